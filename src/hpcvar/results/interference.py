"""An interference experiment's result: ``summary.json`` of ``hpcvar interference simulate``
(:func:`hpcvar.simulate.interference.run_experiment`, the what-if on the simulated dragonfly) and
of ``hpcvar interference run|analyse`` (:func:`hpcvar.analyses.interference.analyse`, a real
experiment on Slurm).

Both write the same kind of summary to the same place (the workflow's
``results/analyses/interference/``, which the report reads), so one class holds either: the
keys they share, the simulation's (``seed``, ``samples``, ``system``, ``elapsed_s``, the jobs'
``message_bytes`` and ``compute_s``, ``slowdown_max_latency``) and the real experiment's
(``mode``, ``runs``, ``notes``), each left out of the JSON by the side that does not write it.
"""

from __future__ import annotations

import typing
from typing import Literal

from hpcvar.results import Record, Result
from hpcvar.util.naming import slug


class System(Record):
    """The simulated dragonfly: the experiment's ``system:`` section and what the network model
    derived from it."""

    groups: int
    group_shape: Literal["1d", "2d"]
    rows: int
    cols: int
    nodes_per_router: int
    global_links_per_router: int
    groups_per_island: int
    terminal_gib_s: float
    local_gib_s: float
    global_gib_s: float
    hop_latency_ns: float
    packet_bytes: int
    buffer_bytes: int
    routers_per_group: int
    routers: int
    nodes: int
    islands: int
    local_channels: int
    global_channels: int
    parallel_global_links: int
    queue_cap_packets: float


class Job(Record):
    """One job of the experiment: the victim or an aggressor."""

    role: Literal["victim", "aggressor"]
    test: str | None  # the suite's test (null: a simulated traffic pattern only)
    pattern: str | None
    nodes: int
    message_bytes: int | None = None  # simulated experiments
    compute_s: float | None = None


class Policy(Record):
    """A placement policy: the victim's and the aggressors'."""

    victim: str
    aggressors: str


class Slowdowns(Record):
    """Median over repetitions of one job's slowdowns (mixed over alone) under one policy and
    routing; null where the runs lacked the data."""

    slowdown_total: float | None
    slowdown_comm: float | None
    slowdown_latency: float | None
    slowdown_max_latency: float | None = None  # simulated experiments


class RunCount(Record):
    """A real experiment's runs: how many were collated, which failed."""

    collated: int
    failed: list[str]


class InterferenceResult(Result):
    NAME: typing.ClassVar[str] = "interference"
    experiment: str | None
    #: ``simulate`` (not written: the simulation's summary has no ``mode``) or ``slurm``.
    mode: Literal["simulate", "slurm"] = "simulate"
    source: str  # the experiment file (simulated) or the experiment's experiment.csv (slurm)
    seed: int | None = None
    repetitions: int
    samples: int | None = None  # simulated iterations per job and workload
    system: System | None = None
    jobs: dict[str, Job]
    policies: dict[str, Policy]
    #: job -> policy -> routing (``site`` on a real machine) -> slowdowns.
    slowdowns: dict[str, dict[str, dict[str, Slowdowns]]]
    elapsed_s: float | None = None
    runs: RunCount | None = None
    notes: list[str] = []

    @property
    def simulated(self) -> bool:
        return self.mode == "simulate"

    @staticmethod
    def table(name: Literal["jobs", "samples", "network"], fmt: Literal["csv", "parquet"] = "csv") -> str:
        """A table beside summary.json: ``jobs`` (one row per policy, routing, repetition and job),
        ``samples`` (every iteration or timed operation), ``network`` (simulated only: channel
        utilisation per mixed workload)."""
        return f"{name}.{fmt}"

    @staticmethod
    def figure(job: str, kind: Literal["slowdowns", "latency"], routing: str | None = None) -> str:
        """A job's figure (:func:`hpcvar.analyses.interference.draw_figures`), relative to the
        output directory: its slowdowns per policy, or its latency alone and mixed under one routing."""
        return f"{job}/slowdowns.svg" if kind == "slowdowns" else f"{job}/latency_{slug(routing)}.svg"


__all__ = ["InterferenceResult", "Job", "Policy", "RunCount", "Slowdowns", "System"]
