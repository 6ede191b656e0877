"""Why was this run slow? One run explained with the evidence, from what the analyses computed.

``hpcvar explain DATASET RUN_ID`` answers for one run; ``hpcvar explain DATASET --out DIR`` for
every dataset at once (its findings, and its slowest runs explained), which the report shows.
Nothing here fits a model of its own:

* **How much slower**: the run's time against its dataset's typical run (the median run time),
  and per step against each step's median over the dataset's runs; the steps that hold most of
  the excess are where the slowdown sat.
* **What accounts for it**, in seconds: the deviation analysis's attribution model
  (:func:`hpcvar.analyses.deviation.attribute`) predicted, out of fold, each step's deviation
  from that step's median and split the prediction into per-feature contributions (SHAP values,
  measured from a typical step: every feature at its median). A contribution times the step's
  typical time is the seconds that feature added; the features
  fall into categories (:func:`category`): network counters, placement, I/O counters, CPU and
  memory pressure. The model splits a step's time, the measured step says how much there is to
  split: a prediction beyond the step's real excess over typical is scaled down to it
  (:func:`_within_excess`), so no cause gets more seconds than the run's steps lost.
* **Who**: what a user the neighbourhood analysis implicates in the dataset (runs significantly
  slower with them: Pearson r > 0, p < ``alpha``, on the log of run time, where slowdowns
  multiply) adds to a step while their jobs run, estimated
  jointly over the dataset's steps (:meth:`Context.effects`: the log of each step's time over
  its median against how many jobs of each implicated user were running, non-negative least
  squares, so each job multiplies a step's time by a factor), so a user who merely kept a
  culprit company gets little. Which runs a user's jobs can reach is the ``reach`` setting:
  anywhere on the system (adaptive routing, the study's machines), or only the runs whose groups
  they shared (minimal routing, the testbed); the estimate itself is the dataset's, over every
  run their jobs ran beside. In the run's steps with their jobs running, what the step would
  lose without them (at most all of its excess) is theirs, and leaves the
  network's share; what the network's counters explain beyond it stays "network". A user that
  other datasets of the system implicate but this one does not (the study's cross-dataset view)
  is a suspect too, counted only where their jobs shared two of the run's groups, so a global
  link (:meth:`Context.implicated_elsewhere`): a small job Slurm mostly packs into one group
  rarely meets a culprit on a global link, and its own statistics then miss the culprit that
  slowed the few runs that did.
* **No clear cause** when the largest cause accounts for less than ``min_share`` of the excess;
  the unexplained remainder is always given.

Runs the attribution model does not cover (no time steps, e.g. the microbenchmarks; a dataset
with too few runs) are explained with the dataset's statistics alone: the largest dataset-wide
effect of the implicated users alongside (shared among them as above), the effect of spanning more
groups than the dataset's fewest.
"""

from __future__ import annotations

import difflib
import multiprocessing
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.analyses.common import step_frame
from hpcvar.data.dataset import Dataset
from hpcvar.results import ResultError
from hpcvar.results.deviation import DeviationResult
from hpcvar.results.explain import (LABELS, Cause, CategoryShare, CounterEvidence, ExplainDataset, ExplainResult,
                                    NeighbourEvidence, PlacementEvidence, RunExplanation, StepTime, UserShare)
from hpcvar.results.neighbourhood import NeighbourhoodDataset, NeighbourhoodResult
from hpcvar.settings import ExplainSettings
from hpcvar.util.cores import processes_for
from hpcvar.util.progress import Progress

#: The placement columns of the attribution model.
PLACEMENT = ("num_routers", "num_groups")
#: Jobs on fewer nodes do not use the interconnect between nodes: they are never given network time.
NETWORK_MIN_NODES = 2
#: A job sharing this many of a run's groups can share a global link with it (minimal routing
#: between two groups takes the link between them).
LINK_GROUPS = 2
#: Causes below this share of the run's excess are not listed (their seconds stay unexplained).
MIN_CAUSE_SHARE = 0.01
#: Share of the run's positive step excess the listed slow steps hold.
SLOW_STEPS_SHARE = 0.8


class ExplainError(ValueError):
    """The run or the analyses to build on are not there (the message says what to do)."""


def category(feature: str) -> str:
    """The kind of cause an attribution feature stands for."""
    if feature in PLACEMENT:
        return "placement"
    if feature.startswith(("io_", "psi.io")):
        return "io"
    if feature.startswith("psi."):
        return "load"
    return "network"


def describe(feature: str) -> str:
    """What a feature counts and where it was measured, in words."""
    from hpcvar.system.linkcounters import base_name
    from hpcvar.system.linkcounters import meaning as link_meaning

    if feature == "num_groups":
        return "dragonfly groups the run spans"
    if feature == "num_routers":
        return "routers the run's nodes attach to"
    if feature.startswith("psi."):
        resource, _, kind = feature[4:].removesuffix("_us").partition("_")
        return f"time the run's tasks stalled waiting for {resource} ({kind}), per node"
    for prefix, where in (("io_", "at the routers serving I/O nodes"), ("sys_", "at the routers with none of "
                                                                                  "the run's nodes")):
        if feature.startswith(prefix):
            inner = feature[len(prefix):]
            words = link_meaning(inner)
            return f"{inner} ({words}) {where}" if words else f"{inner} {where}"
    words = link_meaning(base_name(feature))
    if words:
        return f"{words}, on the links of the run's routers"
    if feature.startswith("RT_"):
        return "router-tile counter of the routers serving the run's nodes"
    if feature.startswith("PT_"):
        return "processor-tile counter of the routers serving the run's nodes"
    return "counter of the run's nodes or routers"


def step_ranges(steps) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    steps = sorted(int(s) for s in steps)
    out, i = [], 0
    while i < len(steps):
        j = i
        while j + 1 < len(steps) and steps[j + 1] == steps[j] + 1:
            j += 1
        out.append(str(steps[i]) if i == j else f"{steps[i]}-{steps[j]}")
        i = j + 1
    return ", ".join(out)


def _fmt_s(x: float) -> str:
    return f"{x:.3g} s" if abs(x) < 100 else f"{x:,.0f} s"


