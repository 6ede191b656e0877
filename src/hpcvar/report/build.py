"""Assemble the report: one function per section, each returning a :class:`Section` with its
reading (plain-language paragraph), figures and tables; a Jinja2 template renders them."""

from __future__ import annotations

import base64
import datetime as dt
import platform
import re
import shutil
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TypeVar

import jinja2
import pandas as pd
import yaml

from hpcvar.data.dataset import Dataset
from hpcvar.results import Record, Result
from hpcvar.results.compare import CompareResult
from hpcvar.results.deviation import DeviationResult
from hpcvar.results.distributions import (Conditions, Description, DistributionsDataset, DistributionsResult,
                                          HistogramSummary, Histograms)
from hpcvar.results.explain import LABELS, ExplainDataset, ExplainResult, RunExplanation
from hpcvar.results.forecast import REPORTED_MODELS, ForecastResult
from hpcvar.results.interference import InterferenceResult
from hpcvar.results.neighbourhood import NeighbourhoodDataset, NeighbourhoodResult, PearsonRankedUser, RankedUser
from hpcvar.results.overview import Campaign, Coverage, DatasetSpread, OverviewDataset, OverviewResult, RoutineShare
from hpcvar.util.anonymise import Pseudonymiser
from hpcvar.util.fileio import atomic_write_text
from hpcvar.util.naming import slug

#: Section ids, in report order (the browser test and the Snakemake categories use them).
SECTIONS = ("findings", "campaign", "datasets", "neighbourhood", "deviation", "forecast", "placement", "background",
            "distributions", "regression", "explained", "interference", "provenance")

R = TypeVar("R", bound=Result)

VERSIONS = ("hpcvar", "snakemake", "reframe-hpc", "pandas", "pyarrow", "scikit-learn", "lightgbm", "torch",
            "pytorch-lightning", "mlflow", "matplotlib")


@dataclass
class Figure:
    section: str
    dataset: str
    name: str
    title: str
    path: Path

    def data_uri(self) -> str:
        return "data:image/svg+xml;base64," + base64.b64encode(self.path.read_bytes()).decode()


@dataclass
class Table:
    caption: str
    frame: pd.DataFrame
    formats: dict = field(default_factory=dict)

    def html(self) -> str:
        f = self.frame.copy()
        for col, fmt in self.formats.items():
            if col in f:
                f[col] = f[col].map(lambda v, fmt=fmt: "" if v is None or (isinstance(v, float) and pd.isna(v))
                                    else fmt.format(v))
        return f.to_html(index=False, classes="sortable", border=0, na_rep="", escape=True)


@dataclass
class Part:
    """A sub-section (one dataset, usually); its anchor is ``<section>--<slug of the title>``
    (:func:`anchor`), which ``links`` (label, anchor) of other parts point at."""

    title: str
    reading: str = ""
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)


def anchor(section: str, title: str) -> str:
    return f"{section}--{slug(title)}"


@dataclass
class Segment:
    """One cause's piece of a dataset's bar at a glance: its seconds of the slow runs' excess and
    its width, in % of the longest bar."""

    category: str  # a Category of explain, or "unexplained" (the colour)
    label: str
    seconds: float
    width: float
    shade: float = 1.0  # the neighbours' users in lighter shades of their colour, one after another


@dataclass
class GlanceRow:
    dataset: str
    segments: list[Segment]
    note: str
    target: str  # the anchor of the dataset's findings


@dataclass
class Glance:
    """The report's first screen: one bar per dataset splitting its slow runs' excess time into the
    causes explain found (the neighbours by user), and beside it the regression check's verdicts
    when the campaign has one. Read from the typed results: nothing is computed but the bars'
    widths."""

    title: str
    rows: list[GlanceRow]
    legend: list[tuple[str, str]]  # (category, label)
    verdicts_title: str = ""
    verdicts: list[dict] = field(default_factory=list)  # test, variable, verdict, shift
    unchanged: int = 0


@dataclass
class Section:
    id: str
    title: str
    reading: str = ""
    parts: list[Part] = field(default_factory=list)
    empty: str = ""  # why the section has no data (rendered instead of figures)
    glance: Glance | None = None

    @property
    def figures(self) -> list[Figure]:
        return [f for p in self.parts for f in p.figures]


def _stats_row(d: Description) -> dict:
    """One table row of a ``describe`` block of the distributions analysis."""
    m = d.moments_about_min
    return {"n": d.n, "min": d.min, "median": d.median, "mean": d.mean, "std": d.std, "skew": d.skew,
            "kurtosis": d.excess_kurtosis, "p99": d.p99, "m1_min": m.m1, "m2_min": m.m2, "modes": len(d.modes),
            "dip_p": d.dip_pvalue}


def _modes_text(d: Description) -> str:
    if len(d.modes) < 2:
        return "one performance mode"
    return f"{len(d.modes)} modes: " + ", ".join(f"{m.location:.3g} ({m.weight:.0%})" for m in d.modes)




def _frame(records: list[Record], kind: type[Record]) -> pd.DataFrame:
    """Typed rows as a table (the record's fields as columns, also when there are no rows)."""
    return pd.DataFrame([r.model_dump() for r in records], columns=list(kind.model_fields))


def _num(v, fmt: str) -> str:
    return "n/a" if v is None else fmt.format(v)


def _counter(name: str) -> str:
    """A counter's name, with what it counts for the link counters of a non-Aries fabric."""
    from hpcvar.system.linkcounters import meaning

    words = meaning(name)
    return f"{name} ({words})" if words else name


def _r(v: float | None) -> str:
    """A correlation coefficient, or n/a where there was none to compute."""
    return "n/a" if v is None else f"{v:.2f}"


