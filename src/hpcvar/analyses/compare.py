"""Did an upgrade change performance? Compare the distributions of samples BEFORE and AFTER.

This module owns ``hpcvar compare``: loading samples (CSV/Parquet files, date ranges of a
collated dataset, ReFrame's stored sessions), the per-(test, variable) comparison and its verdict,
and the outputs (``compare.csv``, ``summary.json``, one PDF+CDF figure per pair).

Following Settlemyer et al., *Diagnosing anomalous network performance with Confidence*: after
the Jaguar SeaStar driver upgrade the mean latency hardly moved while the distribution became much
wider, so a mean +- threshold check would have passed it. Here every (test, variable) pair is
compared as a distribution:

* **Is there any difference?** Two-sample Kolmogorov-Smirnov, k-sample Anderson-Darling and
  Brown-Forsythe (Levene about the median); the pair's p-value is their Bonferroni minimum
  (``3 * min(p)``), and Holm's step-down correction over all pairs keeps the chance of even one
  false alarm in the whole comparison at ``alpha``.
* **Is it a practical difference, and what kind?** Only for pairs significant after Holm:

  - *slower/faster*: the median moved by at least ``min_effect`` % and its bootstrap confidence
    interval excludes 0 (direction from ``better``: lower-is-better unless told otherwise);
  - *changed shape*: the median did not move that much, but the spread did (IQR ratio beyond
    ``1 + min_spread`` % either way, Brown-Forsythe p < alpha), or a mode of at least
    ``min_mode_weight`` of the samples appeared or vanished (:func:`detect_modes`), or the shapes
    differ once the medians are aligned (Anderson-Darling on median-centred samples p < alpha and
    their Wasserstein distance at least ``min_effect`` % of the BEFORE median);
  - otherwise *unchanged*: different in a statistical sense only (huge samples see everything).

Samples that come in groups (``group``: the run of a time step or of a microbenchmark iteration)
are not independent: the steps of one run share its placement and its neighbours. For them the
three tests above are replaced by a permutation test that exchanges whole runs between BEFORE and
AFTER (:func:`group_permutation_tests`), and the confidence interval of the median shift resamples
whole runs, so ordinary run-to-run variation does not pass for a system change. ``independent``
pools them as independent draws instead, as Confidence does with the measurements of one long run.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from hpcvar.fileio import atomic_path
from hpcvar.naming import slug
from hpcvar.parsers.errors import ParseError

class BadInput(ValueError):
    """A command-line input that is not a file's fault: a date range, --fail-on, a missing argument."""


#: Columns of a samples table (``group`` optional; ``unit`` and ``better`` may be empty).
COLUMNS = ("test", "variable", "value", "unit", "better", "group")
VERDICTS = ("unchanged", "faster", "slower", "changed shape", "not compared")
#: What counts as a regression unless ``--fail-on`` says otherwise.
DEFAULT_FAIL_ON = ("slower", "changed shape")
DEFAULTS = {"alpha": 0.05, "min_effect": 2.0, "min_spread": 25.0, "min_mode_weight": 0.05,
            "min_samples": 5, "n_boot": 1000, "max_samples": 20000, "seed": 0, "independent": False,
            "n_perm": 9999}
DEFAULT_RFM_CONFIG = "config/reframe/settings.py"

_REPO = Path(__file__).resolve().parents[3]


# --- samples from files ------------------------------------------------------------------------

def load_samples(path: str | Path) -> pd.DataFrame:
    """Samples from a CSV or Parquet file with columns ``test,variable,value`` (optional ``unit``,
    ``better`` = lower|higher, ``group``). Bad input raises :class:`ParseError` naming the line
    (CSV) or row (Parquet)."""
    path = Path(path)
    if not path.is_file():
        raise ParseError(path, "no such file (expected CSV or Parquet samples with columns test,variable,value)")
    if path.stat().st_size == 0:
        raise ParseError(path, "file is empty: expected a header with columns test,variable,value", 1)
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == b"PAR1" or path.suffix.lower() in (".parquet", ".pq"):
        return _load_parquet(path)
    return _load_csv(path)


