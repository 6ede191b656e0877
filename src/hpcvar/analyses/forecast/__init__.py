"""Forecasting the time of the next k steps from the last m steps (Bhatele et al., Sections IV-C, V-C).

Per dataset (app x nodes x input) and per cell of a grid over the temporal context ``m`` and the
horizon ``k``, windows slide over every run: the inputs are the features of steps
``t_c-m+1..t_c`` and the target is the summed duration of steps ``t_c+1..t_c+k``. Features are
relative deviations from the per-step mean over the *training* runs (the step's own duration
deviation always first); the target is the ratio to that mean profile's sum over the k steps,
and errors (MAPE) are scored in seconds.

Cross-validation is by run (``GroupKFold``), the same folds for every cell, feature set and
model. Models: the paper's attention forecaster (:mod:`.attention`, which
corrects persistence; ``ensemble`` networks averaged per fold, each trained on every horizon
1..k) and baselines on the same windows:
persistence (the last m steps' mean ratio to the profile, applied to the next k steps' profile),
the mean profile itself, LightGBM
on the flattened window, and LightGBM fitted to the correction of persistence
(``lightgbm_residual``: the attention model's starting point, so it isolates the learner).
Feature sets follow the paper's cumulative ablation: job counters, + placement, + io, + sys. On
request, + neighbours: per step, how many jobs each of the dataset's most frequent large
neighbours had running (from sacct through the ``neighbourhood`` table), the observable side of
what the neighbourhood analysis blames.

Outputs per dataset in ``out_dir/<dataset>/``: ``grid.csv`` (one row per m, k, feature set and
model), ``importance.csv`` (permutation importance in the best cell), ``long_run.csv`` when a
long run exists, and SVG figures (MAPE heatmaps, importance bars, long-run forecast). Also
``out_dir/summary.json`` and MLflow runs (one parent per dataset, one nested run per cell).
When the simulator's oracle (``truth_oracle.parquet`` beside the ``truth`` given) is present,
its MAPE on the same windows is reported as model ``oracle``.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from hpcvar import tracking
from hpcvar.analyses import common
from hpcvar.data.rawlayout import TRUTH_ORACLE
from hpcvar.defaults import FORECAST_FEATURE_SETS, FORECAST_GRID, cell_key, feature_groups
from hpcvar.results import clean
from hpcvar.results import forecast as results
from hpcvar.util.cores import processes_for
from hpcvar.results._common import MLflowRuns
from hpcvar.results.forecast import (BestCell, ForecastDataset, ForecastFiles, ForecastParams, ForecastResult, GridRow,
                                     Importance, LongRun)
from hpcvar.settings import ForecastSettings

# The models (torch, Lightning, LightGBM: 14 s -> 5 s for a forecast job with nothing to do) are
# imported where a dataset is forecast, so that a campaign with nothing to forecast (microbenchmark
# rounds only, too few runs) does not pay for them: :func:`analyse`, :func:`torch_threads`.
if TYPE_CHECKING:
    from hpcvar.analyses.forecast.grid import DatasetResult


DEFAULT_GRID = FORECAST_GRID  # shared with the simulator's oracle (hpcvar.defaults)


#: The cumulative feature sets, each adding one group of common.FEATURE_SETS: the paper's ablation
#: (job counters, + placement, + io, + sys), then + neighbours, which is not in the default run.
FEATURE_SETS = FORECAST_FEATURE_SETS


PAPER_FEATURE_SETS = FEATURE_SETS[:4]


MODELS = results.MODELS


def feature_sets_of(frame: pd.DataFrame, wanted: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Columns of each cumulative feature set with data; notes for those skipped."""
    out, notes = {}, []
    for fs in wanted:
        cols, missing = [], []
        for group in feature_groups(fs):
            have = [c for c in common.feature_columns(frame, group) if frame[c].notna().any()]
            cols += have
            if not have:
                missing.append(group)
        if missing:
            notes.append(f"feature set {fs} skipped: no {'/'.join(missing)} data in this dataset")
        else:
            out[fs] = cols
    return out, notes


