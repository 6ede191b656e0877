"""The short text summary of a collated dataset (runs per dataset and the spread of run times)."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from hpcvar.data.dataset import Dataset


def dataset_summary(path) -> pd.DataFrame:
    """Per dataset: runs, mean/min/max total time (s), slowest/fastest ratio, steps per run, date span."""
    runs = Dataset(path).read("runs")
    if runs.empty:
        return pd.DataFrame(columns=["dataset", "runs", "mean_s", "min_s", "max_s", "slowest_fastest", "steps",
                                     "first", "last"])
    g = runs.groupby("dataset")
    out = pd.DataFrame({
        "runs": g.size(),
        "mean_s": g["total_time_s"].mean(),
        "min_s": g["total_time_s"].min(),
        "max_s": g["total_time_s"].max(),
        "steps": g["num_steps"].median().round().astype("Int64"),  # NA for runs imported without steps
        "first": g["start"].min().dt.strftime("%Y-%m-%d"),
        "last": g["start"].max().dt.strftime("%Y-%m-%d"),
    })
    out["slowest_fastest"] = out["max_s"] / out["min_s"]
    return out.reset_index()[["dataset", "runs", "mean_s", "min_s", "max_s", "slowest_fastest", "steps",
                              "first", "last"]]


def format_summary(path) -> str:
    ds = Dataset(path)
    table = dataset_summary(path)
    lines = [f"Dataset {path}: {int(table['runs'].sum()) if len(table) else 0} runs in {len(table)} datasets", ""]
    if len(table):
        lines.append(table.to_string(index=False, float_format=lambda v: f"{v:,.1f}",
                                     formatters={"slowest_fastest": lambda v: f"{v:.2f}x"}))
    q = ds.quarantine()
    failed = [e for e in q if e.get("kind") == "failed-run"]
    bad = [e for e in q if e.get("kind") != "failed-run"]
    lines += ["", f"Failed runs (not used as data): {len(failed)}", *_failure_lines(failed),
              f"Quarantined files (bad input, see quarantine.jsonl): {len(bad)}"]
    lines += [f"  {e.get('file')}:{e.get('line') or ''} {e.get('error')}" for e in bad[:10]]
    return "\n".join(lines) + "\n"


def _failure_lines(failed: list[dict]) -> list[str]:
    """Why the runs failed: Slurm did not complete the job, or Slurm did and the ReFrame test
    failed (sanity: wrong or missing output)."""
    slurm = Counter(e.get("state") for e in failed if e.get("state") != "COMPLETED")
    reframe = Counter(e.get("reframe") or "failed" for e in failed if e.get("state") == "COMPLETED")
    lines = []
    if slurm:
        lines.append(f"  Slurm state not COMPLETED: {sum(slurm.values())} ("
                     + ", ".join(f"{k}: {v}" for k, v in sorted(slurm.items(), key=str)) + ")")
    if reframe:
        lines.append(f"  ReFrame test failed, Slurm COMPLETED: {sum(reframe.values())} ("
                     + ", ".join(f"{k}: {v}" for k, v in sorted(reframe.items())) + ")")
    return lines
