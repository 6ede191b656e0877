"""The planted truth: what the simulator writes of it, and scoring the analyses' answers against it.

The simulator gathers it run by run (:class:`TruthRecorder`) and writes it beside the raw files:
``truth.json`` (the planted causes per dataset, the oracle forecaster's error, the preset),
``truth_oracle.parquet``, ``truth_steps.parquet`` and ``truth_runs.parquet``. Collation never
reads them; the checks (tests, benchmarks) do, through :func:`score_explanations`: the analyses
never see the truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.data.rawlayout import TRUTH, TRUTH_ORACLE
from hpcvar.defaults import FORECAST_GRID, cell_key
from hpcvar.simulate import model
from hpcvar.simulate.presets import DatasetSpec, Preset
from hpcvar.simulate.system import LARGE_JOB_NODES, Users

#: The hidden state per run and step, and the seconds each planted cause added to the step.
TRUTH_STEPS = "truth_steps.parquet"
#: The per-run truth file: one row per run, its dominant planted cause (``dominant``: the category
#: that added the most seconds; ``dominant_user``: for neighbours, the culprit who added the most).
TRUTH_RUNS = "truth_runs.parquet"
ORACLE_COLUMNS = ["run_id", "dataset", "t_c", "k", "oracle_s", "actual_s"]
STEP_COLUMNS = ("run_id", "dataset", "step", "culprit", "ar1", "io", *model.CAUSE_COLUMNS, "culprit_user")

#: A run's row in the truth (one per run, failed ones included): the keys ``add_run`` records.
RUN_COLUMNS = ["run_id", "dataset", "failed", "culprit_steps", "abs_rel_noise"]


class TruthRecorder:
    """The truth of one simulated campaign, gathered run by run and written once at its end."""

    def __init__(self):
        self.runs: list[dict] = []           # per run: failed, share of culprit steps, noise
        self.oracle: list[tuple] = []        # rows of ORACLE_COLUMNS
        self.steps: list[pd.DataFrame] = []  # rows of STEP_COLUMNS

    def add_run(self, run_id: str, ds: DatasetSpec, profile: np.ndarray, res: model.RunResult, frag: float,
                io: model.OUProcess, steps: int, failed: bool, culprit_users: list[str | None]) -> None:
        """One run whose first ``steps`` steps were written; ``culprit_users``: the culprit adding the
        most congestion at each of their starts. A failed run has no oracle rows."""
        if not failed:
            durations = res.step_end - res.step_start
            cum = np.concatenate([[0.0], np.cumsum(durations)])
            self.oracle += [(run_id, ds.name, t_c, k, o, float(cum[t_c + k] - cum[t_c]))
                            for t_c, k, o in model.oracle_sums(ds, profile, res, frag, io, len(profile))]
        causes = model.step_causes(ds, profile, res, frag, io)
        self.steps.append(pd.DataFrame({
            "run_id": run_id, "dataset": ds.name, "step": np.arange(1, steps + 1, dtype=np.int32),
            "culprit": res.culprit_share[:steps], "ar1": res.ar1[:steps], "io": io(res.step_start[:steps]),
            **{c: v[:steps] for c, v in causes.items()}, "culprit_user": culprit_users}))
        self.runs.append({"run_id": run_id, "dataset": ds.name, "failed": failed,
                          "culprit_steps": float(np.mean(res.culprit_share > 0)),
                          "abs_rel_noise": float(np.mean(np.abs((res.step_end - res.step_start) - res.noise_free)
                                                         / (res.step_end - res.step_start)))})

    def write(self, out: Path, p: Preset, seed: int, users: Users, microbenchmarks: dict | None = None) -> dict:
        """The four truth files under ``out``; returns ``truth.json``'s content."""
        oracle = pd.DataFrame(self.oracle, columns=ORACLE_COLUMNS)
        oracle.to_parquet(out / TRUTH_ORACLE, index=False)
        steps = (pd.concat(self.steps, ignore_index=True) if self.steps else
                 pd.DataFrame({c: [] for c in STEP_COLUMNS}))
        steps.to_parquet(out / TRUTH_STEPS, index=False)
        runs = pd.DataFrame(self.runs, columns=RUN_COLUMNS).astype({"failed": bool})
        model.dominant_causes(steps, runs).to_parquet(out / TRUTH_RUNS, index=False)
        truth = self.summary(p, seed, users, oracle, runs)
        if microbenchmarks is not None:
            truth["microbenchmarks"] = microbenchmarks
        (out / TRUTH).write_text(json.dumps(truth, indent=1))
        return truth

    def summary(self, p: Preset, seed: int, users: Users, oracle: pd.DataFrame, df: pd.DataFrame) -> dict:
        """Per dataset: its planted culprits and drivers, its runs (``df``, a row per run), and the
        best errors achievable."""
        ok = df[~df["failed"]]
        return {
            "preset": p.name, "seed": seed, "system": p.system,
            "noise": p.noise, "counter_noise": p.counter_noise,
            "campaign_user": p.campaign_user,
            "neighbourhood_threshold_nodes": LARGE_JOB_NODES,
            "datasets": {
                ds.name: {
                    "app": ds.app, "nodes": ds.nodes, "steps": ds.steps,
                    "culprits": users.culprits[ds.name],
                    "drivers": list(ds.drivers),
                    "io_forecastable": ds.io_sensitivity > 0,
                    "runs": int((df["dataset"] == ds.name).sum()),
                    "failed_runs": int(((df["dataset"] == ds.name) & df["failed"]).sum()),
                    "runs_with_culprits": float((ok.loc[ok["dataset"] == ds.name, "culprit_steps"] > 0).mean()),
                    "best_achievable_mape": float(ok.loc[ok["dataset"] == ds.name, "abs_rel_noise"].mean()),
                    "oracle_mape": oracle_mape(oracle[oracle["dataset"] == ds.name], ds.app),
                } for ds in p.all_datasets
            },
            "culprit_strength": users.culprit_strength,
            "large_users": users.table.loc[users.table["large"], "user"].tolist(),
            "preset_fields": {k: v for k, v in asdict(p).items() if not isinstance(v, tuple)},
        }


