"""Slowdowns of a real interference experiment, from its collated runs (``hpcvar interference run``).

Input: the experiment directory that :mod:`hpcvar.campaign.interference` filled: ``experiment.csv``
(which run is which job, workload, policy and repetition) and ``dataset/`` (the runs, collated).
Per policy, repetition and job, the job's run in the mixed workload against its run alone:

* **total time**: the run's time (an application's summed time steps, a microbenchmark's job);
  for an aggressor, which runs for a fixed time, its median iteration period (compute plus
  communication) instead.
* **communication time**: mpiP's MPI time per rank when both runs were profiled; for the
  microbenchmarks the summed time of their timed operations; for an aggressor its mean
  communication phase.
* **latency**: per (operation, message size) the median of every timed operation, mixed over
  alone, combined as a geometric mean over the cells (microbenchmark victims); an aggressor's
  communication phases. An aggressor's mixed iterations are those that started while the victim
  ran, so its slowdown is what it suffered *from* the victim. The victim's job times are sacct's,
  in whole seconds: a victim that ran within one second has start = end, so its window reaches
  to the end of its last second (:func:`victim_window`).

Outputs in the same shape as the simulated experiment's (``routing`` is ``site``: the machine's
own): ``jobs.csv`` (one row per policy, repetition and job), ``samples.csv``/``.parquet`` (every
timed operation of every run, for the distributions) and ``summary.json`` (median slowdowns over
repetitions per job and policy, plus notes on runs that failed or lacked data).

The figures of an experiment, real or simulated (:func:`draw_figures`, which ``hpcvar interference``
runs after either): per job its slowdowns per policy, and its latency alone and mixed per routing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.analyses.common import PALETTE, savefig, subplots
from hpcvar.data.dataset import Dataset
from hpcvar.results import clean
from hpcvar.results.interference import InterferenceResult, Job, Policy, RunCount, Slowdowns

SLOWDOWNS = ("slowdown_total", "slowdown_comm", "slowdown_latency")
ROUTING = "site"


def victim_window(run: pd.Series) -> tuple[float, float]:
    """When the victim's run ran, ``[start, end)`` in epoch seconds. sacct records whole seconds,
    cut down: a job it shows from 12:00:05 to 12:00:05 ran within that second, so an end in whole
    seconds is taken to the end of its second."""
    start, end = pd.Timestamp(run["start"]), pd.Timestamp(run["end"])
    whole = end == end.floor("s")
    return start.timestamp(), end.timestamp() + (1.0 if whole else 0.0)


def _latency_rows(lat: pd.DataFrame, run_id: str, window: tuple[float, float] | None = None) -> pd.DataFrame:
    rows = lat[lat["run_id"] == run_id]
    if window is not None and rows["start_epoch_s"].notna().any():
        rows = rows[(rows["start_epoch_s"] >= window[0]) & (rows["start_epoch_s"] < window[1])]
    return rows


def _figures(run: pd.Series, rows: pd.DataFrame, mpi: pd.DataFrame, aggressor: bool) -> dict:
    """One run's total time, communication time and latency (NaN where it has no such data)."""
    out = {"total_s": float(run["total_time_s"]), "comm_s": np.nan, "latency_us": np.nan}
    prof = mpi[mpi["run_id"] == run["run_id"]]
    if len(prof):
        out["comm_s"] = float(prof["mpi_time_s"].iloc[0] / max(int(prof["ntasks"].iloc[0]), 1))
    if len(rows):
        out["latency_us"] = float(rows["value_us"].mean())
        if aggressor:
            # It ran for a fixed time, not a fixed amount of work: per iteration, not summed.
            out["comm_s"] = float(rows["value_us"].mean() / 1e6)
            starts = np.sort(rows["start_epoch_s"].dropna().to_numpy())
            out["total_s"] = float(np.median(np.diff(starts))) if len(starts) > 2 else np.nan
        elif np.isnan(out["comm_s"]):
            out["comm_s"] = float(rows["value_us"].sum() / 1e6)
    return out


def _cell_ratio(alone: pd.DataFrame, mixed: pd.DataFrame) -> float:
    """Geometric mean over (operation, size) cells of median mixed / median alone."""
    a = alone.groupby(["operation", "size_bytes"])["value_us"].median()
    m = mixed.groupby(["operation", "size_bytes"])["value_us"].median()
    both = a.index.intersection(m.index)
    ratios = (m[both] / a[both]).to_numpy()
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    return float(np.exp(np.mean(np.log(ratios)))) if len(ratios) else np.nan


