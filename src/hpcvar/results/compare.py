"""``hpcvar compare``'s result (:mod:`hpcvar.analyses.compare`): what it compared, with which
settings, and one :class:`Pair` per (test, variable) with its statistics and verdict."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Literal

from hpcvar.results import Record, Result
from hpcvar.results._common import Mode
from hpcvar.settings import CompareSettings
from hpcvar.util.naming import slug


class Source(Record):
    """One input (BEFORE, AFTER or the reference) as given on the command line."""

    source: str                                   # the argument: a file, a dataset directory, reframe:QUERY
    kind: Literal["file", "dataset", "reframe"]
    range: str | None                             # START..END of a dataset's runs (ISO times), else None
    samples: int
    tests: int


class RunSettings(CompareSettings):
    """The settings the comparison ran with: :class:`~hpcvar.settings.CompareSettings` and how
    the direction of each variable was decided."""

    correction: Literal["holm"]
    higher_is_better: list[str]
    lower_is_better: list[str]


class Regression(Record):
    """A pair whose verdict is one of ``fail_on``."""

    test: str
    variable: str
    verdict: str
    reason: str


class Pair(Record):
    """One (test, variable): the row of ``compare.csv`` with the modes as lists. The statistics are
    absent (pairs ``not compared``) or None (undefined, e.g. a shift relative to a median of 0);
    the permutation test's fields are there only when some pair was tested by exchanging runs."""

    test: str
    variable: str
    unit: str
    better: Literal["lower", "higher"]
    n_before: int
    n_after: int
    median_before: float | None = None
    median_after: float | None = None
    shift_pct: float | None = None                # median shift, % of BEFORE's median
    shift_ci_low: float | None = None
    shift_ci_high: float | None = None
    ci_level: float | None = None
    groups_before: int | None = None              # runs, for grouped samples
    groups_after: int | None = None
    mwu_p: float | None = None
    cliffs_delta: float | None = None
    ks_stat: float | None = None
    ks_p: float | None = None
    ad_stat: float | None = None
    ad_p: float | None = None
    bf_stat: float | None = None
    bf_p: float | None = None
    p_pair: float | None = None
    shape_ad_stat: float | None = None
    shape_p: float | None = None
    wasserstein: float | None = None
    wasserstein_pct: float | None = None
    wasserstein_shape_pct: float | None = None
    iqr_before: float | None = None
    iqr_after: float | None = None
    iqr_ratio: float | None = None
    modes_before: list[Mode] | None = None        # None: too few samples to test
    modes_after: list[Mode] | None = None
    inference: Literal["samples", "groups"] | None = None
    perm_ks_p: float | None = None
    perm_ad_p: float | None = None
    perm_spread_p: float | None = None
    permutations: int | None = None
    permutation_exact: bool | None = None
    p_holm: float | None = None
    verdict: str
    reason: str
    spread_changed: bool | None = None
    modes_changed: bool | None = None
    shape_differs: bool | None = None
    figure: str | None = None                     # relative to the output directory; None: not drawn

    @property
    def compared(self) -> bool:
        return self.verdict != "not compared"


class CompareResult(Result):
    NAME: typing.ClassVar[str] = "compare"
    before: Source | None = None
    after: Source | None = None
    reference: Source | None = None
    settings: RunSettings | None = None
    fail_on: list[str]
    verdicts: dict[str, int]                      # pairs per verdict, every verdict listed
    regression: bool
    regressions: list[Regression]
    exit_code: int                                # the command's: 1 when there is a regression
    pairs: list[Pair]

    @staticmethod
    def figure_file(test: str, variable: str, taken: set[str]) -> str:
        """The figure of a pair, relative to the output directory: ``figures/<test>__<variable>.svg``
        ('_' for other characters, '+' kept, at most 80 per part; '_' appended until the name is
        not in ``taken``, which it joins)."""
        name = "__".join(slug(part, sep="_", keep="A-Za-z0-9._+-", max_len=80, empty="x") for part in (test, variable))
        while name in taken:
            name += "_"
        taken.add(name)
        return f"figures/{name}.svg"

    def figure(self, pair: Pair) -> Path | None:
        """The pair's PDF+CDF figure, None when it was not drawn."""
        return self.path(pair.figure) if pair.figure else None
