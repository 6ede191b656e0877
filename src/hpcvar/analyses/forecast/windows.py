"""The forecaster's data as arrays: runs x steps, the mean profile of the training runs, sliding
windows of one (m, k) cell, and cross-validation folds by run (each with its own profile).

Features are relative deviations from the per-step mean over a fold's *training* runs (the
step's own duration deviation first); a window's target is the summed duration of steps
``t_c+1..t_c+k``, scored as its ratio to that profile's sum over the same steps.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold

from hpcvar.analyses import common


#: Feature-name prefixes of system-wide counters (common.step_frame's LDMS scopes).
SYSTEM_PREFIXES = ("io_", "sys_")


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


def horizon_targets(s: "Series", fold: "Fold", runs: np.ndarray, m: int, k: int) -> np.ndarray:
    """(n, k) log-ratios of steps t_c+1..t_c+j to their profile, j = 1..k, for the windows of
    ``runs`` (column k-1 is the forecast's own target)."""
    w = Windows.of(s.lengths, runs, m, k)
    if not len(w):
        return np.empty((0, k))
    return np.column_stack([np.log(Windows(m, j, w.run, w.t_c).target_seconds(s.duration)
                                   / fold.profile.sums(w.t_c, j)) for j in range(1, k + 1)])


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