def _load_csv(path: Path) -> pd.DataFrame:
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: Excel writes a BOM
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header or not any(h.strip() for h in header):
                raise ParseError(path, "no header: expected columns test,variable,value", 1)
            header = [h.strip().lower() for h in header]
            _check_header(path, header, 1)
            col = {name: header.index(name) for name in COLUMNS if name in header}
            records, lines = [], []
            for row in reader:
                if not any(field.strip() for field in row):
                    continue  # blank line
                if len(row) != len(header):
                    raise ParseError(path, f"{len(row)} fields, the header has {len(header)} "
                                           f"({','.join(header)})", reader.line_num)
                records.append([row[col[c]].strip() if c in col else "" for c in COLUMNS])
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise ParseError(path, "not a text file: expected CSV (or Parquet) samples with columns "
                               "test,variable,value") from None
    except csv.Error as exc:
        raise ParseError(path, f"malformed CSV: {exc}") from None
    if not records:
        raise ParseError(path, "no samples: the file has a header but no rows", 1)
    frame = pd.DataFrame(records, columns=list(COLUMNS), dtype=object)
    return _validate(path, frame, lines)


def _load_parquet(path: Path) -> pd.DataFrame:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise ParseError(path, f"not a readable Parquet file ({exc})") from None
    frame = table.to_pandas()
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    _check_header(path, list(frame.columns), None)
    if frame.empty:
        raise ParseError(path, "no samples: the table has no rows")
    out = pd.DataFrame({c: (frame[c] if c in frame.columns else "") for c in COLUMNS})
    for c in ("test", "variable", "unit", "better", "group"):
        out[c] = out[c].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v).strip())
    return _validate(path, out, None)


def _check_header(path: Path, header: list[str], line: int | None) -> None:
    missing = [c for c in ("test", "variable", "value") if c not in header]
    if missing:
        raise ParseError(path, f"missing column{'s' if len(missing) > 1 else ''} {','.join(missing)}: expected "
                               f"test,variable,value (optional unit, better, group); found "
                               f"{','.join(header) or 'nothing'}", line)


def _validate(path: Path, frame: pd.DataFrame, lines: list[int] | None) -> pd.DataFrame:
    """Check every row; ``lines`` maps rows to CSV line numbers (None: Parquet, rows are counted)."""
    def fail(i: int, message: str):
        if lines is not None:
            raise ParseError(path, message, lines[i])
        raise ParseError(path, f"row {i + 1}: {message}")

    for c in ("test", "variable"):
        empty = np.flatnonzero(frame[c].to_numpy() == "")
        if empty.size:
            fail(int(empty[0]), f"empty {c}")
    raw = frame["value"]
    value = pd.to_numeric(raw, errors="coerce").astype(float)
    bad = np.flatnonzero(~np.isfinite(value.to_numpy()))
    if bad.size:
        i = int(bad[0])
        fail(i, f"value {raw.iloc[i]!r} is not a finite number")
    frame["value"] = value
    frame["better"] = frame["better"].str.lower()
    wrong = np.flatnonzero(~frame["better"].isin(["", "lower", "higher"]).to_numpy())
    if wrong.size:
        i = int(wrong[0])
        fail(i, f"better must be 'lower' or 'higher', got {frame['better'].iloc[i]!r}")
    stated = frame[frame["better"] != ""]
    first = stated.groupby("variable")["better"].transform("first")
    clash = stated.index[stated["better"] != first]
    if len(clash):
        i = int(clash[0])
        fail(i, f"variable {frame['variable'].iloc[i]!r} has better={frame['better'].iloc[i]} here "
                f"but better={first.loc[i]} on an earlier row")
    frame["group"] = frame["group"].replace("", None)
    return frame.reset_index(drop=True)


# --- samples from a collated dataset -------------------------------------------------------------

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_range(text: str) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    """``START..END`` (inclusive; dates or ISO timestamps, UTC unless an offset is given; either end
    may be left open). A date as END includes that whole day; a single date is that day."""
    start_text, end_text = text.split("..", 1) if ".." in text else (text, text)

    def stamp(t: str, end: bool) -> pd.Timestamp | None:
        t = t.strip()
        if not t:
            return None
        try:
            ts = pd.Timestamp(t)
        except (ValueError, TypeError):
            raise BadInput(f"{text!r} is not a date range: expected START..END with dates (2026-01-01) or "
                             f"ISO timestamps (2026-01-01T12:00Z); either end may be left open") from None
        ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
        if end and _DATE.match(t):
            ts = ts + pd.Timedelta(days=1) - pd.Timedelta(microseconds=1)
        return ts

    start, end = stamp(start_text, False), stamp(end_text, True)
    if start is not None and end is not None and start > end:
        raise BadInput(f"{text!r}: the range ends before it starts")
    return start, end