def with_neighbours(data: dict, name: str, frame: pd.DataFrame, settings: ForecastSettings) -> pd.DataFrame:
    """``frame`` with the presence of the dataset's most frequent large neighbours (feature set
    ``neighbours``; none without sacct)."""
    if not any("neighbours" in feature_groups(fs) for fs in settings.feature_sets):
        return frame
    users = common.frequent_neighbours(data, name, settings.neighbour_min_nodes, settings.neighbour_users)
    return common.neighbour_presence(frame, data, users, settings.neighbour_min_nodes)


def analyse(data: dict, name: str, settings: ForecastSettings, oracle: pd.Series | None, out: Path,
            long_name: str | None) -> DatasetResult:
    """The whole grid, importance, final models and (when ``long_name``) the long-run test."""
    from hpcvar.analyses.forecast import outputs
    from hpcvar.analyses.forecast.grid import (DatasetResult, fit_final, long_run, mape_of, oracle_by_cell,
                                               permutation_importance, run_grid)
    from hpcvar.analyses.forecast.windows import make_folds, series

    frame = with_neighbours(data, name, common.step_frame(data, name), settings)
    app = data["runs"].loc[data["runs"]["dataset"] == name, "app"].iloc[0]
    notes: list[str] = []
    grid_cell = settings.grid.get(app)
    if grid_cell is None:
        return _skipped(name, frame, out, f"no forecasting grid for app {app!r} (config['grid'])")
    fsets, fs_notes = feature_sets_of(frame, settings.feature_sets)
    notes += fs_notes
    if not fsets:
        return _skipped(name, frame, out, "no feature set has data", notes)
    columns = list(dict.fromkeys(c for cols in fsets.values() for c in cols))
    s = series(frame, name, columns)
    names = ["duration"] + columns
    index = {fs: [0] + [1 + columns.index(c) for c in cols] for fs, cols in fsets.items()}
    folds = make_folds(s, settings.folds, settings.val_fraction, settings.seed)
    progress = lambda msg: print(f"forecast: {name} {msg}", file=sys.stderr, flush=True)  # noqa: E731
    cells, rows = run_grid(s, folds, grid_cell, index, settings, oracle, progress, notes)
    if not cells:
        return _skipped(name, frame, out, "no cell of the grid has windows", notes)
    grid = pd.DataFrame(rows)
    att = grid[grid["model"] == "attention"].sort_values(["mape", "m", "k"])
    best_row = att.iloc[0]
    best = next(c for c in cells if (c.m, c.k) == (best_row["m"], best_row["k"]))
    fs_best = best_row["feature_set"]
    importance = permutation_importance(s, folds, best, fs_best, index[fs_best], [names[i] for i in index[fs_best]],
                                        settings.importance_repeats, settings.seed)
    final = fit_final(s, best.m, best.k, index[fs_best], [names[i] for i in index[fs_best]], settings)
    out.mkdir(parents=True, exist_ok=True)
    files = outputs.write_tables_figures(name, grid, importance, out)
    summary = ForecastDataset(
        app=app, runs=len(s.run_ids), steps=int(s.lengths.max()), folds=len(folds), feature_sets=list(fsets),
        grid=[GridRow(**r) for r in clean(grid.to_dict("records"))],
        best=BestCell(m=best.m, k=best.k, feature_set=fs_best,
                      **clean({f"mape_{mdl}": mape_of(grid, best.m, best.k, fs_best, mdl)
                               for mdl in (*MODELS, "oracle") if mdl != "oracle" or oracle is not None})),
        oracle_mape=clean(oracle_by_cell(grid)) if oracle is not None else None,
        importance=[Importance(**r) for r in clean(importance.to_dict("records"))],
        long_run=None, notes=notes)
    if long_name is not None:
        found, table = long_run(data, long_name, s, index[fs_best], fs_best, settings, progress)
        summary.long_run = LongRun(**clean(found))
        if table is not None:
            files.update(outputs.write_long_run(table, long_name, settings.long_run_m, settings.long_run_k, out))
    summary.files = ForecastFiles(**files)
    return DatasetResult(name, frame, summary, grid, out, final,
                         params={"feature_sets": ",".join(fsets), "runs": len(s.run_ids)})


def _skipped(name, frame, out, why, notes=()) -> DatasetResult:
    from hpcvar.analyses.forecast.grid import DatasetResult

    return DatasetResult(name, frame, ForecastDataset(skipped=why, notes=[*notes, why]), pd.DataFrame(), out)


