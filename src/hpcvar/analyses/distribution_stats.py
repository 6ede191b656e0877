"""Statistics of one sample as Confidence presents it (Settlemyer et al., ORNL): the empirical
distribution (PDF and CDF over logarithmic or fixed-width bins), its performance modes, summary
statistics and the microbenchmarks' per-cycle minima. The ``hpcvar distributions`` analysis
(:mod:`hpcvar.analyses.distributions`) and the regression check (:mod:`hpcvar.analyses.compare`)
both use it.

- :func:`histogram_table` turns samples into a PDF/CDF table, over Confidence's logarithmic bins
  (``lw_0 = S``, ``lw_i = e^(S*i) - 1``, :mod:`hpcvar.parsers.microbenchmarks`) or fixed-width
  bins; :func:`histogram_from_counts` does the same for an already binned histogram (the
  dataset's ``latency_histograms``).
- :func:`describe`: summary statistics, quantiles, moments about the observed minimum and the
  modes.
- :func:`detect_modes`: Hartigan's dip test decides whether a sample is multimodal at all; only
  then are the modes located as peaks of a Gaussian kernel density estimate.
- :func:`cycle_minima`: the per-cycle minima of the microbenchmarks' ``latency`` rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd
from scipy import stats
from scipy.signal import find_peaks

from hpcvar.parsers.microbenchmarks import bin_index, log_bin_edges

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


def finite_values(values) -> np.ndarray:
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
    x = finite_values(values)
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
    x = np.sort(finite_values(values))
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
    x = finite_values(values)
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
    x = finite_values(values)
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
