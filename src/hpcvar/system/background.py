"""Background traffic estimate ``b`` of a run, from the scheduler's accounting at the run's start.

Salimi Beni and Cosenza (CLUSTER 2022) estimate how busy the network is from what the job
scheduler knows, with no knowledge of other users' communication patterns::

    b = (N_c / N_t) * (N'_c / N_a) * 100        (0 <= b <= 100; larger = more likely congested)

The first factor is the share of the machine's nodes that take part in communication, the
second the share of the allocated nodes that belong to communicating jobs. This module owns the
terms, computed from the jobs of a ``sacct`` snapshot (:func:`hpcvar.parsers.sacct.read`) that
are running at one instant (a run's start), the run's own job excluded:

- ``N_a``: allocated nodes of all those jobs, counted with multiplicity (a node shared by two
  jobs counts twice);
- ``N'_c``: nodes of the *communicating* jobs, with multiplicity;
- ``N_c``: distinct nodes of the communicating jobs;
- ``N_t``: the system's compute nodes (the topology's nodes with role ``compute``).

Which jobs communicate is the heuristic's one choice: the scheduler cannot see MPI traffic, so
a job on at least :data:`MIN_COMM_NODES` (2) nodes counts as communicating, because a job on a
single node keeps its MPI messages inside the node and puts nothing on the network (its file
I/O aside). The threshold is an argument of :func:`background_traffic`.

Edge cases, as decided here:

- **Running at an instant** ``t`` means ``start <= t < end``: a job that ended exactly at ``t``
  (often the one whose nodes the run got) no longer runs, one that started exactly at ``t`` does.
  A missing end (``Unknown``: still running when sacct was asked) counts as running; a missing
  start (pending, or cancelled before it started) never does. sacct has one-second resolution.
- **Allocations, not steps**: only allocation lines (``step`` is None) count, since a job's
  batch, extern and srun steps run on the allocation's nodes; counting them would multiply
  its nodes. Each job id counts once (requeued jobs print several allocation lines; at most one
  of them runs at ``t``, and the last one wins if several appear to). Heterogeneous job
  components (``1234+0``, ``1234+1``) and array tasks (``1234_5``) are jobs of their own.
- **Nodes outside the system**: with ``system_nodes`` given, nodes not in it (login or service
  nodes, nodes of another partition the topology does not map, I/O nodes) are left out of every
  count, so ``N_c <= N_t`` and ``b`` stays within [0, 100]; their number (with multiplicity) is
  reported as ``outside_nodes``. Whether a job communicates still depends on all of its nodes.
- **Unknown node lists** (a node list cut with ``+`` in fixed-width sacct output): the job counts
  with its ``NNodes`` in ``N_a`` and ``N'_c``, its nodes are taken as distinct from every other
  job's in ``N_c``, and ``N_c`` is capped at ``N_t``.
- **Nothing running** (``N_a = 0``): ``b = 0``, an idle network.
"""

from __future__ import annotations

from collections.abc import Container

import pandas as pd

#: Jobs on at least this many nodes are taken to communicate over the network.
MIN_COMM_NODES = 2


def running_at(jobs: pd.DataFrame, at: pd.Timestamp, exclude_job: str | None = None) -> pd.DataFrame:
    """Allocation lines of the jobs running at instant ``at`` (``start <= at < end``), one per job id.

    ``jobs`` is :func:`hpcvar.parsers.sacct.read` output (``job_id``, ``step``, ``start``,
    ``end``); ``at`` must be comparable with its times (naive as sacct printed them, or both UTC).
    ``exclude_job`` (the run's own job id) is left out.
    """
    alloc = jobs[jobs["step"].isna()] if "step" in jobs.columns else jobs
    start, end = alloc["start"], alloc["end"]
    running = start.notna() & (start <= at) & (end.isna() | (end > at))
    if exclude_job is not None:
        running &= alloc["job_id"] != str(exclude_job)
    return alloc[running].drop_duplicates("job_id", keep="last")


def background_traffic(running: pd.DataFrame, total_nodes: int, min_nodes: int = MIN_COMM_NODES,
                       system_nodes: Container[str] | None = None) -> dict:
    """``b`` and its terms for the jobs in ``running`` (see the module docstring).

    ``running``: allocation lines with ``node_list`` (list of node names, or None when unknown)
    and ``node_count`` (used when the node list is unknown); ``total_nodes``: ``N_t``;
    ``min_nodes``: a job on at least this many nodes communicates; ``system_nodes``: the nodes
    counted (None: all). Returns ``b``, ``n_c``, ``n_c_prime``, ``n_a``, ``n_t``, ``jobs``
    (jobs in ``running``), ``communicating_jobs`` and ``outside_nodes``.
    """
    if total_nodes <= 0:
        raise ValueError(f"total_nodes (N_t) must be positive, got {total_nodes}")
    n_a = n_c_prime = outside = communicating = unlisted_comm = 0
    unique: set[str] = set()
    counts = running["node_count"] if "node_count" in running.columns else pd.Series(pd.NA, index=running.index)
    for nodes, count in zip(running["node_list"], counts):
        if isinstance(nodes, (list, tuple)):
            size = len(nodes)
            kept = nodes if system_nodes is None else [n for n in nodes if n in system_nodes]
            outside += size - len(kept)
            counted = len(kept)
        else:  # node list unknown (truncated): trust NNodes
            size = counted = 0 if pd.isna(count) else int(count)
            kept = None
        n_a += counted
        if size >= min_nodes:
            communicating += 1
            n_c_prime += counted
            if kept is None:
                unlisted_comm += counted
            else:
                unique.update(kept)
    n_c = min(len(unique) + unlisted_comm, total_nodes)
    b = (n_c / total_nodes) * (n_c_prime / n_a) * 100 if n_a else 0.0
    return {"b": b, "n_c": n_c, "n_c_prime": n_c_prime, "n_a": n_a, "n_t": int(total_nodes),
            "jobs": len(running), "communicating_jobs": communicating, "outside_nodes": outside}
