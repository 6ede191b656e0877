"""What the forecaster writes per dataset: tables, SVG figures (the paper's Figures 8/10, 11 and 12)
and the MLflow runs (one parent per dataset, a nested run per cell and feature set, the best
cell's models).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from hpcvar import tracking
from hpcvar.analyses import common
from hpcvar.analyses.forecast.grid import DatasetResult
from hpcvar.defaults import cell_key
from hpcvar.results.forecast import DatasetRun


TORCH_REQUIREMENT = f"torch=={torch.__version__.split('+')[0]}"


def write_tables_figures(name: str, grid: pd.DataFrame, importance: pd.DataFrame, out: Path) -> dict:
    grid.to_csv(out / "grid.csv", index=False)
    importance.to_csv(out / "importance.csv", index=False)
    plot_grid(grid, name, out / "mape_grid.svg")
    plot_importance(importance, name, out / "importance.svg")
    return {"grid_table": "grid.csv", "importance_table": "importance.csv", "grid_figure": "mape_grid.svg",
            "importance_figure": "importance.svg"}


def write_long_run(table: pd.DataFrame, long_name: str, m: int, k: int, out: Path) -> dict:
    table.to_csv(out / "long_run.csv", index=False)
    plot_long_run(table, long_name, m, k, out / "long_run.svg")
    return {"long_run_table": "long_run.csv", "long_run_figure": "long_run.svg"}


def plot_grid(grid: pd.DataFrame, name: str, path: Path) -> Path:
    """Figures 8/10: attention MAPE (%) over m x k, one panel per feature set."""
    att = grid[grid["model"] == "attention"]
    sets = list(dict.fromkeys(att["feature_set"]))
    ms, ks = sorted(att["m"].unique()), sorted(att["k"].unique())
    fig, axes = common.subplots(1, len(sets), figsize=(3.2 * len(sets), 3.0), squeeze=False)
    vmin, vmax = 100 * att["mape"].min(), 100 * att["mape"].max()
    for ax, fs in zip(axes[0], sets):
        table = att[att["feature_set"] == fs].pivot(index="m", columns="k", values="mape").reindex(index=ms, columns=ks)
        im = ax.imshow(100 * table.to_numpy(), cmap="viridis_r", vmin=vmin, vmax=vmax, origin="lower")
        for (i, j), v in np.ndenumerate(100 * table.to_numpy()):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", color="w" if v > (vmin + vmax) / 2 else "k")
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_yticks(range(len(ms)), [str(m) for m in ms])
        ax.set_xlabel("k (steps forecast)")
        ax.set_title(fs, fontsize=9)
    axes[0, 0].set_ylabel("m (steps of context)")
    fig.colorbar(im, ax=axes[0].tolist(), label="MAPE (%)", shrink=0.8)
    fig.suptitle(f"{name}: attention forecaster MAPE")
    return common.savefig(fig, path)


def plot_importance(importance: pd.DataFrame, name: str, path: Path) -> Path:
    """Figure 11: permutation importance of the counters in the best cell. The step's own duration
    (the persistence part of every forecast) is far larger, so it goes in the title, not a bar."""
    own = importance[importance["feature"] == "duration"]["mape_increase"]
    imp = importance[importance["feature"] != "duration"].iloc[::-1]
    fig, ax = common.subplots(figsize=(5, 0.25 * len(imp) + 1.4))
    ax.barh(imp["feature"], 100 * imp["mape_increase"], xerr=100 * imp["mape_increase_sd"], color="tab:blue")
    ax.set_xlabel("MAPE increase when permuted (percentage points)")
    title = f"{name}: feature importance (attention)"
    if len(own):
        title += f"\nown step durations (not shown): +{100 * own.iloc[0]:.1f} points"
    ax.set_title(title, fontsize=10)
    return common.savefig(fig, path)


def plot_long_run(table: pd.DataFrame, name: str, m: int, k: int, path: Path) -> Path:
    """Figure 12: each k-step segment's time, actual and forecast from the m steps before it."""
    runs = list(dict.fromkeys(table["run_id"]))
    fig, axes = common.subplots(len(runs), 1, figsize=(7, 2.6 * len(runs)), squeeze=False, sharex=True)
    for ax, run_id in zip(axes[:, 0], runs):
        t = table[table["run_id"] == run_id]
        mid = (t["first_step"] + t["last_step"]) / 2
        ax.plot(mid, t["actual_s"], "o-", label="actual")
        ax.plot(mid, t["predicted_s"], "s--", label="attention forecast")
        ax.set_ylabel(f"time of {k} steps (s)")
        ax.set_title(f"{run_id}: MAPE {100 * common.mape(t['actual_s'], t['predicted_s']):.1f}%", fontsize=9)
        ax.legend(fontsize=8)
    axes[-1, 0].set_xlabel("time step (segment centre)")
    fig.suptitle(f"{name}: forecasting {k}-step segments from the previous {m} steps")
    return common.savefig(fig, path)


