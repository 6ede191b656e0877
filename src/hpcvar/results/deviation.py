"""``hpcvar deviation``'s result (:mod:`hpcvar.analyses.deviation`)."""

from __future__ import annotations

import typing
from typing import Literal

from hpcvar.results import Record, Result
from hpcvar.results._common import MLflowRuns
from hpcvar.settings import DeviationSettings


class CounterRelevance(Record):
    """A row of ``relevance.csv``."""

    counter: str
    relevance: float  # share of the folds whose RFE kept the counter
    mean_gain_share: float
    mean_rfe_rank: float


class DeviationDataset(Record):
    runs: int
    steps: int
    counters: list[str]
    folds: int  # folds actually run (the setting, capped by the number of runs)
    mape: float | None
    mape_per_fold: list[float | None]
    top_counter: str
    relevance: list[CounterRelevance]  # most relevant first
    final_selected: list[str]  # RFE on all runs: the model kept in MLflow
    below_paper_bound: bool
    #: Share of the step-time deviations' variance the CPU pressure explains (R^2); only where the
    #: node samplers recorded pressure stall information.
    cpu_pressure_r2: float | None = None
    #: Columns of the attribution model (the ``attribution`` feature sets present in the data),
    #: one contribution column each in :meth:`attribution_table`.
    attribution_features: list[str] = []

    @staticmethod
    def attribution_table(dataset: str) -> str:
        return f"{dataset}/attribution.parquet"

    @staticmethod
    def relevance_table(dataset: str) -> str:
        return f"{dataset}/relevance.csv"

    @staticmethod
    def folds_table(dataset: str) -> str:
        return f"{dataset}/folds.csv"

    @staticmethod
    def relevance_figure(dataset: str) -> str:
        return f"{dataset}/relevance.svg"


class DeviationResult(Result):
    NAME: typing.ClassVar[str] = "deviation"
    analysis: Literal["deviation"] = "deviation"
    params: DeviationSettings
    paper_mape: float  # the paper's bound: below 5% on all six datasets
    datasets: dict[str, DeviationDataset]
    mlflow: MLflowRuns | None = None
