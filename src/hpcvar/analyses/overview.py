"""The campaign at a glance (``hpcvar overview DATASET --out DIR``): what the report opens with.

From the collated dataset alone, no model:

- the campaign: runs, failures (from the quarantine), the spread of run times per dataset (as
  ``summary.txt``), coverage (first and last run, the longest gap), each run's time relative to
  its dataset's best run (the paper's Figure 1), and a timeline of runs;
- per dataset: the time per step over runs (Figure 3), compute against MPI time and the dominant
  MPI routines from the mpiP profiles (Figures 4-5), and run time against placement (groups and
  routers spanned, locality class).

Writes ``OUT/summary.json`` (:class:`~hpcvar.results.overview.OverviewResult`), ``spread.csv``,
``coverage.csv`` and the SVG figures the result names. It covers the whole campaign (its
numbers compare the datasets), so it runs as one job; it logs nothing to MLflow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.analyses.common import PALETTE, records, savefig, subplots
from hpcvar.data.dataset import Dataset
from hpcvar.data.summary import dataset_summary
from hpcvar.results import clean
from hpcvar.results.overview import (Campaign, Coverage, DatasetSpread, MPIProfile, OverviewDataset, OverviewResult,
                                     Placement, StepSpread)
from hpcvar.settings import OverviewSettings, SettingsError
from hpcvar.system.topology import LOCALITY_CLASSES

LOCALITY_ORDER = [*LOCALITY_CLASSES, "unknown"]


def colours(names) -> dict[str, str]:
    """Colours per dataset, stable across figures."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sorted(names))}


def failed_runs(ds: Dataset) -> pd.DataFrame:
    """The runs collation set aside as failed (quarantine entries of kind ``failed-run``)."""
    failed = pd.DataFrame([e for e in ds.quarantine() if e.get("kind") == "failed-run"],
                          columns=["run_id", "dataset", "state", "start", "end", "file"])
    failed["start"] = pd.to_datetime(failed["start"], utc=True, errors="coerce", format="ISO8601")
    return failed


# --- the campaign -------------------------------------------------------------------------------

def coverage(runs: pd.DataFrame, failed: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: completed and failed runs, first/last start, the longest gap between runs
    (days) and the days of the campaign window with no run of that dataset."""
    window = pd.date_range(runs["start"].min().normalize(), runs["start"].max().normalize(), freq="D")
    rows = []
    for name, g in runs.groupby("dataset"):
        starts = g["start"].sort_values()
        gaps = starts.diff().dt.total_seconds().div(86400)
        days = set(starts.dt.normalize())
        rows.append({"dataset": name, "runs": len(g),
                     "failed": int((failed["dataset"] == name).sum()) if len(failed) else 0,
                     "first": starts.iloc[0], "last": starts.iloc[-1],
                     "longest_gap_days": float(gaps.max()) if len(g) > 1 else float("nan"),
                     "days_without_run": sum(d not in days for d in window)})
    return pd.DataFrame(rows)


def relative_times(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's time relative to the best run of its dataset."""
    rel = runs[["dataset", "run_id", "start", "total_time_s"]].copy()
    rel["relative"] = rel["total_time_s"] / rel.groupby("dataset")["total_time_s"].transform("min")
    return rel


def plot_timeline(runs: pd.DataFrame, failed: pd.DataFrame, path: Path) -> Path:
    """Runs per dataset over time: one row per dataset, a dot per completed run, a cross per failed run."""
    names = sorted(runs["dataset"].unique())
    col = colours(names)
    fig, ax = subplots(figsize=(8, 0.45 * len(names) + 1.4))
    for i, name in enumerate(names):
        g = runs[runs["dataset"] == name]
        ax.scatter(g["start"], np.full(len(g), i), s=14, color=col[name], label=name)
        f = failed[failed["dataset"] == name] if len(failed) else failed
        if len(f):
            ax.scatter(f["start"], np.full(len(f), i), marker="x", s=40, color="black")
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.7, len(names) - 0.3)
    ax.set_xlabel("run start (UTC)")
    ax.set_title("Runs per dataset over the campaign (x: failed run)")
    fig.autofmt_xdate()
    return savefig(fig, path)