class Context:
    """A dataset directory and the analyses beside it, read once for any number of runs."""

    def __init__(self, dataset_dir: str | Path, analyses_dir: str | Path | None = None,
                 settings: ExplainSettings | dict | None = None):
        self.dataset_dir = Path(dataset_dir)
        self.settings = settings if isinstance(settings, ExplainSettings) else ExplainSettings.from_mapping(settings)
        ds = Dataset(self.dataset_dir)
        if not ds.is_dataset():
            raise ExplainError(f"{self.dataset_dir}: not a dataset directory (`hpcvar collate RAW --out DIR` writes "
                               "one)")
        tables = ("runs", "steps", "step_counters", "system_counters", "neighbourhood")
        self.data = {t: ds.read(t) for t in tables}
        runs = self.data["runs"]
        if runs.empty:
            raise ExplainError(f"{self.dataset_dir}: the dataset has no runs (`hpcvar collate` first)")
        self.runs = runs.set_index("run_id", drop=False)
        self.analyses_dir = Path(analyses_dir) if analyses_dir else self.dataset_dir.parent / "analyses"
        self.missing: list[str] = []
        self.deviation = self._read(DeviationResult, "deviation")
        self.neighbourhood = self._read(NeighbourhoodResult, "neighbourhood")
        if self.deviation is None and self.neighbourhood is None:
            raise ExplainError(
                f"{self.analyses_dir}: no analyses to build on (no deviation/summary.json nor "
                f"neighbourhood/summary.json). Run them first: `hpcvar neighbourhood {self.dataset_dir} --out "
                f"{self.analyses_dir / 'neighbourhood'}` and `hpcvar deviation {self.dataset_dir} --out "
                f"{self.analyses_dir / 'deviation'}` (the workflow runs both), or name their directory with "
                "--analyses")
        self._cache: dict = {}

    def _read(self, kind, name: str):
        try:
            result = kind.read(self.analyses_dir / name)
        except ResultError as exc:
            raise ExplainError(str(exc)) from None
        if result is None:
            self.missing.append(f"no {name} analysis in {self.analyses_dir} (`hpcvar {name}` first)")
        return result

    def of_run(self, table: str, run_id: str) -> pd.DataFrame:
        """``table``'s rows of one run, in the table's order: the table is split by run once, not
        filtered again for every run explained (which made explaining a dataset quadratic in its
        runs)."""
        key = ("by_run", table)
        if key not in self._cache:
            frame = self.data[table]
            self._cache[key] = ({rid: part for rid, part in frame.groupby("run_id", sort=False)}
                                if len(frame) else {}, frame.iloc[0:0])
        parts, empty = self._cache[key]
        return parts.get(run_id, empty)

    def dataset_runs(self, dataset: str) -> pd.DataFrame:
        """The dataset's runs that took time: the completed ones, or all if none completed."""
        key = ("runs", dataset)
        if key not in self._cache:
            runs = self.runs[(self.runs["dataset"] == dataset) & (self.runs["total_time_s"] > 0)]
            ok = runs["state"].isna() | (runs["state"] == "COMPLETED")
            self._cache[key] = runs[ok] if ok.any() else runs
        return self._cache[key]

    def frame(self, dataset: str) -> pd.DataFrame:
        """The dataset's per-step frame (per-router counters, as the models saw them)."""
        key = ("frame", dataset)
        if key not in self._cache:
            self._cache[key] = step_frame(self.data, dataset) if not self.data["steps"].empty else pd.DataFrame()
        return self._cache[key]

    def typical_steps(self, dataset: str) -> pd.DataFrame:
        """Per step: the median over the dataset's runs of its duration and of every column."""
        key = ("typical", dataset)
        if key not in self._cache:
            f = self.frame(dataset)
            self._cache[key] = (f.drop(columns=["run_id", "run_order"], errors="ignore").groupby("step").median()
                                if not f.empty else pd.DataFrame())
        return self._cache[key]

    def attribution(self, dataset: str) -> pd.DataFrame | None:
        key = ("attribution", dataset)
        if key not in self._cache:
            table = None
            d = self.deviation.datasets.get(dataset) if self.deviation else None
            if d is not None and d.attribution_features:
                path = self.analyses_dir / "deviation" / d.attribution_table(dataset)
                if path.is_file():
                    table = pd.read_parquet(path).set_index("run_id", drop=False)
            self._cache[key] = table
        return self._cache[key]

    def ranking(self, dataset: str) -> pd.DataFrame | None:
        key = ("ranking", dataset)
        if key not in self._cache:
            table = None
            if self.neighbourhood and dataset in self.neighbourhood.datasets:
                path = self.analyses_dir / "neighbourhood" / NeighbourhoodDataset.ranking_table(dataset)
                if path.is_file():
                    table = pd.read_csv(path, dtype={"user": str}).set_index("user", drop=False)
            self._cache[key] = table
        return self._cache[key]

    def ranking_rows(self, dataset: str) -> dict[str, dict]:
        """The ranking's row of each user, as a mapping (empty without a ranking)."""
        key = ("ranking_rows", dataset)
        if key not in self._cache:
            ranking = self.ranking(dataset)
            self._cache[key] = ({} if ranking is None else
                                dict(zip(ranking.index, ranking.to_dict("records"), strict=True)))
        return self._cache[key]

    def implicated(self, dataset: str) -> dict[str, float]:
        """Users the dataset implicates, with the weight of each: how much slower (relative) the
        dataset's runs are with them than without."""
        key = ("implicated", dataset)
        if key not in self._cache:
            self._cache[key] = self._implicated(dataset)
        return self._cache[key]

    def _implicated(self, dataset: str) -> dict[str, float]:
        ranking = self.ranking(dataset)
        if ranking is None:
            return {}
        r = ranking
        # On the log of run time, as the effects are estimated (:meth:`effects`); a ranking from
        # before that column was written: on run time.
        r_col, p_col = ("log_r", "log_p") if "log_p" in r.columns else ("nodes_r", "nodes_p")
        ok = (r[r_col] > 0) & (r[p_col] < self.settings.alpha)
        out = {}
        for user, row in r[ok].iterrows():
            w, wo = row.get("mean_time_with_s"), row.get("mean_time_without_s")
            out[str(user)] = float(w / wo - 1) if pd.notna(w) and pd.notna(wo) and wo > 0 and w > wo else 0.0
        return out

    def implicated_elsewhere(self, dataset: str) -> dict[str, list[str]]:
        """Users this dataset does not implicate but other datasets of the system do (the study's
        cross-dataset view, its Table III), with those datasets. A dataset whose runs mostly stay
        inside one group, such as a small job Slurm packs, rarely meets a culprit on a global
        link, so its own statistics miss the culprit that slowed the few runs that did; such a
        user counts in its runs only where their jobs shared :data:`LINK_GROUPS` of the run's
        groups (:func:`_presence`)."""
        key = ("elsewhere", dataset)
        if key not in self._cache:
            here = self.implicated(dataset)
            out: dict[str, list[str]] = {}
            for other in sorted(self.neighbourhood.datasets if self.neighbourhood else []):
                if other != dataset:
                    for user in self.implicated(other):
                        if user not in here:
                            out.setdefault(user, []).append(other)
            self._cache[key] = out
        return self._cache[key]

    def suspects(self, dataset: str) -> list[str]:
        """The users whose jobs may take a run's time: implicated here or elsewhere."""
        return sorted({*self.implicated(dataset), *self.implicated_elsewhere(dataset)})

    @property
    def min_nodes(self) -> int:
        """The smallest job that counts as a neighbour on the network: larger than the
        neighbourhood analysis's ``threshold_nodes`` (the jobs its MI ranking is about; in the
        study, jobs on fewer nodes did not matter), and on NETWORK_MIN_NODES nodes at least."""
        threshold = self.neighbourhood.params.threshold_nodes if self.neighbourhood else 0
        return max(NETWORK_MIN_NODES, threshold + 1)

    def reaches(self, shared_groups) -> bool:
        """Whether a job sharing ``shared_groups`` of a run's groups could slow it through the
        network (:attr:`ExplainSettings.reach`): anywhere on the system, or only where it shared
        one of them at least (not known: either way). The effects are the dataset's,
        estimated over every run the jobs ran beside; this decides which runs they are given time
        in. (Estimated over the reached runs alone, a testbed decoy's effect took that of the
        placement: Slurm spread every 2-node run it was beside, 2026-11-30.)"""
        return self.settings.reach == "system" or pd.isna(shared_groups) or shared_groups >= 1

    def mi(self, dataset: str) -> dict[str, float]:
        """The implicated users' mutual information with the dataset's slow runs (the paper's
        ranking, over jobs larger than its threshold; 0 for users without such jobs)."""
        key = ("mi", dataset)
        if key not in self._cache:
            rows = self.ranking_rows(dataset)
            out = {}
            for user in self.implicated(dataset):
                mi = rows[user].get("mi") if user in rows else None
                out[user] = float(mi) if mi is not None and pd.notna(mi) and mi > 0 else 0.0
            self._cache[key] = out
        return self._cache[key]

    def effects(self, dataset: str) -> dict[str, float]:
        """What each implicated user's presence adds, estimated jointly over the dataset, as a
        log factor per job: the log of every step's time over its median (the steps the
        attribution model covers) against how many jobs of each implicated user were running in
        it, by non-negative least squares with an intercept; for a dataset without per-step
        attribution, the log of each run's slowdown against how many of their jobs were
        alongside. Multiplicative, because a culprit's traffic slows a step by more where the
        links are slower for other reasons (after a rate drop, on a longer route). A user
        whose long jobs merely kept the company of a culprit correlates with slow runs as well
        (that is how they got implicated), but adds nothing once the culprit's own jobs are
        accounted for; each job of a culprit loads the network on its own, so they count. Users
        implicated elsewhere (:meth:`implicated_elsewhere`) are estimated alike, their jobs
        counted where they shared a global link with the run."""
        key = ("effects", dataset)
        if key in self._cache:
            return self._cache[key]
        users = self.suspects(dataset)
        out: dict[str, float] = {}
        if users:
            xs, ys = [], []
            attribution = self.attribution(dataset)
            if attribution is not None:
                for rid, part in attribution.groupby(level=0, sort=False):
                    run = self.runs.loc[rid]
                    steps = _step_times(self, run)
                    present = _presence(self, run, steps, users)
                    part = part.set_index("step")
                    xs.append(present.reindex(part.index).fillna(0.0).to_numpy())
                    ys.append(np.log((part["duration_s"] / part["typical_s"]).where(lambda r: r > 0)).to_numpy())
            else:
                runs = self.dataset_runs(dataset)
                typical = float(runs["total_time_s"].median())
                for rid, run in runs.iterrows():
                    window = pd.DataFrame({"step": [0], "t0": [run["start"]], "t1": [run["end"]]})
                    xs.append(_presence(self, run, window, users).to_numpy())
                    ys.append(np.log(np.array([run["total_time_s"] / typical])))
            if xs:
                from scipy.optimize import nnls

                x = np.vstack(xs)
                y = np.concatenate(ys)
                ok = np.isfinite(y)
                design = np.column_stack([x[ok], np.ones(ok.sum()), -np.ones(ok.sum())])
                beta = nnls(design, y[ok])[0] if ok.sum() > len(users) + 2 else np.zeros(len(users) + 2)
                out = {u: float(b) for u, b in zip(users, beta[:len(users)])}
        self._cache[key] = out
        return out

    def weights(self, dataset: str) -> dict[str, float]:
        """How time is shared among implicated users whose jobs ran at the same time: by their
        joint effects (:meth:`effects`); where those are all nil, by mutual information."""
        effects, mi = self.effects(dataset), self.mi(dataset)
        return {u: effects.get(u, 0.0) + 1e-9 * (mi.get(u, 0.0) + 1e-3) for u in self.suspects(dataset)}


