"""The comparison of ``hpcvar compare``: per (test, variable), is there a difference, and what kind?

* :func:`difference_tests`: Kolmogorov-Smirnov, Anderson-Darling and Brown-Forsythe, and their
  Bonferroni minimum ``p_pair``; :func:`group_permutation_tests` replaces them for samples that
  come in runs, exchanging whole runs between BEFORE and AFTER;
* :func:`holm`: Holm's step-down correction over all pairs;
* effect sizes: the median shift with its bootstrap interval (whole runs resampled for grouped
  samples), Cliff's delta, the IQR ratio, Wasserstein distances and the modes
  (:func:`hpcvar.analyses.distribution_stats.detect_modes`);
* the verdict (one of :data:`VERDICTS`) and its one-line reason.

:func:`compare` runs all of it on two samples tables and returns one row per pair.
"""

from __future__ import annotations

import fnmatch
import math
import warnings
import zlib

import numpy as np
import pandas as pd
from scipy import stats

from hpcvar.analyses.compare.sources import BadInput
from hpcvar.settings import CompareSettings

VERDICTS = ("unchanged", "faster", "slower", "changed shape", "not compared")
#: What counts as a regression unless ``--fail-on`` says otherwise.
DEFAULT_FAIL_ON = ("slower", "changed shape")

# --- the comparison ---------------------------------------------------------------------------------

def _rate_unit(unit: str) -> bool:
    """Units of throughput (GB/s, Gflop/s, iter/s) are better higher."""
    u = (unit or "").strip().lower()
    return u.endswith("/s") or u in ("gbps", "mbps", "kbps", "flops", "gflops", "tflops", "iops")


def _better(variable: str, stated: str, unit: str, higher: tuple, lower: tuple) -> str:
    if any(fnmatch.fnmatchcase(variable, p) for p in higher):
        return "higher"
    if any(fnmatch.fnmatchcase(variable, p) for p in lower):
        return "lower"
    if stated in ("lower", "higher"):
        return stated
    return "higher" if _rate_unit(unit) else "lower"


def _check(samples: pd.DataFrame, name: str) -> pd.DataFrame:
    missing = [c for c in ("test", "variable", "value") if c not in samples.columns]
    if missing:
        raise ValueError(f"{name} samples lack columns {missing}")
    out = samples.copy()
    for c in ("unit", "better"):
        out[c] = out[c].fillna("").astype(str) if c in out.columns else ""
    out["group"] = out["group"] if "group" in out.columns else None
    out["value"] = pd.to_numeric(out["value"], errors="raise").astype(float)
    return out[np.isfinite(out["value"])]


def _pair_seed(seed: int, test: str, variable: str) -> int:
    # Per pair, independent of which other pairs are compared and in what order.
    return zlib.crc32(f"{seed}\0{test}\0{variable}".encode())


def _subsample(values: np.ndarray, groups: np.ndarray | None, cap: int, rng) -> tuple:
    if len(values) <= cap:
        return values, groups
    idx = np.sort(rng.choice(len(values), cap, replace=False))
    return values[idx], (groups[idx] if groups is not None else None)


def _boot_medians(values: np.ndarray, groups: np.ndarray | None, n_boot: int, rng) -> np.ndarray:
    """Bootstrap medians; whole groups are resampled when there are at least two."""
    if groups is not None:
        _, codes = np.unique(groups.astype(str), return_inverse=True)
        members = [values[codes == g] for g in range(codes.max() + 1)]
        if len(members) >= 2:
            picks = rng.integers(0, len(members), size=(n_boot, len(members)))
            return np.array([np.median(np.concatenate([members[i] for i in p])) for p in picks])
    out = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(len(values), 1))
    for lo in range(0, n_boot, chunk):
        hi = min(n_boot, lo + chunk)
        out[lo:hi] = np.median(values[rng.integers(0, len(values), size=(hi - lo, len(values)))], axis=1)
    return out


