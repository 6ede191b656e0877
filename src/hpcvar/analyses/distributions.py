"""Latency and step-time distributions as Confidence presents them (Settlemyer et al., ORNL).

Confidence describes a benchmark by its *empirical distribution* (PDF and CDF over fixed-width or
logarithmic bins) rather than by a mean, because latencies are one-sided and often have several
performance modes; it also bins the minimum of every benchmarking cycle (the best case the
hardware allows) and reports higher-order statistics. This module owns that view of our data:

- :func:`histogram_table` turns samples into a PDF/CDF table, over Confidence's logarithmic bins
  (``lw_0 = S``, ``lw_i = e^(S*i) - 1``, :mod:`hpcvar.parsers.microbenchmarks`) or fixed-width
  bins; :func:`histogram_from_counts` does the same for an already binned histogram (the
  dataset's ``latency_histograms``).
- :func:`describe`: summary statistics, quantiles, moments about the observed minimum and the
  modes.
- :func:`detect_modes`: Hartigan's dip test decides whether a sample is multimodal at all; only
  then are the modes located as peaks of a Gaussian kernel density estimate.
- :func:`cycle_minima`: the per-cycle minima of the microbenchmarks' ``latency`` rows.
- :func:`run`: the ``hpcvar distributions`` analysis over a dataset directory.

Settings of :func:`run`: :class:`hpcvar.settings.DistributionsSettings` (types, defaults and
bounds; listed in docs/settings.md; ``--set key=value`` on the command line). What they mean here:
``alpha``, ``min_weight``, ``min_prominence``, ``min_n`` and ``mode_scale`` are
:func:`detect_modes`'s options; ``nbins`` and ``bin_size_us`` are Confidence's C and S for
latencies (null S chooses S per distribution so the C bins just cover ``[0, max]``, see
:func:`log_bin_size`; S 0.05 with 256 bins reproduces ``hpcvar-confidence``'s own bins, values
beyond the last edge then sharing an open last bin); ``b_buckets`` splits the runs at quantiles
of their ``bg_traffic`` (the b heuristic of Salimi Beni et al., :mod:`hpcvar.background`) into
that many equally full buckets, because b's range depends on the machine's occupancy.
What :func:`run` writes to ``summary.json``, and the names of its files, are defined in
:mod:`hpcvar.results.distributions`.

Per dataset the same distributions are also drawn *by condition* (:func:`by_condition`): per
b bucket and per Dragonfly+ locality class (``locality_dfplus``: same group, same island,
different islands), with the Spearman correlation between b and each run's 95th percentile.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats
from scipy.signal import find_peaks

from hpcvar import tracking
from hpcvar.analyses.common import datasets, load, savefig, subplots
from hpcvar.parsers.microbenchmarks import bin_index, log_bin_edges
from hpcvar.results._common import MLflowRuns
from hpcvar.results.distributions import (Conditions, DistributionsDataset, DistributionsResult, HistogramSummary,
                                          Histograms, LatencyGroup)
from hpcvar.settings import DistributionsSettings

TABLE_COLUMNS = ["bin", "lower", "upper", "count", "pdf", "cdf"]
QUANTILES = {"p01": 0.01, "p05": 0.05, "p25": 0.25, "p75": 0.75, "p95": 0.95, "p99": 0.99}
#: Fixed-width histograms never get more bins than this (a few far outliers would otherwise
#: turn a Freedman-Diaconis width into millions of empty bins); the width grows instead.
MAX_FIXED_BINS = 10_000
#: Largest sample diptest has p-value tables for; larger samples are tested on order statistics.
DIP_MAX_N = 72_000
#: Above this many samples the KDE runs on the samples pre-binned to a tenth of the bandwidth.
_KDE_EXACT_MAX = 3000


# --- PDF / CDF tables ------------------------------------------------------------------------


def _finite(values) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    return x[np.isfinite(x)]


def log_bin_size(max_value: float, nbins: int) -> float:
    """The smallest S whose ``nbins`` logarithmic bins hold ``max_value`` (last edge just above it).

    Confidence's bins are in absolute units: ``lw_0 = S`` and, once ``S*i`` is large, every bin
    is about ``e^S - 1`` times its lower edge. A fixed S (Confidence's 50 ns) suits latencies in
    microseconds but not step times in seconds or ratios near 1, so by default S is taken from the
    data: the C bins then span ``[0, max]`` exactly, whatever the unit, with bins narrow near 0
    and widening with the value. The last finite edge grows monotonically with S, so S is found by
    bisection. ``max_value <= 0`` (all samples 0) gives S = 1.
    """
    if nbins < 1:
        raise ValueError("need at least one bin")
    if not max_value > 0:
        return 1.0

    def reach(s: float) -> float:
        with np.errstate(over="ignore"):  # a far too large trial S just reaches infinity
            return s + float(np.sum(np.expm1(s * np.arange(1, nbins))))

    lo, hi = 0.0, max(max_value, 1e-300)
    while reach(hi) <= max_value:  # only for nbins == 1 and rounding; the loop ends at once otherwise
        hi *= 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        lo, hi = (lo, mid) if reach(mid) > max_value else (mid, hi)
    size = hi
    # log_bin_edges sums the widths in the C code's order; make sure its last edge is above too
    # (bins are [lower, upper): a maximum on the last edge would fall beyond it).
    while log_bin_edges(size, nbins)[-1] <= max_value:
        size = math.nextafter(size, math.inf) if size * 1e-12 == 0 else size * (1 + 1e-12)
    return size


def _table(lower: np.ndarray, upper: np.ndarray, count: np.ndarray) -> pd.DataFrame:
    count = np.asarray(count, dtype=np.int64)
    n = int(count.sum())
    width = upper - lower
    with np.errstate(divide="ignore", invalid="ignore"):
        pdf = np.where(np.isfinite(width) & (width > 0), count / (n * width), np.nan)
    return pd.DataFrame({"bin": np.arange(len(count)), "lower": lower.astype(float), "upper": upper.astype(float),
                         "count": count, "pdf": pdf, "cdf": np.cumsum(count) / n})


def histogram_table(values, bins: str = "log", size: float | None = None, nbins: int | None = None,
                    width: float | None = None) -> pd.DataFrame:
    """Empirical PDF and CDF of ``values`` over Confidence's logarithmic or fixed-width bins.

    One row per bin with columns ``bin`` (0-based), ``lower``, ``upper`` (bin ``[lower, upper)``),
    ``count``, ``pdf`` (``count / (n * (upper - lower))``, a density in 1/unit of the values)
    and ``cdf`` (share of the samples below ``upper``). Non-finite values are ignored.

    ``bins="log"``: Confidence's bins (eq. 2 of the paper) with size parameter ``size`` (S, in the
    values' unit) and ``nbins`` bins (C, default 100), exactly as ``hpcvar-confidence`` bins
    (:func:`hpcvar.parsers.microbenchmarks.bin_index`); ``bin`` is Confidence's bin index, every
    bin from 0 is listed (empty ones too). Without ``size``, S is chosen so the bins just cover
    ``[0, max]`` (:func:`log_bin_size`). With a given S, values beyond the last edge go to the
    last bin as in Confidence, whose ``upper`` is then ``inf`` and ``pdf`` NaN. Log bins start at
    0: negative values are an error.

    ``bins="fixed"``: bins of ``width`` on a grid of multiples of the width (Confidence's
    ``f_w = T/C`` grid, starting at the multiple just below the minimum). Without ``width``:
    ``(max - min) / nbins`` if ``nbins`` is given, else the smaller of the Freedman-Diaconis width
    ``2 IQR n^(-1/3)`` (Scott's ``3.49 sd n^(-1/3)`` when the IQR is 0) and ``(max - min) / sqrt(n)``:
    with several modes the IQR spans the gap between them and Freedman-Diaconis alone would
    draw each mode as one or two bars (one bin of width 1 for constant data). At most
    :data:`MAX_FIXED_BINS` bins (the width grows to fit).
    """
    x = _finite(values)
    if x.size == 0:
        raise ValueError("no finite values to bin")
    n = x.size
    if bins == "log":
        if (x < 0).any():
            raise ValueError(f"logarithmic bins start at 0; {int((x < 0).sum())} values are negative")
        nbins = 100 if nbins is None else int(nbins)
        size = log_bin_size(float(x.max()), nbins) if size is None else float(size)
        edges = log_bin_edges(size, nbins)
        count = np.bincount(bin_index(x, size, nbins), minlength=nbins)
        upper = edges[1:].copy()
        if (x >= edges[-1]).any():
            upper[-1] = np.inf
        table = _table(edges[:-1], upper, count)
        table.attrs.update(bins="log", size=size, nbins=nbins)
        return table
    if bins != "fixed":
        raise ValueError(f"bins must be 'log' or 'fixed', got {bins!r}")
    lo, hi = float(x.min()), float(x.max())
    if width is None:
        if hi == lo:
            width = 1.0
        elif nbins:
            width = (hi - lo) / int(nbins)
        else:
            iqr = float(np.subtract(*np.quantile(x, [0.75, 0.25])))
            fd = 2 * iqr * n ** (-1 / 3) if iqr > 0 else 3.49 * float(np.std(x, ddof=1)) * n ** (-1 / 3)
            width = min(fd, (hi - lo) / math.sqrt(n))
    width = float(width)
    if not width > 0:
        raise ValueError(f"bin width must be positive, got {width}")
    if (hi - lo) / width >= MAX_FIXED_BINS:
        width = (hi - lo) / (MAX_FIXED_BINS - 1)
    start = math.floor(lo / width) * width
    count_bins = int(math.floor((hi - start) / width)) + 1
    edges = start + width * np.arange(count_bins + 1)
    index = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, count_bins - 1)
    table = _table(edges[:-1], edges[1:], np.bincount(index, minlength=count_bins))
    table.attrs.update(bins="fixed", width=width)
    return table


def histogram_from_counts(hist: pd.DataFrame, lower: str = "lower_us", upper: str = "upper_us",
                          count: str = "count") -> pd.DataFrame:
    """The PDF/CDF table (columns as :func:`histogram_table`) of an already binned histogram.

    ``hist`` has one row per bin, e.g. rows of the dataset's ``latency_histograms`` (which stores
    non-empty bins only; the last bin's ``upper_us`` may be inf). Rows with the same edges are
    added up, so several pairs' or runs' histograms over the same bins give their sum. Gaps
    between stored bins become bins with count 0 so the PDF is a step function over its whole
    range; ``bin`` numbers the resulting rows. Bins that overlap without being equal (histograms
    binned with different S) cannot be added and raise ``ValueError``.
    """
    if hist.empty:
        raise ValueError("empty histogram")
    summed = hist.groupby([lower, upper], as_index=False)[count].sum().sort_values([lower, upper])
    lo, up, cnt = (summed[c].to_numpy(dtype=float) for c in (lower, upper, count))
    if (up <= lo).any() or (cnt < 0).any():
        raise ValueError("histogram has a bin with upper <= lower or a negative count")
    if cnt.sum() <= 0:
        raise ValueError("histogram holds no samples")
    overlap = np.flatnonzero(lo[1:] < up[:-1] * (1 - 1e-12))
    if overlap.size:
        i = int(overlap[0])
        raise ValueError(f"bins [{lo[i]}, {up[i]}) and [{lo[i + 1]}, {up[i + 1]}) overlap: histograms binned "
                         "differently cannot be added")
    rows_lo, rows_up, rows_n = [], [], []
    for i in range(len(lo)):
        if i and lo[i] > up[i - 1] * (1 + 1e-12):
            rows_lo.append(up[i - 1]), rows_up.append(lo[i]), rows_n.append(0)
        rows_lo.append(lo[i]), rows_up.append(up[i]), rows_n.append(int(cnt[i]))
    return _table(np.array(rows_lo), np.array(rows_up), np.array(rows_n))


def histogram_summary(table: pd.DataFrame) -> dict:
    """A few figures of a PDF/CDF table: samples, the first bin's share (Confidence's timer check:
    the paper finds 99.8% of timer costs in the first 50 ns bin), the densest bin and the bins
    holding the median and the 99th percentile (``[lower, upper]``)."""
    n = int(table["count"].sum())
    first = table[table["count"] > 0].iloc[0]
    dense = table.loc[table["pdf"].fillna(-1).idxmax()]

    def at(q: float) -> list[float]:
        row = table.loc[int(np.searchsorted(table["cdf"].to_numpy(), q - 1e-12))]
        return [float(row["lower"]), float(row["upper"])]

    return {"n": n, "bins": int((table["count"] > 0).sum()),
            "first_bin": [float(first["lower"]), float(first["upper"])],
            "share_first_bin": float(first["count"]) / n,
            "densest_bin": [float(dense["lower"]), float(dense["upper"])],
            "median_bin": at(0.5), "p99_bin": at(0.99)}


# --- modes -----------------------------------------------------------------------------------


@dataclass
class Mode:
    """One performance mode: KDE peak ``location``, share of the samples ``weight``, and the
    range ``[lower, upper]`` of its basin (between the neighbouring density minima)."""

    location: float
    weight: float
    lower: float
    upper: float


@dataclass
class ModeResult:
    """What :func:`detect_modes` found. ``dip``/``dip_pvalue`` are NaN when no test was run
    (``tested`` False: too few samples or constant values); ``bandwidth`` is the KDE's kernel
    standard deviation on ``scale``."""

    multimodal: bool
    dip: float
    dip_pvalue: float
    modes: list[Mode]
    n: int = 0
    tested: bool = True
    bandwidth: float = math.nan
    scale: str = "linear"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _bandwidth(y: np.ndarray) -> float:
    """Silverman's robust rule ``0.9 min(sd, IQR/1.34) n^(-1/5)``: the IQR keeps a heavy tail from
    widening the kernel over the body of the distribution."""
    sd = float(np.std(y, ddof=1))
    iqr = float(np.subtract(*np.quantile(y, [0.75, 0.25])))
    spread = min(sd, iqr / 1.34) if iqr > 0 else sd
    return 0.9 * spread * y.size ** (-0.2)


def _kde(y: np.ndarray, bw: float) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian KDE (scipy) with kernel sd ``bw`` on a grid over the data (to the 99.9th percentile:
    a handful of far outliers cannot hold a mode of ``min_weight`` and would only coarsen the grid)."""
    lo = float(y[0]) - 3 * bw
    hi = max(float(np.quantile(y, 0.999)), float(y[0]) + bw) + 3 * bw
    points = int(np.clip(math.ceil((hi - lo) / (bw / 5)), 512, 4096))
    grid = np.linspace(lo, hi, points)
    if y.size > _KDE_EXACT_MAX:
        # Pre-binned to bw/10 (every sample moves by at most bw/20): same density, far fewer kernels.
        step = bw / 10
        k, counts = np.unique(np.floor((y - y[0]) / step).astype(np.int64), return_counts=True)
        data, weights = y[0] + (k + 0.5) * step, counts.astype(float)
    else:
        data, weights = y, None
    if np.unique(data).size < 2:
        return grid, stats.norm.pdf(grid, loc=float(data[0]), scale=bw)
    kde = stats.gaussian_kde(data, bw_method=1.0, weights=weights)
    kde.set_bandwidth(bw / math.sqrt(float(kde.covariance[0, 0])))
    return grid, kde(grid)


def _kde_modes(y: np.ndarray, bw: float, min_weight: float, min_prominence: float) -> list[tuple]:
    """Basins of the KDE's peaks in sorted ``y``, weak ones merged away:
    ``[(peak location, weight, lower, upper), ...]`` in increasing location."""
    grid, dens = _kde(y, bw)
    peaks = list(find_peaks(np.concatenate([[-1.0], dens, [-1.0]]))[0] - 1)
    if not peaks:
        peaks = [int(np.argmax(dens))]
    # boundaries[i] separates basin i and i+1: the density minimum between the two peaks.
    bounds = [peaks[i] + int(np.argmin(dens[peaks[i]:peaks[i + 1] + 1])) for i in range(len(peaks) - 1)]
    n = y.size
    while True:
        cuts = np.searchsorted(y, grid[bounds], side="left")
        edges = np.concatenate([[0], cuts, [n]])
        weights = np.diff(edges) / n
        saddles = [0.0, *dens[bounds], 0.0]
        height = dens[peaks]
        prominence = (height - np.maximum(saddles[:-1], saddles[1:])) / height
        weak = [i for i in range(len(peaks)) if weights[i] < min_weight or prominence[i] < min_prominence]
        if not weak or len(peaks) == 1:
            break
        i = min(weak, key=lambda j: (weights[j], prominence[j]))
        # Merge across the higher saddle (the less separated neighbour); the merged basin keeps
        # the higher of the two peaks.
        if i == 0:
            other = 1
        elif i == len(peaks) - 1:
            other = i - 1
        else:
            other = i - 1 if dens[bounds[i - 1]] >= dens[bounds[i]] else i + 1
        j = min(i, other)  # bounds[j] separates the two
        peaks[j] = peaks[i] if dens[peaks[i]] > dens[peaks[other]] else peaks[other]
        del peaks[j + 1], bounds[j]
    lowers = [float(y[0]), *grid[bounds]]
    uppers = [*grid[bounds], float(y[-1])]
    return [(float(grid[p]), float(w), float(lo), float(up)) for p, w, lo, up in zip(peaks, weights, lowers, uppers)]


def _dequantise(y: np.ndarray) -> np.ndarray:
    """Spread tied values uniformly over +-half the smallest gap between distinct values.

    The dip test assumes a continuous distribution: timers with a coarse tick give runs of equal
    values whose steps in the empirical CDF look like many tiny modes. Deterministic (seed 0) and
    harmless for data without ties (returned unchanged)."""
    distinct = np.unique(y)
    if distinct.size == y.size or distinct.size < 2:
        return y
    gap = float(np.min(np.diff(distinct)))
    return np.sort(y + np.random.default_rng(0).uniform(-gap / 2, gap / 2, y.size))


def detect_modes(values, alpha: float = 0.05, min_weight: float = 0.05, min_prominence: float = 0.1,
                 min_n: int = 20, scale: str = "linear") -> ModeResult:
    """The performance modes of a sample: Hartigan's dip test first, then KDE peaks.

    1. Hartigan's dip test (package ``diptest``, p-value from the tabulated null distribution of
       the uniform, the least favourable unimodal case, so the test is conservative) on the
       sample. Not rejected at ``alpha``: one mode, weight 1, at the argmax of the KDE.
    2. Rejected: a Gaussian KDE (``scipy.stats.gaussian_kde``; kernel sd by Silverman's robust
       rule) is evaluated on a grid; every peak is a candidate mode whose basin reaches to the
       density minima on either side, and whose ``weight`` is the share of the samples in the
       basin. The weakest peak holding less than ``min_weight`` of the samples or rising less
       than ``min_prominence`` of its height above its higher neighbouring minimum is merged into
       the neighbour across that minimum, until every mode passes; weights therefore sum to 1.
       Smoothing at Silverman's bandwidth can blur modes that the dip test sees; if fewer than
       two modes survive, the KDE is repeated at half the bandwidth.
    3. ``multimodal`` is True only when the dip test rejects *and* at least two modes survive;
       otherwise one mode (the KDE argmax) is reported, with the test's figures still given.

    Samples with fewer than ``min_n`` finite values, or constant ones, are not tested: one mode at
    the median (``tested`` False, ``dip`` and ``dip_pvalue`` NaN).

    ``scale="linear"`` (default) tests and smooths the values as they are. ``scale="log"`` works
    on their logarithms (positive values only) and reports locations and ranges back in the
    values' unit. Linear is the default because unimodality is not preserved by the logarithm:
    a sharp peak with a long, nearly flat tail (latency with OS noise) is unimodal, but the
    density of its log grows along the tail (the Jacobian ``e^y``) and can show a second "mode",
    while the dip test on linear values is unaffected by how far a tail reaches (it compares
    distribution functions). ``log`` suits modes that differ by orders of magnitude and are
    each narrow on a relative scale.

    Tied values (a coarse timer) are spread over half the tick first (:func:`_dequantise`); samples
    above ``DIP_MAX_N`` are tested on that many evenly spaced order statistics.
    """
    x = np.sort(_finite(values))
    if x.size == 0:
        raise ValueError("no finite values")
    if scale not in ("linear", "log"):
        raise ValueError(f"scale must be 'linear' or 'log', got {scale!r}")
    if scale == "log" and (x <= 0).any():
        raise ValueError("scale='log' needs positive values")
    y = np.log(x) if scale == "log" else x
    back = np.exp if scale == "log" else (lambda v: v)
    n = x.size
    if n < min_n or y[0] == y[-1]:
        note = f"fewer than {min_n} samples: not tested" if n < min_n else "constant values: not tested"
        return ModeResult(False, math.nan, math.nan, [Mode(float(np.median(x)), 1.0, float(x[0]), float(x[-1]))],
                          n=n, tested=False, scale=scale, notes=[note])
    import diptest

    notes: list[str] = []
    tested = y
    if n > DIP_MAX_N:
        # diptest's p-value tables end at 72,000 samples; evenly spaced order statistics keep the
        # empirical distribution (which the dip is computed from) to within 1/DIP_MAX_N.
        tested = y[np.linspace(0, n - 1, DIP_MAX_N).round().astype(int)]
        notes.append(f"dip test on {DIP_MAX_N:,} evenly spaced order statistics of {n:,}")
    dip, pvalue = diptest.diptest(_dequantise(tested))
    dip, pvalue = float(dip), float(pvalue)
    bw = _bandwidth(y)
    if not bw > 0:  # IQR and sd both 0 cannot happen for non-constant data; guard anyway
        bw = float(y[-1] - y[0]) / 10
    if pvalue < alpha:
        for factor in (1.0, 0.5):
            found = _kde_modes(y, bw * factor, min_weight, min_prominence)
            if len(found) >= 2:
                modes = [Mode(float(back(loc)), w, float(back(lo)), float(back(up))) for loc, w, lo, up in found]
                if factor != 1.0:
                    notes.append(f"modes resolved at {factor} x Silverman's bandwidth")
                return ModeResult(True, dip, pvalue, modes, n=n, bandwidth=bw * factor, scale=scale, notes=notes)
        notes.append("dip test rejects unimodality but the KDE resolves a single mode")
    grid, dens = _kde(y, bw)
    location = float(back(grid[int(np.argmax(dens))]))
    return ModeResult(False, dip, pvalue, [Mode(location, 1.0, float(x[0]), float(x[-1]))], n=n, bandwidth=bw,
                      scale=scale, notes=notes)


# --- summary statistics ----------------------------------------------------------------------


def moments_about_min(values) -> dict:
    """Moments about the observed minimum: ``m1..m4 = mean((x - min)^k)``, in the values' unit^k,
    and the standardised ``m3 / m2^1.5`` (``m3_std``) and ``m4 / m2^2`` (``m4_std``).

    Latency has a hard lower bound (the hardware's best case) and is one-sided, so Confidence's
    authors propose moments about the observed minimum instead of central ones: ``m1`` is the
    mean excess over the best case, ``sqrt(m2)`` its RMS. The standardised ratios are
    scale-free shape figures (a shifted exponential gives 6/2^1.5 = 2.12 and 24/4 = 6 whatever
    its rate); they are NaN for constant data.
    """
    x = _finite(values)
    if x.size == 0:
        raise ValueError("no finite values")
    d = x - x.min()
    m = {f"m{k}": float(np.mean(d ** k)) for k in range(1, 5)}
    m["m3_std"] = m["m3"] / m["m2"] ** 1.5 if m["m2"] > 0 else math.nan
    m["m4_std"] = m["m4"] / m["m2"] ** 2 if m["m2"] > 0 else math.nan
    return m


def describe(values, alpha: float = 0.05, min_weight: float = 0.05, min_prominence: float = 0.1,
             min_n: int = 20, scale: str = "linear") -> dict:
    """Confidence-style summary of a sample (non-finite values ignored).

    Keys: ``n``, ``mean``, ``median``, ``std`` (ddof 1), ``skew`` and ``excess_kurtosis``
    (scipy.stats, bias-corrected sample estimators; NaN for constant data or n < 4), ``min``,
    ``max``, quantiles ``p01 p05 p25 p75 p95 p99`` (linear interpolation), ``moments_about_min``
    (:func:`moments_about_min`), and the result of :func:`detect_modes` with the given options:
    ``multimodal``, ``dip``, ``dip_pvalue``, ``modes`` (list of ``{location, weight, lower,
    upper}``) and ``mode`` (the location of the heaviest mode).
    """
    x = _finite(values)
    if x.size == 0:
        raise ValueError("no finite values")
    n = x.size
    constant = x.min() == x.max()
    out = {"n": int(n), "mean": float(np.mean(x)), "median": float(np.median(x)),
           "std": float(np.std(x, ddof=1)) if n > 1 else math.nan,
           "skew": float(stats.skew(x, bias=False)) if n > 2 and not constant else math.nan,
           "excess_kurtosis": float(stats.kurtosis(x, fisher=True, bias=False)) if n > 3 and not constant
           else math.nan,
           "min": float(x.min()), "max": float(x.max())}
    out.update({k: float(v) for k, v in zip(QUANTILES, np.quantile(x, list(QUANTILES.values())))})
    out["moments_about_min"] = moments_about_min(x)
    modes = detect_modes(x, alpha=alpha, min_weight=min_weight, min_prominence=min_prominence, min_n=min_n,
                         scale=scale)
    out.update({"multimodal": modes.multimodal, "dip": modes.dip, "dip_pvalue": modes.dip_pvalue,
                "mode": max(modes.modes, key=lambda m: m.weight).location,
                "modes": [asdict(m) for m in modes.modes], "mode_notes": modes.notes})
    return out


# --- microbenchmark tables -------------------------------------------------------------------


MINIMA_KEY = ["run_id", "benchmark", "operation", "size_bytes", "pair", "cycle"]


def cycle_minima(latency: pd.DataFrame) -> pd.DataFrame:
    """The minimum of every benchmarking cycle, from the dataset's ``latency`` table.

    ``overtime`` rows are per-iteration times within cycles: their minimum per (run, operation,
    size, cycle) is taken. ``confidence`` rows already are per-cycle pair minima (operation
    ``pairwise_min``) and pass through, one row per (run, pair, cycle). ``collectives`` rows have
    no cycles and are left out. Columns: the key ``run_id, benchmark, operation, size_bytes, pair,
    cycle``, then ``value_us`` (the minimum) and ``iterations`` (samples it was taken over).
    """
    lat = latency[latency["benchmark"].isin(("overtime", "confidence"))]
    if lat.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in [*MINIMA_KEY, "value_us", "iterations"]})
    return (lat.groupby(MINIMA_KEY, as_index=False, sort=True, dropna=False)
            .agg(value_us=("value_us", "min"), iterations=("value_us", "size")))


