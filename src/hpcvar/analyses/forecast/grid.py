"""The cross-validated grid over (m, k): every model on every fold's held-out windows of each cell,
the oracle's error beside them, permutation importance in the best cell, the best cell's models
refitted on every run, and the long-run test (the paper's Figure 12).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.analyses import common
from hpcvar.analyses.forecast.attention import AttentionForecaster, Ensemble
from hpcvar.analyses.forecast.models import (TRAINERS, Boosted, attention_jobs, fit_attention, fit_lgbm, persistence,
                                             train_attention)
from hpcvar.analyses.forecast.windows import Fold, Part, Profile, Series, Windows, series, split_validation
from hpcvar.defaults import cell_key
from hpcvar.results.forecast import ForecastDataset
from hpcvar.settings import ForecastSettings, GridCell


@dataclass
class CellResult:
    m: int
    k: int
    run: np.ndarray                      # held-out windows, all folds
    t_c: np.ndarray
    seconds: np.ndarray
    predictions: dict = field(default_factory=dict)    # (feature set, model) -> seconds
    train_seconds: dict = field(default_factory=dict)  # (feature set, model) -> seconds spent fitting
    models: dict = field(default_factory=dict)         # feature set -> attention model per fold


def evaluate_cell(s: Series, folds: list[Fold], m: int, k: int, feature_sets: dict[str, list[int]],
                  settings: ForecastSettings, progress) -> CellResult | None:
    """Every model on every fold's held-out windows of one (m, k) cell; None when some fold has
    no training window (runs shorter than m + k steps)."""
    parts = [{name: Part.of(s, f, getattr(f, name), m, k) for name in ("fit", "val", "test")} for f in folds]
    if any(not len(p["fit"].windows) for p in parts):
        return None
    test = [p["test"] for p in parts]
    cell = CellResult(m, k, np.concatenate([t.windows.run for t in test]),
                      np.concatenate([t.windows.t_c for t in test]), np.concatenate([t.seconds for t in test]))
    # Every attention network of the cell (feature sets x folds x ensemble members) trained side by side.
    t0 = time.perf_counter()
    jobs = {(fs, f.number): attention_jobs(s, f, m, k, cols, settings, settings.seed + f.number)
            for fs, cols in feature_sets.items() for f in folds}
    trained = iter(train_attention([j for js in jobs.values() for j in js], settings))
    ensembles = {key: Ensemble([next(trained) for _ in js]) for key, js in jobs.items()}
    took = time.perf_counter() - t0
    progress(f"m={m} k={k} attention: {sum(map(len, jobs.values()))} networks ({len(feature_sets)} feature sets x "
             f"{len(folds)} folds x {settings.ensemble}) {took:.1f}s")
    for fs, cols in feature_sets.items():
        cell.predictions[(fs, "persistence")] = np.concatenate([persistence(t.x, t.profile_s) for t in test])
        cell.predictions[(fs, "profile")] = np.concatenate([t.profile_s for t in test])
        models = [ensembles[(fs, f.number)] for f in folds]
        cell.predictions[(fs, "attention")] = np.concatenate(
            [p["test"].profile_s * np.exp(mdl.predict(p["test"].x[:, :, cols])) for p, mdl in zip(parts, models)])
        cell.train_seconds[(fs, "attention")] = took / len(feature_sets)
        cell.models[fs] = models
        for model_name, trainer in TRAINERS.items():
            preds, spent = [], 0.0
            for fold, p in zip(folds, parts):
                t0 = time.perf_counter()
                model = trainer(s, fold, m, k, cols, settings, settings.seed + fold.number)
                took_fold = time.perf_counter() - t0
                spent += took_fold
                progress(f"m={m} k={k} {fs} {model_name} fold {fold.number}/{len(folds)} {took_fold:.1f}s")
                preds.append(p["test"].profile_s * np.exp(model.predict(p["test"].x[:, :, cols])))
            cell.predictions[(fs, model_name)] = np.concatenate(preds)
            cell.train_seconds[(fs, model_name)] = spent
    return cell


def run_grid(s: Series, folds: list[Fold], grid_cell: GridCell, index: dict[str, list[int]],
             settings: ForecastSettings,
             oracle: pd.Series | None, progress, notes: list[str]) -> tuple[list[CellResult], list[dict]]:
    """Every (m, k) cell with windows; a note for each cell without."""
    cells, rows = [], []
    for m in grid_cell.m:
        for k in grid_cell.k:
            cell = evaluate_cell(s, folds, m, k, index, settings, progress)
            if cell is None:
                notes.append(f"cell m={m} k={k} skipped: windows need runs of m + k = {m + k} steps or more "
                             f"(runs have {s.lengths.min()}-{s.lengths.max()})")
                continue
            cells.append(cell)
            rows += _cell_rows(cell, s, oracle)
    return cells, rows


def _cell_rows(cell: CellResult, s: Series, oracle: pd.Series | None) -> list[dict]:
    rows = []
    oracle_s = None
    if oracle is not None:
        key = pd.MultiIndex.from_arrays([s.run_ids[cell.run], cell.t_c, np.full(len(cell.run), cell.k)])
        oracle_s = oracle.reindex(key).to_numpy()
    for (fs, model), pred in cell.predictions.items():
        rows.append({"m": cell.m, "k": cell.k, "feature_set": fs, "model": model,
                     "mape": common.mape(cell.seconds, pred), "n_windows": len(pred),
                     "train_seconds": cell.train_seconds.get((fs, model), 0.0)})
    if oracle_s is not None:
        have = np.isfinite(oracle_s)
        for fs in dict.fromkeys(f for f, _ in cell.predictions):
            rows.append({"m": cell.m, "k": cell.k, "feature_set": fs, "model": "oracle",
                         "mape": common.mape(cell.seconds[have], oracle_s[have]) if have.any() else np.nan,
                         "n_windows": int(have.sum()), "train_seconds": 0.0})
    return rows


def mape_of(grid: pd.DataFrame, m, k, fs, model) -> float:
    sel = grid[(grid["m"] == m) & (grid["k"] == k) & (grid["feature_set"] == fs) & (grid["model"] == model)]
    return float(sel["mape"].iloc[0]) if len(sel) else float("nan")


def oracle_by_cell(grid: pd.DataFrame) -> dict[str, float]:
    o = grid[grid["model"] == "oracle"].drop_duplicates(["m", "k"])
    return {cell_key(r.m, r.k): r.mape for r in o.itertuples()}


def permutation_importance(s: Series, folds: list[Fold], cell: CellResult, fs: str, cols: list[int],
                           names: list[str], repeats: int, seed: int) -> pd.DataFrame:
    """Increase of the held-out MAPE when one feature is shuffled across windows (at all m
    positions together, so its whole history moves to another window)."""
    rng = np.random.default_rng(seed)
    tests = [Part.of(s, f, f.test, cell.m, cell.k) for f in folds]
    xs = [t.x[:, :, cols] for t in tests]
    models = cell.models[fs]

    def score(xs_):
        pred = np.concatenate([t.profile_s * np.exp(mdl.predict(x)) for t, mdl, x in zip(tests, models, xs_)])
        return common.mape(cell.seconds, pred)

    base = score(xs)
    rows = []
    for j, name in enumerate(names):
        increases = []
        for _ in range(repeats):
            shuffled = []
            for x in xs:
                x = x.copy()
                x[:, :, j] = x[rng.permutation(len(x)), :, j]
                shuffled.append(x)
            increases.append(score(shuffled) - base)
        rows.append({"feature": name, "mape_increase": float(np.mean(increases)),
                     "mape_increase_sd": float(np.std(increases)), "base_mape": base})
    return pd.DataFrame(rows).sort_values("mape_increase", ascending=False, ignore_index=True)


@dataclass
class Final:
    """Models of the best cell refitted on all runs, for MLflow."""

    attention: AttentionForecaster
    lightgbm: Boosted
    example: np.ndarray   # a few windows (relative deviations), float32
    feature_names: list[str]


@dataclass
class DatasetResult:
    """One dataset's forecast: its result record, and what MLflow logs beside it."""

    name: str
    frame: pd.DataFrame
    summary: ForecastDataset
    grid: pd.DataFrame
    out: Path
    final: Final | None = None
    params: dict = field(default_factory=dict)


