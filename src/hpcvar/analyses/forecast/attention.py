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

import logging
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler


def log_ratio(x):
    """Relative deviation -> log of the ratio to the mean: counters respond multiplicatively to
    congestion, so their logs move additively with it."""
    if isinstance(x, np.ndarray):
        return np.log1p(np.clip(x, -0.99, None))
    return torch.log1p(torch.clamp(x, min=-0.99))


def persistence_log_ratio(x: torch.Tensor) -> torch.Tensor:
    """log of the window's mean duration ratio to the profile (feature 0 is the duration deviation):
    windows (..., m, F) -> (...)."""
    return torch.log(torch.clamp(1.0 + x[..., 0], min=1e-3).mean(dim=-1))


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
    GPUs: one network trained on its own (:meth:`AttentionForecaster.configure_optimizers`, the
    reference :class:`MaskedAdamW` is checked against in tests/test_forecast.py)."""
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
    feature sets and ensemble members are a few dozen networks of a few thousand weights. Networks
    of one shape (features, window, horizons) are trained as one stacked model (:class:`Stack`):
    each layer is one batched matrix product for all of them, not one small product per network
    (a MILC cell's 30 networks: 0.56 of the time of training them one at a time, 0.70 on one
    thread, benchmarks/bench_attention_stack.py; about 0.9 of the time of the earlier loop, which
    called each network in turn: docs/benchmarks.md). Each network still trains as it would alone,
    to the last bit: its own weights (from its seed), its own shuffled batches (its own generator,
    :func:`epoch_batches`), its own loss over its own rows (batches of one length computed
    together, unpadded), its own AdamW state (a network without a batch in a step
    is not stepped: :class:`MaskedAdamW`), and early stopping and best weights on its own
    validation windows (:class:`TogetherEarlyStopping`: the untrained model, pure persistence, is
    the first candidate). Returns the networks in the jobs' order.

    "To the last bit" rests on the batched product computing each network's entry as the plain
    product of that network alone (observed with torch 2.13 on the CPU, on one and two threads;
    tests/test_forecast.py checks it, and the stacked forward against
    :meth:`AttentionForecaster.forward_all` and a network trained by Lightning alone)."""
    members = [_initial(job, hidden, lr, weight_decay) for job in jobs]
    if not members:
        return []
    together = Together(members, jobs, batch_size)
    validating = bool(together.has_validation.any())
    stopping = TogetherEarlyStopping(together, patience)
    with quiet_lightning():
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, enable_progress_bar=False,
                             logger=False, enable_checkpointing=False, enable_model_summary=False,
                             deterministic=True, callbacks=[stopping], num_sanity_val_steps=0,
                             limit_val_batches=None if validating else 0)
        trainer.fit(together, DataLoader(_Epoch(together), batch_size=None, collate_fn=_unchanged),
                    DataLoader(_Validation(), batch_size=None, collate_fn=_unchanged) if validating else None)
    together.unstack()
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


def _unchanged(item):
    """The data loaders' items as they are (lists of index arrays, or None)."""
    return item


def epoch_batches(n: int, batch_size: int, generator: torch.Generator) -> list[list[int]]:
    """One epoch's batches of row indices: those of ``DataLoader(TensorDataset(...), batch_size,
    shuffle=True, generator=generator)`` over ``n`` rows, drawn from the generator in the same
    order (the loader's base seed, then the sampler's permutations), epoch after epoch."""
    torch.empty((), dtype=torch.int64).random_(generator=generator)  # the DataLoader's _base_seed
    return list(BatchSampler(RandomSampler(range(n), generator=generator), batch_size=batch_size, drop_last=False))


