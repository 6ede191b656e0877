"""How many processes a step may spread over on this machine."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a Slurm job's allocation, a
    container's limit), or every core where affinity is unknown."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def processes_for(requested: int, items: int) -> int:
    """Processes for ``items`` independent pieces of work (datasets): ``requested`` (an analysis's
    ``workers`` setting), or one per usable core when it is 0; never more than the pieces."""
    return max(1, min(requested or usable_cores(), items))