def _presence(ctx: Context, run: pd.Series, steps: pd.DataFrame, users: list[str],
              reach: bool = False) -> pd.DataFrame:
    """Per step (rows: ``steps['step']``, with its ``t0``/``t1``) and user of ``users``: how many
    of the user's jobs that count (:meth:`Context.min_nodes`) were running alongside the run
    (each job loads the network on its own); for users implicated only in other datasets, only
    the jobs that shared :data:`LINK_GROUPS` of the run's groups. With ``reach`` (explaining the
    run, not estimating the effects), only the jobs that could reach it (:meth:`Context.reaches`)."""
    neigh = ctx.of_run("neighbourhood", run["run_id"])
    linked = set(ctx.implicated_elsewhere(run["dataset"]))
    neigh = neigh[neigh["user"].isin(users) & (neigh["num_nodes"] >= ctx.min_nodes) & neigh["start"].notna()]
    neigh = neigh[~neigh["user"].isin(linked) | (neigh["shared_groups"].fillna(0) >= LINK_GROUPS)]
    if reach:
        neigh = neigh[[ctx.reaches(g) for g in neigh["shared_groups"]]]
    present = pd.DataFrame(0.0, index=pd.Index(steps["step"] if not steps.empty else [], name="step"),
                           columns=list(users))
    if steps.empty or neigh.empty:
        return present
    during = _during(neigh, steps)
    for user, rows in neigh.groupby("user").indices.items():
        present[user] = during[rows].sum(axis=0, dtype=float)
    return present


