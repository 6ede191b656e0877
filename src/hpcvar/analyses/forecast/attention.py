"""The paper's forecaster: scaled dot-product attention over the last m steps, then a
fully-connected head.

Input: a window of ``m`` steps x ``F`` features, each the relative deviation of the step's value
from the training runs' mean at that step (the step's own duration deviation first; system-wide
counters as per-second rates against their mean rate, see :class:`~hpcvar.analyses.forecast.windows.Profile`).
Output: the log of the ratio of the next k steps' time to the mean profile's time for them.

With a few dozen training runs per dataset, a free network does worse than persistence, so the
model is built to start from persistence and earn every departure from it: the head outputs a
correction to persistence's log-ratio and starts at zero, the counters' input weights start near
zero, and training keeps the untrained model unless an epoch beats it on the validation runs.

One network's forecast still depends on its initialisation and on which runs early stopping
watched; :class:`Ensemble` averages several (:func:`~hpcvar.analyses.forecast.models.fit_attention`). The head can output
several horizons (``outputs``, trained together; the forecast is the last), which teaches the
network how fast a slow stretch fades.

The module carries the training windows' per-feature centre and scale as buffers, so the saved
model takes raw relative deviations (what :mod:`hpcvar.analyses.forecast.windows` builds) as input.
"""

from __future__ import annotations

import copy
import logging
import warnings
from contextlib import contextmanager

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def log_ratio(x):
    """Relative deviation -> log of the ratio to the mean: counters respond multiplicatively to
    congestion, so their logs move additively with it."""
    if isinstance(x, np.ndarray):
        return np.log1p(np.clip(x, -0.99, None))
    return torch.log1p(torch.clamp(x, min=-0.99))


def persistence_log_ratio(x: torch.Tensor) -> torch.Tensor:
    """log of the window's mean duration ratio to the profile (feature 0 is the duration deviation)."""
    return torch.log(torch.clamp(1.0 + x[:, :, 0], min=1e-3).mean(dim=1))