def _fmt_range(window) -> str:
    start, end = window or (None, None)
    return f"{start.isoformat() if start is not None else ''}..{end.isoformat() if end is not None else ''}"


def dataset_runs(path: str | Path, window=None) -> pd.DataFrame:
    """Completed runs of a dataset that started inside ``window`` ((start, end), inclusive)."""
    from hpcvar.dataset import Dataset

    path = Path(path)
    if not (path / "runs").is_dir():
        raise ParseError(path, "not a dataset directory (no runs/ table; write one with `hpcvar collate`)")
    runs = Dataset(path).read("runs")
    if runs.empty:
        raise ParseError(path / "runs", "the dataset has no runs")
    runs = runs[runs["state"] == "COMPLETED"]
    start, end = window or (None, None)
    keep = pd.Series(True, index=runs.index)
    if start is not None:
        keep &= runs["start"] >= start
    if end is not None:
        keep &= runs["start"] <= end
    chosen = runs[keep]
    if chosen.empty:
        raise ParseError(path, f"no runs started in {_fmt_range(window)} (the dataset's runs started "
                               f"{runs['start'].min().isoformat()} .. {runs['start'].max().isoformat()})")
    return chosen


def step_baseline(path: str | Path, window=None) -> pd.DataFrame:
    """Median duration of every (dataset, step) over the window's runs: what ``step_time_rel`` is
    relative to (the BEFORE window's, so a uniform slowdown shows as a shift)."""
    from hpcvar.dataset import Dataset

    runs = dataset_runs(path, window)
    steps = Dataset(path).read("steps").merge(runs[["run_id", "dataset"]], on="run_id")
    return steps.groupby(["dataset", "step"], as_index=False)["duration_s"].median().rename(
        columns={"duration_s": "baseline_s"})


def dataset_samples(path: str | Path, window=None, baseline: pd.DataFrame | None = None) -> pd.DataFrame:
    """Samples of one date window of a collated dataset, ``test`` = the dataset name (runs.dataset):

    * ``run_time_s``: each application run's total time (microbenchmark runs have no steps);
    * ``step_time_rel``: each step's duration over ``baseline`` (default: this window's) median of
      that step, grouped by run;
    * ``<operation>_<size>B_us``: every timed operation of the microbenchmarks (``latency``
      table), grouped by run; prefixed with the benchmark if a dataset holds several;
    * ``<operation>_<size>B_rel``: the same over its run's median for that operation and size --
      the shape of the distribution within runs, which placement and background load (they move
      whole runs) do not blur.
    """
    from hpcvar.dataset import Dataset

    ds = Dataset(path)
    runs = dataset_runs(path, window)
    parts = []
    app_runs = runs[runs["num_steps"] > 0]
    if not app_runs.empty:
        parts.append(pd.DataFrame({"test": app_runs["dataset"], "variable": "run_time_s",
                                   "value": app_runs["total_time_s"], "unit": "s", "better": "lower",
                                   "group": None}))
        steps = ds.read("steps").merge(app_runs[["run_id", "dataset"]], on="run_id")
        if not steps.empty:
            base = baseline if baseline is not None else step_baseline(path, window)
            steps = steps.merge(base, on=["dataset", "step"])
            steps = steps[steps["baseline_s"] > 0]
            parts.append(pd.DataFrame({"test": steps["dataset"], "variable": "step_time_rel",
                                       "value": steps["duration_s"] / steps["baseline_s"], "unit": "ratio",
                                       "better": "lower", "group": steps["run_id"]}))
    lat = ds.read("latency")
    if not lat.empty:
        lat = lat.merge(runs[["run_id", "dataset"]], on="run_id")
    if not lat.empty:
        several = lat.groupby("dataset")["benchmark"].transform("nunique") > 1
        name = lat["operation"] + "_" + lat["size_bytes"].astype(str) + "B_us"
        name = name.where(~several, lat["benchmark"] + "_" + name)
        parts.append(pd.DataFrame({"test": lat["dataset"], "variable": name, "value": lat["value_us"],
                                   "unit": "us", "better": "lower", "group": lat["run_id"]}))
        # The shape inside each run, free of what moves a whole run (placement, background load):
        # every time over its run's median for the same operation. An upgrade that splits
        # operations over two paths shows here even when runs differ more among themselves.
        run_median = lat.groupby(["run_id", name])["value_us"].transform("median")
        rel = lat["value_us"] / run_median.where(run_median > 0)
        ok = rel.notna()
        parts.append(pd.DataFrame({"test": lat.loc[ok, "dataset"], "variable": name[ok].str[:-3] + "_rel",
                                   "value": rel[ok], "unit": "ratio", "better": "lower",
                                   "group": lat.loc[ok, "run_id"]}))
    if not parts:
        raise ParseError(path, f"runs of {_fmt_range(window)} have no run times, steps or latencies")
    out = pd.concat(parts, ignore_index=True)
    out["group"] = out["group"].astype(object).where(out["group"].notna(), None)
    return out[list(COLUMNS)]


