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
  ran, so its slowdown is what it suffered *from* the victim.

Outputs in the same shape as the simulated experiment's (``routing`` is ``site``: the machine's
own): ``jobs.csv`` (one row per policy, repetition and job), ``samples.csv``/``.parquet`` (every
timed operation of every run, for the distributions) and ``summary.json`` (median slowdowns over
repetitions per job and policy, plus notes on runs that failed or lacked data).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.data.dataset import Dataset
from hpcvar.results.interference import InterferenceResult

SLOWDOWNS = ("slowdown_total", "slowdown_comm", "slowdown_latency")
ROUTING = "site"


def _latency_rows(lat: pd.DataFrame, run_id: str, window: tuple[float, float] | None = None) -> pd.DataFrame:
    rows = lat[lat["run_id"] == run_id]
    if window is not None and rows["start_epoch_s"].notna().any():
        rows = rows[(rows["start_epoch_s"] >= window[0]) & (rows["start_epoch_s"] <= window[1])]
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
            v = runs.loc[victim_mixed.iloc[0]]
            window = (v["start"].timestamp(), v["end"].timestamp())
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
    summary = {
        "experiment": str(book["experiment"].iloc[0]) if len(book) else None, "mode": "slurm",
        "source": str(exp_dir / "experiment.csv"), "repetitions": int(book["repetition"].nunique()),
        "jobs": {j: {"role": g["role"].iloc[0], "test": g["test"].iloc[0], "pattern": g["pattern"].iloc[0],
                     "nodes": int(g["nodes"].iloc[0])} for j, g in book.groupby("job", sort=False)},
        "policies": {p: {"victim": g["victim_policy"].iloc[0], "aggressors": g["aggressor_policy"].iloc[0]}
                     for p, g in book.groupby("policy", sort=False)},
        "slowdowns": {job: {pol: {ROUTING: {k: _median(gp[k]) for k in SLOWDOWNS}}
                            for pol, gp in gj.groupby("policy", sort=False)}
                      for job, gj in jobs.groupby("job", sort=False)} if len(jobs) else {},
        "runs": {"collated": int(book["run_id"].isin(runs.index).sum()), "failed": sorted(set(book["run_id"]) & set(failed))},
        "notes": notes,
    }
    result = InterferenceResult.build(summary)
    result.write(out)
    return result


def _median(values: pd.Series) -> float | None:
    v = values.dropna()
    return float(v.median()) if len(v) else None


__all__ = ["analyse", "SLOWDOWNS"]
