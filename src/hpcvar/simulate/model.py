"""How a run of one of our datasets behaves: per-step times, network counters, MPI profile.

Planted causes (what ``truth.json`` records and the analyses must recover):

- **Culprit users**: while a culprit of this dataset has a large job running, the run's
  congestion ``z1`` rises by that user's strength. Other large users raise a *benign* traffic
  level ``z2`` that shows in counters but does not slow the run.
- **Counters**: the dataset's driver counters respond strongly to ``z1``; all counters respond to
  ``z2`` (so counters are correlated with each other), and every counter has its own noise.
- **Unexplained congestion**: an AR(1) component of ``z1`` that only the driver counters see.
- **I/O traffic** (system-wide, smooth): slows MILC with a lag, and is what the I/O routers'
  LDMS counters record, so it carries forecastable signal.
- **Placement**: fragmentation beyond the minimum number of groups adds a little.
- **Noise**: multiplicative log-normal noise of ``preset.noise`` on every step; the best
  achievable per-step error is measured, not assumed, as the mean |t - t_noise_free| / t.

Counter values are per-step changes at the step's *nominal* length, summed over the job's
routers: the deviation they carry is the congestion level, not the realised step length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from hpcvar.simulate.presets import DatasetSpec

# Raw (tile-less) Aries counters written to counters.csv, with a base rate per router-second.
RT_FLIT = tuple(f"AR_RTR_INQ_PRF_INCOMING_FLIT_VC{i}" for i in range(8))
RT_PKT = tuple(f"AR_RTR_INQ_PRF_INCOMING_PKT_VC{i}_FILTER_FLIT{i}_CNT" for i in range(8))
RAW_COUNTERS: dict[str, float] = {
    **{c: 4.0e6 for c in RT_FLIT},
    **{c: 1.0e6 for c in RT_PKT},
    "AR_RTR_INQ_PRF_ROWBUS_2X_USAGE_CNT": 2.0e5,
    "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT": 8.0e6,
    "AR_RTR_PT_COLBUF_PERF_STALL_RQ": 3.0e5,
    "AR_RTR_PT_COLBUF_PERF_STALL_RS": 2.5e5,
    "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC0": 6.0e6,
    "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC4": 5.0e6,
    "AR_RTR_PT_INQ_PRF_INCOMING_PKT_VC0_FILTER_FLIT0_CNT": 1.5e6,
    "AR_RTR_PT_INQ_PRF_INCOMING_PKT_VC4_FILTER_FLIT4_CNT": 1.2e6,
    "AR_RTR_PT_INQ_PRF_REQ_ROWBUS_STALL_CNT": 4.0e6,
    "AR_RTR_PT_INQ_PRF_RSP_ROWBUS_STALL_CNT": 3.0e6,
    "AR_RTR_PT_INQ_PRF_ROWBUS_2X_USAGE_CNT": 1.0e5,
}
# Table II abbreviation -> the raw columns that make it (a driver loads on all of them).
ABBREV_COLUMNS = {
    "RT_FLIT_TOT": RT_FLIT,
    "RT_PKT_TOT": RT_PKT,
    "RT_RB_STL": ("AR_RTR_INQ_PRF_ROWBUS_STALL_CNT",),
    "RT_RB_2X_USG": ("AR_RTR_INQ_PRF_ROWBUS_2X_USAGE_CNT",),
    "PT_CB_STL_RQ": ("AR_RTR_PT_COLBUF_PERF_STALL_RQ",),
    "PT_CB_STL_RS": ("AR_RTR_PT_COLBUF_PERF_STALL_RS",),
    "PT_FLIT_VC0": ("AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC0",),
    "PT_FLIT_VC4": ("AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC4",),
    "PT_RB_STL_RQ": ("AR_RTR_PT_INQ_PRF_REQ_ROWBUS_STALL_CNT",),
    "PT_RB_STL_RS": ("AR_RTR_PT_INQ_PRF_RSP_ROWBUS_STALL_CNT",),
    "PT_RB_2X_USG": ("AR_RTR_PT_INQ_PRF_ROWBUS_2X_USAGE_CNT",),
}
# LDMS system-wide counters (router-level sums, one column each) and what drives them.
LDMS_COUNTERS = ("AR_RTR_INQ_PRF_INCOMING_FLIT_TOTAL", "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT",
                 "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_TOTAL", "AR_RTR_PT_INQ_PRF_REQ_ROWBUS_STALL_CNT")
LDMS_RATES = np.array([3.0e7, 8.0e6, 1.1e7, 4.0e6])

# MPI routines and their share of MPI time per app (the paper's Figures 4-5).
MPI_ROUTINES = {
    "amg": {"Iprobe": 0.24, "Test": 0.2, "Testall": 0.18, "Waitall": 0.22, "Allreduce": 0.12, "Isend": 0.04},
    "milc": {"Allreduce": 0.34, "Wait": 0.36, "Isend": 0.16, "Irecv": 0.14},
    "minivite": {"Waitall": 0.92, "Allreduce": 0.04, "Isend": 0.02, "Irecv": 0.02},
    "umt": {"Allreduce": 0.42, "Barrier": 0.3, "Wait": 0.2, "Isend": 0.08},
}

STRONG, WEAK, BENIGN_DRIVER, BENIGN_OTHER = 1.0, 0.12, 0.15, 0.7
PLACEMENT_EFFECT = 0.15
IO_LAG_S = 60.0
AR_PHI, AR1_SD, AR2_SD = 0.8, 0.12, 0.15
#: Horizons for which the oracle's expected k-step sums are recorded.
ORACLE_K = (1, 2, 3, 5, 10, 20, 30, 40)


def step_profile(ds: DatasetSpec, rng: np.random.Generator) -> np.ndarray:
    """Mean time per step (Figure 3): warm-up steps, then a gently varying regular profile."""
    regular = ds.step_s * (1 + 0.08 * np.sin(np.linspace(0, 3, ds.steps - ds.warmup_steps)))
    return np.concatenate([np.full(ds.warmup_steps, ds.warmup_s), regular])


def loadings(ds: DatasetSpec) -> tuple[dict[str, float], dict[str, float]]:
    """Per raw counter: loading on congestion z1 and on benign traffic z2."""
    a = dict.fromkeys(RAW_COUNTERS, WEAK)
    b = dict.fromkeys(RAW_COUNTERS, BENIGN_OTHER)
    for rank, abbrev in enumerate(ds.drivers):
        for col in ABBREV_COLUMNS[abbrev]:
            a[col] = STRONG if rank == 0 else STRONG * 0.6
            b[col] = BENIGN_DRIVER
    return a, b


@dataclass
class RunResult:
    step_start: np.ndarray   # epoch seconds
    step_end: np.ndarray
    noise_free: np.ndarray   # step durations without noise
    counters: dict[str, np.ndarray]
    z1: np.ndarray
    culprit_share: np.ndarray  # part of z1 due to culprits, per step
    compute_s: float           # per-rank compute time over the run
    mpi_s: float               # per-rank MPI time over the run
    routines: dict[str, float]
    ar1: np.ndarray            # the unexplained-congestion AR(1) state used at each step


def simulate_run(ds: DatasetSpec, profile: np.ndarray, t_start: float, num_routers: int, frag: float,
                 active_culprit, active_benign, io: "OUProcess", noise: float, counter_noise: float,
                 rng: np.random.Generator) -> RunResult:
    """Step through one run. ``active_*(t)`` give culprit/benign intensity at time t; ``io`` is
    the system's I/O traffic process, of which only the part above its mean slows a run."""
    n = len(profile)
    start = np.empty(n)
    end = np.empty(n)
    noise_free = np.empty(n)
    z1 = np.empty(n)
    z2 = np.empty(n)
    culprit = np.empty(n)
    ar1_hist = np.empty(n)
    ar1 = ar2 = 0.0
    t = t_start
    eps = rng.normal(0, noise, n)
    for s in range(n):
        ar1 = AR_PHI * ar1 + rng.normal(0, AR1_SD)
        ar2 = AR_PHI * ar2 + rng.normal(0, AR2_SD)
        ar1_hist[s] = ar1
        culprit[s] = active_culprit(t)
        z1[s] = culprit[s] + max(ar1, 0.0)
        z2[s] = active_benign(t) + ar2
        slow = ds.sensitivity * (z1[s] + PLACEMENT_EFFECT * frag) + ds.io_sensitivity * max(io(t - IO_LAG_S), 0.0)
        noise_free[s] = profile[s] * max(1 + slow, 0.5)
        start[s] = t
        t += noise_free[s] * np.exp(eps[s])
        end[s] = t
    a, b = loadings(ds)
    counters = {}
    for col, rate in RAW_COUNTERS.items():
        eta = rng.normal(0, counter_noise, n)
        counters[col] = num_routers * profile * rate * np.exp(a[col] * z1 + b[col] * z2 + eta)
    total = float((end - start).sum())
    compute = float(profile.sum() * (1 - ds.mpi_fraction) * np.exp(rng.normal(0, 0.01)))
    mpi = max(total - compute, 0.0)
    shares = MPI_ROUTINES[ds.app]
    jitter = rng.dirichlet(np.array(list(shares.values())) * 200)
    routines = {r: mpi * w for r, w in zip(shares, jitter)}
    return RunResult(start, end, noise_free, counters, z1, culprit, compute, mpi, routines, ar1_hist)