def plot_relative_times(rel: pd.DataFrame, path: Path) -> Path:
    """The paper's Figure 1: each run's time relative to the best run of its dataset, by date."""
    col = colours(rel["dataset"].unique())
    fig, ax = subplots(figsize=(8, 4))
    for name, g in rel.sort_values("start").groupby("dataset"):
        ax.plot(g["start"], g["relative"], marker="o", ms=3, lw=0.8, color=col[name], label=name)
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_ylabel("run time / best run of the dataset")
    ax.set_xlabel("run start (UTC)")
    ax.set_title("Run time relative to the best run (Figure 1)")
    ax.legend(fontsize=7, ncol=3)
    fig.autofmt_xdate()
    return savefig(fig, path)


def campaign(runs: pd.DataFrame, failed: pd.DataFrame, quarantined: int, spread: pd.DataFrame, cov: pd.DataFrame,
             rel: pd.DataFrame, settings: OverviewSettings) -> Campaign:
    worst = spread.sort_values("slowest_fastest").iloc[-1]
    gap = cov.sort_values("longest_gap_days", na_position="first").iloc[-1]
    has_gap = pd.notna(gap["longest_gap_days"])
    return Campaign(runs=len(runs), datasets=runs["dataset"].nunique(), first_start=runs["start"].min(),
                    last_end=runs["end"].max(), failed=len(failed),
                    failed_states={str(k): int(v) for k, v in failed["state"].value_counts().items()},
                    quarantined=quarantined, share_slow=float((rel["relative"] > settings.slow_factor).mean()),
                    widest=worst["dataset"], widest_ratio=clean(float(worst["slowest_fastest"])),
                    longest_gap=gap["dataset"] if has_gap else None,
                    longest_gap_days=float(gap["longest_gap_days"]) if has_gap else None)


# --- one dataset ----------------------------------------------------------------------------------