def plan(runs: pd.DataFrame, settings: ForecastSettings) -> tuple[list[str], dict[str, str], list[str]]:
    """Datasets to analyse, long-run datasets by the regular dataset that trains for them, notes."""
    notes = []
    per = runs.groupby("dataset").agg(app=("app", "first"), nodes=("num_nodes", "first"),
                                      n=("run_id", "size"), steps=("num_steps", "max"))
    long_cfg = settings.long_run
    if long_cfg:
        longs = [long_cfg.dataset] if long_cfg.dataset in per.index else []
        if not longs:
            notes.append(f"long_run dataset {long_cfg.dataset!r} not in the dataset")
    else:
        longs = list(per.index[per["steps"] >= settings.long_run_min_steps])
    pairs = {}
    for name in longs:
        app, nodes = per.loc[name, ["app", "nodes"]]
        regular = [d for d in per.index if d not in longs and per.loc[d, "app"] == app and per.loc[d, "nodes"] == nodes]
        train = (long_cfg.train if long_cfg else None) or next(iter(regular), None)
        if train is None or train not in per.index:
            notes.append(f"long run {name}: no regular {app} dataset on {nodes} nodes to train on")
        else:
            pairs[train] = name
    wanted = settings.datasets or list(per.index)
    names = []
    for name in wanted:
        if name not in per.index:
            notes.append(f"{name}: not in the dataset")
        elif name in longs:
            notes.append(f"{name}: long-run test data, forecast with a model trained on {_key_of(pairs, name)}")
        elif per.loc[name, "steps"] == 0:
            notes.append(f"{name}: no time steps (microbenchmark runs), nothing to forecast")
        elif per.loc[name, "n"] < 2:
            notes.append(f"{name}: {per.loc[name, 'n']} run; cross-validation by run needs at least 2")
        else:
            names.append(name)
    return names, pairs, notes


def _key_of(pairs: dict, value: str):
    return next((k for k, v in pairs.items() if v == value), None)


def load_oracle(truth: str | Path | None) -> tuple[pd.Series | None, dict | None]:
    """The simulator's oracle k-step sums indexed by (run_id, t_c, k), and truth.json."""
    if not truth:
        return None, None
    truth = Path(truth)
    doc = json.loads(truth.read_text()) if truth.exists() else None
    path = truth.with_name(TRUTH_ORACLE)
    if not path.exists():
        return None, doc
    o = pd.read_parquet(path, columns=["run_id", "t_c", "k", "oracle_s"])
    return o.set_index(["run_id", "t_c", "k"])["oracle_s"], doc