def _naive(times: pd.Series) -> np.ndarray:
    """Timestamps as numpy's (UTC wall time, NaT kept), to compare many at once."""
    times = pd.to_datetime(times)
    return (times.dt.tz_convert("UTC").dt.tz_localize(None) if times.dt.tz is not None else times).to_numpy()


def _during(jobs: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Which of the run's steps (``t0``/``t1``, columns) each neighbour's job (``start``, ``end``;
    no end: still running; rows) overlapped. A job with no start overlapped none."""
    start, end = _naive(jobs["start"])[:, None], _naive(jobs["end"])[:, None]
    t0, t1 = _naive(steps["t0"])[None, :], _naive(steps["t1"])[None, :]
    return (start <= t1) & np.where(np.isnat(end), ~np.isnat(t0), end >= t0)


def _step_times(ctx: Context, run: pd.Series) -> pd.DataFrame:
    """The run's steps with start and end times (start of the run plus the durations before, where
    the output had no timestamps) and the step's typical (median) duration."""
    steps = ctx.of_run("steps", run["run_id"]).sort_values("step").copy()
    if steps.empty:
        return steps
    before = steps["duration_s"].cumsum() - steps["duration_s"]
    fallback = run["start"] + pd.to_timedelta(before.to_numpy(), unit="s")
    steps["t0"] = steps["start"].fillna(pd.Series(fallback, index=steps.index))
    steps["t1"] = steps["end"].fillna(steps["t0"] + pd.to_timedelta(steps["duration_s"], unit="s"))
    typical = ctx.typical_steps(run["dataset"])
    steps["typical_s"] = typical["duration_s"].reindex(steps["step"]).to_numpy() if not typical.empty else np.nan
    return steps


def _neighbours(ctx: Context, run: pd.Series, steps: pd.DataFrame, slow: set[int]) -> tuple[list[NeighbourEvidence],
                                                                                         pd.DataFrame]:
    """Every user alongside the run, with the dataset's view of them; and, per step, how many jobs
    of each implicated user were running (:func:`_presence`; users with none left out)."""
    neigh = ctx.of_run("neighbourhood", run["run_id"])
    rows = ctx.ranking_rows(run["dataset"])
    implicated = ctx.implicated(run["dataset"])
    elsewhere = ctx.implicated_elsewhere(run["dataset"])
    present = pd.DataFrame(index=steps["step"] if not steps.empty else [])
    # Per job: the steps it overlapped, and whether each is a slow one.
    during = _during(neigh, steps) if not steps.empty else None
    slow_step = np.isin(steps["step"].to_numpy(), list(slow)) if not steps.empty else None

    def column(name):
        return neigh[name].to_numpy(dtype=float, na_value=np.nan)

    job_ids, users = neigh["job_id"].to_numpy(dtype=object), neigh["user"].to_numpy(dtype=object)
    nodes, overlap = column("num_nodes"), column("overlap_s")
    groups, routers = column("shared_groups"), column("shared_routers")
    out = []
    for user, at in neigh.groupby("user").indices.items():
        row = rows.get(user)

        def val(key, row=row):
            return None if row is None or pd.isna(row.get(key)) else row.get(key)

        def largest(values, at=at):
            return int(np.nanmax(values[at])) if (~np.isnan(values[at])).any() else None
        running = during[at].any(axis=0) if during is not None else None
        mine = overlap[at]
        out.append(NeighbourEvidence(
            user=str(user), jobs=len({j for j in job_ids[at] if not pd.isna(j)}), max_nodes=int(np.nanmax(nodes[at])),
            overlap_s=float(np.where(np.isnan(mine), 0.0, mine).sum()) if (~np.isnan(mine)).any() else None,
            shared_groups=largest(groups), shared_routers=largest(routers),
            slow_steps_alongside=int((running & slow_step).sum()) if running is not None and len(running) else None,
            implicated=user in implicated, implicated_elsewhere=elsewhere.get(str(user), []),
            rank_mi=None if val("rank_mi") is None else int(val("rank_mi")),
            nodes_r=val("nodes_r"), nodes_p=val("nodes_p"), log_r=val("log_r"), log_p=val("log_p"),
            mean_time_with_s=val("mean_time_with_s"),
            mean_time_without_s=val("mean_time_without_s")))
    out.sort(key=lambda e: (not e.implicated, -(e.overlap_s or 0.0), e.user))
    there = [u for u in ctx.suspects(run["dataset"]) if u in set(users)]
    present = _presence(ctx, run, steps, there, reach=True) if there and not steps.empty else present
    present = present.loc[:, present.sum() > 0] if len(present.columns) else present
    return out, present


def _within_excess(secs: pd.DataFrame, excess: pd.Series) -> np.ndarray:
    """Per step, the factor that brings the model's split (``secs``: the seconds each feature
    added, one row per step) within what the step really took beyond its typical time: 1 where
    the features' positive seconds fit in the step's excess, smaller where the prediction went
    beyond it (a model fitted on a dozen runs extrapolates: one whose culprit runs were slowed
    eightfold after a rate drop predicted 5-7x for a run 1.3x slower before it), 0 for a step
    no slower than typical. The model decides how the time is split, the measured step how much
    there is to split."""
    lost = excess.clip(lower=0).to_numpy(dtype=float)
    given = secs.clip(lower=0).sum(axis=1).to_numpy(dtype=float)
    return np.where(given > lost, lost / np.where(given > 0, given, 1.0), 1.0)


