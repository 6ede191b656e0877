"""``hpcvar forecast``'s result (:mod:`hpcvar.analyses.forecast`)."""

from __future__ import annotations

import typing
from typing import Literal

from hpcvar.results import Record, Result
from hpcvar.results._common import MLflowRuns

#: The forecasters compared in every cell, in the order the analysis scores them; ``oracle`` (the
#: simulator's hidden state) is added when the raw files were simulated.
MODELS = ("attention", "lightgbm", "lightgbm_residual", "persistence", "profile")
#: The baselines a forecaster has to beat (the report names the best of them).
BASELINES = ("persistence", "profile", "lightgbm")
#: The report's columns: the attention model, the baselines, the learner-only comparison and the oracle.
REPORTED_MODELS = ("attention", *BASELINES, "lightgbm_residual", "oracle")


class GridRow(Record):
    """A row of ``grid.csv``: one model's MAPE in one cell and feature set."""

    m: int
    k: int
    feature_set: str
    model: str
    mape: float | None
    n_windows: int
    train_seconds: float


class BestCell(Record):
    """The attention model's best cell with every model's MAPE there."""

    m: int
    k: int
    feature_set: str
    mape_attention: float | None = None
    mape_lightgbm: float | None = None
    mape_lightgbm_residual: float | None = None
    mape_persistence: float | None = None
    mape_profile: float | None = None
    mape_oracle: float | None = None

    def mape(self, model: str) -> float | None:
        return getattr(self, f"mape_{model}")

    def best_baseline(self) -> tuple[str, float] | None:
        """The baseline with the lowest MAPE, or None when none was scored."""
        scored = [(v, m) for m in BASELINES if (v := self.mape(m)) is not None]
        return (min(scored)[1], min(scored)[0]) if scored else None


class Importance(Record):
    """A row of ``importance.csv``: permutation importance in the best cell."""

    feature: str
    mape_increase: float | None
    mape_increase_sd: float | None
    base_mape: float | None


class LongRun(Record):
    """The long-run test (Figure 12), or why it was skipped."""

    dataset: str
    skipped: str | None = None
    run_ids: list[str] | None = None
    m: int | None = None
    k: int | None = None
    feature_set: str | None = None
    segments: int | None = None
    mape: float | None = None
    mape_persistence: float | None = None
    mape_profile: float | None = None


class ForecastFiles(Record):
    """The tables and figures of one dataset, relative to its directory."""

    grid_table: str
    importance_table: str
    grid_figure: str
    importance_figure: str
    long_run_table: str | None = None
    long_run_figure: str | None = None


class DatasetRun(Record):
    experiment_id: str
    run_id: str


class ForecastDataset(Record):
    """One dataset's forecast, or ``skipped`` with why."""

    skipped: str | None = None
    app: str | None = None
    runs: int | None = None
    steps: int | None = None
    folds: int | None = None
    feature_sets: list[str] | None = None
    grid: list[GridRow] | None = None
    best: BestCell | None = None
    oracle_mape: dict[str, float | None] | None = None
    importance: list[Importance] | None = None
    long_run: LongRun | None = None
    notes: list[str] = []
    files: ForecastFiles | None = None
    mlflow: DatasetRun | None = None
    oracle_mape_truth: dict[str, float | None] | None = None  # truth.json's, per cell

    def figure(self, dataset: str, key: Literal["grid_figure", "importance_figure", "long_run_figure"]) -> str | None:
        """A figure's path relative to the analysis's directory, None when it was not drawn."""
        name = getattr(self.files, key) if self.files else None
        return f"{dataset}/{name}" if name else None


class GridSpec(Record):
    m: list[int]
    k: list[int]


class ForecastParams(Record):
    """The settings the forecast ran with (as logged to MLflow)."""

    grid: dict[str, GridSpec]
    folds: int
    max_epochs: int
    patience: int
    seed: int
    hidden: int
    lr: float
    val_fraction: float
    ensemble: int
    long_run: str  # m=..,k=.. of the long-run test
    feature_sets: list[str]


class ForecastResult(Result):
    NAME: typing.ClassVar[str] = "forecast"
    analysis: Literal["forecast"] = "forecast"
    params: ForecastParams
    tracking_uri: str | None = None
    mlflow: MLflowRuns | None = None
    datasets: dict[str, ForecastDataset]
    notes: list[str] = []