def _days(selection: str) -> str:
    """A date range as the user would write it: whole days without their times."""
    return re.sub(r"T23:59:59\.9+(\+00:00)?", "", re.sub(r"T00:00:00(\+00:00)?", "", selection))


def _pct(v) -> str:
    return "n/a" if v is None or pd.isna(v) else f"{100 * v:.1f}%"


class Builder:
    def __init__(self, dataset_dir, analyses_dir, figures_dir, pseudo: Pseudonymiser | None):
        self.ds = Dataset(dataset_dir)
        self.dataset_dir = Path(dataset_dir)
        self.analyses_dir = Path(analyses_dir) if analyses_dir else None
        self.fig_dir = Path(figures_dir)
        self._results: dict[type, Result | None] = {}
        self.pseudo = pseudo
        self.runs = self.ds.read("runs")
        if self.runs.empty:
            raise SystemExit(f"{dataset_dir}: the dataset has no runs; run `hpcvar collate` first")
        self.names = sorted(self.runs["dataset"].unique())

    # --- helpers ------------------------------------------------------------------------------
    def path(self, section: str, dataset: str, name: str) -> Path:
        p = self.fig_dir / section / dataset / f"{name}.svg"
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def figure(self, section, dataset, name, title, path: Path | None = None) -> Figure:
        return Figure(section, dataset, name, title, path or self.path(section, dataset, name))

    def copy_figure(self, section: str, dataset: str, name: str, title: str, src: Path) -> Figure | None:
        if not src.is_file():
            return None
        dst = self.path(section, dataset, name)
        shutil.copyfile(src, dst)
        return self.figure(section, dataset, name, title, dst)

    def result(self, kind: type[R]) -> R | None:
        """The analysis's typed result (``analyses/<analysis>/summary.json``), None if it did not run
        (read once per report)."""
        if kind not in self._results:
            self._results[kind] = kind.read(self.analyses_dir / kind.NAME) if self.analyses_dir else None
        return self._results[kind]

    @staticmethod
    def no_analysis(analysis: str, result: Result | None) -> str:
        if result is None:
            return f"No {analysis} analysis summary (run `hpcvar {analysis}`)."
        why = " ".join(getattr(result, "notes", None) or [])  # not every analysis keeps notes
        need = getattr(getattr(result, "params", None), "min_runs", None)
        return (f"No data: the {analysis} analysis found no dataset it could analyse"
                + (f" (it needs {need} runs or more per dataset)" if need else "") + (f". {why}" if why else "."))

    def user(self, name):
        return self.pseudo.ensure(name) if self.pseudo else name

    def explained_text(self, e: RunExplanation, text: str) -> str:
        """An explanation's sentence with the report's pseudonyms (the dataset may hold names)."""
        for u in e.alongside:
            text = text.replace(u.user, self.user(u.user))
        return text

    # --- sections -----------------------------------------------------------------------------
    def findings(self) -> Section:
        """One screen before any table: per dataset, the spread and what explains most of it."""
        sec = Section("findings", "Findings: why the same job ran slower")
        res = self.result(ExplainResult)
        if res is None or not res.datasets:
            sec.empty = self.no_analysis("explain", res)
            return sec
        present = {n for n in self.names}
        for name, d in res.datasets.items():
            if name not in present:
                continue
            text = d.finding
            for u in d.top_users:
                text = text.replace(u["user"], self.user(u["user"]))
            links = [("slowest runs explained", anchor("explained", name))]
            cats = {c.category for c in d.categories[:3]}
            if "neighbours" in cats:
                links.append(("users alongside", anchor("neighbourhood", name)))
            if cats & {"network", "io", "load"}:
                links.append(("counters", anchor("deviation", name)))
            if "placement" in cats:
                links.append(("placement", anchor("placement", name)))
            sec.parts.append(Part(name, reading=text, links=links))
        sec.glance = self.glance(res, [n for n in res.datasets if n in present])
        sec.reading = ("Per dataset: how far apart its fastest and slowest runs are, and what accounts for the excess "
                       "time of its slow runs (at least "
                       f"{100 * res.params.slow_threshold:.0f}% slower than the typical, median run), summed over "
                       "those runs by `hpcvar explain` from the per-step deviation model and the users alongside. "
                       "Follow the links to the evidence.")
        return sec

    def glance(self, res: ExplainResult, names: list[str]) -> Glance:
        """The first screen's bars (explain's shares of each dataset's slow runs' excess time) and
        the regression check's verdicts."""
        pieces = {}
        for name in names:
            d = res.datasets[name]
            excess = d.slow_excess_s
            shares = {c.category: c.share for c in d.categories}
            parts = [("neighbours", f"neighbours: {self.user(u.user) if u.user else 'other users'}", u.share * excess)
                     for u in d.neighbours_by_user]
            parts += [(c, LABELS[c], shares[c] * excess) for c in ("network", "placement", "io", "load")
                      if shares.get(c, 0) > 0]
            if d.unexplained_share:
                parts.append(("unexplained", "unexplained", d.unexplained_share * excess))
            pieces[name] = [p for p in parts if p[2] > 0]
        # The longest bar fills the track (causes and the unexplained rest may add up to a little
        # more than the excess: a run's unexplained time is never negative).
        longest = max((sum(p[2] for p in parts) for parts in pieces.values()), default=0.0) or 1.0
        rows, seen = [], []
        for name, parts in pieces.items():
            d = res.datasets[name]
            segments = [Segment(c, label, sec, 100 * sec / longest, 1.0 - 0.15 * (i % 3) if c == "neighbours" else 1.0)
                        for i, (c, label, sec) in enumerate(parts)]
            seen += [seg.category for seg in segments if seg.category not in seen]
            note = (f"{d.slow_excess_s:,.0f} s over {d.slow_runs} of {d.runs} runs; slowest {d.spread:.1f}x the "
                    "fastest" if d.slow_runs else f"no run {100 * res.params.slow_threshold:.0f}% slower than typical")
            rows.append(GlanceRow(name, segments, note, anchor("findings", name)))
        order = ["neighbours", "network", "placement", "io", "load", "unexplained"]
        legend = [(c, LABELS.get(c, c)) for c in order if c in seen]
        glance = Glance(f"Where the slow runs' time went: their excess over the typical run, by cause "
                        f"(runs at least {100 * res.params.slow_threshold:.0f}% slower)", rows, legend)
        compare = self.result(CompareResult)
        if compare is not None and compare.pairs:
            b, a = (_days(side.range or side.source) if side else None for side in (compare.before, compare.after))
            glance.verdicts_title = f"Regression check: {a} against {b}"
            glance.verdicts = [{"test": p.test, "variable": p.variable, "verdict": p.verdict,
                                "shift": "" if p.shift_pct is None else f"{p.shift_pct:+.1f}%",
                                "target": anchor("regression", "All tests")}
                               for p in compare.pairs if p.verdict != "unchanged"]
            glance.unchanged = sum(p.verdict == "unchanged" for p in compare.pairs)
        return glance

    def explained(self) -> Section:
        sec = Section("explained", "Slowest runs explained")
        res = self.result(ExplainResult)
        if res is None or not res.datasets:
            sec.empty = self.no_analysis("explain", res)
            return sec
        for name, d in res.datasets.items():
            rows, figs = [], []
            for e in d.slowest:
                rows.append({"run": e.run_id, "start": e.start, "time_s": e.total_s, "slowdown": e.slowdown,
                             "causes": self.explained_text(e, "; ".join(
                                 f"{LABELS[c.category]}" + (f" {self.user(c.user)}" if c.user else "")
                                 + f" {100 * c.share:.0f}%" for c in e.causes[:3]) or "none found"),
                             "unexplained": e.unexplained_share})
                if e.step_times:
                    fig = self.copy_figure("explained", name, f"steps-{slug(e.run_id)}",
                                           f"{e.run_id}: step times against the typical run",
                                           res.path(ExplainDataset.step_figure(name, e.run_id)))
                    figs += [fig] if fig else []
            lines = " ".join(f"{e.run_id} ({e.slowdown:.2f}x): {self.explained_text(e, e.headline)}."
                             for e in d.slowest)
            sec.parts.append(Part(name, reading=lines, figures=figs, tables=[Table(
                f"The {len(rows)} slowest runs and their top causes (share of each run's excess time)",
                pd.DataFrame(rows), {"time_s": "{:,.3g}", "slowdown": "{:.2f}x", "unexplained": "{:.0%}"})]))
        sec.reading = ("Each slow run's excess over the typical run, split into causes by `hpcvar explain DATASET "
                       "RUN_ID` (which prints the evidence behind each: the users' jobs alongside and how the "
                       "dataset's runs fare with them, the counters that deviated in the slow steps, the groups "
                       "spanned): neighbours, network congestion, placement, I/O, CPU and memory load. The figures "
                       "show where in time the slowdown sat.")
        return sec

    def overview(self, section: str, title: str) -> tuple[OverviewResult | None, Section]:
        res = self.result(OverviewResult)
        sec = Section(section, title)
        if res is None:
            sec.empty = self.no_analysis("overview", res)
        return res, sec

    def campaign(self) -> Section:
        res, sec = self.overview("campaign", "Campaign overview")
        if res is None:
            return sec
        c = res.campaign
        reading = (
            f"The campaign ran {c.runs} completed runs of {c.datasets} datasets between "
            f"{c.first_start:%Y-%m-%d} and {c.last_end:%Y-%m-%d}. "
            f"{c.failed} runs failed ({', '.join(f'{n} {s}' for s, n in c.failed_states.items()) or 'none'}) "
            "and are not used as data. "
            f"The same job did not take the same time: in the widest dataset, {c.widest}, the slowest run "
            f"took {_num(c.widest_ratio, '{:.2f}')}x as long as the fastest, and {100 * c.share_slow:.0f}% of all "
            f"runs took more than {res.params.slow_factor:g}x their dataset's best run. "
            + (f"The longest stretch without a run was {c.longest_gap_days:.1f} days ({c.longest_gap}); "
               if c.longest_gap is not None else "")
            + "slow runs that cluster in time point to a cause on the system rather than in the code.")
        if c.quarantined:
            reading += (f" {c.quarantined} input files were set aside as malformed "
                        "(listed in the dataset's quarantine.jsonl).")
        spread = _frame(res.spread, DatasetSpread).astype({"steps": "Int64"})
        cov = _frame(res.coverage, Coverage)
        figures = [self.copy_figure("campaign", "all", "runs_over_time", "Runs per dataset over time",
                                    res.path(Campaign.TIMELINE)),
                   self.copy_figure("campaign", "all", "relative_time", "Run time relative to the best run (Figure 1)",
                                    res.path(Campaign.RELATIVE_TIME))]
        part = Part("All datasets", figures=[f for f in figures if f],
            tables=[Table("Runs and spread per dataset", spread, {"mean_s": "{:,.1f}", "min_s": "{:,.1f}",
                                                                  "max_s": "{:,.1f}", "slowest_fastest": "{:.2f}x"}),
                    Table("Coverage: failures and gaps", cov.assign(
                        first=pd.to_datetime(cov["first"]).dt.strftime("%Y-%m-%d %H:%M"),
                        last=pd.to_datetime(cov["last"]).dt.strftime("%Y-%m-%d %H:%M")),
                        {"longest_gap_days": "{:.1f}"})])
        sec.reading, sec.parts = reading, [part]
        return sec

    def datasets(self) -> Section:
        res, sec = self.overview("datasets", "Per dataset: time per step and MPI profile")
        if res is None:
            return sec
        spread = {r.dataset: r for r in res.spread}
        parts = []
        for name in self.names:
            d, sp = res.datasets.get(name), spread.get(name)
            part = Part(name)
            if d is None or sp is None:  # collated after the overview ran
                part.reading = ("Not in the overview's result (collated after it ran): run `hpcvar overview` "
                                "again.")
                parts.append(part)
                continue
            on = f" on {d.nodes} nodes" if d.nodes is not None else ""
            text = (f"{d.runs} runs of {d.app}{on} took {_num(sp.min_s, '{:,.0f}')} s to {_num(sp.max_s, '{:,.0f}')} "
                    f"s: the slowest run took {_num(sp.slowest_fastest, '{:.2f}')}x as long as the fastest. ")
            if d.steps is not None:
                fig = self.copy_figure("datasets", name, "step_spread", "Time per step (Figure 3)",
                                       res.path(OverviewDataset.figure(name, "step_spread")))
                part.figures += [fig] if fig else []
                if d.steps.cv_median is not None:
                    text += (f"Across runs, a step's time varies by {100 * d.steps.cv_median:.0f}% (median coefficient "
                             f"of variation over {d.steps.steps} steps; widest at step {d.steps.widest_step}). ")
            if d.mpi is not None:
                m = d.mpi
                fig = self.copy_figure("datasets", name, "mpi", "Compute vs MPI and dominant routines (Figures 4-5)",
                                       res.path(OverviewDataset.figure(name, "mpi")))
                part.figures += [fig] if fig else []
                top = m.routines[0]
                text += (f"mpiP profiled {m.profiled_runs} runs: MPI took {_pct(m.share_min)} to "
                         f"{_pct(m.share_max)} of the time, mostly MPI_{top.routine} ({_pct(top.share)} of MPI time). ")
                if m.r_mpi_time is not None:
                    r = m.r_mpi_time
                    text += ("Slower runs spend more time in MPI, so the spread comes from communication "
                             f"(r = {r:.2f})." if r > 0.5 else
                             f"Time in MPI follows run time only weakly (r = {r:.2f}).")
                part.tables.append(Table("Share of MPI time per routine (all profiled runs)",
                                         _frame(m.routines, RoutineShare), {"share": "{:.1%}"}))
            else:
                text += "No mpiP profiles were collected for this dataset, so compute and MPI time are not split."
            part.reading = text
            parts.append(part)
        sec.reading = ("For each dataset (application x node count x input): how the time per step spreads over "
                       "runs, and how each run divides its time between computation and MPI.")
        sec.parts = parts
        return sec

    def neighbourhood(self) -> Section:
        s = self.result(NeighbourhoodResult)
        sec = Section("neighbourhood", "Neighbourhood: who was running when we were slow")
        if not s or not s.datasets:
            sec.empty = self.no_analysis("neighbourhood", s)
            return sec
        thr, top_k = s.params.threshold_nodes, s.params.top_k
        parts, leaders = [], []
        for name, d in s.datasets.items():
            top = _frame(d.top_users, RankedUser)
            part = Part(name)
            if top.empty:
                part.reading = f"No user ran jobs larger than {thr} nodes during these runs."
                parts.append(part)
                continue
            named = any(self.user(u) != u for u in top["user"])
            top["user"] = top["user"].map(self.user)
            # The analysis's figure labels users as the dataset holds them: shown unless those are
            # names the report must not print (a dataset collated with --no-anonymise).
            fig = None if named else self.copy_figure("neighbourhood", name, "top_users",
                                                      "Top users by mutual information",
                                                      s.path(NeighbourhoodDataset.top_users_figure(name)))
            part.figures += [fig] if fig else []
            lead = d.top_users[0]
            leaders.append(self.user(lead.user))
            part.reading = (
                f"{d.qualified_users} users ran jobs larger than {thr} nodes alongside the {d.runs} runs; "
                f"{d.optimal_runs} runs were faster than the mean. {self.user(lead.user)} tells fast from slow runs "
                f"best (MI {lead.mi:.3f}): present in {lead.cooccurrence} runs, which averaged "
                f"{lead.mean_time_with_s:,.0f} s against {_num(lead.mean_time_without_s, '{:,.0f}')} s without "
                f"({lead.direction})."
                + (" The analysis's figure is left out: the dataset holds user names (collated with "
                   "--no-anonymise), and the report shows pseudonyms." if named else ""))
            part.tables.append(Table("Top users (MI ranking, with the Pearson node-count ranking)", top[
                ["rank_mi", "user", "mi", "cooccurrence", "mean_time_with_s", "mean_time_without_s", "direction",
                 "nodes_r", "rank_r"]], {"mi": "{:.3f}", "mean_time_with_s": "{:,.0f}", "mean_time_without_s": "{:,.0f}",
                                         "nodes_r": "{:.2f}"}))
            by_r = _frame(d.top_users_by_nodes_r, PearsonRankedUser)
            if len(by_r):
                by_r["user"] = by_r["user"].map(self.user)
                part.tables.append(Table(
                    "Top users by the Pearson correlation of run time with their concurrently allocated nodes, all "
                    "users and job sizes (the Perlmutter/Frontier study)",
                    by_r[["user", "nodes_r", "nodes_p", "runs_alongside", "rank_mi"]],
                    {"nodes_r": "{:.2f}", "nodes_p": "{:.2g}", "rank_mi": "{:.0f}"}))
            parts.append(part)
        cross = pd.DataFrame(s.cross_dataset)
        if len(cross):
            cross["user"] = cross["user"].map(self.user)
            fmt = {c: "{:.0f}" for c in cross.columns if c not in ("user", "datasets")}
            parts.insert(0, Part("Across datasets (Table III)", tables=[Table(
                "Users among the top slowing users of several datasets (rank per dataset)", cross, fmt)],
                reading=f"{len(cross)} users are among the top {top_k} slowing users of more than one "
                        f"dataset; {cross.iloc[0]['user']} in {int(cross.iloc[0]['datasets'])}. A user who slows "
                        "several applications is worth a look at their job's communication pattern."))
        sec.parts = parts
        sec.reading = (f"Users whose large jobs (more than {thr} nodes) coincide with slow runs, ranked by the mutual "
                       "information between their presence and whether a run was faster than the mean (Bhatele et "
                       "al. 2020, Section IV-A); and, over every user and job size, by the Pearson correlation of "
                       "run time with the nodes they had allocated during the run (the group's Perlmutter/Frontier "
                       "study). User names are pseudonyms (salted hashes); the salt stays with the "
                       "facility.")
        return sec

    def deviation(self) -> Section:
        s = self.result(DeviationResult)
        sec = Section("deviation", "Deviation: which counters explain the spread")
        if not s or not s.datasets:
            sec.empty = self.no_analysis("deviation", s)
            return sec
        rows, parts = [], []
        for name, d in s.datasets.items():
            rows.append({"dataset": name, "runs": d.runs, "steps": d.steps, "top_counter": d.top_counter,
                         "mape": d.mape, "paper_bound": s.paper_mape, "below_paper_bound": d.below_paper_bound})
            part = Part(name)
            fig = self.copy_figure("deviation", name, "relevance", "Counter relevance (Figure 9)",
                                   s.path(d.relevance_figure(name)))
            if fig:
                part.figures.append(fig)
            # The three most relevant in words (as the relevance figure shows more of them): the
            # first alone would hide a global-link counter behind the CPU pressure the emulated
            # nodes' shared CPUs add.
            first, *then = d.relevance[:3]
            part.reading = (
                f"{_counter(d.top_counter)} was selected in {_pct(first.relevance)} of the {d.folds} folds"
                + (", then " + " and ".join(f"{_counter(r.counter)} ({_pct(r.relevance)})" for r in then) if then
                   else "")
                + f". The selected counters reconstruct step-time deviations with a MAPE of {_pct(d.mape)} "
                  f"(paper: under {_pct(s.paper_mape)}).")
            if d.cpu_pressure_r2 is not None:
                part.reading += (f" The CPU load (time under CPU pressure, from the node samplers) alone explains "
                                 f"{_pct(d.cpu_pressure_r2)} of the variance of the step-time deviations.")
            parts.append(part)
        sec.parts = [Part("All datasets", tables=[Table("MAPE of the reconstructed step time", pd.DataFrame(rows),
                                                        {"mape": "{:.1%}", "paper_bound": "{:.0%}"})]), *parts]
        folds = sorted({d.folds for d in s.datasets.values()})
        folds_text = f"{folds[0]}-fold" if len(folds) == 1 else f"{folds[0]}- to {folds[-1]}-fold"
        sec.reading = ("Per-step deviations from the mean step time are explained by the network counters of the "
                       f"job's routers: gradient-boosted trees with recursive feature elimination in {folds_text} "
                       "cross-validation grouped by run. A counter's relevance is the share of folds that selected "
                       "it (Section IV-B); the stall counters point at congestion on the job's routers.")
        return sec

    def forecast(self) -> Section:
        s = self.result(ForecastResult)
        sec = Section("forecast", "Forecasting: the next k steps from the last m")
        if not s or not s.datasets:
            sec.empty = self.no_analysis("forecast", s)
            return sec
        rows, parts = [], []
        for name, d in s.datasets.items():
            b = d.best
            part = Part(name)
            if not b:
                part.reading = " ".join(d.notes or ["No forecast for this dataset."])
                parts.append(part)
                continue
            rows.append({"dataset": name, "m": b.m, "k": b.k, "feature_set": b.feature_set,
                         **{model: b.mape(model) for model in REPORTED_MODELS}})
            for fname, key, title in (("mape_grid", "grid_figure", "MAPE over (m, k) and feature sets "
                                                                   "(Figures 8, 10)"),
                                      ("importance", "importance_figure", "Feature importance (Figure 11)"),
                                      ("long_run", "long_run_figure", "Long-run segment forecast (Figure 12)")):
                src = d.figure(name, key)
                fig = self.copy_figure("forecast", name, fname, title, s.path(src)) if src else None
                if fig:
                    part.figures.append(fig)
            best_name, best_value = b.best_baseline() or ("none scored", None)
            text = (f"Best cell m={b.m}, k={b.k} with {b.feature_set} features: the attention model's MAPE "
                    f"is {_pct(b.mape_attention)} against {_pct(best_value)} for the best baseline "
                    f"({best_name})")
            if b.mape_oracle is not None:
                text += f"; a predictor that knows the simulator's hidden state reaches {_pct(b.mape_oracle)}"
            part.reading = text + "."
            lr = d.long_run
            if lr and lr.mape is not None:
                part.reading += (f" Long run ({lr.segments} segments of {lr.k} steps from the {lr.m} before, "
                                 f"no data of that run in training): MAPE {_pct(lr.mape)}, persistence "
                                 f"{_pct(lr.mape_persistence)}.")
            parts.append(part)
        if rows:
            fmt = {c: "{:.1%}" for c in REPORTED_MODELS}
            parts.insert(0, Part("All datasets", tables=[Table(
                "MAPE in each dataset's best cell, with the baselines (and the simulator's oracle)",
                pd.DataFrame(rows), fmt)]))
        sec.parts = parts
        sec.reading = ("An attention model reads the counters and step times of the last m steps and forecasts the "
                       "time of the next k (Section V). Baselines: persistence (the last m steps rescaled), the mean "
                       "step profile, and LightGBM on the flattened window. Feature sets add placement, file-system "
                       "(io) and system-wide (sys) counters to the job's own.")
        return sec

    def placement(self) -> Section:
        res = self.result(OverviewResult)
        parts = []
        for name in self.names if res is not None else []:
            st = res.datasets[name].placement if name in res.datasets else None
            if st is None:
                continue  # runs imported from tables (hpcvar import-neighbourhood): nodes unknown
            fig = self.copy_figure("placement", name, "placement", "Run time vs placement",
                                   res.path(OverviewDataset.figure(name, "placement")))
            loc = ", ".join(f"{c}: {v.runs} runs, median {_num(v.median_s, '{:,.0f}')} s"
                            for c, v in st.locality.items())
            parts.append(Part(name, figures=[fig] if fig else [],
                              reading=(f"Correlation of run time with the groups spanned r = {_r(st.r_num_groups)}, "
                                       f"with the routers spanned r = {_r(st.r_num_routers)}. By locality class: "
                                       f"{loc}.")))
        sec = Section("placement", "Placement: where the job's nodes were", (
            "Whether a run was slow because of where Slurm placed it: run time against the number of dragonfly "
            "groups and routers the job spanned, and per locality class (one router, one group, the fewest groups "
            "that can hold the job, or fragmented). A weak correlation here with strong neighbourhood or counter "
            "signals means the slowdown came from other jobs' traffic, not from the job's own spread."), parts)
        if res is None:
            sec.empty = self.no_analysis("overview", res)
        elif not parts:
            sec.empty = ("No data: no run has a node list (runs imported from tables with hpcvar "
                         "import-neighbourhood have none).")
        return sec

    def background(self) -> Section:
        sec = Section("background", "Background traffic and locality")
        res = self.result(DistributionsResult)
        if res is None or not res.datasets:
            sec.empty = self.no_analysis("distributions", res)
            return sec
        if "bg_traffic" not in self.runs or self.runs["bg_traffic"].isna().all():
            sec.empty = ("No data: no run has a sacct snapshot of the other jobs at its start (runs of ReFrame's "
                         "local scheduler), so the background-traffic estimate b is unknown.")
            return sec
        for name, d in res.datasets.items():
            c = d.conditions
            if not c.groups:
                continue
            # The rows as the analysis wrote them: b_lower/b_upper only where there are b buckets.
            groups = pd.DataFrame([g.model_dump(exclude_unset=True) for g in c.groups])
            part = Part(name)
            first = c.variables[0]
            for cond, what in (("b", "background traffic b"), ("locality", "locality")):
                file = Conditions.figure_file(cond, first)
                fig = self.copy_figure("background", name, Path(file).stem, f"{first} by {what}",
                                       res.dataset_file(name, file))
                if fig:
                    part.figures.append(fig)
            cols = [c_ for c_ in ("variable", "condition", "group", "b_lower", "b_upper", "runs", "n", "median",
                                  "p95", "p99") if c_ in groups]
            part.tables.append(Table(f"Per b bucket and locality class ({c.unit})", groups[cols],
                                     {k: "{:,.3g}" for k in ("b_lower", "b_upper", "median", "p95", "p99")}))
            sp = c.spearman_b_p95.get(first)
            loc = [g for g in c.groups if g.variable == first and g.condition == "locality"]
            text = (f"b from {c.runs_with_b} runs' sacct snapshots, buckets at "
                    f"{', '.join(f'{e:.0f}' for e in c.b_edges)}. ")
            if sp is not None and sp.rho is not None:
                text += (f"For {first}, the Spearman correlation of b with a run's 95th percentile is "
                         f"{sp.rho:.2f} (p = {sp.p:.2g})")
                if sp.rho_within_locality is not None:
                    text += (f", {sp.rho_within_locality:.2f} (p = {sp.p_within_locality:.2g}) relative to "
                             "runs of the same locality class")
                text += ". "
            if len(loc) > 1:
                text += "Median by locality: " + ", ".join(f"{g.group} {_num(g.median, '{:,.3g}')}" for g in loc) + "."
            part.reading = text
            sec.parts.append(part)
        if not sec.parts:
            sec.empty = "No data: the distributions analysis found no run with a background-traffic estimate."
        sec.reading = ("Salimi Beni et al.'s estimate of the network traffic of other jobs from the scheduler alone, "
                       "b = (N_c / N_t) x (N'_c / N_a) x 100, from the jobs running at each run's start (jobs on two "
                       "nodes or more count as communicating), and the Dragonfly+ locality of the run's nodes (one "
                       "group, one island, different islands). Longer tails at high b mean interference; slower runs "
                       "on less local placements mean the job's own traffic crossed more of the network.")
        return sec

    def distributions(self) -> Section:
        sec = Section("distributions", "Latency and step-time distributions")
        res = self.result(DistributionsResult)
        if res is None or not res.datasets:
            sec.empty = self.no_analysis("distributions", res)
            return sec

        def copy(name: str, file: str, title: str) -> Figure | None:
            """A figure of the dataset's directory, under the analysis's file name."""
            return self.copy_figure("distributions", name, Path(file).stem, title, res.dataset_file(name, file))

        for name, d in res.datasets.items():
            part = Part(name)
            rows = []
            if d.kind == "application":
                st = d.step_ratio
                if st is not None:
                    rows.append({"variable": "step time / step median", **_stats_row(st)})
                    fig = copy(name, DistributionsDataset.STEP_RATIO_FIGURE,
                               "Step times relative to the same step's median")
                    part.figures += [fig] if fig else []
                    # skew is undefined (null) without spread, e.g. one run per step so far
                    skew = f"skew {st.skew:.1f}" if st.skew is not None else "no spread yet"
                    part.reading = (f"Step times span {st.p01:.2f}x to {st.p99:.2f}x of the same step's median "
                                    f"(1st to 99th percentile; {skew}); " + _modes_text(st) + ".")
            else:
                for g in d.latency or []:
                    rows.append({"variable": g.variable, **_stats_row(g)})
                    fig = copy(name, g.figure, f"{g.operation} {g.size_bytes} B: PDF and CDF")
                    part.figures += [fig] if fig else []
                for kind, title in (("timer", "Timer cost (calibration)"), ("pairwise", "Pairwise latency histograms")):
                    fig = copy(name, Histograms.figure_file(kind), title)
                    part.figures += [fig] if fig else []
                multi = [r["variable"] for r in rows if r["modes"] > 1]
                part.reading = (f"{len(rows)} operations and sizes; "
                                + (f"several performance modes in {', '.join(multi)}" if multi else
                                   "each has a single performance mode (dip test)") + ". ")
                timer = d.histograms.timer if d.histograms else None
                if isinstance(timer, HistogramSummary):
                    part.reading += f"{timer.share_first_bin:.1%} of timer calls fall in the first bin."
            rt = d.run_time_s
            rows.append({"variable": "run time (s)", **_stats_row(rt)})
            part.tables.append(Table("Summary and higher-order statistics (moments about the minimum: m2 = mean of "
                                     "(x - min)^2)", pd.DataFrame(rows),
                                     {k: "{:,.4g}" for k in ("min", "median", "mean", "std", "skew", "kurtosis", "p99",
                                                             "m1_min", "m2_min", "dip_p")}))
            sec.parts.append(part)
        sec.reading = ("Confidence-style distributions (Settlemyer et al.): the whole PDF and CDF over logarithmic bins, "
                       "not only a mean, with skew, kurtosis and moments about the observed minimum (latency has a "
                       "hard lower bound). A sample is called multimodal only when Hartigan's dip test rejects a single "
                       "mode; the modes' locations and weights come from a kernel density estimate.")
        return sec

    def regression(self) -> Section:
        sec = Section("regression", "Regression check: before and after a change")
        res = self.result(CompareResult)
        if res is None:
            sec.empty = ("No data: no regression check was configured (set compare.before and compare.after, or run "
                         "`hpcvar compare BEFORE AFTER --out results/analyses/compare`).")
            return sec
        pairs = pd.DataFrame([p.model_dump(exclude_unset=True) for p in res.pairs])
        cols = [c for c in ("test", "variable", "verdict", "n_before", "n_after", "median_before", "median_after",
                            "shift_pct", "iqr_ratio", "modes_before", "modes_after", "p_holm") if c in pairs]
        flagged = [p for p in res.pairs if p.verdict != "unchanged"]
        part = Part("All tests", tables=[Table("Verdict per test and variable", pairs[cols],
                                               {"median_before": "{:,.4g}", "median_after": "{:,.4g}",
                                                "shift_pct": "{:+.1f}%", "iqr_ratio": "{:.2f}", "p_holm": "{:.2g}"})])
        for p in flagged:
            if (path := res.figure(p)) is not None:
                fig = self.copy_figure("regression", p.test, slug(p.variable), f"{p.test} {p.variable}: {p.verdict}",
                                       path)
                part.figures += [fig] if fig else []
        counts = pairs["verdict"].value_counts().to_dict()
        b, a = ((side.range or side.source) if side else None for side in (res.before, res.after))
        part.reading = (f"Runs started {b} against {a}: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + ". "
                        + (" ".join(f"{p.test} {p.variable}: {p.reason}." for p in flagged) if flagged
                           else "No test changed."))
        sec.parts.append(part)
        sec.reading = ("The post-upgrade check (`hpcvar compare`): per test and variable, distribution tests "
                       "(Kolmogorov-Smirnov, Anderson-Darling, Brown-Forsythe, exchanging whole runs when samples come "
                       "in runs, Holm-corrected) and effect sizes decide unchanged, faster, slower or changed shape -- "
                       "the same mean with a different spread or new modes, as after the Jaguar SeaStar upgrade. "
                       "Application run times also move with who else was running: read a verdict on them with the "
                       "neighbourhood section.")
        return sec

    def interference(self) -> Section:
        sec = Section("interference", "Interference: the victim next to aggressors, per placement policy")
        res = self.result(InterferenceResult)
        if res is None:
            sec.empty = ("No data: no interference experiment (set interference.experiment, or run `hpcvar interference "
                         "simulate|run EXPERIMENT.yaml --out results/analyses/interference`).")
            return sec
        cols = ["policy", "routing", "slowdown_total", "slowdown_comm", "slowdown_latency"]
        fmt = {c: "{:.3f}" for c in cols[2:]}
        for job, by_policy in res.slowdowns.items():
            role = res.jobs[job].role
            table = pd.DataFrame([{"policy": policy, "routing": routing, **s.model_dump(include=set(cols[2:]))}
                                  for policy, by_routing in by_policy.items() for routing, s in by_routing.items()],
                                 columns=cols).astype({c: float for c in cols[2:]})
            part = Part(f"{job} ({role})", tables=[Table("Slowdown, mixed over alone (median over repetitions)",
                                                         table, fmt)])
            fig = self.copy_figure("interference", job, "slowdowns", f"{job}: slowdowns per policy",
                                   res.path(InterferenceResult.figure(job, "slowdowns")))
            part.figures += [fig] if fig else []
            for routing in dict.fromkeys(r for by_routing in by_policy.values() for r in by_routing):
                fig = self.copy_figure("interference", job, f"latency_{slug(routing)}",
                                       f"{job}: latency distributions ({routing})",
                                       res.path(InterferenceResult.figure(job, "latency", routing)))
                part.figures += [fig] if fig else []  # drawn where the job's samples had latencies
            lat = table.dropna(subset=["slowdown_latency"])
            if len(lat):
                best, worst = lat.loc[lat["slowdown_latency"].idxmin()], lat.loc[lat["slowdown_latency"].idxmax()]
                part.reading = (f"Latency slowdown from {best['slowdown_latency']:.2f}x ({best['policy']}, "
                                f"{best['routing']}) to {worst['slowdown_latency']:.2f}x ({worst['policy']}, "
                                f"{worst['routing']}).")
                routings = set(lat["routing"])
                if {"minimal", "adaptive"} <= routings:
                    wide = lat.pivot(index="policy", columns="routing", values="slowdown_latency")
                    better = [p for p in wide.index if wide.loc[p, "adaptive"] < wide.loc[p, "minimal"]]
                    part.reading += (f" Adaptive routing lowers it under {len(better)} of {len(wide)} policies"
                                     + (f" ({', '.join(better)})." if better else "."))
            sec.parts.append(part)
        notes = " ".join(res.notes)
        collated = res.runs.collated if res.runs else 0
        sec.reading = (
            ("What-if on the simulated dragonfly (hpcvar interference simulate, after the Union/CODES hybrid-workload "
             "study): " if res.simulated else f"A real experiment on the cluster ({collated} "
             "runs, hpcvar interference run): ")
            + f"experiment {res.experiment}: the victim and each aggressor alone, then all together, under each "
            "placement policy. A slowdown is the mixed run's total time, communication time or message latency over "
            "the same job's alone; random-group placement confines traffic to whole groups, the locality classes place "
            "the victim in one group, one island or across islands. " + notes)
        return sec

    def config_text(self, text: str | None) -> str | None:
        """The configuration as shown: the user names it holds (the planted workload's users,
        ``campaign.background.jobs``) replaced by their pseudonyms, unless the report shows names."""
        if not text or self.pseudo is None:
            return text
        doc = yaml.safe_load(text) or {}
        background = (doc.get("campaign") or {}).get("background") or {}
        for name in sorted({j.get("user") for j in background.get("jobs") or [] if j.get("user")}, key=len,
                           reverse=True):
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", self.user(name), text)
        return text

    def provenance(self, config_text: str | None) -> dict:
        config_text = self.config_text(config_text)
        versions = {}
        for pkg in VERSIONS:
            try:
                versions[pkg] = metadata.version(pkg)
            except metadata.PackageNotFoundError:
                versions[pkg] = "not installed"
        versions["python"] = platform.python_version()
        mlflow = {}
        for kind in (NeighbourhoodResult, DeviationResult, ForecastResult):
            s = self.result(kind)
            if s and s.mlflow:
                mlflow[kind.NAME] = s.mlflow.model_dump()
        uri = next((m.get("tracking_uri") for m in mlflow.values() if m.get("tracking_uri")), None)
        software = sorted(set(self.runs["software"].dropna()) - {""})
        return {
            "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "dataset": str(self.dataset_dir.resolve()), "analyses": str(self.analyses_dir.resolve())
            if self.analyses_dir else None,
            "window": f"{self.runs['start'].min():%Y-%m-%d %H:%M} to {self.runs['end'].max():%Y-%m-%d %H:%M} UTC",
            "systems": sorted(self.runs["system"].unique()), "software": software,
            "versions": versions, "config": config_text, "mlflow": mlflow, "tracking_uri": uri,
            "mlflow_ui": (f"MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui "
                          f"--backend-store-uri {uri} --host 127.0.0.1 --port 5000"
                          if uri else None),
            "anonymised": self.pseudo is not None,
        }