# --- the analysis ----------------------------------------------------------------------------


def _mode_options(cfg: dict) -> dict:
    return {"alpha": cfg["alpha"], "min_weight": cfg["min_weight"], "min_prominence": cfg["min_prominence"],
            "min_n": cfg["min_n"], "scale": cfg["mode_scale"]}


def step_ratios(steps: pd.DataFrame) -> pd.Series:
    """Every step's duration divided by the median duration of the same step over the runs.

    Steps of one application differ systematically (a slow first step that warms caches and
    sets up communicators, periodic I/O steps); pooled raw, each kind of step would appear as a
    mode of its own. Against the same step's median every step kind is centred on 1, so what
    remains is the run-to-run variability the analysis is about."""
    median = steps.groupby("step")["duration_s"].transform("median")
    ratio = steps["duration_s"] / median.where(median > 0)
    return ratio[np.isfinite(ratio)]


def _plot_edges(table: pd.DataFrame, log: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges, PDF and CDF of the bins from the first to the last non-empty one, drawable on a log
    axis (a 0 lower edge becomes a tenth of the upper one; an open last bin twice its lower)."""
    used = np.flatnonzero(table["count"].to_numpy() > 0)
    t = table.iloc[used[0]:used[-1] + 1]
    lower, upper = t["lower"].to_numpy(float).copy(), t["upper"].to_numpy(float).copy()
    if not np.isfinite(upper[-1]):
        upper[-1] = 2 * lower[-1] if lower[-1] > 0 else 1.0
    if log and lower[0] <= 0:
        lower[0] = upper[0] / 10
    pdf = t["pdf"].to_numpy(float).copy()
    opened = ~np.isfinite(pdf)  # the open last bin, drawn as if it ended at twice its lower edge
    pdf[opened] = t["count"].to_numpy(float)[opened] / (table["count"].sum() * (upper - lower)[opened])
    return np.concatenate([lower, upper[-1:]]), pdf, t["cdf"].to_numpy(float)


def _plain_log_ticks(ax) -> None:
    """Over less than two decades, label a log axis 2, 3, 0.05 rather than 2x10^0 (every tick
    within a decade, 1-2-5 within two); wider axes keep matplotlib's powers of ten."""
    from matplotlib.ticker import FuncFormatter

    low, high = ax.get_xlim()
    if not 0 < low < high < 100 * low:
        return
    shown = range(1, 10) if high < 10 * low else (1, 2, 5)

    def label(value: float, _pos) -> str:
        if value <= 0:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return f"{value:g}" if abs(mantissa - round(mantissa)) < 1e-6 and round(mantissa) in shown else ""

    ax.xaxis.set_major_formatter(FuncFormatter(label))
    ax.xaxis.set_minor_formatter(FuncFormatter(label))


def plot_distribution(curves: list[tuple[str, pd.DataFrame]], modes: list[float], title: str, xlabel: str,
                      path: Path, log: bool) -> Path:
    """PDF (left) and CDF (right) of one or more PDF/CDF tables, mode locations marked."""
    fig, (ax_pdf, ax_cdf) = subplots(1, 2, figsize=(10, 3.6))
    for label, table in curves:
        if table is None or table["count"].sum() == 0:
            continue
        edges, pdf, cdf = _plot_edges(table, log)
        steps = ax_pdf.stairs(pdf, edges, label=label, linewidth=1.4)
        # The CDF is known at the bin edges (0 below the first non-empty bin): an ogive.
        ax_cdf.plot(edges, np.concatenate([[0.0], cdf]), label=label, color=steps.get_edgecolor())
    for i, loc in enumerate(modes):
        for ax in (ax_pdf, ax_cdf):
            ax.axvline(loc, color="#c0392b", linestyle="--", linewidth=0.9, label="mode" if i == 0 and ax is ax_pdf
                       else None)
    for ax, ylabel in ((ax_pdf, "probability density"), (ax_cdf, "cumulative probability")):
        if log:
            ax.set_xscale("log")
            _plain_log_ticks(ax)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    ax_cdf.set_ylim(0, 1.02)
    ax_pdf.legend(fontsize=8)
    fig.suptitle(title)
    return savefig(fig, path)


def _app_distributions(name: str, ds_runs: pd.DataFrame, steps: pd.DataFrame, cfg: dict, d: Path) -> dict:
    out: dict = {}
    opts = _mode_options(cfg)
    steps = steps[steps["run_id"].isin(ds_runs["run_id"])]
    ratios = step_ratios(steps)
    if len(ratios):
        table = histogram_table(ratios, bins="fixed")
        table.to_csv(d / DistributionsDataset.STEP_RATIO_TABLE, index=False)
        out["step_ratio"] = {**describe(ratios, **opts), "bin_width": table.attrs["width"],
                             "table": DistributionsDataset.STEP_RATIO_TABLE}
        plot_distribution([("step time / same step's median", table)],
                          [m["location"] for m in out["step_ratio"]["modes"]],
                          f"{name}: step times relative to the same step's median over runs",
                          "step time / median of the step", d / DistributionsDataset.STEP_RATIO_FIGURE, log=False)
    return out


def _run_time(name: str, ds_runs: pd.DataFrame, cfg: dict, d: Path) -> dict:
    times = ds_runs["total_time_s"]
    table = histogram_table(times, bins="fixed")
    table.to_csv(d / DistributionsDataset.RUN_TIME_TABLE, index=False)
    summary = {**describe(times, **_mode_options(cfg)), "bin_width": table.attrs["width"],
               "table": DistributionsDataset.RUN_TIME_TABLE}
    plot_distribution([("run time", table)], [m["location"] for m in summary["modes"]],
                      f"{name}: run times", "run time (s)", d / DistributionsDataset.RUN_TIME_FIGURE, log=False)
    return summary


def _tagged(table: pd.DataFrame, **tags) -> pd.DataFrame:
    return table.assign(**tags)[[*tags, *TABLE_COLUMNS]]


def _mode_rows(summary: dict, **tags) -> list[dict]:
    return [{**tags, "mode": i, **m} for i, m in enumerate(summary["modes"])]


def _microbenchmark_distributions(name: str, lat: pd.DataFrame, hist: pd.DataFrame, cfg: dict, d: Path) -> dict:
    opts = _mode_options(cfg)
    minima = cycle_minima(lat)
    minima.to_csv(d / DistributionsDataset.CYCLE_MINIMA_TABLE, index=False)
    groups, pdf_tables, mode_rows = [], [], []
    for (bench, op, size), g in lat.groupby(["benchmark", "operation", "size_bytes"], sort=True):
        values = g["value_us"].to_numpy(float)
        table = histogram_table(values, bins="log", size=cfg["bin_size_us"], nbins=cfg["nbins"])
        s = table.attrs["size"]
        key = {"benchmark": bench, "operation": op, "size_bytes": int(size)}
        summary = {**key, "unit": "us", **describe(values, **opts), "bin_size_us": s, "nbins": cfg["nbins"]}
        pdf_tables.append(_tagged(table, **key, sample="all"))
        mode_rows += _mode_rows(summary, **key, sample="all")
        curves = [("all samples" if bench != "confidence" else "pair minima per cycle", table)]
        m = minima[(minima["benchmark"] == bench) & (minima["operation"] == op) & (minima["size_bytes"] == size)]
        if len(m) and bench != "confidence":
            mtable = histogram_table(m["value_us"], bins="log", size=s, nbins=cfg["nbins"])
            summary["cycle_minima"] = describe(m["value_us"], **opts)
            pdf_tables.append(_tagged(mtable, **key, sample="cycle_minima"))
            mode_rows += _mode_rows(summary["cycle_minima"], **key, sample="cycle_minima")
            curves.append(("per-cycle minima", mtable))
        elif bench == "confidence":
            # Confidence's latency rows are the per-cycle pair minima themselves.
            summary["cycle_minima"] = {k: v for k, v in summary.items()
                                       if k not in (*key, "unit", "bin_size_us", "nbins")}
        else:
            summary["cycle_minima"] = None
        groups.append(summary)
        plot_distribution(curves, [mm["location"] for mm in summary["modes"]],
                          f"{name}: {bench} {op}, {int(size)} B", "latency (us)",
                          d / LatencyGroup.figure_file(bench, op, int(size)), log=True)
        print(f"distributions: {name}: {bench} {op} {int(size)} B: n={summary['n']}, "
              f"{len(summary['modes'])} mode(s), dip p={summary['dip_pvalue']}", file=sys.stderr, flush=True)
    if pdf_tables:
        pd.concat(pdf_tables, ignore_index=True).to_csv(d / DistributionsDataset.LATENCY_TABLE, index=False)
    pd.DataFrame(mode_rows).to_csv(d / DistributionsDataset.MODES_TABLE, index=False)
    histograms, hist_tables, curves = {}, [], []
    for kind in ("timer", "pairwise", "minima"):
        rows = hist[hist["kind"] == kind]
        if rows.empty or rows["count"].sum() == 0:
            histograms[kind] = None
            continue
        try:
            table = histogram_from_counts(rows)
        except ValueError as exc:  # runs binned with different S
            histograms[kind] = {"error": str(exc)}
            continue
        histograms[kind] = {**histogram_summary(table), "runs": int(rows["run_id"].nunique()),
                            "histograms": int(rows[["run_id", "pair"]].drop_duplicates().shape[0])}
        hist_tables.append(_tagged(table, kind=kind))
        curves.append((kind, table))
    if hist_tables:
        pd.concat(hist_tables, ignore_index=True).to_csv(d / DistributionsDataset.HISTOGRAMS_TABLE, index=False)
        timer = [c for c in curves if c[0] == "timer"]
        lat_curves = [(("all pairwise samples" if k == "pairwise" else "per-cycle pair minima"), t)
                      for k, t in curves if k != "timer"]
        if timer:
            plot_distribution(timer, [], f"{name}: timer cost (MPI_Wtime back to back, minus its minimum)",
                              "timer cost (us)", d / Histograms.figure_file("timer"), log=True)
        if lat_curves:
            plot_distribution(lat_curves, [], f"{name}: Confidence pairwise latency (histograms, all pairs)",
                              "latency (us)", d / Histograms.figure_file("pairwise"), log=True)
    return {"latency": groups, "histograms": histograms}


LOCALITY_ORDER = ("same-group", "same-island", "different-islands")


def b_buckets(b: pd.Series, n: int) -> tuple[pd.Series, list[float]]:
    """Each run's b bucket (``b1`` lowest .. ``b<n>``) at quantiles of ``b``, and the edges used."""
    valid = b.dropna()
    if valid.nunique() < 2 or n < 2:
        return pd.Series("b1", index=b.index).where(b.notna()), [float(valid.min()), float(valid.max())] \
            if len(valid) else []
    edges = np.unique(np.quantile(valid, np.linspace(0, 1, n + 1)))
    labels = [f"b{i + 1}" for i in range(len(edges) - 1)]
    bucket = pd.cut(b, edges, labels=labels, include_lowest=True).astype("string")
    return bucket, [float(e) for e in edges]


def _group_stats(values: np.ndarray) -> dict:
    v = _finite(values)
    if not len(v):
        return {"n": 0}
    return {"n": int(len(v)), "median": float(np.median(v)), "p95": float(np.quantile(v, 0.95)),
            "p99": float(np.quantile(v, 0.99)), "mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1
            else None, "skew": float(stats.skew(v)) if len(v) > 2 and v.std() > 0 else None}


def by_condition(name: str, ds_runs: pd.DataFrame, lat: pd.DataFrame, cfg: dict, d: Path) -> dict:
    """Distributions per background-traffic bucket and per Dragonfly+ locality class.

    The variables are every microbenchmark (benchmark, operation, size) over all its timed
    operations, or the run time for application datasets. Returns the bucket edges, one row per
    (variable, condition, group) (also written to ``conditions.csv``) and, per variable, the
    Spearman correlation between a run's b and its 95th percentile -- the tail, which is where
    background traffic shows (Salimi Beni et al., Figure 2) -- with one value per run, so runs with
    many iterations do not count as many independent observations -- also *within locality*: the
    run's 95th percentile relative to the median of the runs in its locality class."""
    runs = ds_runs.set_index("run_id")
    b = runs["bg_traffic"] if "bg_traffic" in runs else pd.Series(np.nan, index=runs.index)
    loc = runs["locality_dfplus"] if "locality_dfplus" in runs else pd.Series(pd.NA, index=runs.index)
    bucket, edges = b_buckets(b.astype(float), int(cfg["b_buckets"]))
    if len(lat):
        variables = {f"{bench} {op} {int(size)} B": g for (bench, op, size), g in
                     lat.groupby(["benchmark", "operation", "size_bytes"], sort=True)}
        unit, log = "us", True
    else:
        variables = {"run time": pd.DataFrame({"run_id": runs.index, "value_us": runs["total_time_s"].to_numpy()})}
        unit, log = "s", False
    rows, spearman = [], {}
    for var, g in variables.items():
        per_run = g.groupby("run_id")["value_us"].quantile(0.95)
        both = pd.concat([b.rename("b"), per_run.rename("p95"), loc.rename("locality")], axis=1)
        both = both.dropna(subset=["b", "p95"])
        # Placement also moves the tail; relative to the runs of the same locality class, b's
        # own effect is not confounded by where the nodes were.
        known = both["locality"].notna()
        both["p95_rel"] = both["p95"] / both.loc[known].groupby("locality")["p95"].transform("median")
        spearman[var] = {"rho": None, "p": None, "rho_within_locality": None, "p_within_locality": None,
                         "runs": int(len(both))}
        if len(both) >= 4 and both["b"].nunique() > 1:
            rho, p = stats.spearmanr(both["b"], both["p95"])
            spearman[var].update(rho=float(rho), p=float(p))
            rel = both.dropna(subset=["p95_rel"])
            if len(rel) >= 4 and rel["b"].nunique() > 1:
                rho, p = stats.spearmanr(rel["b"], rel["p95_rel"])
                spearman[var].update(rho_within_locality=float(rho), p_within_locality=float(p))
        for condition, labels, order in (("b", bucket, [f"b{i + 1}" for i in range(max(len(edges) - 1, 1))]),
                                         ("locality", loc, list(LOCALITY_ORDER))):
            curves = []
            for group in order:
                ids = labels.index[labels == group]
                values = g.loc[g["run_id"].isin(ids), "value_us"].to_numpy(float)
                if not len(values):
                    continue
                row = {"variable": var, "condition": condition, "group": group, "runs": int(len(ids)),
                       **_group_stats(values)}
                if condition == "b":
                    i = int(group[1:]) - 1
                    row.update(b_lower=edges[i], b_upper=edges[i + 1])
                rows.append(row)
                table = histogram_table(values, bins="log" if log else "fixed",
                                        size=cfg["bin_size_us"] if log else None, nbins=cfg["nbins"] if log else None)
                label = (f"{group}: b {edges[int(group[1:]) - 1]:.0f}-{edges[int(group[1:])]:.0f}"
                         if condition == "b" else group)
                curves.append((f"{label} ({len(ids)} runs)", table))
            if curves:
                plot_distribution(curves, [], f"{name}: {var} by {'background traffic b' if condition == 'b' else 'locality'}",
                                  f"{'latency' if log else 'run time'} ({unit})",
                                  d / Conditions.figure_file(condition, var), log=log)
    table = pd.DataFrame(rows)
    table.to_csv(d / Conditions.TABLE, index=False)
    return {"b_edges": edges, "runs_with_b": int(b.notna().sum()),
            "runs_by_locality": {k: int(v) for k, v in loc.value_counts().items()},
            "spearman_b_p95": spearman, "groups": rows, "table": Conditions.TABLE, "unit": unit}


def run(dataset_dir: str | Path, out_dir: str | Path, config: dict | None = None) -> DistributionsResult:
    """The ``hpcvar distributions`` analysis: per dataset, distributions of step times and run
    times (application datasets) or of every microbenchmark operation, its per-cycle minima and
    Confidence's histograms (microbenchmark datasets), with the settings
    :class:`~hpcvar.settings.DistributionsSettings` from ``config`` (an unknown key or a bad value
    raises :class:`~hpcvar.settings.SettingsError`). Writes ``OUT/summary.json``, per dataset CSV
    tables and SVG figures under ``OUT/<dataset>/``, logs one MLflow run per dataset, and returns
    the result (:class:`~hpcvar.results.distributions.DistributionsResult`)."""
    cfg = DistributionsSettings.from_mapping(config).as_dict()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = load(dataset_dir, tables=("runs", "steps", "latency", "latency_histograms"))
    runs, steps, latency, hists = data["runs"], data["steps"], data["latency"], data["latency_histograms"]
    summary: dict = {"analysis": "distributions", "params": cfg, "datasets": {}}
    for name in datasets(runs, cfg["min_runs"]):
        ds_runs = runs[runs["dataset"] == name]
        d = out_dir / DistributionsResult.dataset_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        lat = latency[latency["run_id"].isin(ds_runs["run_id"])]
        hist = hists[hists["run_id"].isin(ds_runs["run_id"])]
        app = bool((ds_runs["num_steps"] > 0).any())
        entry: dict = {"kind": "application" if app else "microbenchmark", "runs": len(ds_runs),
                       "run_time_s": _run_time(name, ds_runs, cfg, d)}
        if app:
            entry.update(_app_distributions(name, ds_runs, steps, cfg, d))
        if len(lat) or len(hist):
            entry.update(_microbenchmark_distributions(name, lat, hist, cfg, d))
        entry["conditions"] = by_condition(name, ds_runs, lat, cfg, d)
        summary["datasets"][name] = entry
        print(f"distributions: {name}: {len(ds_runs)} runs ({entry['kind']})", file=sys.stderr, flush=True)
    result = DistributionsResult.build(summary)
    result.mlflow = MLflowRuns.model_validate(_log(dataset_dir, out_dir, cfg, runs, steps, latency, result))
    result.write(out_dir)
    return result


def _metrics(entry: DistributionsDataset) -> dict:
    m = {"runs": entry.runs, "run_time_modes": len(entry.run_time_s.modes)}
    if entry.step_ratio is not None:
        s = entry.step_ratio
        m.update(step_ratio_modes=len(s.modes), step_ratio_p99=s.p99, step_ratio_dip_pvalue=s.dip_pvalue)
    if entry.latency is not None:
        m.update(latency_groups=len(entry.latency), multimodal_groups=sum(g.multimodal for g in entry.latency))
        if isinstance(entry.histograms.timer, HistogramSummary):
            m["timer_share_first_bin"] = entry.histograms.timer.share_first_bin
    return {k: float(v) for k, v in m.items() if v is not None and math.isfinite(float(v))}


def _log(dataset_dir, out_dir: Path, cfg: dict, runs, steps, latency, result: DistributionsResult) -> dict:
    import mlflow

    ids = {}
    with tracking.session("distributions", dataset_dir) as exp_id:
        for name, entry in result.datasets.items():
            with mlflow.start_run(run_name=name, tags={"hpcvar.dataset": name}) as r:
                run_ids = runs.loc[runs["dataset"] == name, "run_id"]
                if entry.kind == "application":
                    # The columns analysed (MLflow's digest of tz-aware timestamps warns in pandas 3).
                    used = steps.loc[steps["run_id"].isin(run_ids), ["run_id", "step", "duration_s"]]
                    tracking.log_dataset(used, Path(dataset_dir) / "steps", f"{name}-steps", "analysis")
                else:
                    tracking.log_dataset(latency[latency["run_id"].isin(run_ids)], Path(dataset_dir) / "latency",
                                         f"{name}-latency", "analysis")
                mlflow.log_params({k: ("null" if v is None else v) for k, v in cfg.items()})
                mlflow.log_metrics(_metrics(entry))
                mlflow.log_artifacts(str(out_dir / DistributionsResult.dataset_dir(name)),
                                     artifact_path="distributions")
                ids[name] = r.info.run_id
        return {"tracking_uri": mlflow.get_tracking_uri(), "experiment_id": exp_id, "runs": ids}
