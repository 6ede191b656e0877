"""``hpcvar overview``'s result (:mod:`hpcvar.analyses.overview`): the campaign at a glance.

Besides ``summary.json``'s keys, the classes here name the figures the analysis draws (the
report copies them): the campaign's under ``OUT/campaign/``, each dataset's under ``OUT/<dataset>/``.
"""

from __future__ import annotations

import datetime as dt
import typing
from typing import Literal

from hpcvar.results import Record, Result
from hpcvar.settings import OverviewSettings


class DatasetSpread(Record):
    """A row of ``spread.csv``: a dataset's runs and the spread of their times (as ``summary.txt``)."""

    dataset: str
    runs: int
    mean_s: float | None
    min_s: float | None
    max_s: float | None
    slowest_fastest: float | None  # null when the fastest run took 0 s (sacct's whole seconds)
    steps: int | None  # median steps per run; null for runs imported without steps
    first: str  # first and last start, YYYY-MM-DD
    last: str


class Coverage(Record):
    """A row of ``coverage.csv``: completed and failed runs, first and last start, the longest gap
    between runs and the days of the campaign window without a run of the dataset."""

    dataset: str
    runs: int
    failed: int
    first: dt.datetime
    last: dt.datetime
    longest_gap_days: float | None  # null with one run
    days_without_run: int


class Campaign(Record):
    """What the campaign's reading quotes."""

    runs: int
    datasets: int
    first_start: dt.datetime
    last_end: dt.datetime
    failed: int  # runs that failed (not used as data)
    failed_states: dict[str, int]  # Slurm state -> runs, most frequent first
    quarantined: int  # input files set aside as malformed
    share_slow: float  # of all runs, those over slow_factor x their dataset's best run
    widest: str  # the dataset whose slowest run took the most times its fastest
    widest_ratio: float | None
    longest_gap: str | None  # the dataset with the longest stretch without a run, and its days
    longest_gap_days: float | None

    TIMELINE: typing.ClassVar[str] = "campaign/runs_over_time.svg"
    RELATIVE_TIME: typing.ClassVar[str] = "campaign/relative_time.svg"


class StepSpread(Record):
    """How a step's time varies over runs (Figure 3)."""

    steps: int
    cv_median: float | None  # median over steps of the coefficient of variation over runs
    widest_step: int | None  # the step with the largest coefficient of variation


class RoutineShare(Record):
    routine: str
    share: float | None  # of the MPI time of every profiled run


class MPIProfile(Record):
    """Compute against MPI time over the dataset's mpiP profiles (Figures 4-5)."""

    profiled_runs: int
    share_min: float | None  # MPI's share of a run's time, over runs
    share_max: float | None
    r_mpi_time: float | None  # Pearson r of MPI time per rank with run time; null with 2 runs or fewer
    routines: list[RoutineShare]  # the largest shares, largest first


class LocalityTimes(Record):
    runs: int
    median_s: float | None


class Placement(Record):
    """Run time against the groups and routers spanned, and per locality class."""

    r_num_groups: float | None  # null when it cannot be computed (2 runs or fewer, constant spread)
    r_num_routers: float | None
    locality: dict[str, LocalityTimes]  # in the order of hpcvar.system.topology.LOCALITY_CLASSES, unknown last


class OverviewDataset(Record):
    app: str
    nodes: int | None
    runs: int
    steps: StepSpread | None = None  # runs with time steps
    mpi: MPIProfile | None = None  # runs with mpiP profiles
    placement: Placement | None = None  # runs with node lists

    @staticmethod
    def figure(dataset: str, kind: Literal["step_spread", "mpi", "placement"]) -> str:
        """A dataset's figure, relative to the analysis's directory."""
        return f"{dataset}/{kind}.svg"


class OverviewResult(Result):
    NAME: typing.ClassVar[str] = "overview"
    analysis: Literal["overview"] = "overview"
    params: OverviewSettings
    campaign: Campaign
    spread: list[DatasetSpread]
    coverage: list[Coverage]
    datasets: dict[str, OverviewDataset]

    SPREAD_TABLE: typing.ClassVar[str] = "spread.csv"
    COVERAGE_TABLE: typing.ClassVar[str] = "coverage.csv"


__all__ = ["Campaign", "Coverage", "DatasetSpread", "LocalityTimes", "MPIProfile", "OverviewDataset", "OverviewResult",
           "Placement", "RoutineShare", "StepSpread"]