def step_spread(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step: mean, standard deviation, min, max and count of its time over runs."""
    return steps.groupby("step")["duration_s"].agg(["mean", "std", "min", "max", "count"]).reset_index()


def plot_step_spread(per: pd.DataFrame, dataset: str, path: Path) -> Path:
    """The paper's Figure 3: mean time per step over runs, with the standard deviation and the
    min-max band."""
    fig, ax = subplots(figsize=(7, 3.2))
    ax.fill_between(per["step"], per["min"], per["max"], color="#9ecae1", alpha=0.5, label="min-max")
    ax.fill_between(per["step"], per["mean"] - per["std"].fillna(0), per["mean"] + per["std"].fillna(0),
                    color="#3182bd", alpha=0.5, label="mean ± std")
    ax.plot(per["step"], per["mean"], color="#08519c", lw=1.2, label="mean")
    ax.set_xlabel("time step")
    ax.set_ylabel("step time (s)")
    ax.set_title(f"{dataset}: time per step over {int(per['count'].max())} runs (Figure 3)")
    ax.legend(fontsize=7)
    return savefig(fig, path)


def step_summary(per: pd.DataFrame) -> StepSpread:
    cv = (per["std"] / per["mean"]).dropna()
    return StepSpread(steps=len(per), cv_median=float(cv.median()) if len(cv) else None,
                      widest_step=int(per.loc[cv.idxmax(), "step"]) if len(cv) else None)


def mpi_per_run(profile: pd.DataFrame, runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Per profiled run (ordered by run time): compute and MPI time per rank and MPI's share; and
    the time in each MPI routine over all of them, largest first."""
    prof = profile.merge(runs[["run_id", "total_time_s"]], on="run_id")
    per_run = prof.groupby("run_id").agg(app_time_s=("app_time_s", "first"), mpi_time_s=("mpi_time_s", "first"),
                                         ntasks=("ntasks", "first"), total_time_s=("total_time_s", "first"))
    per_run["mpi_s"] = per_run["mpi_time_s"] / per_run["ntasks"]
    per_run["compute_s"] = (per_run["app_time_s"] - per_run["mpi_time_s"]) / per_run["ntasks"]
    per_run["mpi_share"] = per_run["mpi_time_s"] / per_run["app_time_s"]
    per_run = per_run.sort_values("total_time_s").reset_index()
    routines = prof.groupby("routine")["time_s"].sum().sort_values(ascending=False)
    return per_run, routines


def plot_mpi(profile: pd.DataFrame, per_run: pd.DataFrame, routines: pd.Series, dataset: str, path: Path,
             top: int) -> Path:
    """Figures 4-5: per profiled run (ordered by run time) the mean compute and MPI time per
    rank, and the time per rank in the dominant MPI routines."""
    dominant = list(routines.index[:top])
    wide = (profile[profile["routine"].isin(dominant)].assign(per_rank=lambda d: d["time_s"] / d["ntasks"])
            .pivot_table(index="run_id", columns="routine", values="per_rank", fill_value=0.0)
            .reindex(per_run["run_id"]).fillna(0.0)[dominant])
    x = np.arange(len(per_run))
    fig, (a1, a2) = subplots(1, 2, figsize=(10, 3.4))
    a1.bar(x, per_run["compute_s"], color="#74c476", label="compute")
    a1.bar(x, per_run["mpi_s"], bottom=per_run["compute_s"], color="#fd8d3c", label="MPI")
    a1.set_xlabel("profiled runs, fastest to slowest")
    a1.set_ylabel("time per rank (s)")
    a1.set_title(f"{dataset}: compute vs MPI (Figure 4)")
    a1.legend(fontsize=7)
    bottom = np.zeros(len(per_run))
    for i, r in enumerate(dominant):
        a2.bar(x, wide[r].to_numpy(), bottom=bottom, color=PALETTE[i % len(PALETTE)], label=f"MPI_{r}")
        bottom += wide[r].to_numpy()
    a2.set_xlabel("profiled runs, fastest to slowest")
    a2.set_ylabel("time per rank (s)")
    a2.set_title(f"{dataset}: dominant MPI routines (Figure 5)")
    a2.legend(fontsize=7)
    return savefig(fig, path)


def mpi_summary(per_run: pd.DataFrame, routines: pd.Series, shown: int) -> MPIProfile:
    shares = routines / routines.sum()
    r = per_run[["mpi_s", "total_time_s"]].corr().iloc[0, 1] if len(per_run) > 2 else float("nan")
    return MPIProfile(profiled_runs=len(per_run), share_min=clean(float(per_run["mpi_share"].min())),
                      share_max=clean(float(per_run["mpi_share"].max())), r_mpi_time=clean(float(r)),
                      routines=[{"routine": k, "share": clean(float(v))} for k, v in shares.head(shown).items()])


def locality_classes(runs: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    loc = runs["locality"].fillna("unknown")
    classes = [c for c in LOCALITY_ORDER if c in set(loc)]
    return loc, classes + sorted(set(loc) - set(classes))


def placement_summary(runs: pd.DataFrame) -> Placement:
    """Pearson r of run time with the groups and routers spanned; runs and median time per locality class."""
    r = {}
    for key in ("num_groups", "num_routers"):
        ok = runs[[key, "total_time_s"]].dropna()
        r[key] = (float(np.corrcoef(ok[key], ok["total_time_s"])[0, 1])
                  if len(ok) > 2 and ok[key].nunique() > 1 else None)
    loc, classes = locality_classes(runs)
    return Placement(r_num_groups=clean(r["num_groups"]), r_num_routers=clean(r["num_routers"]),
                     locality={c: {"runs": int((loc == c).sum()),
                                   "median_s": clean(float(runs.loc[loc == c, "total_time_s"].median()))}
                               for c in classes})


def plot_placement(runs: pd.DataFrame, dataset: str, path: Path) -> Path:
    """Run time against the number of groups and routers a run spans, and per locality class."""
    fig, (a1, a2, a3) = subplots(1, 3, figsize=(11, 3.3))
    a1.scatter(runs["num_groups"], runs["total_time_s"], s=12, color="#3182bd")
    a1.set_xlabel("groups spanned (num_groups)")
    a1.set_ylabel("run time (s)")
    a2.scatter(runs["num_routers"], runs["total_time_s"], s=12, color="#3182bd")
    a2.set_xlabel("routers spanned (num_routers)")
    loc, classes = locality_classes(runs)
    a3.boxplot([runs.loc[loc == c, "total_time_s"] for c in classes], tick_labels=classes)
    a3.set_xlabel("locality class")
    fig.suptitle(f"{dataset}: run time and placement")
    return savefig(fig, path)


def dataset(name: str, runs: pd.DataFrame, steps: pd.DataFrame, profile: pd.DataFrame, out: Path,
            settings: OverviewSettings) -> OverviewDataset:
    nodes = runs["num_nodes"].iloc[0]
    found = OverviewDataset(app=runs["app"].iloc[0], nodes=int(nodes) if pd.notna(nodes) else None, runs=len(runs))
    (out / name).mkdir(parents=True, exist_ok=True)
    st = steps[steps["run_id"].isin(runs["run_id"])]
    if len(st):
        per = step_spread(st)
        plot_step_spread(per, name, out / OverviewDataset.figure(name, "step_spread"))
        found.steps = step_summary(per)
    prof = profile[profile["run_id"].isin(runs["run_id"])]
    if len(prof):
        per_run, routines = mpi_per_run(prof, runs)
        plot_mpi(prof, per_run, routines, name, out / OverviewDataset.figure(name, "mpi"), settings.mpi_routines)
        found.mpi = mpi_summary(per_run, routines, settings.routine_shares)
    if not runs["num_groups"].isna().all():  # runs imported from tables (import-neighbourhood) have no nodes
        plot_placement(runs, name, out / OverviewDataset.figure(name, "placement"))
        found.placement = placement_summary(runs)
    return found


def run(dataset_dir: str | Path, out_dir: str | Path, config: OverviewSettings | dict | None = None,
        only: str | None = None) -> OverviewResult:
    """The overview of every dataset of ``dataset_dir``; writes ``out_dir/summary.json``, the
    tables and the figures, and returns the result."""
    settings = OverviewSettings.from_mapping(config)
    if only is not None:
        raise SettingsError("overview: it covers the whole campaign (its numbers compare the datasets) and has no "
                            "per-dataset parts; run it without --only")
    ds = Dataset(dataset_dir)
    runs = ds.read("runs")
    if runs.empty:
        raise SystemExit(f"{dataset_dir}: the dataset has no runs; run `hpcvar collate` first")
    out = Path(out_dir)
    (out / "campaign").mkdir(parents=True, exist_ok=True)
    failed = failed_runs(ds)
    quarantined = sum(e.get("kind") != "failed-run" for e in ds.quarantine())
    spread = dataset_summary(dataset_dir)
    cov = coverage(runs, failed)
    rel = relative_times(runs)
    spread.to_csv(out / OverviewResult.SPREAD_TABLE, index=False)
    cov.to_csv(out / OverviewResult.COVERAGE_TABLE, index=False)
    plot_timeline(runs, failed.dropna(subset=["start"]), out / Campaign.TIMELINE)
    plot_relative_times(rel, out / Campaign.RELATIVE_TIME)
    steps, profile = ds.read("steps"), ds.read("mpi_profile")
    found = {}
    for name in sorted(runs["dataset"].unique()):
        found[name] = dataset(name, runs[runs["dataset"] == name], steps, profile, out, settings)
        print(f"overview: {name}: {found[name].runs} runs", file=sys.stderr, flush=True)
    result = OverviewResult(
        params=settings, campaign=campaign(runs, failed, quarantined, spread, cov, rel, settings),
        spread=[DatasetSpread(**clean(r)) for r in records(spread)],
        coverage=[Coverage(**clean(r)) for r in records(cov)],
        datasets=found)
    result.write(out)
    return result
