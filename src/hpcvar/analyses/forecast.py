"""Forecasting the time of the next k steps from the last m steps (Bhatele et al., Sections IV-C, V-C).

Per dataset (app x nodes x input) and per cell of a grid over the temporal context ``m`` and the
horizon ``k``, windows slide over every run: the inputs are the features of steps
``t_c-m+1..t_c`` and the target is the summed duration of steps ``t_c+1..t_c+k``. Features are
relative deviations from the per-step mean over the *training* runs (the step's own duration
deviation always first); the target is the ratio to that mean profile's sum over the k steps,
and errors (MAPE) are scored in seconds.

Cross-validation is by run (``GroupKFold``), the same folds for every cell, feature set and
model. Models: the paper's attention forecaster (:mod:`hpcvar.analyses.attention`, which
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
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import GroupKFold

from hpcvar import tracking
from hpcvar.analyses import attention, common
from hpcvar.defaults import FORECAST_FEATURE_SETS, FORECAST_GRID
from hpcvar.results import forecast as results
from hpcvar.results.forecast import ForecastResult
from hpcvar.settings import ForecastSettings, GridCell

DEFAULT_GRID = FORECAST_GRID  # shared with the simulator's oracle (hpcvar.defaults)
#: The cumulative feature sets, each adding one group of common.FEATURE_SETS: the paper's ablation
#: (job counters, + placement, + io, + sys), then + neighbours, which is not in the default run.
FEATURE_SETS = FORECAST_FEATURE_SETS
PAPER_FEATURE_SETS = FEATURE_SETS[:4]
MODELS = results.MODELS
TORCH_REQUIREMENT = f"torch=={torch.__version__.split('+')[0]}"


# --- the data as arrays -----------------------------------------------------------------------

@dataclass
class Series:
    """One dataset's runs as arrays: row = run, column = step (NaN past a run's last step)."""

    name: str
    run_ids: np.ndarray          # (N,)
    duration: np.ndarray         # (N, T) seconds
    features: np.ndarray         # (N, T, F) raw feature values
    feature_names: list[str]
    lengths: np.ndarray          # (N,) steps recorded per run

    @property
    def steps(self) -> int:
        return self.duration.shape[1]

    @property
    def rates(self) -> np.ndarray:
        """(F,) True for system-wide counters (LDMS ``io_``/``sys_`` scopes), which are compared
        as per-second rates rather than per step (see :meth:`Profile.deviations`)."""
        return np.array([n.startswith(SYSTEM_PREFIXES) for n in self.feature_names], dtype=bool)

    @property
    def counts(self) -> np.ndarray:
        """(F,) True for neighbour-presence columns (jobs running), used as they are."""
        return np.array([n.startswith(common.NEIGHBOUR_PREFIX) for n in self.feature_names], dtype=bool)


#: Feature-name prefixes of system-wide counters (common.step_frame's LDMS scopes).
SYSTEM_PREFIXES = ("io_", "sys_")


def series(frame: pd.DataFrame, name: str, columns: list[str]) -> Series:
    """Arrays from a :func:`common.step_frame` (steps are 1-based)."""
    run_ids = frame["run_id"].drop_duplicates().to_numpy()
    row = pd.Series(np.arange(len(run_ids)), index=run_ids)[frame["run_id"]].to_numpy()
    col = frame["step"].to_numpy().astype(int) - 1
    steps = int(col.max()) + 1
    duration = np.full((len(run_ids), steps), np.nan)
    duration[row, col] = frame["duration_s"].to_numpy(float)
    features = np.full((len(run_ids), steps, len(columns)), np.nan)
    features[row, col] = frame[columns].to_numpy(float)
    lengths = frame.groupby("run_id", sort=False)["step"].max().reindex(run_ids).to_numpy().astype(int)
    return Series(name, run_ids, duration, features, list(columns), lengths)


@dataclass
class Profile:
    """Per-step means over the training runs (the paper's mean trend), for durations and features.

    Steps beyond the training runs' length (a long run) take the mean over the last half of the
    trained steps: the steady state, past any warm-up.

    System-wide counters (``Series.rates``) do not follow our application's steps: what an I/O
    router carries at step 12 has nothing to do with step 12. Their per-step means over a few
    dozen runs are mostly noise (one busy file system during one run moves a step's mean), and
    their per-step change grows with the step's length. They are compared as per-second rates
    with one mean rate over every step of the training runs (``rate``)."""

    duration: np.ndarray   # (T,)
    features: np.ndarray   # (T, F)
    rate: np.ndarray | None = None  # (F,) mean per-second rate of system-wide counters, NaN for the others

    @classmethod
    def fit(cls, s: Series, train: np.ndarray) -> "Profile":
        """Means at each step the training runs reached (longer held-out runs get the extension)."""
        reach = int(s.lengths[train].max())
        rate = np.full(len(s.feature_names), np.nan)
        with _all_nan_ok(), np.errstate(invalid="ignore", divide="ignore"):
            if s.rates.any():
                per_s = s.features[train, :reach][..., s.rates] / s.duration[train, :reach, None]
                rate[s.rates] = np.nanmean(per_s.reshape(-1, int(s.rates.sum())), axis=0)
            return cls(np.nanmean(s.duration[train, :reach], axis=0), np.nanmean(s.features[train, :reach], axis=0),
                       rate)

    def extended(self, steps: int) -> "Profile":
        have = len(self.duration)
        if steps <= have:
            return self
        tail = slice(have // 2, have)
        with _all_nan_ok():
            d = np.nanmean(self.duration[tail])
            f = np.nanmean(self.features[tail], axis=0)
        return Profile(np.concatenate([self.duration, np.full(steps - have, d)]),
                       np.concatenate([self.features, np.tile(f, (steps - have, 1))]), self.rate)

    def deviations(self, s: Series) -> np.ndarray:
        """(N, T, 1 + F): relative deviation of duration and each feature from this profile
        (system-wide counters: of their per-second rate from the mean rate). Neighbour
        presence (``Series.counts``) is a count of jobs, 0 when nobody is there: kept as it is.

        A zero mean or a missing value gives 0 (no information: as at the mean)."""
        p = self.extended(s.steps)
        mean = np.concatenate([p.duration[:s.steps, None], p.features[:s.steps]], axis=1)
        values = np.concatenate([s.duration[..., None], s.features], axis=2)
        rates = np.concatenate([[False], s.rates])
        with np.errstate(invalid="ignore", divide="ignore"):
            if rates.any() and p.rate is not None:
                values[..., rates] /= s.duration[..., None]
                mean[:, rates] = p.rate[s.rates]
            dev = (values - mean) / np.where(mean == 0, np.nan, mean)
        counts = np.concatenate([[False], s.counts])
        dev[..., counts] = values[..., counts]
        return np.nan_to_num(dev, nan=0.0, posinf=0.0, neginf=0.0)

    def sums(self, t_c: np.ndarray, k: int) -> np.ndarray:
        """The profile's seconds over steps t_c+1..t_c+k."""
        cum = np.concatenate([[0.0], np.cumsum(self.extended(int(t_c.max()) + k).duration)])
        return cum[t_c + k] - cum[t_c]


@contextmanager
def _all_nan_ok():
    """nanmean of an all-NaN column is NaN by design here (a counter no run recorded)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Mean of empty slice", RuntimeWarning)
        yield


@dataclass
class Windows:
    """Sliding windows of one (m, k) cell: run index and t_c (steps observed) per window."""

    m: int
    k: int
    run: np.ndarray
    t_c: np.ndarray

    @classmethod
    def of(cls, lengths: np.ndarray, runs: np.ndarray, m: int, k: int, stride: int = 1) -> "Windows":
        run, t_c = [], []
        for r in runs:
            tcs = np.arange(m, lengths[r] - k + 1, stride)
            run.append(np.full(len(tcs), r))
            t_c.append(tcs)
        return cls(m, k, np.concatenate(run).astype(int) if run else np.empty(0, int),
                   np.concatenate(t_c).astype(int) if t_c else np.empty(0, int))

    def __len__(self) -> int:
        return len(self.run)

    def inputs(self, dev: np.ndarray) -> np.ndarray:
        """(n, m, F): deviations of steps t_c-m+1..t_c (0-based rows t_c-m..t_c-1)."""
        return dev[self.run[:, None], self.t_c[:, None] - self.m + np.arange(self.m)]

    def target_seconds(self, duration: np.ndarray) -> np.ndarray:
        cum = np.concatenate([np.zeros((len(duration), 1)), np.nancumsum(duration, axis=1)], axis=1)
        return cum[self.run, self.t_c + self.k] - cum[self.run, self.t_c]


# --- models -------------------------------------------------------------------------------------

def persistence(x: np.ndarray, profile_sum: np.ndarray) -> np.ndarray:
    """The next k steps' profile time, scaled by the last m steps' mean ratio to their profile."""
    return profile_sum * np.mean(1.0 + x[:, :, 0], axis=1)


def persistence_log_ratio(x: np.ndarray) -> np.ndarray:
    """log of the window's mean duration ratio to its profile (as attention.persistence_log_ratio)."""
    return np.log(np.clip(1.0 + x[:, :, 0], 1e-3, None).mean(axis=1))


class Boosted:
    """LightGBM on the flattened window (all m steps x features) -> log-ratio.

    With ``residual`` it fits the correction to persistence's log-ratio (``init_score``), the
    attention model's own starting point, so the two learners start level. ``model`` is the
    booster alone: it predicts the log-ratio, or with ``residual`` the correction."""

    def __init__(self, settings: ForecastSettings, seed: int, residual: bool):
        import lightgbm

        self.model = lightgbm.LGBMRegressor(**settings.lgbm.as_dict(), random_state=seed, n_jobs=settings.threads,
                                            verbose=-1)
        self.early_stopping = settings.lgbm_early_stopping
        self.residual = residual

    def _base(self, x: np.ndarray) -> np.ndarray:
        return persistence_log_ratio(x) if self.residual else np.zeros(len(x))

    def fit(self, x, y, x_val, y_val) -> "Boosted":
        import lightgbm

        if x_val is not None and len(x_val):
            self.model.fit(_flat(x), y, init_score=self._base(x), eval_X=(_flat(x_val),), eval_y=(y_val,),
                           eval_init_score=[self._base(x_val)], eval_metric="l1",
                           callbacks=[lightgbm.early_stopping(self.early_stopping, verbose=False)])
        else:
            self.model.fit(_flat(x), y, init_score=self._base(x))
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self._base(x) + self.model.predict(_flat(x))


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(len(x), -1)


def _fit_val(s: "Series", fold: "Fold", m: int, k: int, cols: list[int], fit: np.ndarray, val: np.ndarray):
    """Inputs and log-ratio targets of the fit and validation runs' windows."""
    pf, pv = Part.of(s, fold, fit, m, k), Part.of(s, fold, val, m, k)
    return pf.x[:, :, cols], pf.log_ratio, pv.x[:, :, cols], pv.log_ratio


def horizon_targets(s: "Series", fold: "Fold", runs: np.ndarray, m: int, k: int) -> np.ndarray:
    """(n, k) log-ratios of steps t_c+1..t_c+j to their profile, j = 1..k, for the windows of
    ``runs`` (column k-1 is the forecast's own target)."""
    w = Windows.of(s.lengths, runs, m, k)
    if not len(w):
        return np.empty((0, k))
    return np.column_stack([np.log(Windows(m, j, w.run, w.t_c).target_seconds(s.duration)
                                   / fold.profile.sums(w.t_c, j)) for j in range(1, k + 1)])


def fit_lgbm(s, fold, m, k, cols, settings: ForecastSettings, seed: int) -> Boosted:
    return Boosted(settings, seed, residual=False).fit(*_fit_val(s, fold, m, k, cols, fold.fit, fold.val))


def fit_lgbm_residual(s, fold, m, k, cols, settings: ForecastSettings, seed: int) -> Boosted:
    return Boosted(settings, seed, residual=True).fit(*_fit_val(s, fold, m, k, cols, fold.fit, fold.val))


def fit_attention(s, fold, m, k, cols, settings: ForecastSettings, seed: int) -> attention.Ensemble:
    """``settings.ensemble`` attention models averaged (a deep ensemble). With a few dozen to a few
    hundred training runs, one network's forecast depends noticeably on its initialisation and on
    which runs early stopping watched; averaging members that differ in both removes that part of
    the error. The first member watches the fold's validation runs, each other one its own draw.

    With ``settings.all_horizons`` each member learns every horizon 1..k at once (the log-ratios of
    steps t_c+1..t_c+j, :func:`horizon_targets`) and forecasts the k-th: the short horizons show
    how fast a slow stretch fades (the congestion's AR(1) part within a few steps, I/O traffic
    over many), which the k-step sum alone blurs. Early stopping and the kept weights still
    watch the k-step forecast. Measured on 150-day MILC campaigns (cell m=10, k=20, three
    dataset/seed pairs): 1.3%, 1.2% and 2.8% lower MAPE than the k-step target alone, at the
    same cost."""
    members = []
    for i in range(settings.ensemble):
        fit, val = ((fold.fit, fold.val) if i == 0
                    else split_validation(fold.train, settings.val_fraction, seed + 7919 * i))
        x, y, x_val, y_val = _fit_val(s, fold, m, k, cols, fit, val)
        if settings.all_horizons and k > 1:
            y, y_val = horizon_targets(s, fold, fit, m, k), horizon_targets(s, fold, val, m, k)
        members.append(attention.fit(x, y, x_val, y_val, seed=seed + 104729 * i,
                                     hidden=settings.hidden, lr=settings.lr, weight_decay=settings.weight_decay,
                                     max_epochs=settings.max_epochs, patience=settings.patience,
                                     batch_size=settings.batch_size))
    return attention.Ensemble(members)


TRAINERS = {"attention": fit_attention, "lightgbm": fit_lgbm, "lightgbm_residual": fit_lgbm_residual}


# --- cross-validation -----------------------------------------------------------------------------

@dataclass
class Fold:
    """One cross-validation split by run, with the profile of its training runs only."""

    number: int
    fit: np.ndarray        # runs the models are fitted on
    val: np.ndarray        # training runs held back for early stopping
    test: np.ndarray       # held-out runs
    profile: Profile       # per-step means over fit + val runs
    dev: np.ndarray        # every run's deviations from that profile (N, T, 1 + F)

    @property
    def train(self) -> np.ndarray:
        return np.sort(np.concatenate([self.fit, self.val]))


def make_folds(s: Series, folds: int, val_fraction: float, seed: int) -> list[Fold]:
    n = len(s.run_ids)
    splits = GroupKFold(n_splits=min(folds, n)).split(np.zeros(n), groups=s.run_ids)
    out = []
    for i, (train, test) in enumerate(splits):
        fit, val = split_validation(train, val_fraction, seed + i)
        profile = Profile.fit(s, train)
        out.append(Fold(i + 1, fit, val, test, profile, profile.deviations(s)))
    return out


def split_validation(train: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hold back whole runs for early stopping; with fewer than 3 runs there is nothing to spare."""
    n_val = int(round(fraction * len(train)))
    if len(train) < 3 or n_val == 0:
        return np.sort(train), np.empty(0, int)
    val = np.random.default_rng(seed).choice(train, size=n_val, replace=False)
    return np.sort(np.setdiff1d(train, val)), np.sort(val)


@dataclass
class Part:
    """Windows of one set of runs in a fold: inputs, target seconds, the profile's seconds."""

    windows: Windows
    x: np.ndarray
    seconds: np.ndarray
    profile_s: np.ndarray

    @classmethod
    def of(cls, s: Series, fold: Fold, runs: np.ndarray, m: int, k: int) -> "Part":
        w = Windows.of(s.lengths, runs, m, k)
        if not len(w):
            return cls(w, np.empty((0, m, fold.dev.shape[2])), np.empty(0), np.empty(0))
        return cls(w, w.inputs(fold.dev), w.target_seconds(s.duration), fold.profile.sums(w.t_c, k))

    @property
    def log_ratio(self) -> np.ndarray:
        return np.log(self.seconds / self.profile_s)


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
    for fs, cols in feature_sets.items():
        cell.predictions[(fs, "persistence")] = np.concatenate([persistence(t.x, t.profile_s) for t in test])
        cell.predictions[(fs, "profile")] = np.concatenate([t.profile_s for t in test])
        for model_name, trainer in TRAINERS.items():
            preds, spent, models = [], 0.0, []
            for fold, p in zip(folds, parts):
                t0 = time.perf_counter()
                model = trainer(s, fold, m, k, cols, settings, settings.seed + fold.number)
                took = time.perf_counter() - t0
                spent += took
                progress(f"m={m} k={k} {fs} {model_name} fold {fold.number}/{len(folds)} {took:.1f}s")
                preds.append(p["test"].profile_s * np.exp(model.predict(p["test"].x[:, :, cols])))
                models.append(model)
            cell.predictions[(fs, model_name)] = np.concatenate(preds)
            cell.train_seconds[(fs, model_name)] = spent
            if model_name == "attention":
                cell.models[fs] = models
    return cell


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


# --- one dataset ------------------------------------------------------------------------------------

@dataclass
class Final:
    """Models of the best cell refitted on all runs, for MLflow."""

    attention: attention.AttentionForecaster
    lightgbm: Boosted
    example: np.ndarray   # a few windows (relative deviations), float32
    feature_names: list[str]


@dataclass
class DatasetResult:
    name: str
    frame: pd.DataFrame
    summary: dict
    grid: pd.DataFrame
    out: Path
    final: Final | None = None
    params: dict = field(default_factory=dict)


def feature_sets_of(frame: pd.DataFrame, wanted: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Columns of each cumulative feature set with data; notes for those skipped."""
    out, notes = {}, []
    for fs in wanted:
        cols, missing = [], []
        for group in fs.split("+"):
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
    if "neighbours" not in "+".join(settings.feature_sets):
        return frame
    users = common.frequent_neighbours(data, name, settings.neighbour_min_nodes, settings.neighbour_users)
    return common.neighbour_presence(frame, data, users, settings.neighbour_min_nodes)


def analyse(data: dict, name: str, settings: ForecastSettings, oracle: pd.Series | None, out: Path,
            long_name: str | None) -> DatasetResult:
    """The whole grid, importance, final models and (when ``long_name``) the long-run test."""
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
    files = write_tables_figures(name, grid, importance, out)
    summary = {
        "app": app, "runs": len(s.run_ids), "steps": int(s.lengths.max()), "folds": len(folds),
        "feature_sets": list(fsets), "grid": grid.to_dict("records"),
        "best": {"m": best.m, "k": best.k, "feature_set": fs_best,
                 **{f"mape_{mdl}": _mape_of(grid, best.m, best.k, fs_best, mdl)
                    for mdl in (*MODELS, "oracle") if mdl != "oracle" or oracle is not None}},
        "oracle_mape": _oracle_by_cell(grid) if oracle is not None else None,
        "importance": importance.to_dict("records"),
        "long_run": None, "notes": notes, "files": files,
    }
    if long_name is not None:
        summary["long_run"] = long_run(data, long_name, s, index[fs_best], fs_best, settings, out, progress)
        if "mape" in summary["long_run"]:
            summary["files"].update({"long_run_table": "long_run.csv", "long_run_figure": "long_run.svg"})
    return DatasetResult(name, frame, summary, grid, out, final,
                         params={"feature_sets": ",".join(fsets), "runs": len(s.run_ids)})


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


def _skipped(name, frame, out, why, notes=()) -> DatasetResult:
    return DatasetResult(name, frame, {"skipped": why, "notes": [*notes, why]}, pd.DataFrame(), out)


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


def _mape_of(grid: pd.DataFrame, m, k, fs, model) -> float:
    sel = grid[(grid["m"] == m) & (grid["k"] == k) & (grid["feature_set"] == fs) & (grid["model"] == model)]
    return float(sel["mape"].iloc[0]) if len(sel) else float("nan")


def _oracle_by_cell(grid: pd.DataFrame) -> dict[str, float]:
    o = grid[grid["model"] == "oracle"].drop_duplicates(["m", "k"])
    return {f"m={r.m},k={r.k}": r.mape for r in o.itertuples()}


def fit_final(s: Series, m: int, k: int, cols: list[int], names: list[str], settings: ForecastSettings) -> Final:
    """The best cell's attention and LightGBM models refitted on every run (validation runs
    still held back for early stopping), with the profile of all runs."""
    everything = np.arange(len(s.run_ids))
    fit, val = split_validation(everything, settings.val_fraction, settings.seed)
    profile = Profile.fit(s, everything)
    fold = Fold(0, fit, val, np.empty(0, int), profile, profile.deviations(s))
    att = fit_attention(s, fold, m, k, cols, settings, settings.seed)
    lgb = fit_lgbm(s, fold, m, k, cols, settings, settings.seed)
    example = Part.of(s, fold, fit, m, k).x[:5][:, :, cols]
    return Final(att, lgb, example.astype(np.float32), names)


def long_series(data: dict, long_name: str, s: Series, settings: ForecastSettings) -> Series:
    """The long run(s) with the training series' features, the presence of the same neighbours
    (from the long run's own sacct) included."""
    users = [n[len(common.NEIGHBOUR_PREFIX):] for n in s.feature_names if n.startswith(common.NEIGHBOUR_PREFIX)]
    long_frame = common.neighbour_presence(common.step_frame(data, long_name), data, users,
                                           settings.neighbour_min_nodes)
    return series(long_frame, long_name, s.feature_names)


def long_run(data: dict, long_name: str, s: Series, cols: list[int], fs: str, settings: ForecastSettings, out: Path,
             progress) -> dict:
    """Figure 12: train on every run of this dataset with (m, k) = (long_run_m, long_run_k) and
    forecast consecutive k-step segments of the long run, each from the m steps before it."""
    m, k = settings.long_run_m, settings.long_run_k
    if m + k > s.lengths.max():
        return {"dataset": long_name, "skipped": f"training runs have {s.lengths.max()} steps < m + k = {m + k}"}
    long_s = long_series(data, long_name, s, settings)
    everything = np.arange(len(s.run_ids))
    fit, val = split_validation(everything, settings.val_fraction, settings.seed)
    profile = Profile.fit(s, everything)
    fold = Fold(0, fit, val, np.empty(0, int), profile, profile.deviations(s))
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
    table.to_csv(out / "long_run.csv", index=False)
    plot_long_run(table, long_name, m, k, out / "long_run.svg")
    return {"dataset": long_name, "run_ids": sorted(set(table["run_id"])), "m": m, "k": k, "feature_set": fs,
            "segments": len(table), "mape": common.mape(table["actual_s"], table["predicted_s"]),
            "mape_persistence": common.mape(table["actual_s"], table["persistence_s"]),
            "mape_profile": common.mape(table["actual_s"], table["profile_s"])}


# --- tables and figures ---------------------------------------------------------------------------

def write_tables_figures(name: str, grid: pd.DataFrame, importance: pd.DataFrame, out: Path) -> dict:
    grid.to_csv(out / "grid.csv", index=False)
    importance.to_csv(out / "importance.csv", index=False)
    plot_grid(grid, name, out / "mape_grid.svg")
    plot_importance(importance, name, out / "importance.svg")
    return {"grid_table": "grid.csv", "importance_table": "importance.csv", "grid_figure": "mape_grid.svg",
            "importance_figure": "importance.svg"}


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


# --- MLflow ------------------------------------------------------------------------------------------

def log_dataset(res: DatasetResult, experiment_id: str, dataset_dir: Path, params: dict) -> dict:
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
        if "skipped" in s:
            mlflow.set_tag("hpcvar.skipped", s["skipped"])
            return {"experiment_id": experiment_id, "run_id": parent.info.run_id}
        for (m, k, fs), cell in res.grid.groupby(["m", "k", "feature_set"], sort=False):
            with mlflow.start_run(run_name=f"{res.name} m={m} k={k} {fs}", nested=True,
                                  tags={"hpcvar.dataset": res.name}):
                mlflow.log_params({"m": m, "k": k, "feature_set": fs})
                mlflow.log_metrics({**{f"mape_{r.model}": r.mape for r in cell.itertuples() if np.isfinite(r.mape)},
                                    "train_seconds": float(cell["train_seconds"].sum()),
                                    "n_windows": float(cell["n_windows"].max())})
        metrics = {"best_mape_attention": s["best"]["mape_attention"]}
        if s["long_run"] and "mape" in s["long_run"]:
            metrics["long_run_mape"] = s["long_run"]["mape"]
        mlflow.log_metrics(metrics)
        mlflow.set_tags({"hpcvar.best_cell": f"m={s['best']['m']},k={s['best']['k']},{s['best']['feature_set']}"})
        f = res.final
        y_example = f.attention.predict(f.example).astype(np.float32)
        mlflow.pytorch.log_model(f.attention, name="attention", signature=infer_signature(f.example, y_example),
                                 input_example=f.example, pip_requirements=[TORCH_REQUIREMENT])
        flat = pd.DataFrame(f.example.reshape(len(f.example), -1).astype(float),
                            columns=[f"{n}@t-{f.example.shape[1] - 1 - i}" for i in range(f.example.shape[1])
                                     for n in f.feature_names])
        booster = f.lightgbm.model
        mlflow.lightgbm.log_model(booster, name="lightgbm",
                                  signature=infer_signature(flat, booster.predict(flat.to_numpy())),
                                  input_example=flat, pip_requirements=[f"lightgbm=={lightgbm.__version__}"])
        mlflow.log_artifacts(str(res.out), artifact_path="forecast")
        return {"experiment_id": experiment_id, "run_id": parent.info.run_id}


# --- entry point ------------------------------------------------------------------------------------

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
    path = truth.with_name("truth_oracle.parquet")
    if not path.exists():
        return None, doc
    o = pd.read_parquet(path, columns=["run_id", "t_c", "k", "oracle_s"])
    return o.set_index(["run_id", "t_c", "k"])["oracle_s"], doc


@contextmanager
def torch_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
        notes.append(f"no oracle: {Path(truth).with_name('truth_oracle.parquet')} not found")
    # One dataset's part (with its long run, if it trains one): the notes stay the campaign's.
    names = [n for n in names if only is None or n == only]
    results = {}
    with torch_threads(settings.threads):
        for name in names:
            results[name] = analyse(data, name, settings, oracle, out_dir / name, pairs.get(name))
    grid = {app: cell.as_dict() for app, cell in settings.grid.items()}
    params = {"grid": json.dumps({a: grid[a] for a in sorted(grid)}), "folds": settings.folds,
              "max_epochs": settings.max_epochs, "patience": settings.patience, "seed": settings.seed,
              "hidden": settings.hidden, "lr": settings.lr, "val_fraction": settings.val_fraction,
              "ensemble": settings.ensemble,
              "long_run": f"m={settings.long_run_m},k={settings.long_run_k}"}
    # Everything is computed before the store's lock is taken: other analyses wait on it.
    with tracking.session("forecast", dataset_dir) as experiment_id:
        for res in results.values():
            res.summary["mlflow"] = log_dataset(res, experiment_id, dataset_dir, params)
    for name, res in results.items():
        if truth_doc is not None and name in truth_doc.get("datasets", {}):
            res.summary["oracle_mape_truth"] = truth_doc["datasets"][name].get("oracle_mape")
    uri = tracking.tracking_uri(dataset_dir)
    summary = ForecastResult.build({"analysis": "forecast",
                            "params": {**params, "feature_sets": settings.feature_sets, "grid": grid},
                            "tracking_uri": uri,
                            "mlflow": {"tracking_uri": uri, "experiment_id": experiment_id,
                                       "runs": {n: r.summary["mlflow"]["run_id"] for n, r in results.items()}},
                            "datasets": {name: res.summary for name, res in results.items()}, "notes": notes})
    summary.write(out_dir, only)
    return summary