# --- samples from ReFrame's results database --------------------------------------------------------

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def reframe_config(path: str | Path | None) -> Path:
    """The ReFrame configuration: as given, else the repository's when run from elsewhere."""
    p = Path(path or DEFAULT_RFM_CONFIG)
    if not p.exists() and str(path or DEFAULT_RFM_CONFIG) == DEFAULT_RFM_CONFIG and (_REPO / DEFAULT_RFM_CONFIG).exists():
        p = _REPO / DEFAULT_RFM_CONFIG
    return p


def _reframe_exe() -> str:
    beside = Path(sys.executable).with_name("reframe")
    return str(beside) if beside.exists() else (shutil.which("reframe") or "reframe")


def reframe_samples(query: str, config: str | Path | None = None, *, env: dict | None = None,
                    reframe: str | None = None) -> pd.DataFrame:
    """Samples from ReFrame's stored sessions, read through ReFrame itself
    (``reframe -C CONFIG --describe-stored-sessions QUERY``).

    ``query`` is a comma-separated list of session UUIDs or one ReFrame session query (a time
    period such as ``20260101:20260115``). Every performance variable of every test case is one
    sample; ``test`` is the test's display name without ``%.repeat_no`` and with
    ``@system:partition+environ``, so ``--repeat N``, ``--reruns N`` and several sessions all add
    samples to the same test.
    """
    parts = [q.strip() for q in query.split(",")]
    queries = parts if all(_UUID.match(q) for q in parts) else [query.strip()]
    config = reframe_config(config)
    exe = reframe or _reframe_exe()
    rows = []
    for q in queries:
        where = f"reframe:{q}"
        if not config.exists():
            raise ParseError(where, f"ReFrame configuration {config} not found (--reframe-config)")
        try:
            proc = subprocess.run([exe, "-C", str(config), "--nocolor", "--describe-stored-sessions", q],
                                  capture_output=True, text=True, env=env, timeout=600)
        except OSError as exc:
            raise ParseError(where, f"cannot run ReFrame ({exe}): {exc}") from None
        try:
            sessions = _first_json(_ANSI.sub("", proc.stdout))
        except ValueError:
            said = [ln for ln in _ANSI.sub("", proc.stdout + proc.stderr).splitlines() if ln.strip()]
            raise ParseError(where, f"ReFrame could not describe the session (exit {proc.returncode}): "
                                    f"{said[-1] if said else 'no output'}") from None
        if isinstance(sessions, dict):
            sessions = [sessions]
        if not sessions:
            raise ParseError(where, f"no stored session matches in ReFrame's results database (configuration "
                                    f"{config}; HPCVAR_RFM_DB={(env or os.environ).get('HPCVAR_RFM_DB', 'unset')})")
        found = 0
        for session in sessions:
            for run in session.get("runs", []):
                for tc in run.get("testcases", []):
                    new = _testcase_rows(tc)
                    found += len(new)
                    rows += new
        if not found:
            raise ParseError(where, "the session has no performance values (no test case passed its sanity check)")
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _first_json(text: str):
    """The JSON document ReFrame prints, skipping any log lines before it."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^[\[{]", text, re.M):
        try:
            return decoder.raw_decode(text, m.start())[0]
        except json.JSONDecodeError:
            continue
    raise ValueError("no JSON document in ReFrame's output")


def _testcase_rows(tc: dict) -> list[dict]:
    if tc.get("fixture") or tc.get("fail_phase") not in (None, "performance"):
        return []  # fixtures (builds) and failed runs measured nothing
    name = re.sub(r"\s*%\.repeat_no=\d+", "", tc.get("display_name") or tc.get("name", "?")).strip()
    test = f"{name} @{tc.get('system')}:{tc.get('partition')}+{tc.get('environ')}"
    rows = []
    for key, entry in (tc.get("perfvalues") or {}).items():
        if not entry or entry[0] is None:
            continue
        rows.append({"test": test, "variable": key.split(":")[-1], "value": float(entry[0]),
                     "unit": str(entry[4] or "") if len(entry) > 4 else "", "better": "", "group": None})
    return rows


# --- one input argument to samples ---------------------------------------------------------------

def load_source(spec: str, window=None, *, baseline=None, reframe_config_path=None, env=None) -> pd.DataFrame:
    """BEFORE/AFTER/--reference as given on the command line: ``reframe:QUERY``, a dataset
    directory (with an optional date window) or a samples file."""
    if spec.startswith("reframe:"):
        if window is not None:
            raise BadInput("date ranges (--before/--after) apply to a dataset directory, not to ReFrame sessions")
        return reframe_samples(spec.removeprefix("reframe:"), reframe_config_path, env=env)
    path = Path(spec)
    if path.is_dir():
        return dataset_samples(path, window, baseline)
    if window is not None:
        raise BadInput(f"{spec}: date ranges (--before/--after) apply to a dataset directory, not to a file")
    return load_samples(path)


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
    """Modes by Hartigan's dip test and KDE peaks (:func:`hpcvar.analyses.distributions.detect_modes`),
    each holding at least ``min_weight`` of the samples; None when too few samples to test."""
    from hpcvar.analyses.distributions import detect_modes

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
    that does not depend on the labelling); ``last`` marks the last value of each run of ties."""
    labels = assign[:, codes]
    n = labels.shape[1]
    nb = labels.sum(axis=1, keepdims=True).astype(float)
    na = n - nb
    mb = np.cumsum(labels, axis=1, dtype=np.int64)
    ma = np.arange(1, n + 1) - mb
    ks = np.max(np.abs(mb / nb - ma / na)[:, last], axis=1)
    j = np.arange(1, n)
    ad = (((n * mb[:, :-1] - j * nb) ** 2 / nb + (n * ma[:, :-1] - j * na) ** 2 / na) / (j * (n - j))).sum(axis=1) / n
    spread = np.abs(labels @ dev / nb[:, 0] - (~labels) @ dev / na[:, 0])
    return np.stack([ks, ad, spread], axis=1)


