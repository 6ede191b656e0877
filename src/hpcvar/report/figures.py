"""The report's own figures: the interference experiment's, drawn from the tables its analysis
wrote (every other figure is an analysis's, copied)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.analyses.common import PALETTE, savefig, subplots


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