class AttentionForecaster(pl.LightningModule):
    """Each step is embedded by a small MLP (so a counter can matter only above a threshold, as
    file-system traffic slows a job only once it exceeds the usual) plus a learned position; one
    query per head (a learned vector plus the last step's embedding) attends over the m steps; a
    fully-connected head (one hidden GELU layer) reads the attended context beside the last step's
    embedding and the mean and maximum of the step embeddings over the window, and outputs a
    correction to the persistence forecast's log-ratio (the window's mean duration ratio to its
    profile). The pooled summaries give the head the window's persistent level directly (a
    congested stretch raises every step, a transient burst only some); attention alone had to
    learn it from a few hundred runs and did not."""

    def __init__(self, n_features: int, m: int, hidden: int = 32, heads: int = 4, lr: float = 3e-3,
                 weight_decay: float = 1e-4, center: np.ndarray | None = None, scale: np.ndarray | None = None,
                 outputs: int = 1):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
        self.save_hyperparameters(ignore=["center", "scale"])
        self.register_buffer("center", torch.as_tensor(np.zeros(n_features) if center is None else center,
                                                       dtype=torch.float32))
        self.register_buffer("scale", torch.as_tensor(np.ones(n_features) if scale is None else scale,
                                                      dtype=torch.float32))
        self.embed = nn.Sequential(nn.Linear(n_features, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        # Counters start almost switched off: with a few dozen training runs, a model that must
        # earn each counter's weight generalises better than one that starts by fitting all of them.
        with torch.no_grad():
            self.embed[0].weight[:, 1:] *= 0.01
        self.position = nn.Parameter(0.02 * torch.randn(m, hidden))
        self.query = nn.Parameter(0.02 * torch.randn(hidden))
        self.q_proj = nn.Linear(hidden, hidden)
        self.kv_proj = nn.Linear(hidden, 2 * hidden)
        # The head corrects persistence and starts at no correction.
        self.head = nn.Sequential(nn.Linear(4 * hidden, hidden), nn.GELU(), nn.Linear(hidden, outputs))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The forecast: log-ratio of the next k steps' time to their profile."""
        return self.forward_all(x)[:, -1]

    def forward_all(self, x: torch.Tensor) -> torch.Tensor:
        """(b, outputs): the log-ratios at every trained horizon, the forecast's own last."""
        b, m, _ = x.shape
        heads, hidden = self.hparams.heads, self.hparams.hidden
        h = self.embed((log_ratio(x) - self.center) / self.scale) + self.position
        last = h[:, -1]
        q = self.q_proj(last + self.query).view(b, heads, 1, hidden // heads)
        k, v = self.kv_proj(h).view(b, m, 2, heads, hidden // heads).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v).reshape(b, hidden)
        pooled = [h.mean(dim=1), h.amax(dim=1)]
        return persistence_log_ratio(x)[:, None] + self.head(torch.cat([context, last, *pooled], dim=-1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        # L1 on the log-ratio: close to the relative (percentage) error that MAPE scores; with
        # several horizons, their mean.
        return F.l1_loss(self.forward_all(x), y.reshape(len(y), -1))

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", forecast_loss(self, *batch), prog_bar=False)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    def predict(self, x: np.ndarray) -> np.ndarray:
        self.eval()
        with torch.no_grad():
            return self(torch.as_tensor(x, dtype=torch.float32)).numpy().astype(float)


def forecast_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L1 of the forecast (the last horizon) on targets (n,) or (n, horizons): what early
    stopping and the choice of weights watch."""
    return F.l1_loss(module(x), y.reshape(len(y), -1)[:, -1])


class Ensemble(nn.Module):
    """Members' forecasts (log-ratios) averaged; takes the same windows as one member."""

    def __init__(self, members: list[AttentionForecaster]):
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([member(x) for member in self.members]).mean(dim=0)

    def predict(self, x: np.ndarray) -> np.ndarray:
        self.eval()
        with torch.no_grad():
            return self(torch.as_tensor(x, dtype=torch.float32)).numpy().astype(float)


class BestWeights(pl.Callback):
    """Keeps the weights of the epoch with the lowest validation loss and restores them at the end
    (early stopping alone would leave the last, ``patience`` epochs worse, weights). The untrained
    model (pure persistence) is the first candidate: training must beat it on the validation runs."""

    def __init__(self, module: pl.LightningModule, x_val: torch.Tensor, y_val: torch.Tensor):
        module.eval()
        with torch.no_grad():
            self.best = float(forecast_loss(module, x_val, y_val))
        self.state = copy.deepcopy(module.state_dict())
        module.train()

    def on_validation_end(self, trainer, module):
        loss = trainer.callback_metrics.get("val_loss")
        if loss is not None and float(loss) < self.best:
            self.best, self.state = float(loss), copy.deepcopy(module.state_dict())

    def on_fit_end(self, trainer, module):
        module.load_state_dict(self.state)


@contextmanager
def quiet_lightning():
    """Lightning's per-fit banners and data-loader advice would swamp the progress lines."""
    loggers = [logging.getLogger(n) for n in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="pytorch_lightning")
        warnings.filterwarnings("ignore", module="lightning_fabric")
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def fit(x: np.ndarray, y: np.ndarray, x_val: np.ndarray | None, y_val: np.ndarray | None, *, seed: int,
        hidden: int, lr: float, weight_decay: float, max_epochs: int, patience: int,
        batch_size: int) -> AttentionForecaster:
    """Train on windows ``x`` (n, m, F) -> log-ratios ``y``; early stopping on the validation
    windows when given, else ``max_epochs`` epochs. ``y`` (n, H) trains H horizons at once (the
    forecast's own last); the model then still forecasts the last one."""
    pl.seed_everything(seed, workers=True, verbose=False)
    flat = log_ratio(x).reshape(-1, x.shape[-1])
    center, scale = flat.mean(axis=0), flat.std(axis=0)
    scale = np.where(np.isfinite(scale) & (scale > 1e-9), scale, 1.0)
    model = AttentionForecaster(x.shape[-1], x.shape[1], hidden=hidden, lr=lr, weight_decay=weight_decay,
                                center=center, scale=scale, outputs=1 if y.ndim == 1 else y.shape[1])
    gen = torch.Generator().manual_seed(seed)
    train = DataLoader(TensorDataset(torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)),
                       batch_size=batch_size, shuffle=True, generator=gen)
    callbacks, val = [], None
    if x_val is not None and len(x_val):
        xv, yv = torch.as_tensor(x_val, dtype=torch.float32), torch.as_tensor(y_val, dtype=torch.float32)
        val = DataLoader(TensorDataset(xv, yv), batch_size=len(xv))
        callbacks = [pl.callbacks.EarlyStopping("val_loss", patience=patience), BestWeights(model, xv, yv)]
    with quiet_lightning():
        trainer = pl.Trainer(accelerator="auto", devices=1, max_epochs=max_epochs, enable_progress_bar=False,
                             logger=False, enable_checkpointing=False, enable_model_summary=False,
                             deterministic=True, callbacks=callbacks,
                             limit_val_batches=None if val is not None else 0, num_sanity_val_steps=0)
        trainer.fit(model, train, val)
    model.eval()
    return model