def analyse(experiment_dir: str | Path, out_dir: str | Path | None = None) -> InterferenceResult:
    """Write ``jobs.csv``, ``samples.csv``/``.parquet`` and ``summary.json`` to ``out_dir``
    (default: the experiment directory) and return the summary
    (:class:`~hpcvar.results.interference.InterferenceResult`, ``mode`` ``slurm``)."""
    exp_dir = Path(experiment_dir)
    out = Path(out_dir) if out_dir else exp_dir
    book = pd.read_csv(exp_dir / "experiment.csv")
    ds = Dataset(exp_dir / "dataset")
    runs = ds.read("runs").set_index("run_id", drop=False)
    mpi, lat = ds.read("mpi_profile"), ds.read("latency")
    failed = {q["run_id"]: q.get("state") for q in ds.quarantine() if q.get("kind") == "failed-run"}
    notes, rows, samples = [], [], []
    for (policy, rep), reps in book.groupby(["policy", "repetition"], sort=False):
        victim_mixed = reps[(reps["role"] == "victim") & (reps["workload"] == "mixed")]["run_id"]
        window = None
        if len(victim_mixed) and victim_mixed.iloc[0] in runs.index:
            window = victim_window(runs.loc[victim_mixed.iloc[0]])
        for job, g in reps.groupby("job", sort=False):
            first = g.iloc[0]
            row = {"policy": policy, "routing": ROUTING, "repetition": int(rep),
                   "victim_policy": first["victim_policy"], "aggressor_policy": first["aggressor_policy"],
                   "job": job, "role": first["role"], "test": first["test"], "pattern": first["pattern"],
                   "nodes": int(first["nodes"]), "node_list": first["node_list"],
                   "num_routers": int(first["num_routers"]), "num_groups": int(first["num_groups"])}
            ids = {w: g.loc[g["workload"] == w, "run_id"].iloc[0] for w in ("alone", "mixed")}
            row.update(run_id_alone=ids["alone"], run_id_mixed=ids["mixed"])
            missing = [f"{w} run {r} ({'Slurm state ' + failed[r] if r in failed else 'not collated'})"
                       for w, r in ids.items() if r not in runs.index]
            if missing:
                notes.append(f"{policy} repetition {rep} {job}: no slowdown, " + "; ".join(missing))
                rows.append({**row, **dict.fromkeys(SLOWDOWNS, np.nan)})
                continue
            aggressor = first["role"] == "aggressor"
            sel = {"alone": _latency_rows(lat, ids["alone"]),
                   "mixed": _latency_rows(lat, ids["mixed"], window if aggressor else None)}
            if aggressor and window is not None and sel["mixed"].empty:
                notes.append(f"{policy} repetition {rep} {job}: no iteration started while the victim ran")
            fig = {w: _figures(runs.loc[ids[w]], sel[w], mpi, aggressor) for w in ("alone", "mixed")}
            for stem, key, unit in (("total_time", "total_s", "s"), ("comm_time", "comm_s", "s"),
                                    ("latency", "latency_us", "us")):
                row[f"{stem}_alone_{unit}"] = fig["alone"][key]
                row[f"{stem}_mixed_{unit}"] = fig["mixed"][key]
            row["slowdown_total"] = fig["mixed"]["total_s"] / fig["alone"]["total_s"]
            row["slowdown_comm"] = fig["mixed"]["comm_s"] / fig["alone"]["comm_s"]
            row["slowdown_latency"] = _cell_ratio(sel["alone"], sel["mixed"])
            rows.append(row)
            for w in ("alone", "mixed"):
                s = sel[w]
                if len(s):
                    samples.append(pd.DataFrame({"policy": policy, "routing": ROUTING, "repetition": int(rep),
                                                 "job": job, "role": first["role"], "workload": w,
                                                 "operation": s["operation"].to_numpy(),
                                                 "size_bytes": s["size_bytes"].to_numpy(),
                                                 "iteration": np.arange(len(s)),
                                                 "latency_us": s["value_us"].to_numpy()}))
    jobs = pd.DataFrame(rows)
    samples_df = pd.concat(samples, ignore_index=True) if samples else pd.DataFrame(
        columns=["policy", "routing", "repetition", "job", "role", "workload", "operation", "size_bytes",
                 "iteration", "latency_us"])
    out.mkdir(parents=True, exist_ok=True)
    jobs.to_csv(out / InterferenceResult.table("jobs", "csv"), index=False)
    samples_df.to_csv(out / InterferenceResult.table("samples", "csv"), index=False)
    samples_df.to_parquet(out / InterferenceResult.table("samples", "parquet"), index=False)
    result = InterferenceResult(
        experiment=str(book["experiment"].iloc[0]) if len(book) else None, mode="slurm",
        source=str(exp_dir / "experiment.csv"), repetitions=int(book["repetition"].nunique()),
        jobs={j: Job(**clean({"role": g["role"].iloc[0], "test": g["test"].iloc[0], "pattern": g["pattern"].iloc[0],
                              "nodes": int(g["nodes"].iloc[0])})) for j, g in book.groupby("job", sort=False)},
        policies={p: Policy(victim=g["victim_policy"].iloc[0], aggressors=g["aggressor_policy"].iloc[0])
                  for p, g in book.groupby("policy", sort=False)},
        slowdowns={job: {pol: {ROUTING: Slowdowns(**{k: _median(gp[k]) for k in SLOWDOWNS})}
                         for pol, gp in gj.groupby("policy", sort=False)}
                   for job, gj in jobs.groupby("job", sort=False)} if len(jobs) else {},
        runs=RunCount(collated=int(book["run_id"].isin(runs.index).sum()),
                      failed=sorted(set(book["run_id"]) & set(failed))),
        notes=notes)
    result.write(out)
    draw_figures(out)
    return result