def _quiet(fn, *args, **kwargs) -> tuple[float, float]:
    """A test's (statistic, p-value), NaN where it is undefined (constant samples)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = fn(*args, **kwargs)
        except (ValueError, ZeroDivisionError, FloatingPointError):
            return math.nan, math.nan
    return float(res.statistic), float(res.pvalue)


def _iqr(x: np.ndarray) -> float:
    q75, q25 = np.percentile(x, [75, 25])
    return float(q75 - q25)


def _modes(values: np.ndarray, alpha: float, min_weight: float) -> list[dict] | None:
    """Modes by Hartigan's dip test and KDE peaks (:func:`hpcvar.analyses.distribution_stats.detect_modes`),
    each holding at least ``min_weight`` of the samples; None when too few samples to test."""
    from hpcvar.analyses.distribution_stats import detect_modes

    result = detect_modes(values, alpha, min_weight=min_weight)
    if not result.tested:
        return None
    return [{"location": float(m.location), "weight": float(m.weight), "lower": float(m.lower),
             "upper": float(m.upper)} for m in result.modes]


def difference_tests(b: np.ndarray, a: np.ndarray) -> dict:
    """Do BEFORE and AFTER differ at all? Kolmogorov-Smirnov, Anderson-Darling (p floored at 0.001,
    capped at 0.25 by scipy's tables) and Brown-Forsythe; ``p_pair`` is their Bonferroni minimum,
    a valid p-value for "same distribution" whatever the dependence between the three."""
    s = {}
    s["ks_stat"], s["ks_p"] = _quiet(stats.ks_2samp, b, a)
    s["ad_stat"], s["ad_p"] = _quiet(stats.anderson_ksamp, [b, a], variant="midrank")
    s["bf_stat"], s["bf_p"] = _quiet(stats.levene, b, a, center="median")
    ps = [p for p in (s["ks_p"], s["ad_p"], s["bf_p"]) if math.isfinite(p)]
    s["p_pair"] = min(1.0, len(ps) * min(ps)) if ps else 1.0
    return s


def _perm_statistics(assign: np.ndarray, codes: np.ndarray, dev: np.ndarray, last: np.ndarray) -> np.ndarray:
    """KS, Anderson-Darling and spread statistics for many labellings at once.

    ``assign`` (P x G, True = BEFORE) labels groups; ``codes`` gives each pooled, sorted value's
    group; ``dev`` is each value's distance from the pooled median (a Levene-type spread measure
    that does not depend on the labelling); ``last`` marks the last value of each run of ties.

    With ``mb`` the BEFORE values among the first j of the n sorted ones, the AFTER ones number
    ``j - mb``, so both empirical CDFs and both Anderson-Darling terms follow from ``mb`` alone
    (``n*ma - j*na = -(n*mb - j*nb)``), and the spread's sums from each group's sum of ``dev``:
    a few passes over the P x n matrix instead of one per term."""
    n_groups, n = assign.shape[1], len(codes)
    weights = assign.astype(float)
    nb = weights @ np.bincount(codes, minlength=n_groups).astype(float)
    na = n - nb
    mb = np.cumsum(assign[:, codes], axis=1, dtype=float)
    j = np.arange(1, n + 1, dtype=float)
    both = (1 / nb + 1 / na)[:, None]
    at = mb if last.all() else mb[:, last]
    ks = np.abs(at * both - j[last] / na[:, None]).max(axis=1)
    gap = mb[:, :-1] * n
    gap -= nb[:, None] * j[:-1]
    ad = (gap * gap) @ (1 / (j[:-1] * (n - j[:-1]))) * both[:, 0] / n
    dev_b = weights @ np.bincount(codes, weights=dev, minlength=n_groups)
    spread = np.abs(dev_b / nb - (dev.sum() - dev_b) / na)
    return np.stack([ks, ad, spread], axis=1)


def group_permutation_tests(b: np.ndarray, a: np.ndarray, gb: np.ndarray, ga: np.ndarray, *, rng,
                            n_perm: int = CompareSettings.model_fields["n_perm"].default, max_values: int = 2000,
                            stop_after: int = 50) -> dict:
    """Do BEFORE and AFTER differ by more than their groups (runs) differ among themselves?

    Whole groups are exchanged between BEFORE and AFTER (all labellings when there are at most
    ``n_perm``, else ``n_perm`` random ones, stopping early once ``stop_after`` are at least as
    extreme: the p-value is then clearly large) and the KS, Anderson-Darling and spread statistics
    of the pooled values are recomputed. Steps or iterations of one run share its placement and
    neighbours, so treating them as independent samples would call ordinary run-to-run variation a
    system change. Groups are thinned to ``max_values`` values in all for speed; the test stays exact."""
    from itertools import combinations

    # Each side's groups in the order of their names, each group's values in their own order,
    # split at once (a comparison of every value's group name with each name in turn took a
    # second per pair at 2,989 runs).
    sides = [(x, *np.unique(g.astype(str), return_inverse=True)) for x, g in ((b, gb), (a, ga))]
    keys_b, keys_a = sides[0][1], sides[1][1]
    per_group = max(10, max_values // (len(keys_b) + len(keys_a)))
    values, codes = [], []
    for x, keys, inverse in sides:
        inverse = inverse.ravel()
        grouped = x[np.argsort(inverse, kind="stable")]
        ends = np.cumsum(np.bincount(inverse, minlength=len(keys)))
        for v in (grouped[lo:hi] for lo, hi in zip(np.r_[0, ends[:-1]], ends)):
            if len(v) > per_group:
                v = rng.choice(v, per_group, replace=False)
            values.append(v)
            codes.append(np.full(len(v), len(codes)))
    z, codes = np.concatenate(values), np.concatenate(codes)
    order = np.argsort(z, kind="stable")
    z, codes = z[order], codes[order]
    last = np.r_[z[1:] != z[:-1], True]
    dev = np.abs(z - np.median(z))
    n_groups, n_b = len(keys_b) + len(keys_a), len(keys_b)
    observed = np.zeros((1, n_groups), bool)
    observed[0, :n_b] = True
    t_obs = _perm_statistics(observed, codes, dev, last)[0]
    tol = 1e-9 * np.abs(t_obs)
    exact = math.comb(n_groups, n_b) <= n_perm + 1
    if exact:
        # Every labelling, the observed one included: the exact permutation distribution.
        combos = np.array(list(combinations(range(n_groups), n_b)))
        hits = np.zeros(3, int)
        for lo in range(0, len(combos), 500):  # in chunks: P x N matrices stay small
            chunk = combos[lo:lo + 500]
            assign = np.zeros((len(chunk), n_groups), bool)
            assign[np.arange(len(chunk))[:, None], chunk] = True
            hits += (_perm_statistics(assign, codes, dev, last) >= t_obs - tol).sum(axis=0)
        p, done = hits / len(combos), len(combos)
    else:
        hits, done = np.zeros(3, int), 0
        while done < n_perm and hits.min() < stop_after:
            size = min(500, n_perm - done)
            assign = np.argsort(rng.random((size, n_groups)), axis=1) < n_b
            hits += (_perm_statistics(assign, codes, dev, last) >= t_obs - tol).sum(axis=0)
            done += size
        p = (1 + hits) / (1 + done)
    return {"perm_ks_p": float(p[0]), "perm_ad_p": float(p[1]), "perm_spread_p": float(p[2]),
            "permutations": int(done), "permutation_exact": bool(exact),
            "p_pair": float(min(1.0, 3 * p.min()))}


def _pair_stats(b: np.ndarray, a: np.ndarray, gb, ga, *, alpha, n_boot, max_samples, min_mode_weight, rng,
                n_perm: int) -> dict:
    s: dict = {"n_before": len(b), "n_after": len(a)}
    med_b, med_a = float(np.median(b)), float(np.median(a))
    scale = abs(med_b) if med_b != 0 else math.nan
    s.update(median_before=med_b, median_after=med_a, shift_pct=100 * (med_a - med_b) / scale)
    bs, gbs = _subsample(b, gb, max_samples, rng)
    as_, gas = _subsample(a, ga, max_samples, rng)
    boot = 100 * (_boot_medians(as_, gas, n_boot, rng) - _boot_medians(bs, gbs, n_boot, rng)) / scale
    s["shift_ci_low"], s["shift_ci_high"] = (float(v) for v in np.percentile(boot, [100 * alpha / 2, 100 * (1 - alpha / 2)]))
    s["ci_level"] = 1 - alpha
    s["groups_before"] = int(len(set(gb))) if gb is not None else None
    s["groups_after"] = int(len(set(ga))) if ga is not None else None
    u, s["mwu_p"] = _quiet(stats.mannwhitneyu, a, b, alternative="two-sided")
    s["cliffs_delta"] = 2 * u / (len(a) * len(b)) - 1 if math.isfinite(u) else math.nan
    s.update(difference_tests(b, a))
    s["shape_ad_stat"], s["shape_p"] = _quiet(stats.anderson_ksamp, [b - med_b, a - med_a], variant="midrank")
    s["wasserstein"] = float(stats.wasserstein_distance(b, a))
    s["wasserstein_pct"] = 100 * s["wasserstein"] / scale
    s["wasserstein_shape_pct"] = 100 * float(stats.wasserstein_distance(b - med_b, a - med_a)) / scale
    s["iqr_before"], s["iqr_after"] = _iqr(b), _iqr(a)
    s["iqr_ratio"] = s["iqr_after"] / s["iqr_before"] if s["iqr_before"] > 0 else (
        1.0 if s["iqr_after"] == 0 else math.inf)
    s["modes_before"], s["modes_after"] = _modes(bs, alpha, min_mode_weight), _modes(as_, alpha, min_mode_weight)
    s["inference"] = "samples"
    if gb is not None and ga is not None:
        s.update(group_permutation_tests(b, a, gb, ga, rng=rng, n_perm=n_perm))
        s["inference"] = "groups"
    return s


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error rate, any dependence)."""
    p = np.asarray(pvalues, float)
    order = np.argsort(p)
    m = len(p)
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