@contextmanager
def torch_threads(n: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def analyse_all(data: dict, names: list[str], pairs: dict[str, str], settings: ForecastSettings,
                oracle: pd.Series | None, out_dir: Path,
                done: Callable[[str, DatasetResult], None] | None = None) -> dict[str, DatasetResult]:
    """:func:`analyse` of every dataset, spread over ``settings.workers`` processes
    (:func:`processes_for`; each gets its dataset's rows only, and forecasts it exactly as one
    process alone would); in ``names``' order. ``done(name, result)`` is called in this process
    as each dataset's result arrives, while the others are still being computed (the forecaster
    logs each to MLflow then)."""
    done = done or (lambda name, result: None)
    if not names:
        return {}
    workers = processes_for(settings.workers, len(names))
    if workers == 1:
        results = {}
        with torch_threads(settings.threads):
            for name in names:
                results[name] = analyse(data, name, settings, oracle, out_dir / name, pairs.get(name))
                done(name, results[name])
        return results
    # The largest datasets first, so that the last one to finish is a small one.
    size = data["runs"].groupby("dataset")["num_steps"].sum()
    order = sorted(names, key=lambda n: -size.get(n, 0))
    print(f"forecast: {len(names)} datasets over {workers} processes", file=sys.stderr, flush=True)
    # What a worker needs to forecast (torch, Lightning, LightGBM), imported once here before the
    # workers fork: they inherit it instead of each importing it again.
    import lightgbm  # noqa: F401

    from hpcvar.analyses.forecast import grid, outputs  # noqa: F401
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {}
        for name in order:
            mine = [name, *([pairs[name]] if name in pairs else [])]
            part = common.subset(data, mine)
            ids = set(part["runs"]["run_id"])
            part_oracle = oracle[oracle.index.get_level_values(0).isin(ids)] if oracle is not None else None
            futures[pool.submit(_analyse_in_worker, part, name, settings, part_oracle, out_dir / name,
                                pairs.get(name))] = name
        results = {}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done(futures[future], results[futures[future]])
        return {name: results[name] for name in names}


def _analyse_in_worker(data, name, settings, oracle, out, long_name) -> DatasetResult:
    with torch_threads(settings.threads):
        return analyse(data, name, settings, oracle, out, long_name)


def run(dataset_dir: str | Path, out_dir: str | Path, config: ForecastSettings | dict | None = None,
        truth: str | Path | None = None, only: str | None = None) -> ForecastResult:
    """Forecast every dataset of ``dataset_dir``; writes ``out_dir/summary.json`` and returns it.
    ``truth``: the simulator's truth.json (an input, not a setting), whose oracle's error
    (``truth_oracle.parquet`` beside it) is reported beside the models'."""
    settings = ForecastSettings.from_mapping(config)
    dataset_dir, out_dir = Path(dataset_dir), Path(out_dir)
    data = common.load(dataset_dir, tables=("runs", "steps", "step_counters", "system_counters", "neighbourhood"))
    oracle, truth_doc = load_oracle(truth)
    names, pairs, notes = plan(data["runs"], settings)
    notes += [f"long run {long}: {train} is not analysed, so it was not forecast"
              for train, long in pairs.items() if train not in names]
    if truth and oracle is None:
        notes.append(f"no oracle: {Path(truth).with_name(TRUTH_ORACLE)} not found")
    # One dataset's part (with its long run, if it trains one): the notes stay the campaign's.
    names = [n for n in names if only is None or n == only]
    grid = {app: cell.as_dict() for app, cell in settings.grid.items()}
    params = {"grid": json.dumps({a: grid[a] for a in sorted(grid)}), "folds": settings.folds,
              "max_epochs": settings.max_epochs, "patience": settings.patience, "seed": settings.seed,
              "hidden": settings.hidden, "lr": settings.lr, "val_fraction": settings.val_fraction,
              "ensemble": settings.ensemble,
              "long_run": cell_key(settings.long_run_m, settings.long_run_k)}

    def log(name: str, res: DatasetResult) -> None:
        # Each dataset is logged as soon as it is computed, while the other processes still
        # compute theirs; the store's lock is held only while logging (other analyses wait on it).
        from hpcvar.analyses.forecast import outputs

        with tracking.session("forecast", dataset_dir) as experiment:
            res.summary.mlflow = outputs.log_dataset(res, experiment, dataset_dir, params)

    logged: list[DatasetResult] = []
    try:
        results = analyse_all(data, names, pairs, settings, oracle, out_dir,
                              done=lambda name, res: (log(name, res), logged.append(res)))
    except BaseException:
        # A dataset failed: the runs of those already logged go (MLflow's deleted state), so that
        # the store holds what a finished job logged and a re-run does not log them twice.
        with tracking.session("forecast", dataset_dir):
            tracking.delete_runs([res.summary.mlflow.run_id for res in logged])
        raise
    with tracking.session("forecast", dataset_dir) as experiment_id:
        pass  # the experiment's id (created here when there was nothing to log)
    for name, res in results.items():
        if truth_doc is not None and name in truth_doc.get("datasets", {}):
            res.summary.oracle_mape_truth = clean(truth_doc["datasets"][name].get("oracle_mape"))
    uri = tracking.tracking_uri(dataset_dir)
    summary = ForecastResult(
        params=ForecastParams(**{**params, "feature_sets": settings.feature_sets, "grid": grid}), tracking_uri=uri,
        mlflow=MLflowRuns(tracking_uri=uri, experiment_id=experiment_id,
                          runs={n: r.summary.mlflow.run_id for n, r in results.items()}),
        datasets={name: res.summary for name, res in results.items()}, notes=notes)
    summary.write(out_dir, only)
    return summary
