"""Latency and step-time distributions as Confidence presents them (Settlemyer et al., ORNL).

Confidence describes a benchmark by its *empirical distribution* (PDF and CDF over fixed-width or
logarithmic bins) rather than by a mean, because latencies are one-sided and often have several
performance modes; it also bins the minimum of every benchmarking cycle (the best case the
hardware allows) and reports higher-order statistics. This module is the ``hpcvar distributions`` analysis over a dataset directory (:func:`run`);
the statistics of one sample it draws on (PDF/CDF tables, :func:`describe`, the modes, the
per-cycle minima) are :mod:`hpcvar.analyses.distribution_stats`, which the regression check
shares.

Settings of :func:`run`: :class:`hpcvar.settings.DistributionsSettings` (types, defaults and
bounds; listed in docs/settings.md; ``--set key=value`` on the command line). What they mean here:
``alpha``, ``min_weight``, ``min_prominence``, ``min_n`` and ``mode_scale`` are
:func:`detect_modes`'s options; ``nbins`` and ``bin_size_us`` are Confidence's C and S for
latencies (null S chooses S per distribution so the C bins just cover ``[0, max]``, see
:func:`log_bin_size`; S 0.05 with 256 bins reproduces ``hpcvar-confidence``'s own bins, values
beyond the last edge then sharing an open last bin); ``b_buckets`` splits the runs at quantiles
of their ``bg_traffic`` (the b heuristic of Salimi Beni et al., :mod:`hpcvar.system.background`) into
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
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from hpcvar import tracking
from hpcvar.analyses.common import datasets, load, savefig, subplots
from hpcvar.analyses.distribution_stats import (TABLE_COLUMNS, cycle_minima, describe, finite_values,
                                                histogram_from_counts, histogram_summary, histogram_table)
from hpcvar.results import clean
from hpcvar.results._common import MLflowRuns
from hpcvar.results.distributions import (BinnedDescription, Conditions, DistributionsDataset, DistributionsResult,
                                          HistogramSummary, Histograms, LatencyGroup)
from hpcvar.settings import DistributionsSettings


# --- the analysis ----------------------------------------------------------------------------


def _mode_options(settings: DistributionsSettings) -> dict:
    return {"alpha": settings.alpha, "min_weight": settings.min_weight, "min_prominence": settings.min_prominence,
            "min_n": settings.min_n, "scale": settings.mode_scale}


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
    within a decade, 1-2-5 within two); wider axes keep matplotlib's powers of ten, with minor
    ticks at 2 and 5 of each decade only (all of 2-9, drawn unlabelled on every axis, took a third
    of the analysis's time on a small campaign: docs/benchmarks.md)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    low, high = ax.get_xlim()
    if not 0 < low < high:
        return
    if high >= 100 * low:
        ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
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


def _app_distributions(name: str, ds_runs: pd.DataFrame, steps: pd.DataFrame, settings: DistributionsSettings,
                       d: Path) -> BinnedDescription | None:
    """Step times relative to the same step's median over runs (None without steps)."""
    opts = _mode_options(settings)
    steps = steps[steps["run_id"].isin(ds_runs["run_id"])]
    ratios = step_ratios(steps)
    if len(ratios):
        table = histogram_table(ratios, bins="fixed")
        table.to_csv(d / DistributionsDataset.STEP_RATIO_TABLE, index=False)
        found = BinnedDescription(**clean({**describe(ratios, **opts), "bin_width": table.attrs["width"],
                                           "table": DistributionsDataset.STEP_RATIO_TABLE}))
        plot_distribution([("step time / same step's median", table)], [m.location for m in found.modes],
                          f"{name}: step times relative to the same step's median over runs",
                          "step time / median of the step", d / DistributionsDataset.STEP_RATIO_FIGURE, log=False)
        return found
    return None


def _run_time(name: str, ds_runs: pd.DataFrame, settings: DistributionsSettings, d: Path) -> BinnedDescription:
    times = ds_runs["total_time_s"]
    table = histogram_table(times, bins="fixed")
    table.to_csv(d / DistributionsDataset.RUN_TIME_TABLE, index=False)
    summary = BinnedDescription(**clean({**describe(times, **_mode_options(settings)), "bin_width": table.attrs["width"],
                                         "table": DistributionsDataset.RUN_TIME_TABLE}))
    plot_distribution([("run time", table)], [m.location for m in summary.modes],
                      f"{name}: run times", "run time (s)", d / DistributionsDataset.RUN_TIME_FIGURE, log=False)
    return summary


def _tagged(table: pd.DataFrame, **tags) -> pd.DataFrame:
    return table.assign(**tags)[[*tags, *TABLE_COLUMNS]]


def _mode_rows(summary: dict, **tags) -> list[dict]:
    return [{**tags, "mode": i, **m} for i, m in enumerate(summary["modes"])]