def _placement(ctx: Context, run: pd.Series) -> PlacementEvidence:
    runs = ctx.dataset_runs(run["dataset"])
    groups = runs["num_groups"].dropna()
    g = None if pd.isna(run.get("num_groups")) else int(run["num_groups"])
    same = runs[runs["num_groups"] == g] if g is not None else runs.iloc[0:0]
    fewest = runs[runs["num_groups"] == groups.min()] if len(groups) else runs.iloc[0:0]
    return PlacementEvidence(
        num_groups=g, num_routers=None if pd.isna(run.get("num_routers")) else int(run["num_routers"]),
        dataset_min_groups=int(groups.min()) if len(groups) else None,
        dataset_median_groups=float(groups.median()) if len(groups) else None,
        median_time_same_groups_s=float(same["total_time_s"].median()) if len(same) else None,
        median_time_fewest_groups_s=float(fewest["total_time_s"].median()) if len(fewest) else None,
        runs_same_groups=len(same))


def _counter_evidence(ctx: Context, run: pd.Series, seconds: dict[str, float], slow: set[int],
                      top: int = 3) -> list[CounterEvidence]:
    frame = ctx.frame(run["dataset"])
    typical = ctx.typical_steps(run["dataset"])
    mine = frame[(frame["run_id"] == run["run_id"]) & frame["step"].isin(slow)] if not frame.empty else frame
    out = []
    for feature, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        if s <= 0:
            break
        ratio = None
        if feature in mine.columns and feature in typical.columns and len(mine):
            ref = typical[feature].reindex(mine["step"]).sum()
            ratio = float(mine[feature].sum() / ref) if ref and np.isfinite(ref) and ref > 0 else None
        out.append(CounterEvidence(counter=feature, meaning=describe(feature), seconds=float(s), ratio=ratio))
    return out


def _line(cause: Cause, run: pd.Series) -> str:
    pct = f"{100 * cause.share:.0f}%"
    if cause.category == "neighbours":
        e = next((u for u in cause.users if u.user == cause.user), None)
        where = ""
        if e is not None:
            where = f"{e.jobs} job{'s' if e.jobs > 1 else ''} on up to {e.max_nodes} nodes alongside"
            if e.shared_groups is not None:
                where += f", in {e.shared_groups} of the run's groups"
            if e.implicated_elsewhere and not e.implicated:
                where += f" (a global link shared); implicated in {', '.join(e.implicated_elsewhere)}"
            elif e.mean_time_with_s and e.mean_time_without_s:
                where += (f"; the dataset's runs average {_fmt_s(e.mean_time_with_s)} with them, "
                          f"{_fmt_s(e.mean_time_without_s)} without")
        return f"neighbours: {cause.user} ({_fmt_s(cause.seconds)}, {pct}): {where}"
    if cause.category == "placement" and cause.placement is not None:
        p = cause.placement
        return (f"placement ({_fmt_s(cause.seconds)}, {pct}): {p.num_groups} groups, {p.num_routers} routers; the "
                f"dataset's runs span {p.dataset_min_groups} group(s) at fewest")
    counters = ", ".join(f"{c.counter}" + (f" {c.ratio:.2g}x typical" if c.ratio is not None else "")
                         for c in cause.counters)
    return f"{LABELS[cause.category]} ({_fmt_s(cause.seconds)}, {pct})" + (f": {counters}" if counters else "")


def close_ids(run_id: str, ids: list[str], n: int = 5) -> list[str]:
    """Run ids like ``run_id``: with the same prefix and the nearest job numbers (``cray-1234`` ->
    ``cray-1230``, ``cray-1236``), else the most similar strings."""
    m = re.fullmatch(r"(.*?)(\d+)", run_id)
    if m:
        same = [(abs(int(k.group(2)) - int(m.group(2))), i) for i in ids
                if (k := re.fullmatch(r"(.*?)(\d+)", i)) and k.group(1) == m.group(1)]
        if same:
            return [i for _, i in sorted(same)[:n]]
    return difflib.get_close_matches(run_id, ids, n=n, cutoff=0.5)