def every_run(s: Series, settings: ForecastSettings) -> Fold:
    """One "fold" that trains on every run (validation runs still held back for early stopping),
    with the profile of all runs: what the final models and the long-run test fit on."""
    everything = np.arange(len(s.run_ids))
    fit, val = split_validation(everything, settings.val_fraction, settings.seed)
    profile = Profile.fit(s, everything)
    return Fold(0, fit, val, np.empty(0, int), profile, profile.deviations(s))


def fit_final(s: Series, m: int, k: int, cols: list[int], names: list[str], settings: ForecastSettings) -> Final:
    """The best cell's attention and LightGBM models refitted on every run (validation runs
    still held back for early stopping), with the profile of all runs."""
    fold = every_run(s, settings)
    att = fit_attention(s, fold, m, k, cols, settings, settings.seed)
    lgb = fit_lgbm(s, fold, m, k, cols, settings, settings.seed)
    example = Part.of(s, fold, fold.fit, m, k).x[:5][:, :, cols]
    return Final(att, lgb, example.astype(np.float32), names)


def long_series(data: dict, long_name: str, s: Series, settings: ForecastSettings) -> Series:
    """The long run(s) with the training series' features, the presence of the same neighbours
    (from the long run's own sacct) included."""
    users = [n[len(common.NEIGHBOUR_PREFIX):] for n in s.feature_names if n.startswith(common.NEIGHBOUR_PREFIX)]
    long_frame = common.neighbour_presence(common.step_frame(data, long_name), data, users,
                                           settings.neighbour_min_nodes)
    return series(long_frame, long_name, s.feature_names)


