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
from dataclasses import dataclass

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset


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
        return adamw(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)

    def predict(self, x: np.ndarray) -> np.ndarray:
        self.eval()
        with torch.no_grad():
            return self(torch.as_tensor(x, dtype=torch.float32)).numpy().astype(float)


def adamw(parameters, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with its multi-tensor (``foreach``) update, which PyTorch uses by default only on
    GPUs: the same arithmetic in the same order for every weight (bit for bit the weights the
    one-tensor-at-a-time loop gives: tests/test_forecast.py), in half the time for the
    many small tensors of a grid cell's networks."""
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay, foreach=True)


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


@dataclass
class FitJob:
    """One network to train: windows ``x`` (n, m, F) -> log-ratios ``y`` (n,) or (n, H), the
    validation windows early stopping watches (or None), and the seed of its weights and shuffles."""

    x: np.ndarray
    y: np.ndarray
    x_val: np.ndarray | None
    y_val: np.ndarray | None
    seed: int

    @property
    def outputs(self) -> int:
        return 1 if self.y.ndim == 1 else self.y.shape[1]

    @property
    def has_validation(self) -> bool:
        return self.x_val is not None and len(self.x_val) > 0


def fit(x: np.ndarray, y: np.ndarray, x_val: np.ndarray | None, y_val: np.ndarray | None, *, seed: int,
        hidden: int, lr: float, weight_decay: float, max_epochs: int, patience: int,
        batch_size: int) -> AttentionForecaster:
    """Train on windows ``x`` (n, m, F) -> log-ratios ``y``; early stopping on the validation
    windows when given, else ``max_epochs`` epochs. ``y`` (n, H) trains H horizons at once (the
    forecast's own last); the model then still forecasts the last one. One network of
    :func:`fit_many`."""
    return fit_many([FitJob(x, y, x_val, y_val, seed)], hidden=hidden, lr=lr, weight_decay=weight_decay,
                    max_epochs=max_epochs, patience=patience, batch_size=batch_size)[0]


def fit_many(jobs: list[FitJob], *, hidden: int, lr: float, weight_decay: float, max_epochs: int, patience: int,
             batch_size: int) -> list[AttentionForecaster]:
    """Train every job's network in one training loop (:class:`Together`): a grid cell's folds,
    feature sets and ensemble members are a few dozen networks of a few thousand weights, which
    trained one by one spend most of their time in setting up and tearing down the loop. Each
    network trains as it would alone, to the last bit: its own weights (from its seed), its own
    shuffled batches (its own DataLoader and generator), its forward, loss and backward on its own
    batch, its own AdamW state (a network without a batch in a step is not stepped), and early
    stopping and best weights on its own validation windows (:class:`TogetherEarlyStopping`: the
    untrained model, pure persistence, is the first candidate). Returns the networks in the
    jobs' order."""
    members = [_initial(job, hidden, lr, weight_decay) for job in jobs]
    together = Together(members, jobs, batch_size)
    validating = any(job.has_validation for job in jobs)
    stopping = TogetherEarlyStopping(together, patience)
    with quiet_lightning():
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, enable_progress_bar=False,
                             logger=False, enable_checkpointing=False, enable_model_summary=False,
                             deterministic=True, callbacks=[stopping], num_sanity_val_steps=0,
                             limit_val_batches=None if validating else 0)
        trainer.fit(together, DataLoader(_Epoch(together), batch_size=None),
                    DataLoader(_Validation(together), batch_size=None) if validating else None)
    for member in members:
        member.eval()
    return members


def _initial(job: FitJob, hidden: int, lr: float, weight_decay: float) -> AttentionForecaster:
    """The job's untrained network: its weights drawn from its seed, its input normalisation from
    its training windows."""
    pl.seed_everything(job.seed, workers=True, verbose=False)
    flat = log_ratio(job.x).reshape(-1, job.x.shape[-1])
    center, scale = flat.mean(axis=0), flat.std(axis=0)
    scale = np.where(np.isfinite(scale) & (scale > 1e-9), scale, 1.0)
    return AttentionForecaster(job.x.shape[-1], job.x.shape[1], hidden=hidden, lr=lr, weight_decay=weight_decay,
                               center=center, scale=scale, outputs=job.outputs)


def shuffled_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int) -> DataLoader:
    """``DataLoader(TensorDataset(x, y), batch_size, shuffle=True)`` with a generator seeded with
    ``seed``: the same batches in the same order, drawn from the generator in the same order,
    each batch taken from the tensors by one indexing rather than row by row and stacked."""
    gen = torch.Generator().manual_seed(seed)
    data = TensorDataset(x, y)
    batches = BatchSampler(RandomSampler(data, generator=gen), batch_size=batch_size, drop_last=False)
    return DataLoader(data, sampler=batches, batch_size=None, generator=gen)