def _microbenchmark_distributions(name: str, lat: pd.DataFrame, hist: pd.DataFrame, settings: DistributionsSettings,
                                  d: Path) -> tuple[list[LatencyGroup], Histograms]:
    opts = _mode_options(settings)
    minima = cycle_minima(lat)
    minima.to_csv(d / DistributionsDataset.CYCLE_MINIMA_TABLE, index=False)
    groups, pdf_tables, mode_rows = [], [], []
    for (bench, op, size), g in lat.groupby(["benchmark", "operation", "size_bytes"], sort=True):
        values = g["value_us"].to_numpy(float)
        table = histogram_table(values, bins="log", size=settings.bin_size_us, nbins=settings.nbins)
        s = table.attrs["size"]
        key = {"benchmark": bench, "operation": op, "size_bytes": int(size)}
        summary = {**key, "unit": "us", **describe(values, **opts), "bin_size_us": s, "nbins": settings.nbins}
        pdf_tables.append(_tagged(table, **key, sample="all"))
        mode_rows += _mode_rows(summary, **key, sample="all")
        curves = [("all samples" if bench != "confidence" else "pair minima per cycle", table)]
        m = minima[(minima["benchmark"] == bench) & (minima["operation"] == op) & (minima["size_bytes"] == size)]
        if len(m) and bench != "confidence":
            mtable = histogram_table(m["value_us"], bins="log", size=s, nbins=settings.nbins)
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
        groups.append(LatencyGroup(**clean(summary)))
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
    return groups, Histograms(**clean(histograms))


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
    v = finite_values(values)
    if not len(v):
        return {"n": 0}
    return {"n": int(len(v)), "median": float(np.median(v)), "p95": float(np.quantile(v, 0.95)),
            "p99": float(np.quantile(v, 0.99)), "mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1
            else None, "skew": float(stats.skew(v)) if len(v) > 2 and v.std() > 0 else None}


def by_condition(name: str, ds_runs: pd.DataFrame, lat: pd.DataFrame, settings: DistributionsSettings,
                 d: Path) -> Conditions:
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
    bucket, edges = b_buckets(b.astype(float), int(settings.b_buckets))
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
                                        size=settings.bin_size_us if log else None,
                                        nbins=settings.nbins if log else None)
                label = (f"{group}: b {edges[int(group[1:]) - 1]:.0f}-{edges[int(group[1:])]:.0f}"
                         if condition == "b" else group)
                curves.append((f"{label} ({len(ids)} runs)", table))
            if curves:
                plot_distribution(curves, [], f"{name}: {var} by {'background traffic b' if condition == 'b' else 'locality'}",
                                  f"{'latency' if log else 'run time'} ({unit})",
                                  d / Conditions.figure_file(condition, var), log=log)
    table = pd.DataFrame(rows)
    table.to_csv(d / Conditions.TABLE, index=False)
    return Conditions(**clean({"b_edges": edges, "runs_with_b": int(b.notna().sum()),
            "runs_by_locality": {k: int(v) for k, v in loc.value_counts().items()},
            "spearman_b_p95": spearman, "groups": rows, "table": Conditions.TABLE, "unit": unit}))


def run(dataset_dir: str | Path, out_dir: str | Path, config: DistributionsSettings | dict | None = None,
        only: str | None = None) -> DistributionsResult:
    """The ``hpcvar distributions`` analysis: per dataset, distributions of step times and run
    times (application datasets) or of every microbenchmark operation, its per-cycle minima and
    Confidence's histograms (microbenchmark datasets), with the settings
    :class:`~hpcvar.settings.DistributionsSettings` from ``config`` (an unknown key or a bad value
    raises :class:`~hpcvar.settings.SettingsError`). Writes ``OUT/summary.json``, per dataset CSV
    tables and SVG figures under ``OUT/<dataset>/``, logs one MLflow run per dataset, and returns
    the result (:class:`~hpcvar.results.distributions.DistributionsResult`)."""
    settings = DistributionsSettings.from_mapping(config)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = load(dataset_dir, tables=("runs", "steps", "latency", "latency_histograms"))
    runs, steps, latency, hists = data["runs"], data["steps"], data["latency"], data["latency_histograms"]
    found: dict[str, DistributionsDataset] = {}
    for name in datasets(runs, settings.min_runs, only):
        ds_runs = runs[runs["dataset"] == name]
        d = out_dir / DistributionsResult.dataset_dir(name)
        d.mkdir(parents=True, exist_ok=True)
        lat = latency[latency["run_id"].isin(ds_runs["run_id"])]
        hist = hists[hists["run_id"].isin(ds_runs["run_id"])]
        app = bool((ds_runs["num_steps"] > 0).any())
        run_time = _run_time(name, ds_runs, settings, d)
        parts: dict = {}  # only what the dataset has (summary.json leaves the rest out)
        if app and (step_ratio := _app_distributions(name, ds_runs, steps, settings, d)) is not None:
            parts["step_ratio"] = step_ratio
        if len(lat) or len(hist):
            parts["latency"], parts["histograms"] = _microbenchmark_distributions(name, lat, hist, settings, d)
        entry = DistributionsDataset(kind="application" if app else "microbenchmark", runs=len(ds_runs),
                                     run_time_s=run_time, **parts,
                                     conditions=by_condition(name, ds_runs, lat, settings, d))
        found[name] = entry
        print(f"distributions: {name}: {len(ds_runs)} runs ({entry.kind})", file=sys.stderr, flush=True)
    result = DistributionsResult(params=settings, datasets=found)
    result.mlflow = MLflowRuns.model_validate(_log(dataset_dir, out_dir, settings, runs, steps, latency, result))
    result.write(out_dir, only)
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


def _log(dataset_dir, out_dir: Path, settings: DistributionsSettings, runs, steps, latency,
         result: DistributionsResult) -> dict:
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
                mlflow.log_params({k: ("null" if v is None else v) for k, v in settings.as_dict().items()})
                mlflow.log_metrics(_metrics(entry))
                mlflow.log_artifacts(str(out_dir / DistributionsResult.dataset_dir(name)),
                                     artifact_path="distributions")
                ids[name] = r.info.run_id
        return {"tracking_uri": mlflow.get_tracking_uri(), "experiment_id": exp_id, "runs": ids}
