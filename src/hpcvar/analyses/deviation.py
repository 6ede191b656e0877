"""Deviation prediction: which counters explain the spread of step times (paper Section IV-B).

Per dataset, every time step is a sample. Step times and job counters (per router) are turned
into relative deviations from the per-step mean over runs (the paper's mean-centring), so the
model learns the *deviation* from the expected behaviour, not the behaviour. A LightGBM
regressor with recursive feature elimination (scikit-learn RFE) is fitted inside k-fold
cross-validation grouped by run (no steps of one run on both sides; the per-step means come from
the training runs only). A counter's relevance is the share of folds that keep it, ties broken
by its mean gain; the reconstructed step time gives the MAPE the paper reports (< 5%).

In the same folds, a second LightGBM model is fitted on every column of the ``attribution``
feature sets (job counters, placement, I/O and system counters), each step centred on its
*median* over the training runs, and its out-of-fold prediction for every held-out step is split
into per-feature contributions (LightGBM's SHAP values, ``pred_contrib``). These are written per
dataset (``attribution.parquet``) for :mod:`hpcvar.analyses.explain`, which turns them into
seconds of one run's slowdown per cause.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from lightgbm import LGBMRegressor
from sklearn.feature_selection import RFE
from sklearn.model_selection import GroupKFold

from hpcvar import tracking
from hpcvar.analyses.common import (CPU_PRESSURE, datasets, feature_columns, load, mape, savefig, step_frame,
                                    subplots)
from hpcvar.results._common import MLflowRuns
from hpcvar.results.deviation import CounterRelevance, DeviationDataset, DeviationResult
from hpcvar.settings import DeviationSettings

PAPER_MAPE = 0.05  # the paper: below 5% on all six datasets


def _model(s: DeviationSettings) -> LGBMRegressor:
    return LGBMRegressor(n_estimators=s.n_estimators, learning_rate=s.learning_rate,
                         num_leaves=s.num_leaves, min_child_samples=20, subsample=0.8, subsample_freq=1,
                         random_state=s.seed, n_jobs=1, verbose=-1)  # threads contend on small fits


def centre(frame: pd.DataFrame, columns: list[str], means: pd.DataFrame) -> pd.DataFrame:
    """Relative deviation of ``columns`` from per-step ``means`` (index: step)."""
    m = means.reindex(frame["step"])[columns].to_numpy()
    return pd.DataFrame((frame[columns].to_numpy() - m) / m, columns=columns, index=frame.index)


def cross_validate(frame: pd.DataFrame, counters: list[str], s: DeviationSettings, label: str = "") -> dict:
    """RFE + LightGBM in grouped k-fold CV; returns per-fold results and the relevance table."""
    groups = frame["run_id"].to_numpy()
    n_folds = min(s.folds, len(np.unique(groups)))
    folds, predictions = [], np.full(len(frame), np.nan)
    for i, (train, test) in enumerate(GroupKFold(n_splits=n_folds).split(frame, groups=groups)):
        t0 = time.perf_counter()
        tr, te = frame.iloc[train], frame.iloc[test]
        means = tr.groupby("step")[["duration_s", *counters]].mean()
        keep = te["step"].isin(means.index).to_numpy()  # steps no training run reached cannot be centred
        x_tr, y_tr = centre(tr, counters, means), centre(tr, ["duration_s"], means)["duration_s"]
        x_te = centre(te[keep], counters, means)
        rfe = RFE(_model(s), n_features_to_select=min(s.n_select, len(counters)), step=1)
        rfe.fit(x_tr.fillna(0), y_tr)
        rel = rfe.predict(x_te.fillna(0))
        pred = means.loc[te.loc[keep, "step"], "duration_s"].to_numpy() * (1 + rel)
        predictions[test[keep]] = pred
        gain = pd.Series(rfe.estimator_.booster_.feature_importance("gain"),
                         index=np.array(counters)[rfe.support_])
        # A model that made no split (too few steps to split on) gives every counter a zero share.
        share = gain / gain.sum() if gain.sum() > 0 else gain * 0.0
        folds.append({"fold": i, "selected": list(gain.index), "gain_share": share.to_dict(),
                      "ranking": dict(zip(counters, rfe.ranking_.tolist())),
                      "mape": mape(te.loc[keep, "duration_s"], pred), "test_runs": int(te["run_id"].nunique()),
                      "seconds": time.perf_counter() - t0})
        print(f"deviation: {label} fold {i + 1}/{n_folds} mape={folds[-1]['mape']:.4f} "
              f"{folds[-1]['seconds']:.1f}s", file=sys.stderr, flush=True)
    relevance = pd.DataFrame({
        "counter": counters,
        "relevance": [np.mean([c in f["selected"] for f in folds]) for c in counters],
        "mean_gain_share": [np.mean([f["gain_share"].get(c, 0.0) for f in folds]) for c in counters],
        "mean_rfe_rank": [np.mean([f["ranking"][c] for f in folds]) for c in counters],
    }).sort_values(["relevance", "mean_gain_share"], ascending=False).reset_index(drop=True)
    ok = ~np.isnan(predictions)
    return {"folds": folds, "relevance": relevance, "predictions": predictions,
            "mape": mape(frame.loc[ok, "duration_s"], predictions[ok])}


#: Columns of ``attribution.parquet`` besides one contribution column per feature.
ATTRIBUTION_META = ("run_id", "step", "duration_s", "typical_s", "predicted_rel", "bias")


def centre_on(frame: pd.DataFrame, columns: list[str], reference: pd.DataFrame) -> pd.DataFrame:
    """Relative deviation of ``columns`` from a per-step ``reference`` (index: step); where the
    reference is 0 (a counter that did not move), the plain difference."""
    m = reference.reindex(frame["step"])[columns].to_numpy()
    x = frame[columns].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(m != 0, (x - m) / np.where(m != 0, m, 1.0), x - m)
    return pd.DataFrame(rel, columns=columns, index=frame.index)


def attribute(frame: pd.DataFrame, features: list[str], s: DeviationSettings, label: str = "") -> pd.DataFrame:
    """Out-of-fold per-step contributions: for every step of every run, the step's median over
    the *other* folds' runs (``typical_s``), the model's predicted relative deviation from it
    (``predicted_rel``), the model's prediction for a typical step, every feature at its median
    (``bias``), and one column per feature: its SHAP value at the step less its SHAP value at
    that typical step, so they and ``bias`` sum to ``predicted_rel``. TreeSHAP's own base value is
    the average prediction over the training steps: where a few runs were several times slower
    (the testbed's rounds after a rate drop) it lies far above a typical step, and a counter that
    slowed a run by half came out negative, being lower than in the slowest runs. Steps no
    training run reached are left out."""
    groups = frame["run_id"].to_numpy()
    n_folds = min(s.folds, len(np.unique(groups)))
    parts = []
    for train, test in GroupKFold(n_splits=n_folds).split(frame, groups=groups):
        tr, te = frame.iloc[train], frame.iloc[test]
        medians = tr.groupby("step")[["duration_s", *features]].median()
        te = te[te["step"].isin(medians.index)]
        if te.empty:
            continue
        model = _model(s).fit(centre_on(tr, features, medians).fillna(0),
                              centre_on(tr, ["duration_s"], medians)["duration_s"])
        contrib = model.predict(centre_on(te, features, medians).fillna(0), pred_contrib=True)
        # Centred: a typical step has every feature at its median, 0. Named as the model was fitted
        # (a bare array made scikit-learn warn once per fold in the job's log).
        typical = model.predict(pd.DataFrame(np.zeros((1, len(features))), columns=features), pred_contrib=True)[0]
        part = pd.DataFrame(contrib[:, :-1] - typical[:-1], columns=features, index=te.index)
        part.insert(0, "bias", typical.sum())
        part.insert(0, "predicted_rel", contrib.sum(axis=1))
        part.insert(0, "typical_s", medians.loc[te["step"], "duration_s"].to_numpy())
        for col in ("duration_s", "step", "run_id"):
            part.insert(0, col, te[col].to_numpy())
        parts.append(part)
    print(f"deviation: {label} attribution over {len(features)} features in {n_folds} folds", file=sys.stderr,
          flush=True)
    return pd.concat(parts).sort_index().reset_index(drop=True) if parts else pd.DataFrame(
        columns=[*ATTRIBUTION_META, *features])


def cpu_pressure_r2(frame: pd.DataFrame) -> float | None:
    """How much of the step-time spread the CPU load explains: the squared correlation of each
    step's relative deviation (from that step's mean over runs) with its share of time under CPU
    pressure (:data:`CPU_PRESSURE`, per node, over the step's duration). None without the counter
    (no pressure stall sampling) or with a constant one."""
    if CPU_PRESSURE not in frame.columns or frame[CPU_PRESSURE].isna().all():
        return None
    share = frame[CPU_PRESSURE] / 1e6 / frame["duration_s"]
    deviation = frame["duration_s"] / frame.groupby("step")["duration_s"].transform("mean") - 1
    ok = share.notna() & deviation.notna()
    if ok.sum() < 3 or share[ok].std() == 0 or deviation[ok].std() == 0:
        return None
    return float(np.corrcoef(share[ok], deviation[ok])[0, 1] ** 2)


def _figure(relevance: pd.DataFrame, name: str, path: Path) -> Path:
    r = relevance.iloc[::-1]
    fig, ax = subplots(figsize=(6, 0.3 * len(r) + 1.2))
    ax.barh(r["counter"], r["relevance"], color="#34495e")
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("relevance (share of CV folds that keep the counter)")
    ax.set_title(f"{name}: counters explaining step-time deviation")
    return savefig(fig, path)


def run(dataset_dir: str | Path, out_dir: str | Path, config: DeviationSettings | dict | None = None,
        only: str | None = None) -> DeviationResult:
    """Counter relevance per dataset (:class:`~hpcvar.settings.DeviationSettings`, or a mapping of
    them); writes ``out_dir/summary.json`` and the tables and figures, logs to MLflow, returns the
    result."""
    s = DeviationSettings.from_mapping(config)
    out_dir = Path(out_dir)
    data = load(dataset_dir)
    found: dict[str, DeviationDataset] = {}
    fitted = {}
    for name in datasets(data["runs"], s.min_runs, only):
        frame = step_frame(data, name)
        counters = feature_columns(frame, "job")
        if not counters:
            print(f"deviation: {name}: no step counters, skipped", file=sys.stderr)
            continue
        cv = cross_validate(frame, counters, s, label=name)
        # The model to keep: RFE on all runs, for the MLflow model registry and later scoring.
        means = frame.groupby("step")[["duration_s", *counters]].mean()
        x_all = centre(frame, counters, means).fillna(0)
        final = RFE(_model(s), n_features_to_select=min(s.n_select, len(counters)), step=1)
        final.fit(x_all, centre(frame, ["duration_s"], means)["duration_s"])
        selected = list(np.array(counters)[final.support_])
        (out_dir / name).mkdir(parents=True, exist_ok=True)
        rel = cv["relevance"]
        rel.to_csv(out_dir / DeviationDataset.relevance_table(name), index=False)
        pd.DataFrame(cv["folds"]).drop(columns=["gain_share", "ranking"]).to_csv(
            out_dir / DeviationDataset.folds_table(name), index=False)
        _figure(rel, name, out_dir / DeviationDataset.relevance_figure(name))
        features = [c for fs in s.attribution for c in feature_columns(frame, fs) if frame[c].notna().any()]
        attribute(frame, features, s, label=name).to_parquet(out_dir / DeviationDataset.attribution_table(name),
                                                             index=False)
        cpu_r2 = cpu_pressure_r2(frame)
        found[name] = DeviationDataset(
            runs=int(frame["run_id"].nunique()), steps=len(frame), counters=counters, folds=len(cv["folds"]),
            mape=_finite(cv["mape"]), mape_per_fold=[_finite(f["mape"]) for f in cv["folds"]],
            top_counter=rel["counter"].iloc[0], relevance=[CounterRelevance(**r) for r in rel.to_dict("records")],
            final_selected=selected, below_paper_bound=bool(cv["mape"] < PAPER_MAPE),
            **({"cpu_pressure_r2": cpu_r2} if cpu_r2 is not None else {}), attribution_features=features)
        fitted[name] = (frame, x_all[selected], final.estimator_, cv)
    result = DeviationResult(params=s, paper_mape=PAPER_MAPE, datasets=found)
    result.mlflow = MLflowRuns.model_validate(_log(dataset_dir, out_dir, s, fitted, result))
    result.write(out_dir, only)
    return result


def _finite(x: float) -> float | None:
    """A figure for the summary: None where there is none (NaN)."""
    return float(x) if np.isfinite(x) else None


def _log(dataset_dir, out_dir: Path, settings: DeviationSettings, fitted: dict, result: DeviationResult) -> dict:
    import mlflow
    from mlflow.models import infer_signature

    ids = {}
    with tracking.session("deviation", dataset_dir) as exp_id:
        for name, (frame, x_sel, estimator, cv) in fitted.items():
            d = result.datasets[name]
            with mlflow.start_run(run_name=name, tags={"hpcvar.dataset": name}) as parent:
                tracking.log_dataset(frame, Path(dataset_dir) / "steps", f"{name}-steps")
                mlflow.log_params({**settings.as_dict(), "counters": ",".join(d.counters)})
                mlflow.log_metrics({"mape": cv["mape"], "runs": d.runs, "steps": d.steps})
                mlflow.set_tag("hpcvar.top_counter", d.top_counter)
                for f in cv["folds"]:
                    with mlflow.start_run(run_name=f"{name} fold {f['fold']}", nested=True):
                        mlflow.log_params({"fold": f["fold"], "selected": ",".join(f["selected"])})
                        mlflow.log_metrics({"mape": f["mape"], "test_runs": f["test_runs"],
                                            "train_seconds": f["seconds"]})
                # The native booster (LightGBM's own text format; the estimator would go through
                # skops, which takes seconds): it predicts what the estimator predicts.
                mlflow.lightgbm.log_model(estimator.booster_, name="deviation_model",
                                          signature=infer_signature(x_sel, estimator.predict(x_sel)),
                                          input_example=x_sel.head(3), pip_requirements=["lightgbm==4.7.0"])
                mlflow.log_artifacts(str(out_dir / name), artifact_path="deviation")
                ids[name] = parent.info.run_id
        return {"tracking_uri": mlflow.get_tracking_uri(), "experiment_id": exp_id, "runs": ids}