def oracle_mape(oracle: pd.DataFrame, app: str) -> dict[str, float]:
    """The oracle's MAPE on the default forecasting grid's windows (t_c from m to T-k)."""
    out = {}
    for m in FORECAST_GRID[app]["m"]:
        for k in FORECAST_GRID[app]["k"]:
            w = oracle[(oracle["k"] == k) & (oracle["t_c"] >= m)]
            if len(w):
                out[cell_key(m, k)] = float((abs(w["oracle_s"] - w["actual_s"]) / w["actual_s"]).mean())
    return out


def score_explanations(truth_runs: pd.DataFrame, runs_tables: dict[str, pd.DataFrame],
                       pseudonym: Callable[[str], str], slow: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per dataset, among the runs at least ``slow`` slower than the dataset's median (explain's
    ``runs.csv``): how many runs, how many whose top cause is the planted dominant one (the same
    category, and for neighbours the same user, compared by pseudonym), and the share. Also the
    confusion between planted (rows) and named (columns) categories over those runs."""
    truth = truth_runs.set_index("run_id")
    rows, pairs = [], []
    for name, table in runs_tables.items():
        t = table[(table["slowdown"] >= 1 + slow) & table["run_id"].isin(truth.index)]
        hits = 0
        for r in t.itertuples():
            planted = truth.loc[r.run_id]
            user = planted["dominant_user"]
            want = pseudonym(user) if isinstance(user, str) else None
            hits += bool(r.top_category == planted["dominant"]
                         and (planted["dominant"] != "neighbours" or r.top_user == want))
            pairs.append((planted["dominant"], r.top_category))
        rows.append({"dataset": name, "slow_runs": len(t), "hits": hits,
                     "accuracy": hits / len(t) if len(t) else float("nan")})
    confusion = pd.crosstab(pd.Series([p for p, _ in pairs], name="planted", dtype=object),
                            pd.Series([n for _, n in pairs], name="named", dtype=object))
    return pd.DataFrame(rows), confusion
