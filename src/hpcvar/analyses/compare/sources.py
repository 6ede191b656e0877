"""Samples for ``hpcvar compare``: what BEFORE, AFTER and ``--reference`` name, as one table.

Three kinds of input, each read into the same samples table (:data:`COLUMNS`):

* a CSV or Parquet file of samples (:func:`load_samples`), checked row by row;
* a date range of a collated dataset (:func:`dataset_samples`): run times, step times relative
  to the BEFORE window's and every microbenchmark latency of the runs started in the window;
* stored ReFrame sessions (:func:`reframe_samples`), read through ReFrame itself.

:func:`load_source` picks the kind from the command-line argument. Bad input raises
:class:`~hpcvar.parsers.errors.ParseError` naming the file and line (or row, or session), or
:class:`BadInput` when the arguments themselves do not fit together.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.defaults import REFRAME_CONFIG
from hpcvar.parsers.errors import ParseError
from hpcvar.parsers.sacct import accounted_second


class BadInput(ValueError):
    """A command-line input that is not a file's fault: a date range, --fail-on, a missing argument."""


#: Columns of a samples table (``group`` optional; ``unit`` and ``better`` may be empty).
COLUMNS = ("test", "variable", "value", "unit", "better", "group")

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


def round_range(text: str, rounds_dir: Path) -> str:
    """``round:A..B`` (campaign round ids, inclusive, compared as text: ``round:001..010``) as the
    ``START..END`` of those rounds: from the first one's ReFrame session start to the last one's
    end (``rounds/<id>/reframe-report.json``). Any other text is returned as it is.

    The runs' starts are Slurm's accounting's, in whole seconds, so the range opens at the whole
    second of the session's start (:func:`hpcvar.parsers.sacct.accounted_second`): the round's
    first job often starts within it."""
    if not text.startswith("round:"):
        return text
    first, _, last = text.removeprefix("round:").partition("..")
    last = last or first
    reports = sorted(p for p in Path(rounds_dir).glob("*/reframe-report.json")
                     if first <= p.parent.name <= last)
    if not reports:
        raise BadInput(f"{text!r}: no finished round between {first} and {last} in {rounds_dir}")
    sessions = [json.loads(p.read_text())["session_info"] for p in reports]
    start = accounted_second(min(float(s["time_start_unix"]) for s in sessions))
    end = max(float(s["time_end_unix"]) for s in sessions)
    stamp = lambda t: pd.Timestamp(t, unit="s", tz="UTC").isoformat()  # noqa: E731
    return f"{stamp(start)}..{stamp(end)}"


@dataclass(frozen=True)
class Selection:
    """Which runs of a dataset one side of a comparison takes: those started in [start, end]
    (either end open), and, with ``image``, only those run in that container image
    (``NAME``, ``NAME@sha256:HEX``, a digest prefix allowed) or, with :data:`BARE_METAL`, none."""

    start: pd.Timestamp | None = None
    end: pd.Timestamp | None = None
    image: str | None = None

    def matches_container(self, container: pd.Series) -> pd.Series:
        if self.image is None:
            return pd.Series(True, index=container.index)
        ran = container.fillna("").astype(str)
        if self.image == BARE_METAL:
            return ran == ""
        name, _, digest = self.image.partition("@sha256:")
        keep = ran.str.startswith(f"{name}@sha256:") if name else ran != ""
        if digest:
            keep &= ran.str.partition("@sha256:")[2].str.startswith(digest)
        return keep


#: ``--before bare-metal``: the runs without a container image.
BARE_METAL = "bare-metal"


def parse_selection(text: str, rounds_dir: Path) -> Selection:
    """``--before``/``--after``/``--reference`` of one dataset: a date range (``START..END``), a
    campaign's rounds (``round:A..B``), an image (``image:NAME[@sha256:HEX]``) or ``bare-metal``,
    or a range and an image joined by a comma (``round:021..030,image:amgproxy``)."""
    start = end = image = None
    for part in (p.strip() for p in text.split(",")):
        if part == BARE_METAL or part.startswith("image:"):
            if image is not None:
                raise BadInput(f"{text!r}: two images; give one (image:NAME[@sha256:HEX]) or bare-metal")
            image = BARE_METAL if part == BARE_METAL else part.removeprefix("image:")
            if not image:
                raise BadInput(f"{text!r}: image: needs a name, image:NAME or image:NAME@sha256:HEX")
        elif part:
            if start is not None or end is not None:
                raise BadInput(f"{text!r}: two ranges; give one date or round range")
            start, end = parse_range(round_range(part, rounds_dir))
    return Selection(start, end, image)