class Layout:
    """Where each weight of an :class:`AttentionForecaster` of one shape sits in a row of numbers."""

    def __init__(self, member: AttentionForecaster):
        self.shapes = {name: tuple(p.shape) for name, p in member.named_parameters()}
        self.slices, start = {}, 0
        for name, shape in self.shapes.items():
            self.slices[name] = slice(start, start + int(np.prod(shape)))
            start += int(np.prod(shape))
        self.size = start

    def flatten(self, member: AttentionForecaster) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in member.parameters()])

    def views(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """(G, >= size) -> each weight as (G, *shape), views into the rows."""
        return {name: rows[:, self.slices[name]].view(len(rows), *shape) for name, shape in self.shapes.items()}

    def load(self, member: AttentionForecaster, row: torch.Tensor) -> None:
        with torch.no_grad():
            for name, p in member.named_parameters():
                p.copy_(row[self.slices[name]].view(p.shape))


def _linear(x: torch.Tensor, w: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """nn.Linear of each network on its own rows: x (G, N, in) -> (G, N, out)."""
    return torch.baddbmm(w[f"{name}.bias"].unsqueeze(1), x, w[f"{name}.weight"].transpose(1, 2))


def _by_length(index: list) -> dict[int, list[int]]:
    """Positions of the index lists (None: none) grouped by their length: networks with batches of
    one length are computed together, without padding, so that each network's sums (its weight
    gradients sum over its batch's rows) run over the same rows in the same order as alone."""
    groups: dict[int, list[int]] = {}
    for g, i in enumerate(index):
        if i is not None and len(i):
            groups.setdefault(len(i), []).append(g)
    return groups


class Stack:
    """The networks of one shape (features, window, horizons) among :class:`Together`'s, trained as
    one: their weights are rows ``start`` to ``start + G`` of Together's weight matrix, their
    training windows one tensor, and a step's batches of one length one (G', B, m, F) tensor."""

    def __init__(self, index: list[int], members: list[AttentionForecaster], jobs: list[FitJob], start: int):
        self.index, self.start = index, start
        self.rows = slice(start, start + len(index))
        first = members[index[0]]
        self.layout = Layout(first)
        self.heads, self.hidden = first.hparams.heads, first.hparams.hidden
        self.center = torch.stack([members[i].center for i in index])
        self.scale = torch.stack([members[i].scale for i in index])
        mine = [jobs[i] for i in index]
        xs = [torch.as_tensor(j.x, dtype=torch.float32) for j in mine]
        # What the forward takes of the windows, computed once: they do not change in training.
        self.z, self.persistence = self.inputs(torch.cat(xs), torch.cat(
            [torch.full((len(x),), r, dtype=torch.long) for r, x in enumerate(xs)]))
        self.y = torch.cat([torch.as_tensor(j.y[:, None] if j.y.ndim == 1 else j.y, dtype=torch.float32)
                            for j in mine])
        self.first = torch.as_tensor(np.cumsum([0] + [len(x) for x in xs[:-1]]))
        self.has_validation = torch.tensor([j.has_validation for j in mine])
        # The validation windows, networks with as many stacked: (networks, inputs of x (G', V, m, F), y (G', V)).
        self.validation = []
        for n, which in _by_length([j.x_val if j.has_validation else None for j in mine]).items():
            which = torch.tensor(which)
            x = torch.stack([torch.as_tensor(mine[g].x_val, dtype=torch.float32) for g in which.tolist()])
            y = torch.stack([torch.as_tensor(mine[g].y_val, dtype=torch.float32).reshape(n, -1)[:, -1]
                             for g in which.tolist()])
            self.validation.append((which, *self.inputs(x, which[:, None]), y))

    def inputs(self, x: torch.Tensor, which: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward's inputs from windows x (..., m, F) of the networks ``which`` (their places
        in the stack, broadcast against x's leading dimensions): the normalised log-ratios
        (:meth:`AttentionForecaster.forward_all`'s first step) and persistence's log-ratio."""
        return ((log_ratio(x) - self.center[which][..., None, :]) / self.scale[which][..., None, :],
                persistence_log_ratio(x))

    def forward_all(self, weights: torch.Tensor, z: torch.Tensor, persistence: torch.Tensor,
                    which: torch.Tensor) -> torch.Tensor:
        """:meth:`AttentionForecaster.forward_all` of the networks ``which`` (their places in the
        stack) on their own windows, given as their :meth:`inputs` z (G', B, m, F) and persistence
        (G', B) -> (G', B, outputs), weights from Together's."""
        w = self.layout.views(weights[self.start + which])
        g, b, m, f = z.shape
        heads, hidden = self.heads, self.hidden
        h = _linear(F.gelu(_linear(z.reshape(g, b * m, f), w, "embed.0")), w, "embed.2")
        h = h.view(g, b, m, hidden) + w["position"][:, None]
        last = h[:, :, -1]
        q = _linear(last + w["query"][:, None], w, "q_proj").view(g * b, heads, 1, hidden // heads)
        k, v = _linear(h.reshape(g, b * m, hidden), w, "kv_proj").view(g * b, m, 2, heads, hidden // heads) \
            .permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v).reshape(g, b, hidden)
        pooled = [h.mean(dim=2), h.amax(dim=2)]
        head = _linear(F.gelu(_linear(torch.cat([context, last, *pooled], dim=-1), w, "head.0")), w, "head.2")
        return persistence[..., None] + head

    def training_loss(self, weights: torch.Tensor, batches: list) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The sum of each network's L1 loss on its batch (None: no batch in this step), and which
        networks had one; None when none had. Only those are computed (a stack's networks stop at
        different epochs), those with batches of one length together."""
        groups = _by_length(batches)
        if not groups:
            return None
        total = []
        for which in groups.values():
            rows = self.first[which][:, None] + torch.as_tensor(np.array([batches[g] for g in which]))
            which = torch.tensor(which)
            # F.l1_loss's mean, over each network's rows x horizons
            total.append((self.forward_all(weights, self.z[rows], self.persistence[rows], which)
                          - self.y[rows]).abs().mean(dim=(1, 2)).sum())
        active = torch.zeros(len(batches), dtype=torch.bool)
        active[[g for which in groups.values() for g in which]] = True
        return torch.stack(total).sum(), active

    def validation_losses(self, weights: torch.Tensor, watched: torch.Tensor) -> torch.Tensor:
        """(G,): the ``watched`` networks' L1 forecast loss on their whole validation sets (NaN for
        the others and those without one)."""
        loss = torch.full((len(self.index),), torch.nan)
        for which, z, persistence, y in self.validation:
            keep = watched[which]
            if keep.any():
                forecast = self.forward_all(weights, z[keep], persistence[keep], which[keep])[..., -1]
                loss[which[keep]] = (forecast - y[keep]).abs().mean(dim=1)
        return loss


class Together(pl.LightningModule):
    """Several :class:`AttentionForecaster` networks in one training loop, their weights the rows
    of one matrix (each network's :class:`Layout`, zero-padded to the widest): a training step
    holds each network's next batch of its epoch; the loss is the sum of their losses (each
    network's gradient is its own loss's), and one :class:`MaskedAdamW` steps the rows of the
    networks with a batch."""

    def __init__(self, members: list[AttentionForecaster], jobs: list[FitJob], batch_size: int):
        super().__init__()
        self.automatic_optimization = False
        self.members = members   # not submodules: Together trains the weights matrix, then unstack() loads them
        groups: dict[tuple, list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault((job.x.shape[1], job.x.shape[2], job.outputs), []).append(i)
        self.stacks, start = [], 0
        for index in groups.values():
            self.stacks.append(Stack(index, members, jobs, start))
            start += len(index)
        self.order = [i for stack in self.stacks for i in stack.index]   # row r is job order[r]
        weights = torch.zeros(len(jobs), max(stack.layout.size for stack in self.stacks))
        for stack in self.stacks:
            for r, i in enumerate(stack.index):
                weights[stack.start + r, :stack.layout.size] = stack.layout.flatten(members[i])
        self.weights = nn.Parameter(weights)
        self.has_validation = torch.cat([stack.has_validation for stack in self.stacks])
        self.training_networks = [True] * len(jobs)   # by row: early stopping has not stopped them
        self.generators = [torch.Generator().manual_seed(jobs[i].seed) for i in self.order]
        self.sizes = [len(jobs[i].x) for i in self.order]
        self.batch_size = batch_size
        self.val_losses: torch.Tensor | None = None    # the last validation's, by row
        first = members[0].hparams
        self.lr, self.weight_decay = first.lr, first.weight_decay

    def configure_optimizers(self):
        return MaskedAdamW([self.weights], lr=self.lr, weight_decay=self.weight_decay)

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        """The batch as it is: it holds row indices (plain ints, by network; the windows are in the
        Stacks, on the CPU with the weights), nothing to move. Lightning's default walks it
        element by element (``apply_to_collection``): for a cell's 30 networks, about 1,500 ints a
        step, 58 s of the 265 s of a forecast test fixture's training under cProfile."""
        return batch

    def training_step(self, batches, batch_idx):
        optimizer = self.optimizers()
        optimizer.zero_grad()
        total, active = [], torch.zeros(len(self.order), dtype=torch.bool)
        for stack in self.stacks:
            part = stack.training_loss(self.weights, batches[stack.rows])
            if part is not None:
                total.append(part[0])
                active[stack.rows] = part[1]
        if total:
            self.manual_backward(torch.stack(total).sum())
            optimizer.optimizer.active = active
            optimizer.step()

    def validation_losses(self) -> torch.Tensor:
        """(rows,): the validation loss of each network still training (NaN for the others)."""
        training = torch.tensor(self.training_networks)
        return torch.cat([stack.validation_losses(self.weights, training[stack.rows]) for stack in self.stacks])

    def validation_step(self, batch, batch_idx):
        # Each network's loss on its whole validation set (AttentionForecaster.validation_step's
        # val_loss), kept here for TogetherEarlyStopping rather than passed through self.log:
        # Lightning's logging costs about 0.7 ms a call.
        self.val_losses = self.validation_losses().detach()

    def unstack(self) -> None:
        """Each network's trained weights into its AttentionForecaster."""
        for stack in self.stacks:
            for r, i in enumerate(stack.index):
                stack.layout.load(self.members[i], self.weights.detach()[stack.start + r])


class MaskedAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's update (decoupled weight decay, bias-corrected moments; the same
    arithmetic in the same order as its multi-tensor loop, tests/test_forecast.py) on matrices
    whose rows are networks, stepping only the rows marked in ``active`` (all when None): a row
    not stepped keeps its weights, moments and step count, as a network alone that had no batch
    would."""

    def __init__(self, params, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.active: torch.Tensor | None = None

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, wd, (beta1, beta2), eps = group["lr"], group["weight_decay"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                active = torch.ones(len(p), dtype=torch.bool) if self.active is None else self.active
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(len(p), dtype=torch.float64)
                    state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += active
                step = state["step"].clamp(min=1)
                per_row = (len(p),) + (1,) * (p.dim() - 1)
                step_size = (lr / (1 - beta1 ** step)).to(p.dtype).view(per_row)
                bias_correction2_sqrt = (1 - beta2 ** step).sqrt().to(p.dtype).view(per_row)
                rows = active.view(per_row)
                exp_avg = state["exp_avg"].lerp(p.grad, 1 - beta1)
                exp_avg_sq = state["exp_avg_sq"].mul(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                denom = exp_avg_sq.sqrt().div_(bias_correction2_sqrt).add_(eps)
                stepped = p.mul(1 - lr * wd).addcdiv_(exp_avg * -step_size, denom)
                p.copy_(torch.where(rows, stepped, p))
                state["exp_avg"] = torch.where(rows, exp_avg, state["exp_avg"])
                state["exp_avg_sq"] = torch.where(rows, exp_avg_sq, state["exp_avg_sq"])
        return loss


class _Epoch(torch.utils.data.IterableDataset):
    """One epoch of the networks still training: step j holds each one's j-th batch of its own
    epoch (None once its epoch is over, or when it has stopped), by row of Together's weights."""

    def __init__(self, together: Together):
        self.together = together

    def __iter__(self):
        t = self.together
        epochs = [epoch_batches(n, t.batch_size, gen) if training else []
                  for n, gen, training in zip(t.sizes, t.generators, t.training_networks)]
        for j in range(max(map(len, epochs), default=0)):
            yield [e[j] if j < len(e) else None for e in epochs]


class _Validation(torch.utils.data.IterableDataset):
    """The validation loop's one step: each network's whole validation set (its Stack holds them)."""

    def __iter__(self):
        yield None


class TogetherEarlyStopping(pl.Callback):
    """Lightning's EarlyStopping (``val_loss``, ``patience``) and a best-weights keeper, per
    network: after each validation, a network whose loss beats its best keeps those weights (the
    untrained model's loss is the first best: training must beat persistence on the validation
    runs), and one whose loss has not improved on its best
    epoch for ``patience`` epochs stops training. Training ends when none trains any more (those
    without validation windows train ``max_epochs``). Each network's ``stopped_epoch`` is then
    EarlyStopping's (0 when it was not stopped)."""

    def __init__(self, together: Together, patience: int):
        self.patience = patience
        with torch.no_grad():
            self.best = together.validation_losses()
        self.best_weights = together.weights.detach().clone()
        self.epoch_best = torch.full_like(self.best, float("inf"))
        self.wait = torch.zeros(len(self.best), dtype=torch.long)
        for member in together.members:
            member.stopped_epoch = 0  # as EarlyStopping's: 0 when it never stopped

    def on_validation_end(self, trainer, together: Together):
        loss = together.val_losses
        if loss is None:
            return
        watched = torch.tensor(together.training_networks) & together.has_validation
        better = watched & (loss < self.best)
        self.best = torch.where(better, loss, self.best)
        self.best_weights[better] = together.weights.detach()[better]
        finite = torch.isfinite(loss)
        improved = watched & finite & (loss < self.epoch_best)
        self.epoch_best = torch.where(improved, loss, self.epoch_best)
        self.wait = torch.where(improved, 0, self.wait + (watched & finite & ~improved).long())
        stop = watched & (~finite | (~improved & (self.wait >= self.patience)))
        for r in torch.nonzero(stop).flatten().tolist():
            together.training_networks[r] = False
            together.members[together.order[r]].stopped_epoch = trainer.current_epoch
        if not any(together.training_networks):
            trainer.should_stop = True

    def on_fit_end(self, trainer, together: Together):
        with torch.no_grad():
            kept = together.has_validation[:, None]
            together.weights.copy_(torch.where(kept, self.best_weights, together.weights))