def explain_run(ctx: Context, run_id: str, *, with_steps: bool = True) -> RunExplanation:
    """Why ``run_id`` was slower than its dataset's typical run (see the module's description)."""
    if run_id not in ctx.runs.index:
        close = close_ids(run_id, list(ctx.runs.index))
        raise ExplainError(f"{ctx.dataset_dir}: no run {run_id!r} (datasets: "
                           f"{', '.join(sorted(ctx.runs['dataset'].unique()))})"
                           + (f"; close: {', '.join(close)}" if close else ""))
    run = ctx.runs.loc[run_id]
    name, s = run["dataset"], ctx.settings
    runs = ctx.dataset_runs(name)
    typical = float(runs["total_time_s"].median())
    total = float(run["total_time_s"])
    excess = total - typical
    missing = list(ctx.missing)
    steps = _step_times(ctx, run)
    if steps.empty:
        missing.append("no per-step times (the run has no time steps): explained with the dataset's statistics")
    # Where the slowdown sat: the steps holding most of the positive excess.
    slow: set[int] = set()
    slow_share = peak = None
    if not steps.empty and steps["typical_s"].notna().any():
        step_excess = (steps["duration_s"] - steps["typical_s"]).clip(lower=0).fillna(0)
        step_excess.index = steps["step"]
        if step_excess.sum() > 0:
            order = step_excess.sort_values(ascending=False)
            cum = order.cumsum() / order.sum()
            slow = set(order.index[: int((cum < SLOW_STEPS_SHARE).sum()) + 1])
            slow_share = float(order[list(slow)].sum() / order.sum())
            peak = int(order.index[0])
    alongside, present = _neighbours(ctx, run, steps, slow)
    attribution = ctx.attribution(name)
    rows = (attribution.loc[[run_id]] if attribution is not None and run_id in attribution.index
            else pd.DataFrame())
    causes: list[Cause] = []
    implicated = ctx.implicated(name)
    if not rows.empty:
        basis = "per-step model"
        d = ctx.deviation.datasets[name]
        feats = [f for f in d.attribution_features if f in rows.columns]
        secs = rows[feats].mul(rows["typical_s"], axis=0)  # seconds each feature added to each step
        secs = secs.mul(_within_excess(secs, rows["duration_s"] - rows["typical_s"]), axis=0)
        secs.index = rows["step"].to_numpy()
        by_cat = {c: secs[[f for f in feats if category(f) == c]].sum(axis=1) for c in
                  ("network", "placement", "io", "load")}
        # In the steps an implicated user's jobs ran, what the joint estimate says those jobs add
        # (at most the step's excess) is theirs, shared by weight when several were there; it
        # leaves the network's share.
        net = by_cat["network"]
        user_s = {}
        if len(present.columns):
            pres = present.reindex(net.index).fillna(0.0)
            w = ctx.weights(name)
            weights = pres.mul(pd.Series({u: w[u] for u in pres.columns}), axis=1)
            share = weights.div(weights.sum(axis=1).replace(0, np.nan), axis=0).fillna(0.0)
            # What their jobs add by the joint estimate, at most the step's excess over typical.
            effects = ctx.effects(name)
            est = pres.mul(pd.Series({u: effects.get(u, 0.0) for u in pres.columns}), axis=1).sum(axis=1)
            excess_step = (rows.set_index("step")["duration_s"] - rows.set_index("step")["typical_s"]).clip(lower=0)
            cap = excess_step.reindex(net.index).fillna(0.0)
            # est is a log factor: without their jobs the step would have taken exp(-est) of it.
            took = rows.set_index("step")["duration_s"].reindex(net.index)
            given = share.mul(np.minimum(took * -np.expm1(-est), cap), axis=0)
            user_s = {u: float(given[u].sum()) for u in given.columns if given[u].sum() > 0}
            by_cat["network"] = net - given.sum(axis=1)
        per_feature = secs.sum()
        net_feats = {f: float(per_feature[f]) for f in feats if category(f) == "network"}
        for user, sec in user_s.items():
            # The network counters that carried the time, in the steps their jobs ran.
            theirs = present.reindex(secs.index)[user].fillna(0.0).to_numpy() > 0
            their_feats = {f: float(secs.loc[theirs, f].sum()) for f in net_feats}
            slow_theirs = {int(st) for st, on in zip(secs.index, theirs) if on} & (slow or set(secs.index))
            causes.append(Cause(category="neighbours", seconds=sec, share=0.0, line="", user=user,
                                users=[e for e in alongside if e.user == user],
                                counters=_counter_evidence(ctx, run, their_feats, slow_theirs or slow)))
        for cat, series in by_cat.items():
            sec = float(series.sum())
            if sec <= 0:
                continue
            cat_feats = {f: float(per_feature[f]) for f in feats if category(f) == cat}
            causes.append(Cause(category=cat, seconds=sec, share=0.0, line="",
                                counters=_counter_evidence(ctx, run, cat_feats, slow or set(rows["step"])),
                                placement=_placement(ctx, run) if cat == "placement" else None))
    else:
        basis = "dataset statistics" if (implicated or ctx.ranking(name) is not None) else "none"
        if ctx.deviation is not None and not steps.empty:
            missing.append(f"no per-step attribution for {name} (the deviation analysis skipped it: too few runs "
                           "or no counters)")
        if excess > 0:
            # The implicated users alongside take what the dataset says their presence costs, at
            # most the excess, split by that cost. A cost multiplies a run's time (as the step
            # effects above do): by 1 + c, so c / (1 + c) of this run's time is theirs.
            there = {e.user: implicated[e.user] for e in alongside if e.user in implicated
                     and implicated[e.user] > 0 and e.max_nodes >= NETWORK_MIN_NODES and ctx.reaches(e.shared_groups)}
            # ... and those implicated elsewhere whose jobs shared a global link with the run,
            # what their jobs add here by the joint estimate.
            effects = ctx.effects(name)
            there.update({e.user: float(np.expm1(effects.get(e.user, 0.0))) for e in alongside if e.implicated_elsewhere
                          and effects.get(e.user, 0.0) > 0 and e.max_nodes >= NETWORK_MIN_NODES
                          and (e.shared_groups or 0) >= LINK_GROUPS})
            if there:
                cost = max(there.values())
                budget = min(excess, total * cost / (1 + cost))
                w = ctx.weights(name)
                weight = {u: w[u] for u in there}
                for e in alongside:
                    if e.user in there:
                        causes.append(Cause(category="neighbours", seconds=budget * weight[e.user] / sum(weight.values()),
                                            share=0.0, line="", user=e.user, users=[e]))
            p = _placement(ctx, run)
            if (p.num_groups is not None and p.dataset_min_groups is not None and p.num_groups > p.dataset_min_groups
                    and p.median_time_same_groups_s and p.median_time_fewest_groups_s
                    and p.median_time_same_groups_s > p.median_time_fewest_groups_s):
                # What the neighbours did not take of the excess, at most.
                left = excess - sum(c.seconds for c in causes)
                sec = min(left, typical * (p.median_time_same_groups_s / p.median_time_fewest_groups_s - 1))
                if sec > 0:
                    causes.append(Cause(category="placement", seconds=sec, share=0.0, line="", placement=p))
    # Causes too small to name (what is left of the network once its users took their part).
    causes = sorted((c for c in causes if c.seconds > MIN_CAUSE_SHARE * max(excess, 0.0)), key=lambda c: -c.seconds)
    explained = float(sum(c.seconds for c in causes))
    denominator = max(excess, explained, 1e-12)
    for c in causes:
        c.share = c.seconds / denominator if excess > 0 else 0.0
        c.line = _line(c, run)
    unexplained = max(excess - explained, 0.0) if excess > 0 else 0.0
    top = causes[0] if causes and excess > 0 and causes[0].share >= s.min_share else None
    if excess <= 0:
        headline = f"not slower than typical ({total / typical:.2f}x its dataset's median run)"
    elif top is None:
        headline = (f"no clear cause: {100 * unexplained / excess:.0f}% of the {_fmt_s(excess)} excess unexplained"
                    + (f"; the largest part, {causes[0].line}" if causes else ""))
    else:
        headline = top.line
    return RunExplanation(
        dataset=name, run_id=run_id, start=None if pd.isna(run["start"]) else f"{run['start']:%Y-%m-%d %H:%M UTC}",
        num_nodes=None if pd.isna(run.get("num_nodes")) else int(run["num_nodes"]), total_s=total,
        typical_s=typical, runs_in_dataset=len(runs), slowdown=total / typical if typical > 0 else float("nan"),
        excess_s=excess, steps=len(steps), slow_steps=step_ranges(slow) if slow else None,
        slow_steps_share=slow_share, peak_step=peak, basis=basis, causes=causes, explained_s=explained,
        unexplained_s=unexplained, unexplained_share=unexplained / excess if excess > 0 else 0.0,
        top_category=top.category if top else "none", top_user=top.user if top else None, headline=headline,
        alongside=alongside, missing=missing,
        step_times=[StepTime(step=int(r.step), duration_s=float(r.duration_s),
                             typical_s=None if pd.isna(r.typical_s) else float(r.typical_s))
                    for r in steps.itertuples()] if with_steps else [])