def build(dataset_dir, out_html, analyses_dir=None, figures_dir=None, config_file=None,
          pseudo: Pseudonymiser | None = None, title: str = "hpcvar: where the variability comes from") -> dict:
    """Write the report to ``out_html`` (and its figures under ``figures_dir``); returns what
    went in: sections with their figure files, for tests and the command's message."""
    out_html = Path(out_html)
    figures_dir = Path(figures_dir) if figures_dir else out_html.with_suffix("") / "figures"
    if figures_dir.exists():
        shutil.rmtree(figures_dir)  # figures of datasets no longer present must not linger
    b = Builder(dataset_dir, analyses_dir, figures_dir, pseudo)
    sections = [b.findings(), b.campaign(), b.datasets(), b.neighbourhood(), b.deviation(), b.forecast(),
                b.placement(), b.background(), b.distributions(), b.regression(), b.explained(), b.interference()]
    config_text = Path(config_file).read_text() if config_file else None
    prov = b.provenance(config_text)
    env = jinja2.Environment(loader=jinja2.PackageLoader("hpcvar.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)
    env.filters["slug"] = slug
    html = env.get_template("report.html.j2").render(title=title, sections=sections, prov=prov)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_html, html)
    return {"html": str(out_html), "bytes": out_html.stat().st_size, "figures_dir": str(figures_dir),
            "sections": {s.id: {"title": s.title, "figures": [str(f.path) for f in s.figures], "empty": s.empty}
                         for s in sections}}
