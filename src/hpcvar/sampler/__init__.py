"""Per-node counter sampler, run alongside a job step.

On Slurm, one sampler per node beside the application's step::

    srun --overlap --ntasks-per-node=1 hpcvar sample --out 'counters.{hostname}.csv' &

locally, :func:`spawn` (or ``hpcvar sample ... &``). Each sampler reads its sources
(:mod:`.sources`: ``net``, ``infiniband``, ``cxi``) every ``interval`` seconds and
appends timestamped cumulative counter values to one CSV per node (format: the node counter file
of :mod:`hpcvar.parsers.node_counters`, which also turns the samples into per-step deltas) until
SIGTERM/SIGINT or ``duration``.
"""

from hpcvar.sampler.core import Sampler, hostname, output_path, run, spawn
from hpcvar.sampler.sources import DEFAULT_CXI_COUNTERS, NET_COUNTERS, SOURCE_NAMES, Probe

__all__ = ["DEFAULT_CXI_COUNTERS", "NET_COUNTERS", "SOURCE_NAMES", "Probe", "Sampler", "hostname",
           "output_path", "run", "spawn"]