def group_permutation_tests(b: np.ndarray, a: np.ndarray, gb: np.ndarray, ga: np.ndarray, *, rng,
                            n_perm: int = 9999, max_values: int = 2000, stop_after: int = 50) -> dict:
    """Do BEFORE and AFTER differ by more than their groups (runs) differ among themselves?

    Whole groups are exchanged between BEFORE and AFTER (all labellings when there are at most
    ``n_perm``, else ``n_perm`` random ones, stopping early once ``stop_after`` are at least as
    extreme: the p-value is then clearly large) and the KS, Anderson-Darling and spread statistics
    of the pooled values are recomputed. Steps or iterations of one run share its placement and
    neighbours, so treating them as independent samples would call ordinary run-to-run variation a
    system change. Groups are thinned to ``max_values`` values in all for speed; the test stays exact."""
    from itertools import combinations

    keys_b, keys_a = np.unique(gb.astype(str)), np.unique(ga.astype(str))
    per_group = max(10, max_values // (len(keys_b) + len(keys_a)))
    values, codes = [], []
    for side, x, g, keys in ((0, b, gb.astype(str), keys_b), (1, a, ga.astype(str), keys_a)):
        for k in keys:
            v = x[g == k]
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
                n_perm: int = 9999) -> dict:
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


def _g(x, digits=3) -> str:
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
        notes.append(f"spread x{r:.2f} ({'wider' if r > 1 else 'narrower'}; IQR {_g(s['iqr_before'])} -> "
                     f"{_g(s['iqr_after'])}, {spread_test} p={_g(spread_p, 2)})")
    if modes:
        at = lambda ms: ", ".join(f"{_g(m['location'], 4)} ({m['weight']:.0%})" for m in ms)
        notes.append(f"modes {len(mb)} -> {len(ma)} (at {at(mb)} -> {at(ma)})")
    if other:
        notes.append(f"shape differs with medians aligned (Wasserstein {s['wasserstein_shape_pct']:.1f}% of the "
                     f"median, {'run permutation ' if grouped else ''}AD p={_g(shape_p, 2)})")
    if s["p_holm"] >= alpha:
        why = f"no significant difference (Holm-adjusted p={_g(s['p_holm'], 2)}; {ci})"
        if grouped:
            why += f"; tested by exchanging whole runs ({s['groups_before']} before, {s['groups_after']} after)"
            if s["permutation_exact"] and 3 / math.comb(s["groups_before"] + s["groups_after"], s["groups_before"]) >= alpha:
                why += ", too few to tell a change from run-to-run variation (--independent pools them)"
        return "unchanged", why, flags
    located = math.isfinite(shift) and abs(shift) >= min_effect and (lo > 0 or hi < 0)
    if located:
        worse = (shift > 0) == (better == "lower")
        verdict = "slower" if worse else "faster"
        test = (f"run permutation p={_g(s['p_pair'], 2)} ({s['groups_before']}/{s['groups_after']} runs)" if grouped
                else f"KS p={_g(s['ks_p'], 2)}")
        reason = f"{ci}, {better} is better; Cliff's delta {s['cliffs_delta']:+.2f}, {test}"
        return verdict, reason + ("; also " + "; ".join(notes) if notes else ""), flags
    if notes:
        return "changed shape", f"{ci} but " + "; ".join(notes) + f" (Holm-adjusted p={_g(s['p_holm'], 2)})", flags
    return "unchanged", (f"differs statistically (Holm-adjusted p={_g(s['p_holm'], 2)}) but below the practical "
                         f"thresholds: {ci}, IQR x{_g(r)}, shape distance {_g(s['wasserstein_shape_pct'], 2)}%"), flags