#: Seconds each planted cause added to a step (truth_steps.parquet), and the categories
#: :mod:`hpcvar.analyses.explain` names them by.
CAUSE_COLUMNS = ("culprit_s", "congestion_s", "placement_s", "io_s", "noise_s")
CAUSE_CATEGORY = {"culprit_s": "neighbours", "congestion_s": "network", "placement_s": "placement", "io_s": "io",
                  "noise_s": "none"}


def step_causes(ds: DatasetSpec, profile: np.ndarray, res: RunResult, frag: float, io: "OUProcess") -> dict:
    """The seconds each planted cause added to each step of a run: the culprits' congestion, the
    unexplained AR(1) congestion, placement, lagged I/O (each its term of the slowdown times the
    step's mean time), and the step noise (the realised time over the noise-free one)."""
    culprit = profile * ds.sensitivity * res.culprit_share
    congestion = profile * ds.sensitivity * np.maximum(res.ar1, 0.0)
    placement = profile * ds.sensitivity * PLACEMENT_EFFECT * frag
    io_s = profile * ds.io_sensitivity * np.maximum(io(res.step_start - IO_LAG_S), 0.0)
    noise = (res.step_end - res.step_start) - res.noise_free
    return dict(zip(CAUSE_COLUMNS, (culprit, congestion, np.full(len(profile), placement), io_s, noise)))