def fmt_range(window) -> str:
    """A selection as ``START..END`` in ISO times (an open end left empty), with its image."""
    window = window or Selection()
    start, end = window.start, window.end
    text = f"{start.isoformat() if start is not None else ''}..{end.isoformat() if end is not None else ''}"
    return text + (f", {window.image if window.image == BARE_METAL else 'image ' + window.image}"
                   if window.image else "")


def dataset_runs(path: str | Path, window: Selection | None = None) -> pd.DataFrame:
    """Completed runs of a dataset selected by ``window`` (started inside its range, inclusive;
    run in its image)."""
    from hpcvar.data.dataset import Dataset

    path = Path(path)
    if not (path / "runs").is_dir():
        raise ParseError(path, "not a dataset directory (no runs/ table; write one with `hpcvar collate`)")
    runs = Dataset(path).read("runs")
    if runs.empty:
        raise ParseError(path / "runs", "the dataset has no runs")
    runs = runs[runs["state"] == "COMPLETED"]
    window = window or Selection()
    keep = window.matches_container(runs["container"])
    if window.start is not None:
        keep &= runs["start"] >= window.start
    if window.end is not None:
        keep &= runs["start"] <= window.end
    chosen = runs[keep]
    if chosen.empty:
        images = sorted(set(runs["container"].dropna()) - {""})
        ran = (f"; their images: {', '.join(images)}" + (" and bare metal" if runs["container"].isna().any() else "")
               if images else "; none ran in a container image")
        raise ParseError(path, f"no runs started in {fmt_range(window)} (the dataset's runs started "
                               f"{runs['start'].min().isoformat()} .. {runs['start'].max().isoformat()}{ran})")
    return chosen


def step_baseline(path: str | Path, window=None) -> pd.DataFrame:
    """Median duration of every (dataset, step) over the window's runs: what ``step_time_rel`` is
    relative to (the BEFORE window's, so a uniform slowdown shows as a shift)."""
    from hpcvar.data.dataset import Dataset

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
    from hpcvar.data.dataset import Dataset

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
        raise ParseError(path, f"runs of {fmt_range(window)} have no run times, steps or latencies")
    out = pd.concat(parts, ignore_index=True)
    out["group"] = out["group"].astype(object).where(out["group"].notna(), None)
    return out[list(COLUMNS)]


# --- samples from ReFrame's results database --------------------------------------------------------

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def reframe_config(path: str | Path | None, where: str) -> Path:
    """The ReFrame configuration (default :data:`~hpcvar.defaults.REFRAME_CONFIG`); a relative path
    is taken from the current directory, like any path on the command line. A :class:`ParseError`
    about ``where`` (the ``reframe:`` argument) names it and ``--reframe-config`` when it is missing."""
    config = Path(path or REFRAME_CONFIG)
    if not config.is_file():
        cwd = "" if config.is_absolute() else f"; relative to the current directory {Path.cwd()}"
        raise ParseError(where, f"ReFrame configuration {config} not found (--reframe-config{cwd})")
    return config


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
    exe = reframe or _reframe_exe()
    rows = []
    for q in queries:
        where = f"reframe:{q}"
        config = reframe_config(config, where)
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


def describe(spec: str, window, samples: pd.DataFrame) -> dict:
    """What ``summary.json`` records of one input: the argument, its kind, range and size."""
    kind = "reframe" if spec.startswith("reframe:") else ("dataset" if Path(spec).is_dir() else "file")
    return {"source": spec, "kind": kind, "range": fmt_range(window) if window else None,
            "samples": int(len(samples)), "tests": int(samples["test"].nunique())}