def compare(before: pd.DataFrame, after: pd.DataFrame, *, alpha: float = 0.05, min_effect: float = 2.0,
            min_spread: float = 25.0, min_mode_weight: float = 0.05, min_samples: int = 5, n_boot: int = 1000,
            max_samples: int = 20000, seed: int = 0, higher_is_better=(), lower_is_better=(),
            independent: bool = False, n_perm: int = 9999) -> pd.DataFrame:
    """One row per (test, variable) of BEFORE and AFTER samples: the statistics, ``verdict``
    (one of :data:`VERDICTS`) and a one-line ``reason``. ``min_effect`` and ``min_spread`` are
    percentages; ``higher_is_better``/``lower_is_better`` are variable-name patterns (fnmatch).
    Samples with a ``group`` (run) on both sides are tested by exchanging whole groups
    (:func:`group_permutation_tests`) unless ``independent`` pools them as independent draws.
    ``modes_before``/``modes_after`` hold lists of ``{location, weight, lower, upper}``."""
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
    n_perm = max(n_perm, math.ceil(6 * len(compared) / alpha))
    for row in compared:
        test, variable = key = row["test"], row["variable"]
        b, a = gb[key], ga[key]
        rng = np.random.default_rng(_pair_seed(seed, test, variable))
        row.update(_pair_stats(b["value"].to_numpy(float), a["value"].to_numpy(float), groups(b), groups(a),
                               alpha=alpha, n_boot=n_boot, max_samples=max_samples,
                               min_mode_weight=min_mode_weight, rng=rng, n_perm=n_perm))
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