def fmt_g(x, digits=3) -> str:
    """``x`` to ``digits`` significant digits; ``n/a`` when missing (None, NaN, inf)."""
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}g}"


def _verdict(s: dict, *, alpha, min_effect, min_spread) -> tuple[str, str, dict]:
    better = s["better"]
    shift, lo, hi = s["shift_pct"], s["shift_ci_low"], s["shift_ci_high"]
    ci = f"median {shift:+.1f}% [{lo:+.1f}, {hi:+.1f}]" if math.isfinite(shift) else "median shift n/a"
    grouped = s.get("inference") == "groups"
    # Grouped samples (runs): the spread and shape evidence is the run-level permutation test's.
    spread_p, spread_test = (s["perm_spread_p"], "run permutation") if grouped else (s["bf_p"], "Brown-Forsythe")
    shape_p = s["perm_ad_p"] if grouped else s["shape_p"]
    spread_limit = 1 + min_spread / 100
    r = s["iqr_ratio"]
    spread = (math.isfinite(r) and (r >= spread_limit or r <= 1 / spread_limit) or r == math.inf) and \
        math.isfinite(spread_p) and spread_p < alpha
    mb, ma = s["modes_before"], s["modes_after"]
    # detect_modes merges modes under min_mode_weight, so a different count is a mode of at
    # least that share of the samples appearing or vanishing.
    modes = mb is not None and ma is not None and len(mb) != len(ma)
    other = (math.isfinite(s["wasserstein_shape_pct"]) and s["wasserstein_shape_pct"] >= min_effect
             and math.isfinite(shape_p) and shape_p < alpha)
    flags = {"spread_changed": bool(spread), "modes_changed": bool(modes), "shape_differs": bool(other)}
    notes = []
    if spread:
        notes.append(f"spread x{r:.2f} ({'wider' if r > 1 else 'narrower'}; IQR {fmt_g(s['iqr_before'])} -> "
                     f"{fmt_g(s['iqr_after'])}, {spread_test} p={fmt_g(spread_p, 2)})")
    if modes:
        at = lambda ms: ", ".join(f"{fmt_g(m['location'], 4)} ({m['weight']:.0%})" for m in ms)
        notes.append(f"modes {len(mb)} -> {len(ma)} (at {at(mb)} -> {at(ma)})")
    if other:
        notes.append(f"shape differs with medians aligned (Wasserstein {s['wasserstein_shape_pct']:.1f}% of the "
                     f"median, {'run permutation ' if grouped else ''}AD p={fmt_g(shape_p, 2)})")
    if s["p_holm"] >= alpha:
        why = f"no significant difference (Holm-adjusted p={fmt_g(s['p_holm'], 2)}; {ci})"
        if grouped:
            why += f"; tested by exchanging whole runs ({s['groups_before']} before, {s['groups_after']} after)"
            if s["permutation_exact"] and 3 / math.comb(s["groups_before"] + s["groups_after"], s["groups_before"]) >= alpha:
                why += ", too few to tell a change from run-to-run variation (--independent pools them)"
        return "unchanged", why, flags
    located = math.isfinite(shift) and abs(shift) >= min_effect and (lo > 0 or hi < 0)
    if located:
        worse = (shift > 0) == (better == "lower")
        verdict = "slower" if worse else "faster"
        test = (f"run permutation p={fmt_g(s['p_pair'], 2)} ({s['groups_before']}/{s['groups_after']} runs)" if grouped
                else f"KS p={fmt_g(s['ks_p'], 2)}")
        reason = f"{ci}, {better} is better; Cliff's delta {s['cliffs_delta']:+.2f}, {test}"
        return verdict, reason + ("; also " + "; ".join(notes) if notes else ""), flags
    if notes:
        return "changed shape", f"{ci} but " + "; ".join(notes) + f" (Holm-adjusted p={fmt_g(s['p_holm'], 2)})", flags
    return "unchanged", (f"differs statistically (Holm-adjusted p={fmt_g(s['p_holm'], 2)}) but below the practical "
                         f"thresholds: {ci}, IQR x{fmt_g(r)}, shape distance {fmt_g(s['wasserstein_shape_pct'], 2)}%"), flags