def _median(values: pd.Series) -> float | None:
    v = values.dropna()
    return float(v.median()) if len(v) else None


# --- figures -----------------------------------------------------------------------------------------

def draw_figures(out_dir: str | Path) -> list[Path]:
    """Each job's figures from the experiment's tables in ``out_dir`` (``jobs.csv``, and
    ``samples.parquet`` when there is one), under the names :class:`InterferenceResult` gives."""
    out = Path(out_dir)
    try:
        jobs = pd.read_csv(out / InterferenceResult.table("jobs"))
    except pd.errors.EmptyDataError:  # an experiment with no run to compare: nothing to draw
        return []
    samples_file = out / InterferenceResult.table("samples", "parquet")
    samples = pd.read_parquet(samples_file) if samples_file.is_file() else None
    drawn = []
    for job in dict.fromkeys(jobs["job"]):
        drawn.append(plot_slowdowns(jobs, job, out / InterferenceResult.figure(job, "slowdowns")))
        if samples is not None and (samples["job"] == job).any():
            for routing in dict.fromkeys(samples.loc[samples["job"] == job, "routing"]):
                drawn.append(plot_latency(samples, job, routing, out / InterferenceResult.figure(job, "latency",
                                                                                              routing)))
    return drawn


def plot_slowdowns(jobs: pd.DataFrame, job: str, path: Path) -> Path:
    """One job's slowdowns per placement policy: bars for total, communication and latency, one
    panel per routing (the simulated experiment's minimal/adaptive, or the machine's own: site),
    the bar the median over repetitions and the whisker their range."""
    g = jobs[jobs["job"] == job]
    policies = list(dict.fromkeys(g["policy"]))
    routings = list(dict.fromkeys(g["routing"]))
    kinds = [("slowdown_total", "total"), ("slowdown_comm", "communication"), ("slowdown_latency", "latency")]
    fig, axes = subplots(1, len(routings), figsize=(max(4.5, 1.1 * len(policies)) * len(routings), 3.4),
                         squeeze=False, sharey=True)
    x = np.arange(len(policies))
    for ax, routing in zip(axes[0], routings):
        r = g[g["routing"] == routing]
        for i, (col, label) in enumerate(kinds):
            stats = r.groupby("policy")[col].agg(["median", "min", "max"]).reindex(policies)
            err = np.vstack([stats["median"] - stats["min"], stats["max"] - stats["median"]])
            ax.bar(x + (i - 1) * 0.27, stats["median"], 0.27, yerr=np.nan_to_num(err), label=label,
                   color=PALETTE[i], capsize=2)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(x, policies, rotation=30, ha="right")
        ax.set_title(f"routing: {routing}", fontsize=9)
    axes[0, 0].set_ylabel("mixed / alone")
    axes[0, -1].legend(fontsize=8)
    fig.suptitle(f"{job}: slowdown next to the other jobs, per placement policy", y=1.03)
    return savefig(fig, path)


def plot_latency(samples: pd.DataFrame, job: str, routing: str, path: Path) -> Path:
    """One job's per-iteration latency alone and mixed, per policy, as CDFs (one routing). Each
    sample is divided by the median of the same repetition's (and operation's) samples alone, so
    policies with different placements, and operations of different sizes, share one axis."""
    value = "mean_latency_us" if "mean_latency_us" in samples else "latency_us"
    g = samples[(samples["job"] == job) & (samples["routing"] == routing)].copy()
    key = [c for c in ("policy", "repetition", "operation", "size_bytes") if c in g]
    base = g[g["workload"] == "alone"].groupby(key)[value].median().rename("base")
    g = g.join(base, on=key)
    g["relative"] = g[value] / g["base"]
    policies = list(dict.fromkeys(g["policy"]))
    fig, axes = subplots(1, len(policies), figsize=(2.4 * len(policies) + 1, 2.9), squeeze=False, sharey=True)
    for ax, policy in zip(axes[0], policies):
        for workload, style in (("alone", "--"), ("mixed", "-")):
            v = np.sort(g[(g["policy"] == policy) & (g["workload"] == workload)]["relative"].dropna().to_numpy())
            if len(v):
                ax.step(v, np.arange(1, len(v) + 1) / len(v), style, where="post", label=workload)
        ax.set_title(policy, fontsize=9)
        ax.set_xlabel("latency / median alone")
    axes[0, 0].set_ylabel("fraction of iterations")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{job}: per-iteration latency alone and mixed (routing: {routing})", y=1.04)
    return savefig(fig, path)


__all__ = ["analyse", "draw_figures", "SLOWDOWNS"]
