"""``hpcvar neighbourhood``'s result (:mod:`hpcvar.analyses.neighbourhood`)."""

from __future__ import annotations

import typing
from typing import Literal

from hpcvar.results import Record, Result
from hpcvar.results._common import MLflowRuns
from hpcvar.settings import NeighbourhoodSettings


class RankedUser(Record):
    """A row of the ranking (``ranking.csv``): both ranks of one user."""

    user: str
    mi: float | None
    rank_mi: int | None
    cooccurrence: int
    share_of_runs: float
    mean_time_with_s: float | None
    mean_time_without_s: float | None
    direction: Literal["slower", "faster", "none"] | None
    nodes_r: float | None
    nodes_p: float | None
    rank_r: int
    runs_alongside: int
    #: Pearson of the log of run time with the nodes alongside (slowdowns multiply).
    log_r: float | None = None
    log_p: float | None = None


class PearsonRankedUser(Record):
    """A row of the Pearson top list: the user's node-count correlation with run time."""

    user: str
    nodes_r: float | None
    nodes_p: float | None
    runs_alongside: int
    rank_mi: int | None


class NeighbourhoodDataset(Record):
    runs: int
    qualified_users: int  # users with a job over threshold_nodes (the MI ranking's)
    users_alongside: int
    optimal_runs: int
    top_users: list[RankedUser]  # by mutual information
    top_users_by_nodes_r: list[PearsonRankedUser]

    @staticmethod
    def ranking_table(dataset: str) -> str:
        return f"{dataset}/ranking.csv"

    @staticmethod
    def top_users_figure(dataset: str) -> str:
        return f"{dataset}/top_users.svg"


class NeighbourhoodResult(Result):
    NAME: typing.ClassVar[str] = "neighbourhood"
    analysis: Literal["neighbourhood"] = "neighbourhood"
    params: NeighbourhoodSettings
    datasets: dict[str, NeighbourhoodDataset]
    #: Table III: one row per user, ``user``, ``datasets`` and the user's rank in each dataset.
    cross_dataset: list[dict[str, str | int | None]]
    mlflow: MLflowRuns | None = None

    CROSS_DATASET_TABLE: typing.ClassVar[str] = "cross_dataset.csv"
    ACROSS_DATASETS: typing.ClassVar[tuple[str, ...]] = ("cross_dataset",)