def compare(before: pd.DataFrame, after: pd.DataFrame, settings: CompareSettings | dict | None = None, *,
            higher_is_better=(), lower_is_better=(), **overrides) -> pd.DataFrame:
    """One row per (test, variable) of BEFORE and AFTER samples: the statistics, ``verdict``
    (one of :data:`VERDICTS`) and a one-line ``reason``.

    ``settings`` (:class:`~hpcvar.settings.CompareSettings`, or a mapping of its keys) and
    ``overrides`` (its keys, e.g. ``n_boot=500``) set the thresholds; ``min_effect`` and
    ``min_spread`` are percentages. ``higher_is_better``/``lower_is_better`` are variable-name
    patterns (fnmatch). Samples with a ``group`` (run) on both sides are tested by exchanging whole
    groups (:func:`group_permutation_tests`) unless ``independent`` pools them as independent draws.
    ``modes_before``/``modes_after`` hold lists of ``{location, weight, lower, upper}``."""
    base = settings.as_dict() if isinstance(settings, CompareSettings) else dict(settings or {})
    cfg = CompareSettings.from_mapping({**base, **overrides})
    alpha, min_effect, min_spread, min_samples, independent = (cfg.alpha, cfg.min_effect, cfg.min_spread,
                                                                cfg.min_samples, cfg.independent)
    before, after = _check(before, "BEFORE"), _check(after, "AFTER")
    gb, ga = (dict(list(df.groupby(["test", "variable"]))) for df in (before, after))

    def groups(df):
        return None if independent or not df["group"].notna().all() else df["group"].to_numpy(object)

    rows = []
    for key in sorted(set(gb) | set(ga)):
        test, variable = key
        b, a = gb.get(key), ga.get(key)
        side = b if b is not None else a
        unit = next((u for u in side["unit"] if u), "")
        stated = next((x for x in side["better"] if x), "")
        row = {"test": test, "variable": variable, "unit": unit,
               "better": _better(variable, stated, unit, tuple(higher_is_better), tuple(lower_is_better)),
               "n_before": 0 if b is None else len(b), "n_after": 0 if a is None else len(a)}
        if b is None or a is None:
            row.update(verdict="not compared", reason=f"only in {'AFTER' if b is None else 'BEFORE'}")
        elif min(len(b), len(a)) < min_samples:
            row.update(verdict="not compared",
                       reason=f"{len(b)} samples before, {len(a)} after; need at least {min_samples} each")
        elif unit and (ua := next((u for u in a["unit"] if u), "")) and ua != unit:
            row.update(verdict="not compared", reason=f"units differ: {unit} before, {ua} after")
        rows.append(row)
    compared = [r for r in rows if "verdict" not in r]
    # Enough run exchanges that a clear change can pass Holm's first threshold, alpha / pairs,
    # despite the Bonferroni factor 3 (pairs far from significance stop early).
    n_perm = max(cfg.n_perm, math.ceil(6 * len(compared) / alpha))
    for row in compared:
        test, variable = key = row["test"], row["variable"]
        b, a = gb[key], ga[key]
        rng = np.random.default_rng(_pair_seed(cfg.seed, test, variable))
        row.update(_pair_stats(b["value"].to_numpy(float), a["value"].to_numpy(float), groups(b), groups(a),
                               alpha=alpha, n_boot=cfg.n_boot, max_samples=cfg.max_samples,
                               min_mode_weight=cfg.min_mode_weight, rng=rng, n_perm=n_perm))
    if not rows:
        return pd.DataFrame(columns=["test", "variable", "verdict", "reason"])
    for r, p in zip(compared, holm([r["p_pair"] for r in compared])):
        r["p_holm"] = float(p)
        r["verdict"], r["reason"], flags = _verdict(r, alpha=alpha, min_effect=min_effect, min_spread=min_spread)
        r.update(flags)
    return pd.DataFrame(rows)


def fail_on(tokens: str | list[str]) -> tuple[str, ...]:
    """``slower,changed-shape`` -> the verdicts that count as a regression (``none``: nothing)."""
    items = tokens.split(",") if isinstance(tokens, str) else list(tokens)
    out = []
    for t in (x.strip().lower().replace("-", " ").replace("_", " ") for x in items):
        if not t or t == "none":
            continue
        if t not in VERDICTS:
            raise BadInput(f"--fail-on: unknown verdict {t!r}; choose from "
                             f"{', '.join(v.replace(' ', '-') for v in VERDICTS)} or none")
        out.append(t)
    return tuple(out)
