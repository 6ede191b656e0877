"""The forecasters fitted on one fold's windows: persistence (the baseline every model corrects),
LightGBM on the flattened window, LightGBM fitted to persistence's correction, and the paper's
attention forecaster (:mod:`.attention`) as a deep ensemble.

Every trainer takes the same arguments (series, fold, m, k, feature columns, settings, seed) and
returns a model whose ``predict`` gives the log-ratio of the k-step time to the fold's profile.
"""

from __future__ import annotations

import numpy as np

from hpcvar.analyses.forecast import attention
from hpcvar.analyses.forecast.windows import Fold, Part, Series, horizon_targets, split_validation
from hpcvar.settings import ForecastSettings


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


def fit_lgbm(s, fold, m, k, cols, settings: ForecastSettings, seed: int) -> Boosted:
    return Boosted(settings, seed, residual=False).fit(*_fit_val(s, fold, m, k, cols, fold.fit, fold.val))


def fit_lgbm_residual(s, fold, m, k, cols, settings: ForecastSettings, seed: int) -> Boosted:
    return Boosted(settings, seed, residual=True).fit(*_fit_val(s, fold, m, k, cols, fold.fit, fold.val))


def attention_jobs(s, fold, m, k, cols, settings: ForecastSettings, seed: int) -> list[attention.FitJob]:
    """The networks of one fold's attention ensemble: ``settings.ensemble`` members averaged (a
    deep ensemble). With a few dozen to a few hundred training runs, one network's forecast
    depends noticeably on its initialisation and on which runs early stopping watched; averaging
    members that differ in both removes that part of the error. The first member watches the
    fold's validation runs, each other one its own draw.

    With ``settings.all_horizons`` each member learns every horizon 1..k at once (the log-ratios of
    steps t_c+1..t_c+j, :func:`horizon_targets`) and forecasts the k-th: the short horizons show
    how fast a slow stretch fades (the congestion's AR(1) part within a few steps, I/O traffic
    over many), which the k-step sum alone blurs. Early stopping and the kept weights still
    watch the k-step forecast. Measured on 150-day MILC campaigns (cell m=10, k=20, three
    dataset/seed pairs): 1.3%, 1.2% and 2.8% lower MAPE than the k-step target alone, at the
    same cost."""
    jobs = []
    for i in range(settings.ensemble):
        fit, val = ((fold.fit, fold.val) if i == 0
                    else split_validation(fold.train, settings.val_fraction, seed + 7919 * i))
        x, y, x_val, y_val = _fit_val(s, fold, m, k, cols, fit, val)
        if settings.all_horizons and k > 1:
            y, y_val = horizon_targets(s, fold, fit, m, k), horizon_targets(s, fold, val, m, k)
        jobs.append(attention.FitJob(x, y, x_val, y_val, seed=seed + 104729 * i))
    return jobs


def train_attention(jobs: list[attention.FitJob], settings: ForecastSettings) -> list[attention.AttentionForecaster]:
    """Every job's network, trained side by side (:func:`attention.fit_many`)."""
    return attention.fit_many(jobs, hidden=settings.hidden, lr=settings.lr, weight_decay=settings.weight_decay,
                              max_epochs=settings.max_epochs, patience=settings.patience,
                              batch_size=settings.batch_size)


def fit_attention(s, fold, m, k, cols, settings: ForecastSettings, seed: int) -> attention.Ensemble:
    """One fold's attention ensemble (:func:`attention_jobs`), its members trained together."""
    return attention.Ensemble(train_attention(attention_jobs(s, fold, m, k, cols, settings, seed), settings))


#: The learners fitted fold by fold (the attention networks are trained a cell at a time: grid.evaluate_cell).
TRAINERS = {"lightgbm": fit_lgbm, "lightgbm_residual": fit_lgbm_residual}