def long_run(data: dict, long_name: str, s: Series, cols: list[int], fs: str, settings: ForecastSettings,
             progress) -> tuple[dict, pd.DataFrame | None]:
    """Figure 12: train on every run of this dataset with (m, k) = (long_run_m, long_run_k) and
    forecast consecutive k-step segments of the long run, each from the m steps before it.
    Returns the summary and the table of segments (None when skipped)."""
    m, k = settings.long_run_m, settings.long_run_k
    if m + k > s.lengths.max():
        return {"dataset": long_name, "skipped": f"training runs have {s.lengths.max()} steps < m + k = {m + k}"}, None
    long_s = long_series(data, long_name, s, settings)
    fold = every_run(s, settings)
    profile = fold.profile
    t0 = time.perf_counter()
    model = fit_attention(s, fold, m, k, cols, settings, settings.seed)
    progress(f"long run {long_name} m={m} k={k} {fs} attention {time.perf_counter() - t0:.1f}s")
    dev = profile.deviations(long_s)
    w = Windows.of(long_s.lengths, np.arange(len(long_s.run_ids)), m, k, stride=k)
    x = w.inputs(dev)[:, :, cols]
    profile_s = profile.sums(w.t_c, k)
    table = pd.DataFrame({"run_id": long_s.run_ids[w.run], "first_step": w.t_c + 1, "last_step": w.t_c + k,
                          "actual_s": w.target_seconds(long_s.duration),
                          "predicted_s": profile_s * np.exp(model.predict(x)),
                          "persistence_s": persistence(w.inputs(dev), profile_s), "profile_s": profile_s})
    return {"dataset": long_name, "run_ids": sorted(set(table["run_id"])), "m": m, "k": k, "feature_set": fs,
            "segments": len(table), "mape": common.mape(table["actual_s"], table["predicted_s"]),
            "mape_persistence": common.mape(table["actual_s"], table["persistence_s"]),
            "mape_profile": common.mape(table["actual_s"], table["profile_s"])}, table