def render(e: RunExplanation) -> str:
    """The explanation as text for a terminal."""
    lines = [f"Run {e.run_id} ({e.dataset}" + (f", {e.num_nodes} nodes" if e.num_nodes else "")
             + (f", started {e.start}" if e.start else "") + ")",
             f"  {_fmt_s(e.total_s)}: {e.slowdown:.2f}x its dataset's typical run ({_fmt_s(e.typical_s)}, the median "
             f"of {e.runs_in_dataset}), " + (f"{_fmt_s(e.excess_s)} slower." if e.excess_s > 0 else "not slower.")]
    if e.slow_steps:
        peak = next((t for t in e.step_times if t.step == e.peak_step), None)
        lines.append(f"  Where: steps {e.slow_steps} of {e.steps} hold {100 * e.slow_steps_share:.0f}% of the excess"
                     + (f"; the worst, step {peak.step}, took {_fmt_s(peak.duration_s)} against "
                        f"{_fmt_s(peak.typical_s)} typical." if peak and peak.typical_s else "."))
    lines.append(f"  Verdict: {e.headline}")
    if e.causes:
        lines.append(f"Causes, largest first ({e.basis}):")
        for i, c in enumerate(e.causes, 1):
            lines.append(f"  {i}. {c.line}")
            for u in c.users:
                if u.log_r is not None:
                    lines.append(f"       in {e.dataset}: Pearson r {u.log_r:.2f} (p {u.log_p:.2g}) of the log of run "
                                 f"time with their nodes alongside" + (f"; MI rank {u.rank_mi}" if u.rank_mi else ""))
                if u.implicated_elsewhere and not u.implicated:
                    lines.append(f"       implicated in {', '.join(u.implicated_elsewhere)} of this system, not in "
                                 f"{e.dataset}; their jobs shared {u.shared_groups} of the run's groups")
                if u.slow_steps_alongside is not None and e.slow_steps:
                    lines.append(f"       a job of theirs ran during {u.slow_steps_alongside} of the slow steps")
            for k in c.counters:
                lines.append(f"       {k.counter}: {k.meaning}; {_fmt_s(k.seconds)}"
                             + (f", {k.ratio:.2g}x its typical value in the slow steps" if k.ratio is not None else ""))
    if e.excess_s > 0:
        lines.append(f"Unexplained: {_fmt_s(e.unexplained_s)} ({100 * e.unexplained_share:.0f}% of the excess).")
    named = {c.user for c in e.causes if c.user}
    others = [u for u in e.alongside if not u.implicated and u.user not in named]
    if others:
        lines.append("Also alongside (not implicated in this dataset): " + ", ".join(
            f"{u.user} ({u.max_nodes} nodes" + (f", {u.overlap_s:.0f} s" if u.overlap_s is not None else "") + ")"
            for u in others[:8]) + (f" and {len(others) - 8} more" if len(others) > 8 else ""))
    for m in e.missing:
        lines.append(f"Missing: {m}")
    return "\n".join(lines)


# --- every dataset: findings and the slowest runs --------------------------------------------------