# --- outputs ----------------------------------------------------------------------------------------

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
            f"IQR x{_g(row['iqr_ratio'])}, modes {modes(row.get('modes_before'))} -> {modes(row.get('modes_after'))}, "
            f"Holm-adjusted p={_g(row['p_holm'], 2)}")


def write_outputs(table: pd.DataFrame, out: str | Path, before: pd.DataFrame, after: pd.DataFrame, *,
                  reference: pd.DataFrame | None = None, meta: dict | None = None, fail_verdicts=DEFAULT_FAIL_ON,
                  figures: bool = True) -> dict:
    """Write ``compare.csv``, ``summary.json`` and ``figures/<test>__<variable>.svg``; returns the summary."""
    from hpcvar.analyses.common import write_summary

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
            # compare's own figure names: '_' for other characters, '+' kept, at most 80 per part
            name = "__".join(slug(row[c], sep="_", keep="A-Za-z0-9._+-", max_len=80, empty="x")
                             for c in ("test", "variable"))
            while name in used:
                name += "_"
            used.add(name)
            ref = by["reference"].get(key)
            unit = f" ({row['unit']})" if row["unit"] else ""
            plot_pair(b["value"].to_numpy(float), a["value"].to_numpy(float), out / "figures" / f"{name}.svg",
                      reference=None if ref is None else ref["value"].to_numpy(float),
                      title=f"{row['test']}: {row['variable']} - {row['verdict']}\n{_stats_line(row)}",
                      xlabel=f"{row['variable']}{unit}",
                      modes={"before": row.get("modes_before"), "after": row.get("modes_after")})
            table.loc[i, "figure"] = f"figures/{name}.svg"
    flat = csv_table(table)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "compare.csv") as tmp:
        flat.to_csv(tmp, index=False)
    summary = summarise(table, fail_verdicts, meta)
    write_summary(out / "summary.json", summary)
    return summary


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


def summarise(table: pd.DataFrame, fail_verdicts=DEFAULT_FAIL_ON, meta: dict | None = None) -> dict:
    """The ``summary.json`` document (before :func:`~hpcvar.analyses.common.clean` makes it JSON-safe)."""
    counts = {v: int((table["verdict"] == v).sum()) if not table.empty else 0 for v in VERDICTS}
    flagged = table[table["verdict"].isin(fail_verdicts)] if not table.empty else table
    counted = ("n_before", "n_after", "groups_before", "groups_after", "permutations")
    pairs = [{k: (int(v) if k in counted and v is not None else v) for k, v in
              ((k, _plain(v)) for k, v in rec.items())} for rec in table.to_dict("records")]
    return {**(meta or {}), "fail_on": list(fail_verdicts), "verdicts": counts, "regression": bool(len(flagged)),
            "regressions": [{"test": r["test"], "variable": r["variable"], "verdict": r["verdict"],
                             "reason": r["reason"]} for r in flagged.to_dict("records")],
            "exit_code": 1 if len(flagged) else 0, "pairs": pairs}


def format_table(table: pd.DataFrame) -> str:
    """The table printed on stdout: one line per pair, then the reasons of everything not unchanged."""
    if table.empty:
        return "(nothing to compare)\n"
    lines = []
    for r in table.to_dict("records"):
        compared = r["verdict"] != "not compared"
        nm = lambda m: str(len(m)) if isinstance(m, list) else "?"
        lines.append({
            "test": r["test"], "variable": r["variable"], "n": f"{r['n_before']}/{r['n_after']}",
            "median before": _g(r.get("median_before"), 4) if compared else "",
            "median after": _g(r.get("median_after"), 4) if compared else "",
            "shift % [CI]": (f"{r['shift_pct']:+.1f} [{r['shift_ci_low']:+.1f}, {r['shift_ci_high']:+.1f}]"
                             if compared and math.isfinite(r["shift_pct"]) else ""),
            # The p-values that decided: exchanges of whole runs for grouped samples.
            "tested by": ("runs" if r.get("inference") == "groups" else "samples") if compared else "",
            "KS p": _g(r.get("perm_ks_p" if r.get("inference") == "groups" else "ks_p"), 2) if compared else "",
            "AD p": _g(r.get("perm_ad_p" if r.get("inference") == "groups" else "ad_p"), 2) if compared else "",
            "IQR x": _g(r.get("iqr_ratio"), 3) if compared else "",
            "modes": f"{nm(r.get('modes_before'))}->{nm(r.get('modes_after'))}" if compared else "",
            "p Holm": _g(r.get("p_holm"), 2) if compared else "", "verdict": r["verdict"]})
    text = pd.DataFrame(lines).to_string(index=False) + "\n"
    notes = [f"  {r['test']} / {r['variable']}: {r['verdict']}: {r['reason']}"
             for r in table.to_dict("records") if r["verdict"] != "unchanged"]
    return text + ("\n" + "\n".join(notes) + "\n" if notes else "")


