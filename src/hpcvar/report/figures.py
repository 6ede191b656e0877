"""The report's own figures: the ones drawn from the collated dataset rather than by an analysis
(campaign overview, per-step spread, compute vs MPI, placement). Each function returns the
figure's file and the numbers its reading quotes, computed from the same frame it plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.analyses.common import savefig, subplots
from hpcvar.topology import LOCALITY_CLASSES

#: Colours per dataset, stable across figures (matplotlib's tab10).
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]

LOCALITY_ORDER = [*LOCALITY_CLASSES, "unknown"]


def colours(names) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sorted(names))}


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


def campaign_timeline(runs: pd.DataFrame, failed: pd.DataFrame, path: Path) -> Path:
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


def relative_times(runs: pd.DataFrame, path: Path) -> tuple[Path, pd.DataFrame]:
    """The paper's Figure 1: each run's time relative to the best run of its dataset, by date."""
    rel = runs[["dataset", "run_id", "start", "total_time_s"]].copy()
    rel["relative"] = rel["total_time_s"] / rel.groupby("dataset")["total_time_s"].transform("min")
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
    return savefig(fig, path), rel


def step_spread(steps: pd.DataFrame, dataset: str, path: Path) -> tuple[Path, pd.DataFrame]:
    """The paper's Figure 3: mean time per step over runs, with the standard deviation and the
    min-max band."""
    per = steps.groupby("step")["duration_s"].agg(["mean", "std", "min", "max", "count"]).reset_index()
    fig, ax = subplots(figsize=(7, 3.2))
    ax.fill_between(per["step"], per["min"], per["max"], color="#9ecae1", alpha=0.5, label="min-max")
    ax.fill_between(per["step"], per["mean"] - per["std"].fillna(0), per["mean"] + per["std"].fillna(0),
                    color="#3182bd", alpha=0.5, label="mean ± std")
    ax.plot(per["step"], per["mean"], color="#08519c", lw=1.2, label="mean")
    ax.set_xlabel("time step")
    ax.set_ylabel("step time (s)")
    ax.set_title(f"{dataset}: time per step over {int(per['count'].max())} runs (Figure 3)")
    ax.legend(fontsize=7)
    return savefig(fig, path), per


def mpi_breakdown(profile: pd.DataFrame, runs: pd.DataFrame, dataset: str, path: Path,
                  top: int = 5) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """Figures 4-5: per profiled run (ordered by run time) the mean compute and MPI time per
    rank, and the time per rank in the dominant MPI routines."""
    prof = profile.merge(runs[["run_id", "total_time_s"]], on="run_id")
    per_run = prof.groupby("run_id").agg(app_time_s=("app_time_s", "first"), mpi_time_s=("mpi_time_s", "first"),
                                         ntasks=("ntasks", "first"), total_time_s=("total_time_s", "first"))
    per_run["mpi_s"] = per_run["mpi_time_s"] / per_run["ntasks"]
    per_run["compute_s"] = (per_run["app_time_s"] - per_run["mpi_time_s"]) / per_run["ntasks"]
    per_run["mpi_share"] = per_run["mpi_time_s"] / per_run["app_time_s"]
    per_run = per_run.sort_values("total_time_s").reset_index()
    routines = prof.groupby("routine")["time_s"].sum().sort_values(ascending=False)
    dominant = list(routines.index[:top])
    wide = (prof[prof["routine"].isin(dominant)].assign(per_rank=lambda d: d["time_s"] / d["ntasks"])
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
    shares = (routines / routines.sum()).rename("share").reset_index()
    return savefig(fig, path), per_run, shares


def placement(runs: pd.DataFrame, dataset: str, path: Path) -> tuple[Path, dict]:
    """Run time against the number of groups and routers a run spans, and per locality class."""
    fig, (a1, a2, a3) = subplots(1, 3, figsize=(11, 3.3))
    a1.scatter(runs["num_groups"], runs["total_time_s"], s=12, color="#3182bd")
    a1.set_xlabel("groups spanned (num_groups)")
    a1.set_ylabel("run time (s)")
    a2.scatter(runs["num_routers"], runs["total_time_s"], s=12, color="#3182bd")
    a2.set_xlabel("routers spanned (num_routers)")
    classes = [c for c in LOCALITY_ORDER if c in set(runs["locality"].fillna("unknown"))]
    classes += sorted(set(runs["locality"].fillna("unknown")) - set(classes))
    loc = runs["locality"].fillna("unknown")
    a3.boxplot([runs.loc[loc == c, "total_time_s"] for c in classes], tick_labels=classes)
    a3.set_xlabel("locality class")
    fig.suptitle(f"{dataset}: run time and placement")
    stats = {}
    for key in ("num_groups", "num_routers"):
        ok = runs[[key, "total_time_s"]].dropna()
        stats[f"r_{key}"] = (float(np.corrcoef(ok[key], ok["total_time_s"])[0, 1])
                             if len(ok) > 2 and ok[key].nunique() > 1 else float("nan"))
    stats["locality"] = {c: {"runs": int((loc == c).sum()),
                             "median_s": float(runs.loc[loc == c, "total_time_s"].median())} for c in classes}
    return savefig(fig, path), stats


def interference_slowdowns(jobs: pd.DataFrame, job: str, path: Path) -> Path:
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


def interference_latency(samples: pd.DataFrame, job: str, routing: str, path: Path) -> Path:
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
