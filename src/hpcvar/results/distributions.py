"""``hpcvar distributions``'s result (:mod:`hpcvar.analyses.distributions`).

Besides ``summary.json``'s keys, the classes here name the files the analysis writes under each
dataset's directory (``OUT/<dataset>/``): the analysis saves its figures under these names and
the report finds them through :meth:`DistributionsResult.dataset_file`.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Literal

from hpcvar.results import Record, Result
from hpcvar.results._common import MLflowRuns, Mode
from hpcvar.settings import DistributionsSettings
from hpcvar.util.naming import slug


class Moments(Record):
    """Moments about the observed minimum (:func:`~hpcvar.analyses.distribution_stats.moments_about_min`)."""

    m1: float
    m2: float
    m3: float
    m4: float
    m3_std: float | None  # null for constant data
    m4_std: float | None


class Description(Record):
    """What :func:`~hpcvar.analyses.distribution_stats.describe` says about a sample."""

    n: int
    mean: float
    median: float
    std: float | None  # null for one sample
    skew: float | None  # null for constant data or fewer than 3 samples
    excess_kurtosis: float | None
    min: float
    max: float
    p01: float
    p05: float
    p25: float
    p75: float
    p95: float
    p99: float
    moments_about_min: Moments
    multimodal: bool
    dip: float | None  # null when the dip test did not run (too few samples, constant values)
    dip_pvalue: float | None
    mode: float  # the heaviest mode's location
    modes: list[Mode]
    mode_notes: list[str]


class BinnedDescription(Description):
    """A distribution over fixed-width bins (step-time ratios, run times), with its PDF/CDF table."""

    bin_width: float
    table: str  # the PDF/CDF table, in the dataset's directory


class LatencyKey(Record):
    benchmark: str
    operation: str
    size_bytes: int
    unit: Literal["us"]


class LatencyGroup(Description, LatencyKey):
    """One microbenchmark operation and message size: its latencies over Confidence's logarithmic
    bins (``bin_size_us`` is S, ``nbins`` is C) and the distribution of its per-cycle minima (for
    ``confidence`` the same samples: its rows are the minima; null for benchmarks without cycles)."""

    bin_size_us: float
    nbins: int
    cycle_minima: Description | None

    @staticmethod
    def figure_file(benchmark: str, operation: str, size_bytes: int) -> str:
        return f"latency_{slug(benchmark, operation, int(size_bytes))}.svg"

    @property
    def variable(self) -> str:
        """The name the conditions use for this operation and size."""
        return f"{self.benchmark} {self.operation} {self.size_bytes} B"

    @property
    def figure(self) -> str:
        """PDF and CDF of the samples and their cycle minima, in the dataset's directory."""
        return self.figure_file(self.benchmark, self.operation, self.size_bytes)


class HistogramSummary(Record):
    """Confidence's histograms of one kind added up over runs and pairs
    (:func:`~hpcvar.analyses.distribution_stats.histogram_summary`); bins are ``[lower, upper]``, an
    open last bin's upper edge null."""

    n: int
    bins: int
    first_bin: list[float | None]
    share_first_bin: float
    densest_bin: list[float | None]
    median_bin: list[float | None]
    p99_bin: list[float | None]
    runs: int
    histograms: int


class HistogramError(Record):
    """Histograms that could not be added up (runs binned with different S)."""

    error: str


Histogram = HistogramSummary | HistogramError | None


class Histograms(Record):
    """The dataset's ``latency_histograms`` per kind; null where it has none."""

    timer: Histogram
    pairwise: Histogram
    minima: Histogram

    @staticmethod
    def figure_file(kind: Literal["timer", "pairwise"]) -> str:
        """The timer-cost figure (``timer``) or the pairwise latency histograms' (``pairwise``,
        with the per-cycle pair minima), in the dataset's directory."""
        return f"{kind}_histogram.svg"


class ConditionGroup(Record):
    """A row of ``conditions.csv``: one variable in one b bucket or locality class."""

    variable: str
    condition: Literal["b", "locality"]
    group: str
    runs: int
    n: int
    median: float | None = None  # left out when the group has no finite sample
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None
    std: float | None = None
    skew: float | None = None
    b_lower: float | None = None  # b buckets only
    b_upper: float | None = None


class Spearman(Record):
    """Spearman correlation of b with a run's 95th percentile, overall and relative to the runs
    of the same locality class; null with fewer than 4 runs or a constant b."""

    rho: float | None
    p: float | None
    rho_within_locality: float | None
    p_within_locality: float | None
    runs: int


class Conditions(Record):
    """The distributions per background-traffic bucket and per Dragonfly+ locality class."""

    b_edges: list[float]
    runs_with_b: int
    runs_by_locality: dict[str, int]
    spearman_b_p95: dict[str, Spearman]  # per variable
    groups: list[ConditionGroup]
    table: str
    unit: Literal["us", "s"]

    TABLE: typing.ClassVar[str] = "conditions.csv"

    @staticmethod
    def figure_file(condition: Literal["b", "locality"], variable: str) -> str:
        """One variable's distributions per b bucket or per locality class, in the dataset's directory."""
        return f"by_{condition}_{slug(variable)}.svg"

    @property
    def variables(self) -> list[str]:
        """The variables with groups, in the analysis's order."""
        return list(dict.fromkeys(g.variable for g in self.groups))


class DistributionsDataset(Record):
    """One dataset: run times always; step-time ratios for applications; every operation and
    size, and Confidence's histograms, for microbenchmarks; both by condition."""

    kind: Literal["application", "microbenchmark"]
    runs: int
    run_time_s: BinnedDescription
    step_ratio: BinnedDescription | None = None  # applications with steps
    latency: list[LatencyGroup] | None = None  # datasets with latency samples or histograms
    histograms: Histograms | None = None
    conditions: Conditions

    #: Files in the dataset's directory.
    RUN_TIME_TABLE: typing.ClassVar[str] = "run_time_pdf.csv"
    RUN_TIME_FIGURE: typing.ClassVar[str] = "run_time.svg"
    STEP_RATIO_TABLE: typing.ClassVar[str] = "step_ratio_pdf.csv"
    STEP_RATIO_FIGURE: typing.ClassVar[str] = "step_ratio.svg"
    LATENCY_TABLE: typing.ClassVar[str] = "latency_pdf.csv"
    MODES_TABLE: typing.ClassVar[str] = "modes.csv"
    CYCLE_MINIMA_TABLE: typing.ClassVar[str] = "cycle_minima.csv"
    HISTOGRAMS_TABLE: typing.ClassVar[str] = "histograms_pdf.csv"


class DistributionsResult(Result):
    NAME: typing.ClassVar[str] = "distributions"
    analysis: Literal["distributions"] = "distributions"
    params: DistributionsSettings
    datasets: dict[str, DistributionsDataset]
    mlflow: MLflowRuns | None = None

    @staticmethod
    def dataset_dir(dataset: str) -> str:
        """A dataset's directory (its tables and figures), relative to the analysis's."""
        return dataset

    def dataset_file(self, dataset: str, name: str) -> Path:
        """A file of a dataset's directory (e.g. ``LatencyGroup.figure``) as a path."""
        return self.path(f"{self.dataset_dir(dataset)}/{name}")


__all__ = ["BinnedDescription", "ConditionGroup", "Conditions", "Description", "DistributionsDataset",
           "DistributionsResult", "HistogramError", "HistogramSummary", "Histograms", "LatencyGroup", "Mode",
           "Moments", "Spearman"]