# --- the command ------------------------------------------------------------------------------------

def run(a) -> int:
    """``hpcvar compare`` (arguments from :func:`hpcvar.cli.build_parser`); returns the exit code:
    0 no regression, 1 regression, 2 bad input."""
    fails = fail_on(a.fail_on)
    before_spec, after_spec = a.before_source, a.after_source
    before_win = parse_range(a.before) if a.before else None
    after_win = parse_range(a.after) if a.after else None
    if after_spec is None:
        if not Path(before_spec).is_dir():
            raise BadInput("give BEFORE and AFTER, or one dataset directory with --before and --after ranges")
        after_spec = before_spec
        if before_win is None or after_win is None:
            raise BadInput(f"{before_spec}: one dataset directory needs both --before and --after date ranges")
    ref_spec, ref_win = a.reference, None
    if ref_spec and not ref_spec.startswith("reframe:") and not Path(ref_spec).exists() and Path(before_spec).is_dir():
        ref_spec, ref_win = before_spec, parse_range(a.reference)  # --reference RANGE of the same dataset
    baseline = None
    if Path(before_spec).is_dir() and Path(after_spec).is_dir():
        baseline = step_baseline(before_spec, before_win)
    kw = {"reframe_config_path": a.reframe_config}
    before = load_source(before_spec, before_win, baseline=baseline, **kw)
    after = load_source(after_spec, after_win, baseline=baseline, **kw)
    reference = None
    if ref_spec:
        ref_base = baseline if (baseline is not None and Path(ref_spec).is_dir()) else None
        reference = load_source(ref_spec, ref_win, baseline=ref_base, **kw)
    settings = {k: getattr(a, k) for k in DEFAULTS}
    table = compare(before, after, higher_is_better=a.higher_is_better, lower_is_better=a.lower_is_better,
                    **settings)
    if table.empty or (table["verdict"] == "not compared").all():
        only_b = sorted(set(before["test"]) - set(after["test"]))[:3]
        raise BadInput(f"nothing to compare: no (test, variable) has at least {a.min_samples} samples in both "
                         f"BEFORE and AFTER" + (f" (BEFORE has tests {only_b}, AFTER {sorted(set(after['test']))[:3]})"
                                                 if only_b else ""))
    print(format_table(table), end="")
    meta = {"before": _describe(before_spec, before_win, before), "after": _describe(after_spec, after_win, after),
            "reference": _describe(ref_spec, ref_win, reference) if ref_spec else None,
            "settings": {**settings, "correction": "holm", "higher_is_better": list(a.higher_is_better),
                         "lower_is_better": list(a.lower_is_better)}}
    flagged = table["verdict"].isin(fails)
    if a.out:
        write_outputs(table, a.out, before, after, reference=reference, meta=meta, fail_verdicts=fails,
                      figures=not a.no_figures)
    counts = ", ".join(f"{int((table['verdict'] == v).sum())} {v}" for v in VERDICTS if (table["verdict"] == v).any())
    print(f"\n{counts}; " + (f"REGRESSION: {int(flagged.sum())} pair(s) {' or '.join(fails)}" if flagged.any()
                               else "no regression") + (f" -> {Path(a.out) / 'summary.json'}" if a.out else ""))
    return 1 if flagged.any() else 0


def _describe(spec: str, window, samples: pd.DataFrame) -> dict:
    kind = "reframe" if spec.startswith("reframe:") else ("dataset" if Path(spec).is_dir() else "file")
    return {"source": spec, "kind": kind, "range": _fmt_range(window) if window else None,
            "samples": int(len(samples)), "tests": int(samples["test"].nunique())}