class Together(pl.LightningModule):
    """Several :class:`AttentionForecaster` networks in one training loop. A training step holds
    each network's next batch of its epoch; the loss is the sum of their losses (each network's
    gradient is its own loss's), and one AdamW over every network's weights steps those with a
    batch (the others' gradients are None, so AdamW leaves them as they are)."""

    def __init__(self, members: list[AttentionForecaster], jobs: list[FitJob], batch_size: int):
        super().__init__()
        self.automatic_optimization = False
        self.members = nn.ModuleList(members)
        self.training_networks = [True] * len(members)   # early stopping has not stopped them
        # The loaders training each network alone would use: the same batches, in the same order.
        self.loaders = [shuffled_batches(torch.as_tensor(j.x, dtype=torch.float32),
                                         torch.as_tensor(j.y, dtype=torch.float32), batch_size, j.seed) for j in jobs]
        self.validation = [(torch.as_tensor(j.x_val, dtype=torch.float32), torch.as_tensor(j.y_val, dtype=torch.float32))
                           if j.has_validation else None for j in jobs]
        self.val_losses: dict[int, torch.Tensor] = {}  # the last validation's, by network

    def configure_optimizers(self):
        first = self.members[0].hparams
        return adamw(self.parameters(), lr=first.lr, weight_decay=first.weight_decay)

    def training_step(self, batches, batch_idx):
        optimizer = self.optimizers()
        optimizer.zero_grad()  # every gradient None: a network without a batch here is not stepped
        losses = [member.training_step(batch, batch_idx) for member, batch in zip(self.members, batches)
                  if batch is not None]
        if losses:
            self.manual_backward(torch.stack(losses).sum())
            optimizer.step()

    def validation_step(self, batch, batch_idx):
        # Each network's loss on its whole validation set (AttentionForecaster.validation_step's
        # val_loss), kept here for TogetherEarlyStopping rather than passed through self.log:
        # Lightning's logging costs about 0.7 ms a call, a few thousand calls a forecast.
        self.val_losses = {g: forecast_loss(member, *val).detach()
                           for g, (member, val) in enumerate(zip(self.members, self.validation))
                           if val is not None and self.training_networks[g]}


class _Epoch(torch.utils.data.IterableDataset):
    """One epoch of the networks still training: step j holds each one's j-th batch of its own
    loader (None once its epoch is over), every loader run to its end as alone."""

    def __init__(self, together: Together):
        self.together = together

    def __iter__(self):
        t = self.together
        running = [iter(loader) if t.training_networks[g] else None for g, loader in enumerate(t.loaders)]
        while any(it is not None for it in running):
            batches = []
            for g, it in enumerate(running):
                batch = next(it, None) if it is not None else None
                if batch is None:
                    running[g] = None
                batches.append(batch)
            if any(b is not None for b in batches):
                yield batches


class _Validation(torch.utils.data.IterableDataset):
    """The validation loop's one step: each network's whole validation set (Together holds them)."""

    def __init__(self, together: Together):
        self.together = together

    def __iter__(self):
        yield None


class TogetherEarlyStopping(pl.Callback):
    """Lightning's EarlyStopping (``val_loss``, ``patience``) and a best-weights keeper, per
    network: after each validation, a network whose loss beats its best keeps those weights (the
    untrained model's loss is the first best: training must beat persistence on the validation
    runs), and one whose loss has not improved on its best
    epoch for ``patience`` epochs stops training. Training ends when none trains any more (those
    without validation windows train ``max_epochs``)."""

    def __init__(self, together: Together, patience: int):
        self.patience = patience
        self.best: list[float | None] = []
        self.state: list[dict | None] = []
        for member, val in zip(together.members, together.validation):
            if val is None:
                self.best.append(None)
                self.state.append(None)
                continue
            member.eval()
            with torch.no_grad():
                self.best.append(float(forecast_loss(member, *val)))
            self.state.append(copy.deepcopy(member.state_dict()))
            member.train()
        self.epoch_best = [torch.tensor(float("inf"))] * len(together.members)
        self.wait = [0] * len(together.members)

    def on_validation_end(self, trainer, together: Together):
        for g, member in enumerate(together.members):
            loss = together.val_losses.get(g)
            if loss is None or not together.training_networks[g]:
                continue
            if float(loss) < self.best[g]:
                self.best[g], self.state[g] = float(loss), copy.deepcopy(member.state_dict())
            if not torch.isfinite(loss):
                together.training_networks[g] = False
            elif torch.lt(loss, self.epoch_best[g]):
                self.epoch_best[g], self.wait[g] = loss, 0
            else:
                self.wait[g] += 1
                if self.wait[g] >= self.patience:
                    together.training_networks[g] = False
        if not any(together.training_networks):
            trainer.should_stop = True

    def on_fit_end(self, trainer, together: Together):
        for member, state in zip(together.members, self.state):
            if state is not None:
                member.load_state_dict(state)
