"""``hpcvar explain``'s results (:mod:`hpcvar.analyses.explain`): one run explained, and the
summary of a dataset directory (every dataset's findings and its slowest runs explained)."""

from __future__ import annotations

import typing
from typing import Literal

from pydantic import field_serializer

from hpcvar.results import Record, Result
from hpcvar.settings import ExplainSettings

#: The kinds of cause, in the order they are described.
Category = Literal["neighbours", "network", "placement", "io", "load"]
#: What a category is called in sentences.
LABELS: dict[str, str] = {"neighbours": "neighbours", "network": "network congestion", "placement": "placement",
                          "io": "I/O", "load": "CPU and memory load", "none": "no clear cause"}


class NeighbourEvidence(Record):
    """One user whose jobs ran alongside the run, and what the dataset says about them."""

    user: str  # pseudonym
    jobs: int
    max_nodes: int
    overlap_s: float | None  # seconds their jobs and the run overlapped (summed over jobs)
    shared_groups: int | None
    shared_routers: int | None
    slow_steps_alongside: int | None  # of the run's slow steps, those during which a job of theirs ran
    implicated: bool  # runs of the dataset are significantly slower with them (log_r > 0, log_p < alpha)
    implicated_elsewhere: list[str] = []  # if not: the system's other datasets that implicate them
    rank_mi: int | None = None
    nodes_r: float | None = None
    nodes_p: float | None = None
    log_r: float | None = None  # Pearson of the log of run time with their nodes alongside
    log_p: float | None = None
    mean_time_with_s: float | None = None
    mean_time_without_s: float | None = None


class CounterEvidence(Record):
    """A counter (or placement column) that carried part of a cause, over the run's slow steps."""

    counter: str
    meaning: str  # what it counts and where it was measured
    seconds: float  # its contribution to the slowdown
    ratio: float | None  # its value over the slow steps / the typical value over those steps


class PlacementEvidence(Record):
    num_groups: int | None
    num_routers: int | None
    dataset_min_groups: int | None
    dataset_median_groups: float | None
    median_time_same_groups_s: float | None  # the dataset's runs over as many groups
    median_time_fewest_groups_s: float | None  # ... over the fewest groups any run had
    runs_same_groups: int


class Cause(Record):
    category: Category
    seconds: float  # of the slowdown
    share: float  # of the run's excess over the typical run
    line: str  # one line for people
    user: str | None = None  # neighbours: who
    users: list[NeighbourEvidence] = []
    counters: list[CounterEvidence] = []
    placement: PlacementEvidence | None = None


class StepTime(Record):
    step: int
    duration_s: float
    typical_s: float | None  # the step's median over the dataset's runs


class RunExplanation(Record):
    """Why one run was slow (``hpcvar explain DATASET RUN_ID``)."""

    dataset: str
    run_id: str
    start: str | None
    num_nodes: int | None
    total_s: float
    typical_s: float  # the dataset's median run time
    runs_in_dataset: int
    slowdown: float  # total / typical
    excess_s: float  # total - typical
    steps: int
    slow_steps: str | None  # the steps holding most of the excess, as ranges ("3-9, 14")
    slow_steps_share: float | None  # share of the excess in them
    peak_step: int | None
    #: How the slowdown was split: the deviation analysis's per-step attribution model (out of
    #: fold), or, for runs it does not cover, the dataset's statistics alone.
    basis: Literal["per-step model", "dataset statistics", "none"]
    causes: list[Cause]  # largest first; only those that added time
    explained_s: float
    unexplained_s: float
    unexplained_share: float
    top_category: Category | Literal["none"]
    top_user: str | None
    headline: str
    alongside: list[NeighbourEvidence]  # every user with a job alongside, implicated or not
    missing: list[str]  # what the explanation could not use, and why
    step_times: list[StepTime] = []


class CategoryShare(Record):
    category: Category
    share: float  # of the slow runs' excess
    runs: int  # slow runs whose top cause it is


class UserShare(Record):
    user: str | None  # None: every user beyond the largest five together
    share: float  # of the slow runs' excess, from causes of category neighbours only


class ExplainDataset(Record):
    runs: int
    typical_s: float
    fastest_s: float
    slowest_s: float
    spread: float  # slowest / fastest
    slow_runs: int  # at least slow_threshold slower than typical
    slow_excess_s: float
    categories: list[CategoryShare]  # largest share first
    unexplained_share: float | None
    top_users: list[dict]  # {user, seconds, share, runs}
    top_counters: list[dict]  # {counter, meaning, seconds, share}
    # The neighbours' share split by user, largest first (sums to the neighbours' share).
    neighbours_by_user: list[UserShare] = []
    finding: str  # one sentence: the spread and what explains most of it
    slowest: list[RunExplanation]

    @staticmethod
    def step_figure(dataset: str, run_id: str) -> str:
        """A slowest run's step times against the typical ones."""
        return f"{dataset}/steps-{run_id}.svg"

    @staticmethod
    def runs_table(dataset: str) -> str:
        """Every run's headline (run_id, slowdown, top cause, its share, unexplained share)."""
        return f"{dataset}/runs.csv"


class ExplainResult(Result):
    NAME: typing.ClassVar[str] = "explain"
    analysis: Literal["explain"] = "explain"
    params: ExplainSettings
    datasets: dict[str, ExplainDataset]
    missing: list[str]  # analyses that were not there to build on

    @field_serializer("params")
    def _params(self, params: ExplainSettings) -> dict:
        # How the work was spread is not what was computed: the summary is the same on every
        # machine and however the workflow cut the jobs.
        return {k: v for k, v in params.as_dict().items() if k != "workers"}