def log_dataset(res: DatasetResult, experiment_id: str, dataset_dir: Path, params: dict) -> DatasetRun:
    """One parent run per dataset: params, the step frame as input, a nested run per cell and
    feature set, the final models and the tables and figures."""
    import lightgbm
    import mlflow
    import mlflow.lightgbm
    import mlflow.pytorch
    from mlflow.models import infer_signature

    s = res.summary
    with mlflow.start_run(run_name=res.name, tags={"hpcvar.dataset": res.name}) as parent:
        mlflow.log_params({**params, **res.params})
        tracking.log_dataset(res.frame, dataset_dir, res.name)
        if s.skipped is not None:
            mlflow.set_tag("hpcvar.skipped", s.skipped)
            return DatasetRun(experiment_id=experiment_id, run_id=parent.info.run_id)
        for (m, k, fs), cell in res.grid.groupby(["m", "k", "feature_set"], sort=False):
            with mlflow.start_run(run_name=f"{res.name} m={m} k={k} {fs}", nested=True,
                                  tags={"hpcvar.dataset": res.name}):
                mlflow.log_params({"m": m, "k": k, "feature_set": fs})
                mlflow.log_metrics({**{f"mape_{r.model}": r.mape for r in cell.itertuples() if np.isfinite(r.mape)},
                                    "train_seconds": float(cell["train_seconds"].sum()),
                                    "n_windows": float(cell["n_windows"].max())})
        metrics = {"best_mape_attention": s.best.mape_attention}
        if s.long_run is not None:
            metrics["long_run_mape"] = s.long_run.mape
        metrics = {key: value for key, value in metrics.items() if value is not None}
        mlflow.log_metrics(metrics)
        mlflow.set_tags({"hpcvar.best_cell": f"{cell_key(s.best.m, s.best.k)},{s.best.feature_set}"})
        f = res.final
        y_example = f.attention.predict(f.example).astype(np.float32)
        mlflow.pytorch.log_model(f.attention, name="attention", signature=infer_signature(f.example, y_example),
                                 input_example=f.example, pip_requirements=[TORCH_REQUIREMENT])
        flat = pd.DataFrame(f.example.reshape(len(f.example), -1).astype(float),
                            columns=[f"{n}@t-{f.example.shape[1] - 1 - i}" for i in range(f.example.shape[1])
                                     for n in f.feature_names])
        # The native booster: LightGBM's own text format (an estimator would go through skops, and
        # take seconds to save); it predicts what the estimator predicts.
        booster = f.lightgbm.model.booster_
        mlflow.lightgbm.log_model(booster, name="lightgbm",
                                  signature=infer_signature(flat, booster.predict(flat.to_numpy())),
                                  input_example=flat, pip_requirements=[f"lightgbm=={lightgbm.__version__}"])
        mlflow.log_artifacts(str(res.out), artifact_path="forecast")
        return DatasetRun(experiment_id=experiment_id, run_id=parent.info.run_id)
