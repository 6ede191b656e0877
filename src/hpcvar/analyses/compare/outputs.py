"""What ``hpcvar compare`` writes and prints: ``compare.csv`` (one flat row per pair), one PDF+CDF
figure per pair (``figures/<test>__<variable>.svg``), ``summary.json`` (through
:class:`~hpcvar.results.compare.CompareResult`) and the table on stdout."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.analyses.compare.stats import DEFAULT_FAIL_ON, VERDICTS, fmt_g
from hpcvar.results import clean
from hpcvar.results.compare import CompareResult, Pair, Regression
from hpcvar.util.fileio import atomic_path

CSV_COLUMNS = ["test", "variable", "unit", "better", "n_before", "n_after", "median_before", "median_after",
               "shift_pct", "shift_ci_low", "shift_ci_high", "cliffs_delta", "mwu_p", "ks_stat", "ks_p",
               "ad_stat", "ad_p", "bf_p", "shape_p", "inference", "groups_before", "groups_after", "perm_ks_p",
               "perm_ad_p", "perm_spread_p", "permutations", "wasserstein", "wasserstein_pct", "wasserstein_shape_pct",
               "iqr_before", "iqr_after", "iqr_ratio", "n_modes_before", "n_modes_after", "modes_before",
               "modes_after", "spread_changed", "modes_changed", "shape_differs", "p_pair", "p_holm",
               "verdict", "reason", "figure"]


def _mode_text(modes) -> str:
    return ";".join(f"{m['location']:.6g}@{m['weight']:.2f}" for m in modes) if isinstance(modes, list) else ""


def csv_table(table: pd.DataFrame) -> pd.DataFrame:
    """The flat ``compare.csv`` form: modes as ``location@weight;...`` and their counts."""
    t = table.copy()
    for side in ("before", "after"):
        col = t.get(f"modes_{side}", pd.Series([None] * len(t), index=t.index))
        t[f"n_modes_{side}"] = [len(m) if isinstance(m, list) else None for m in col]
        t[f"modes_{side}"] = [_mode_text(m) for m in col]
    for c in CSV_COLUMNS:
        if c not in t:
            t[c] = None
    return t[CSV_COLUMNS]


def plot_pair(before: np.ndarray, after: np.ndarray, path: Path, *, reference: np.ndarray | None = None,
              title: str = "", xlabel: str = "", modes: dict | None = None) -> Path:
    """PDF and CDF side by side, one line per sample (reference, before, after), as the
    ORIG/OLD/NEW figures of the Confidence paper; mode locations marked on the PDF."""
    from hpcvar.analyses.common import savefig, subplots

    series = [(lab, np.asarray(v, float), c) for lab, v, c in
              (("reference", reference, "0.55"), ("before", before, "tab:blue"), ("after", after, "tab:red"))
              if v is not None and len(v)]
    pooled = np.concatenate([v for _, v, _ in series])
    lo, hi = float(pooled.min()), float(pooled.max())
    log = lo > 0 and hi / lo > 50
    if hi == lo:
        lo, hi = lo - 0.5 * (abs(lo) or 1), hi + 0.5 * (abs(hi) or 1)
    nbins = int(np.clip(len(np.histogram_bin_edges(pooled, bins="fd")) - 1, 10, 100))
    edges = np.geomspace(lo, hi, nbins + 1) if log else np.linspace(lo, hi, nbins + 1)
    fig, (ax_pdf, ax_cdf) = subplots(1, 2, figsize=(10, 3.6))
    for label, v, colour in series:
        dens, _ = np.histogram(v, bins=edges, density=True)
        ax_pdf.stairs(dens, edges, color=colour, label=f"{label} (n={len(v)})", linewidth=1.4)
        xs = np.sort(v)
        ax_cdf.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", color=colour, linewidth=1.4,
                    label=f"{label}: median {np.median(v):.4g}")
        for m in (modes or {}).get(label) or []:
            ax_pdf.axvline(m["location"], color=colour, linestyle=":", linewidth=1)
    for ax in (ax_pdf, ax_cdf):
        ax.set_xlabel(xlabel)
        if log:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    ax_pdf.set_ylabel("probability density")
    ax_cdf.set_ylabel("cumulative probability")
    ax_pdf.legend(fontsize=8)
    ax_cdf.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return savefig(fig, path)


def _stats_line(row) -> str:
    modes = lambda m: str(len(m)) if isinstance(m, list) else "?"
    return (f"median {row['shift_pct']:+.1f}% [{row['shift_ci_low']:+.1f}, {row['shift_ci_high']:+.1f}], "
            f"IQR x{fmt_g(row['iqr_ratio'])}, modes {modes(row.get('modes_before'))} -> {modes(row.get('modes_after'))}, "
            f"Holm-adjusted p={fmt_g(row['p_holm'], 2)}")


def write_outputs(table: pd.DataFrame, out: str | Path, before: pd.DataFrame, after: pd.DataFrame, *,
                  reference: pd.DataFrame | None = None, meta: dict | None = None, fail_verdicts=DEFAULT_FAIL_ON,
                  figures: bool = True) -> CompareResult:
    """Write ``compare.csv``, ``summary.json`` and ``figures/<test>__<variable>.svg``; returns the result."""
    out = Path(out)
    table = table.copy()
    table["figure"] = None
    if figures:
        used: set[str] = set()
        by = {name: dict(list(df.groupby(["test", "variable"]))) for name, df in
              (("before", before), ("after", after), ("reference", reference if reference is not None else before.iloc[:0]))}
        for i, row in table.iterrows():
            key = (row["test"], row["variable"])
            b, a = by["before"].get(key), by["after"].get(key)
            if b is None or a is None or row["verdict"] == "not compared":
                continue
            figure = CompareResult.figure_file(row["test"], row["variable"], used)
            ref = by["reference"].get(key)
            unit = f" ({row['unit']})" if row["unit"] else ""
            plot_pair(b["value"].to_numpy(float), a["value"].to_numpy(float), out / figure,
                      reference=None if ref is None else ref["value"].to_numpy(float),
                      title=f"{row['test']}: {row['variable']} - {row['verdict']}\n{_stats_line(row)}",
                      xlabel=f"{row['variable']}{unit}",
                      modes={"before": row.get("modes_before"), "after": row.get("modes_after")})
            table.loc[i, "figure"] = figure
    flat = csv_table(table)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "compare.csv") as tmp:
        flat.to_csv(tmp, index=False)
    result = summarise(table, fail_verdicts, meta)
    result.write(out)
    return result


def _plain(v):
    """A JSON-ready Python value: numpy scalars unwrapped, NaN/inf and missing values as None."""
    if isinstance(v, (list, dict)):
        return v
    if v is None or v is pd.NA:
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def summarise(table: pd.DataFrame, fail_verdicts=DEFAULT_FAIL_ON, meta: dict | None = None) -> CompareResult:
    """The result (``summary.json``): the pairs, the verdicts counted, the regressions; ``meta``:
    the sources compared and the settings."""
    counts = {v: int((table["verdict"] == v).sum()) if not table.empty else 0 for v in VERDICTS}
    flagged = table[table["verdict"].isin(fail_verdicts)] if not table.empty else table
    counted = ("n_before", "n_after", "groups_before", "groups_after", "permutations")
    pairs = [Pair(**clean({k: (int(v) if k in counted and v is not None else v) for k, v in
                           ((k, _plain(v)) for k, v in rec.items())})) for rec in table.to_dict("records")]
    return CompareResult(**(meta or {}), fail_on=list(fail_verdicts), verdicts=counts, regression=bool(len(flagged)),
                         regressions=[Regression(test=r["test"], variable=r["variable"], verdict=r["verdict"],
                                                 reason=r["reason"]) for r in flagged.to_dict("records")],
                         exit_code=1 if len(flagged) else 0, pairs=pairs)


def format_table(result: CompareResult) -> str:
    """The table printed on stdout: one line per pair, then the reasons of everything not unchanged."""
    if not result.pairs:
        return "(nothing to compare)\n"
    lines = []
    for r in result.pairs:
        nm = lambda m: str(len(m)) if m is not None else "?"
        # The p-values that decided: exchanges of whole runs for grouped samples.
        runs = r.inference == "groups"
        lines.append({
            "test": r.test, "variable": r.variable, "n": f"{r.n_before}/{r.n_after}",
            "median before": fmt_g(r.median_before, 4) if r.compared else "",
            "median after": fmt_g(r.median_after, 4) if r.compared else "",
            "shift % [CI]": (f"{r.shift_pct:+.1f} [{r.shift_ci_low:+.1f}, {r.shift_ci_high:+.1f}]"
                             if r.compared and r.shift_pct is not None else ""),
            "tested by": ("runs" if runs else "samples") if r.compared else "",
            "KS p": fmt_g(r.perm_ks_p if runs else r.ks_p, 2) if r.compared else "",
            "AD p": fmt_g(r.perm_ad_p if runs else r.ad_p, 2) if r.compared else "",
            "IQR x": fmt_g(r.iqr_ratio, 3) if r.compared else "",
            "modes": f"{nm(r.modes_before)}->{nm(r.modes_after)}" if r.compared else "",
            "p Holm": fmt_g(r.p_holm, 2) if r.compared else "", "verdict": r.verdict})
    text = pd.DataFrame(lines).to_string(index=False) + "\n"
    notes = [f"  {r.test} / {r.variable}: {r.verdict}: {r.reason}" for r in result.pairs if r.verdict != "unchanged"]
    return text + ("\n" + "\n".join(notes) + "\n" if notes else "")


def counts_line(result: CompareResult, summary: str | Path | None = None) -> str:
    """The last line printed: pairs per verdict and whether there is a regression (and where the
    summary went)."""
    counts = ", ".join(f"{n} {v}" for v, n in result.verdicts.items() if n)
    found = (f"REGRESSION: {len(result.regressions)} pair(s) {' or '.join(result.fail_on)}" if result.regression
             else "no regression")
    return f"{counts}; {found}" + (f" -> {summary}" if summary else "")