def step_figure(e: RunExplanation, path: Path) -> Path:
    """The run's step times against each step's median over the dataset (the typical run), the
    slow steps shaded."""
    from hpcvar.analyses.common import savefig, subplots

    steps = pd.DataFrame([t.model_dump() for t in e.step_times])
    fig, ax = subplots(figsize=(6, 2.6))
    slow = set()
    for part in (e.slow_steps or "").split(", "):
        if part:
            a, _, b = part.partition("-")
            slow |= set(range(int(a), int(b or a) + 1))
    for st in sorted(slow):
        ax.axvspan(st - 0.5, st + 0.5, color="#f5b7b1", alpha=0.5, lw=0)
    ax.plot(steps["step"], steps["typical_s"], color="#7f8c8d", lw=1.5, label="typical (median over runs)")
    ax.plot(steps["step"], steps["duration_s"], color="#c0392b", lw=1.2, marker="o", ms=2.5, label=e.run_id)
    ax.set_xlabel("time step")
    ax.set_ylabel("step time (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{e.dataset} {e.run_id}: {e.slowdown:.2f}x typical", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    return savefig(fig, path)

def _findings(name: str, runs: pd.DataFrame, table: pd.DataFrame, explained: dict[str, RunExplanation],
              s: ExplainSettings) -> ExplainDataset:
    typical = float(runs["total_time_s"].median())
    slow = table[table["slowdown"] >= 1 + s.slow_threshold]
    excess = float(slow["excess_s"].sum())
    cats, users, neighbours, counters = {}, {}, {}, {}
    for rid in slow["run_id"]:
        for c in explained[rid].causes:
            cats[c.category] = cats.get(c.category, 0.0) + c.seconds
            if c.user:
                u = users.setdefault(c.user, {"user": c.user, "seconds": 0.0, "runs": 0})
                u["seconds"] += c.seconds
                u["runs"] += 1
            if c.category == "neighbours":
                neighbours[c.user] = neighbours.get(c.user, 0.0) + c.seconds
            for k in c.counters:
                v = counters.setdefault(k.counter, {"counter": k.counter, "meaning": k.meaning, "seconds": 0.0})
                v["seconds"] += k.seconds
    total = max(excess, sum(cats.values()), 1e-12)
    shares = sorted((CategoryShare(category=c, share=v / total, runs=int((slow["top_category"] == c).sum()))
                     for c, v in cats.items()), key=lambda x: -x.share)
    top_users = sorted(users.values(), key=lambda u: -u["seconds"])[:5]
    top_counters = sorted(counters.values(), key=lambda k: -k["seconds"])[:5]
    for item in (*top_users, *top_counters):
        item["share"] = item["seconds"] / total
    # The neighbours' share split by user (the rest of the five largest together): the report's bars.
    ranked = sorted(((u, v) for u, v in neighbours.items() if u), key=lambda uv: -uv[1])
    by_user = [UserShare(user=u, share=v / total) for u, v in ranked[:5]]
    rest = sum(neighbours.values()) - sum(v for _, v in ranked[:5])
    if rest > 0:
        by_user.append(UserShare(user=None, share=rest / total))
    fastest, slowest = float(runs["total_time_s"].min()), float(runs["total_time_s"].max())
    unexplained = (float(slow["unexplained_s"].sum()) / excess) if excess > 0 else None
    if not len(slow):
        finding = (f"{name}: runs from {_fmt_s(fastest)} to {_fmt_s(slowest)} ({slowest / fastest:.2f}x); none "
                   f"{100 * s.slow_threshold:.0f}% slower than the typical {_fmt_s(typical)}.")
    else:
        parts = []
        for c in [c for c in shares if c.share >= 0.01][:3]:
            what = LABELS[c.category]
            if c.category == "neighbours" and top_users:
                via = [k["counter"] for k in top_counters if category(k["counter"]) == "network"][:1]
                what += (" (" + ", ".join(u["user"] for u in top_users[:2])
                         + (f"; their time showed in {via[0]}: {describe(via[0])}" if via else "") + ")")
            elif c.category in ("network", "io", "load") and top_counters:
                names = [k["counter"] for k in top_counters if category(k["counter"]) == c.category][:2]
                if names:  # the first in words too: which link, which resource
                    what += f" ({names[0]}: {describe(names[0])}" + "".join(f", {n}" for n in names[1:]) + ")"
            parts.append(f"{100 * c.share:.0f}% {what}")
        finding = (f"{name}: the slowest run took {slowest / fastest:.1f}x the fastest; of the excess time of the "
                   f"{len(slow)} runs at least {100 * s.slow_threshold:.0f}% slower than typical, "
                   + (", ".join(parts) if parts else "none is explained")
                   + (f"; {100 * unexplained:.0f}% unexplained." if unexplained is not None else "."))
    return ExplainDataset(
        runs=len(runs), typical_s=typical, fastest_s=fastest, slowest_s=slowest, spread=slowest / fastest,
        slow_runs=len(slow), slow_excess_s=excess, categories=shares, unexplained_share=unexplained,
        top_users=top_users, top_counters=top_counters, neighbours_by_user=by_user, finding=finding,
        slowest=[explained[r] for r in table.sort_values("total_s", ascending=False)["run_id"].head(s.slowest)])




def explain_dataset(ctx: Context, name: str, out_dir: Path, bar: Progress) -> ExplainDataset | None:
    """Every run of one dataset explained: ``out_dir/<dataset>/runs.csv``, the slowest runs'
    figures, and the dataset's findings (None: fewer than two runs)."""
    runs = ctx.dataset_runs(name)
    if len(runs) < 2:
        bar.step(len(runs))
        return None
    explained, rows = {}, []
    for rid in runs["run_id"]:
        bar.step()
        e = explain_run(ctx, rid, with_steps=False)
        explained[rid] = e
        top = e.causes[0] if e.causes else None
        rows.append({"run_id": rid, "total_s": e.total_s, "slowdown": e.slowdown, "excess_s": e.excess_s,
                     "top_category": e.top_category, "top_user": e.top_user,
                     "top_share": top.share if top else 0.0, "unexplained_s": e.unexplained_s,
                     "unexplained_share": e.unexplained_share, "basis": e.basis, "headline": e.headline})
    table = pd.DataFrame(rows)
    (out_dir / name).mkdir(parents=True, exist_ok=True)
    table.to_csv(out_dir / ExplainDataset.runs_table(name), index=False)
    for rid in table.sort_values("total_s", ascending=False)["run_id"].head(ctx.settings.slowest):
        explained[rid] = explain_run(ctx, rid)  # in full, with the step times for the figure
        if explained[rid].step_times:
            step_figure(explained[rid], out_dir / ExplainDataset.step_figure(name, rid))
    return _findings(name, runs, table, explained, ctx.settings)


#: The context the worker processes of :func:`run` explain with (inherited when they fork).
_WORKER_CONTEXT: Context | None = None


def _explain_in_worker(name: str, out_dir: Path, runs: int) -> ExplainDataset | None:
    return explain_dataset(_WORKER_CONTEXT, name, out_dir, Progress(f"explain {name}", runs, every_s=5.0))


def run(dataset_dir: str | Path, out_dir: str | Path, config: dict | ExplainSettings | None = None,
        analyses_dir: str | Path | None = None, only: str | None = None) -> ExplainResult:
    """Every run of every dataset explained: ``out_dir/<dataset>/runs.csv`` (one line per run) and
    ``summary.json`` (per dataset, the findings and the slowest runs explained in full). The
    datasets are spread over ``workers`` processes (default: one per usable core), each explained
    exactly as in one process."""
    global _WORKER_CONTEXT
    ctx = Context(dataset_dir, analyses_dir, config)
    out_dir = Path(out_dir)
    names = sorted(d for d in ctx.runs["dataset"].unique() if only is None or d == only)
    sizes = ctx.runs["dataset"].value_counts()
    workers = processes_for(ctx.settings.workers, len(names))
    if workers == 1:
        bar = Progress("explain", int(sizes.reindex(names).fillna(0).sum()))
        found = {name: explain_dataset(ctx, name, out_dir, bar) for name in names}
    else:
        print(f"explain: {len(names)} datasets over {workers} processes", file=sys.stderr, flush=True)
        _WORKER_CONTEXT = ctx
        try:
            with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
                # The datasets with the most runs first, so that the last one to finish is a small one.
                futures = {name: pool.submit(_explain_in_worker, name, out_dir, int(sizes.get(name, 0)))
                           for name in sorted(names, key=lambda n: -sizes.get(n, 0))}
                found = {name: futures[name].result() for name in names}
        finally:
            _WORKER_CONTEXT = None
    datasets = {name: d for name, d in found.items() if d is not None}
    for d in datasets.values():
        print(f"explain: {d.finding}", file=sys.stderr, flush=True)
    result = ExplainResult(params=ctx.settings, datasets=datasets, missing=ctx.missing)
    result.write(out_dir, only)
    return result