def dominant_causes(steps, runs):
    """Per run (truth_runs.parquet; ``runs``: a frame with run_id, dataset and failed): the seconds
    of each cause summed over its steps and the dominant one -- the cause that added the most,
    with the culprit user who added the most when it is the culprits. Noise dominates when it
    added more than any planted cause."""
    sums = steps.groupby("run_id")[list(CAUSE_COLUMNS)].sum()
    users = (steps.dropna(subset=["culprit_user"]).groupby(["run_id", "culprit_user"])["culprit_s"].sum()
             .reset_index().sort_values("culprit_s", ascending=False).drop_duplicates("run_id")
             .set_index("run_id")["culprit_user"])
    meta = runs.set_index("run_id")[["dataset", "failed"]]
    out = meta.join(sums, how="inner")
    out["dominant"] = out[list(CAUSE_COLUMNS)].idxmax(axis=1).map(CAUSE_CATEGORY)
    out["dominant_user"] = users.reindex(out.index).where(out["dominant"] == "neighbours")
    return out.reset_index()


_SQRT_2PI = np.sqrt(2 * np.pi)


def _expected_positive(mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """E[max(X, 0)] for X ~ N(mu, sd^2) (sd may be 0). The standard normal's CDF and density as
    ``scipy.stats.norm`` computes them (``special.ndtr``, ``exp(-z**2/2)/sqrt(2 pi)``), the same
    bits, without its argument checks: those cost more than the arithmetic, at each of a run's
    steps."""
    sd = np.maximum(sd, 1e-12)
    z = mu / sd
    return mu * special.ndtr(z) + sd * (np.exp(-z**2 / 2.0) / _SQRT_2PI)


def oracle_sums(ds: DatasetSpec, profile: np.ndarray, res: RunResult, frag: float, io: "OUProcess",
                n_steps: int) -> list[tuple[int, int, float]]:
    """The oracle forecaster: ``(t_c, k, expected seconds of steps t_c+1..t_c+k)``.

    It knows the true state after ``t_c`` observed steps (culprit intensity, the AR(1)
    congestion state, the I/O process up to now, placement) and the dynamics of the effect
    processes, but not the future: culprit activity is held as it is, the AR(1) and I/O
    processes evolve to their conditional expectations, and future step noise is unknown.
    """
    out = []
    kmax = max(ORACLE_K)
    for t_c in range(1, n_steps):
        t_now = res.step_start[t_c]
        J = min(kmax, n_steps - t_c)
        j = np.arange(1, J + 1)
        mu = AR_PHI**j * res.ar1[t_c - 1]
        sd = AR1_SD * np.sqrt((1 - AR_PHI ** (2 * j)) / (1 - AR_PHI**2))
        ahead = profile[t_c:t_c + J]
        starts = t_now + np.concatenate([[0.0], np.cumsum(ahead[:-1])])
        lag_t = starts - IO_LAG_S
        now_io = float(io(t_now))
        dt = np.maximum(lag_t - t_now, 0.0)
        io_mu = np.where(dt > 0, now_io * np.exp(-dt / io.tau), io(np.minimum(lag_t, t_now)))
        io_sd = io.sigma * np.sqrt(1 - np.exp(-2 * dt / io.tau))
        slow = (ds.sensitivity * (res.culprit_share[t_c] + _expected_positive(mu, sd) + PLACEMENT_EFFECT * frag)
                + ds.io_sensitivity * _expected_positive(io_mu, io_sd))
        cum = np.cumsum(ahead * np.maximum(1 + slow, 0.5))
        out += [(t_c, k, float(cum[k - 1])) for k in ORACLE_K if k <= J]
    return out


class OUProcess:
    """A smooth, mean-zero Ornstein-Uhlenbeck signal on a fixed grid (system I/O traffic)."""

    def __init__(self, t0: float, t1: float, rng: np.random.Generator, dt: float = 60.0,
                 tau: float = 1800.0, sigma: float = 0.6):
        n = int((t1 - t0) / dt) + 2
        phi = np.exp(-dt / tau)
        shocks = rng.normal(0, sigma * np.sqrt(1 - phi**2), n)
        x = np.empty(n)
        x[0] = rng.normal(0, sigma)
        for i in range(1, n):
            x[i] = phi * x[i - 1] + shocks[i]
        self.t0, self.dt, self.x, self.tau, self.sigma = t0, dt, x, tau, sigma
        # The grid's times, built once: rebuilt on every call, they made each call cost as much as
        # the whole campaign's span (the simulator's cost per run grew with the campaign's days).
        self.grid = t0 + dt * np.arange(n)

    def __call__(self, t):
        return np.interp(t, self.grid, self.x)
