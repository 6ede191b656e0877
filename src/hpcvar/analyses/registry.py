"""The analyses, in one place: what the command line, MLflow tracking, the workflow's rule and the
report take their list from.

Each entry names the analysis (its module ``hpcvar.analyses.<name>``, its command ``hpcvar
<name>``, its config section ``analyses: <name>:`` and its output directory
``<results>/analyses/<name>/``), its settings model (:mod:`hpcvar.settings`), what it builds on and
whether it logs to MLflow (experiment ``hpcvar-<name>``, :func:`hpcvar.tracking.experiment`).
The regression check (``hpcvar compare``, config ``compare:``) and the interference experiment
are not in it: they compare windows or run jobs of their own, with commands of their own.

Nothing here imports an analysis module: :meth:`Analysis.module` does, when one is run.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpcvar.settings import Settings


@dataclass(frozen=True)
class Analysis:
    name: str
    #: One line for ``hpcvar --help`` and the workflow's documentation.
    help: str
    #: Its settings model: the class's name in :mod:`hpcvar.settings` (imported when asked for,
    #: :attr:`settings`: ``hpcvar --help`` and the commands that are not analyses start without
    #: pydantic).
    settings_class: str
    #: What its ``summary.json`` holds: the class's name in :mod:`hpcvar.results.<name>` (imported
    #: when asked for, :attr:`result`: the command line starts without the results' models).
    result_class: str
    #: Analyses whose outputs it reads (``--analyses DIR``; the workflow waits for them).
    reads: tuple[str, ...] = ()
    #: It reports the simulator's oracle beside its models when given ``--truth`` (a rule input).
    takes_truth: bool = False
    #: It logs its runs to MLflow.
    tracked: bool = True
    #: It analyses each dataset on its own (``--only NAME`` writes a part; the workflow's
    #: ``fan_out: dataset`` runs one job per dataset). False: its numbers compare the datasets,
    #: so it runs as one job over the campaign.
    per_dataset: bool = True
    #: It spreads its datasets over processes (its ``workers`` setting): the workflow gives its job
    #: every core and, once its inputs are there, starts it before the others (the forecaster, the
    #: longest analysis, and explain, the last one).
    spreads: bool = False

    @property
    def module(self) -> ModuleType:
        return importlib.import_module(f"hpcvar.analyses.{self.name}")

    @property
    def settings(self) -> type[Settings]:
        return getattr(importlib.import_module("hpcvar.settings"), self.settings_class)

    @property
    def result(self) -> type:
        """The :class:`hpcvar.results.Result` its ``summary.json`` holds."""
        return getattr(importlib.import_module(f"hpcvar.results.{self.name}"), self.result_class)


#: In report order.
ANALYSES: dict[str, Analysis] = {a.name: a for a in (
    Analysis("overview", "the campaign at a glance: spread and coverage per dataset, time per step, compute vs MPI, "
                         "placement", "OverviewSettings", "OverviewResult", tracked=False, per_dataset=False),
    Analysis("neighbourhood", "rank users whose concurrent large jobs go with slow runs (mutual information, Pearson)",
             "NeighbourhoodSettings", "NeighbourhoodResult"),
    Analysis("deviation", "rank counters explaining per-step deviations (LightGBM + RFE in grouped CV)",
             "DeviationSettings", "DeviationResult"),
    Analysis("forecast", "forecast the next k steps from the last m (attention model vs baselines)", "ForecastSettings",
             "ForecastResult", takes_truth=True, spreads=True),
    Analysis("distributions", "PDFs/CDFs, modes (dip test) and cycle minima of step times and latencies (Confidence)",
             "DistributionsSettings", "DistributionsResult"),
    Analysis("explain", "why was this run slow? its slowdown split into causes, with the evidence", "ExplainSettings",
             "ExplainResult", reads=("deviation", "neighbourhood"), tracked=False, spreads=True),
)}


@functools.cache
def settings_sections() -> dict[str, type[Settings]]:
    """Every section of settings by name, in report order: the analyses', then the regression
    check's (``compare:``). The workflow's settings schema and ``docs/settings.md`` are generated
    from it (``python -m hpcvar.settings --write``). Built when first asked for: it imports the
    models."""
    from hpcvar.settings import CompareSettings

    return {**{a.name: a.settings for a in ANALYSES.values()}, CompareSettings.name: CompareSettings}
