"""ReFrame performance logs (perflogs) and JSON run reports.

This module owns three formats:

* 3.x perflog: one ``|``-separated line per performance variable, in ReFrame 3's documented
  ``filelog`` format ``<completion time>|reframe <version>|<test> on <system>:<partition> using
  <environ>|<key>=<value>|...|<var>=<value>|ref=<ref> (l=<lower>, u=<upper>)|<unit>``, with any
  number of site-added ``key=value`` fields (``jobid``, ``num_tasks``, ``nodelist``, ...).
* 4.x perflog (``filelog`` handler): a header row naming the ``|``-separated fields (the format
  attributes without their ``check_`` prefix; ``check_perfvalues`` expanded to
  ``<var>_value|<var>_unit|<var>_ref|<var>_lower_thres|<var>_upper_thres`` per variable), then one
  line per test case. A header row repeated further down starts a new section with its own
  fields (files concatenated across format changes).
* JSON run report (``--report-file``): ``runs[].testcases[]`` with ``perfvalues`` (4.x:
  ``"<system>:<partition>:<var>": [value, ref, lower, upper, unit, result]``) or ``perfvars``
  (3.x: a list of ``{name, value, reference, thres_lower, thres_upper, unit}``).

Every reader returns the same long table, one row per (test case, performance variable):
``time`` (job completion time; offsets converted to UTC, then dropped), ``test`` (display name),
``system, partition, environ, job_id, result`` (``pass``/``fail``; NA in 3.x perflogs, which do
not log it), ``variable, value, unit, reference, lower_thres, upper_thres``, then every other
field as a string column under its own name (``nodelist``, ``num_tasks``, a site's image
digest, ...). ReFrame's null spellings (``None``, ``null``) become NA. Lists in a report are
joined with ``,`` and other non-string values JSON-encoded, as ReFrame formats them in perflogs.

:func:`write_perflog` appends records in the 4.x format the way the ``filelog`` handler does.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from hpcvar.parsers.errors import ParseError

KIND_PERFLOG = "reframe_perflog"
KIND_REPORT = "reframe_report"
COLUMNS = ["time", "test", "system", "partition", "environ", "job_id", "result", "variable", "value",
           "unit", "reference", "lower_thres", "upper_thres"]
FLOAT_COLUMNS = ["value", "reference", "lower_thres", "upper_thres"]
RECORD_KEY = ["time", "test", "system", "partition", "environ", "job_id"]
# ReFrame's default ``format_perfvars``: the per-variable header suffixes, in order.
PERFVAR_SUFFIXES = ("value", "unit", "ref", "lower_thres", "upper_thres")
NULLS = {"None", "null"}

# 4.x header fields are attribute names, possibly preceded by literal format text
# ("reframe version"); a data row always has a numeric ``_value`` field, so it never matches.
_HEADER_FIELD = re.compile(r"^[A-Za-z_#][\w# ]*$")
_INFO_3X = re.compile(r"^(?P<test>.+) on (?P<system>[^\s:]+):(?P<partition>\S+) using (?P<environ>\S+)$")
_REF_3X = re.compile(r"^ref=(?P<ref>\S+) \(l=(?P<lower>\S+), u=(?P<upper>\S+)\)$")
# Perflog field -> column of the long table; "name" is the test name only without "display_name".
_RENAME_4X = {"job_completion_time": "time", "display_name": "test", "jobid": "job_id",
              "job_nodelist": "nodelist"}
_RENAME_3X = {"jobid": "job_id"}
_RESULTS_3X = {"success": "pass", "failure": "fail"}


# --- sniffing and dispatch -----------------------------------------------------------------


def sniff(head: str, name: str) -> bool:
    """True for a 3.x/4.x perflog or a JSON run report."""
    return _sniff_kind(head) is not None


def _sniff_kind(head: str) -> str | None:
    text = head.lstrip("\ufeff")
    if text.lstrip().startswith("{"):
        return KIND_REPORT if '"session_info"' in text and '"data_version"' in text else None
    first = text.split("\n", 1)[0].rstrip("\r").split("|")
    return KIND_PERFLOG if _is_header(first) or _is_record_3x(first) else None


def _is_header(fields: list[str]) -> bool:
    return (all(_HEADER_FIELD.match(f) for f in fields)
            and any(f.endswith("_value") for f in fields))


def _is_record_3x(fields: list[str]) -> bool:
    return len(fields) >= 6 and fields[1].startswith("reframe ") and _REF_3X.match(fields[-2]) is not None


def _kind(path: Path) -> str:
    with path.open(errors="replace") as handle:
        head = handle.read(8192)
    kind = _sniff_kind(head)
    if kind is None:
        raise ParseError(path, "expected a ReFrame perflog (header row or 3.x record) or a JSON run report", 1)
    return kind


def read(path: str | Path) -> pd.DataFrame:
    """The long table of a perflog or a run report (format sniffed from the content)."""
    path = Path(path)
    return read_report(path) if _kind(path) == KIND_REPORT else read_perflog(path)


def describe(path: str | Path) -> dict:
    path = Path(path)
    if _kind(path) == KIND_REPORT:
        frame, version = _read_report(path)
        kind = KIND_REPORT
    else:
        frame, version = _read_perflog(path)
        kind = KIND_PERFLOG
    times = frame["time"].dropna()
    records = frame.drop_duplicates(RECORD_KEY)
    # A 3.x perflog (or a 4.x one whose format has no %(check_result)s) does not say pass or fail.
    known = records["result"].notna().any()
    return {
        "kind": kind,
        "format_version": version,
        "records": len(records),
        "time_span": [times.min().isoformat(), times.max().isoformat()] if len(times) else None,
        "figures": {
            "tests": int(frame["test"].nunique()),
            "variables": int(frame["variable"].nunique()),
            "values": int(frame["value"].notna().sum()),
            "pass": int((records["result"] == "pass").sum()) if known else "unknown (no result field)",
            "fail": int((records["result"] == "fail").sum()) if known else "unknown (no result field)",
        },
    }


# --- shared helpers ------------------------------------------------------------------------


def _null(text: str | None) -> str | None:
    return None if text is None or text in NULLS else text


def _time(path: Path, text: str | None, line: int | None) -> datetime | None:
    """A job completion time; an offset is converted to UTC and dropped so all times compare."""
    text = _null(text)
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ParseError(path, f"expected an ISO 8601 job completion time, found {text!r}", line) from None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def _float(path: Path, text: str | None, what: str, line: int | None, *, nullable: bool) -> float | None:
    if nullable and _null(text) is None:
        return None
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ParseError(path, f"expected a number for {what}, found {text!r}", line) from None


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Long table with the fixed columns first, extra fields after them as strings."""
    extras = list(dict.fromkeys(key for row in rows for key in row if key not in COLUMNS))
    frame = pd.DataFrame(rows, columns=COLUMNS + extras)
    frame["time"] = pd.to_datetime(frame["time"])
    for column in FLOAT_COLUMNS:
        frame[column] = frame[column].astype("float64")
    for column in frame.columns.difference(["time", *FLOAT_COLUMNS]):
        frame[column] = frame[column].astype("str")
    return frame


def _perf(variable: str, value: float, unit: str | None, ref: float | None, lower: float | None,
          upper: float | None) -> dict[str, Any]:
    return {"variable": variable, "value": value, "unit": unit, "reference": ref,
            "lower_thres": lower, "upper_thres": upper}


# --- perflogs ------------------------------------------------------------------------------


def read_perflog(path: str | Path) -> pd.DataFrame:
    """Long table of a 3.x or 4.x perflog (module docstring); ParseError on a malformed line."""
    return _read_perflog(Path(path))[0]


def _read_perflog(path: Path) -> tuple[pd.DataFrame, str]:
    lines = path.read_text(errors="replace").splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise ParseError(path, "empty perflog", 1)
    fields = lines[first].split("|")
    if _is_header(fields):
        rows, version = _rows_4x(path, lines), "4.x"
    elif _is_record_3x(fields):
        rows, version = _rows_3x(path, lines), "3.x"
    else:
        raise ParseError(path, "expected a 4.x header row ('job_completion_time|...|<var>_value|...') "
                               "or a 3.x record ('<time>|reframe <version>|...|ref=... (l=..., u=...)|<unit>')",
                         first + 1)
    if not rows:
        raise ParseError(path, "perflog has a header but no records", len(lines))
    return _frame(rows), version


class _Layout:
    """Field positions named by one 4.x header row."""

    def __init__(self, path: Path, names: list[str], line: int):
        self.line = line
        self.names = names
        self.perfvars: dict[str, dict[str, int]] = {}
        for index, name in enumerate(names):
            for suffix in PERFVAR_SUFFIXES:
                if name.endswith("_" + suffix):
                    self.perfvars.setdefault(name[:-len(suffix) - 1], {})[suffix] = index
        self.perfvars = {var: cols for var, cols in self.perfvars.items() if {"value", "unit"} <= cols.keys()}
        if not self.perfvars:
            raise ParseError(path, "header names no performance variable ('<var>_value' with '<var>_unit')", line)
        if "job_completion_time" not in names:
            raise ParseError(path, "header lacks the 'job_completion_time' field", line)
        if "display_name" not in names and "name" not in names:
            raise ParseError(path, "header lacks a test name field ('display_name' or 'name')", line)
        perf_columns = {i for cols in self.perfvars.values() for i in cols.values()}
        rename = dict(_RENAME_4X, **({} if "display_name" in names else {"name": "test"}))
        self.plain = [(i, rename.get(n, n)) for i, n in enumerate(names) if i not in perf_columns]

    def rows(self, path: Path, fields: list[str], line: int) -> list[dict[str, Any]]:
        if len(fields) != len(self.names):
            raise ParseError(path, f"expected {len(self.names)} '|'-separated fields as named by the header on "
                                   f"line {self.line}, found {len(fields)}", line)
        base: dict[str, Any] = {column: _null(fields[i]) for i, column in self.plain}
        base["time"] = _time(path, base["time"], line)
        rows = []
        for var, cols in self.perfvars.items():
            def field(suffix: str) -> str | None:
                return fields[cols[suffix]] if suffix in cols else None

            rows.append({**base, **_perf(
                var, _float(path, field("value"), f"{var}_value", line, nullable=False), field("unit"),
                _float(path, field("ref"), f"{var}_ref", line, nullable=True),
                _float(path, field("lower_thres"), f"{var}_lower_thres", line, nullable=True),
                _float(path, field("upper_thres"), f"{var}_upper_thres", line, nullable=True))})
        return rows


def _rows_4x(path: Path, lines: list[str]) -> list[dict[str, Any]]:
    layout: _Layout | None = None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if _is_header(fields):
            layout = _Layout(path, fields, number)
        elif layout is None:
            raise ParseError(path, "expected a header row before the first record", number)
        else:
            rows.extend(layout.rows(path, fields, number))
    return rows


def _rows_3x(path: Path, lines: list[str]) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            rows.append(_row_3x(path, line.split("|"), number))
    return rows


def _row_3x(path: Path, fields: list[str], line: int) -> dict[str, Any]:
    if not _is_record_3x(fields):
        raise ParseError(path, "expected '<time>|reframe <version>|<check info>|<key>=<value>|...|<var>=<value>|"
                               "ref=<ref> (l=<lower>, u=<upper>)|<unit>'", line)
    info = _INFO_3X.match(fields[2])
    if info is None:
        raise ParseError(path, f"expected '<test> on <system>:<partition> using <environ>', found {fields[2]!r}", line)
    row: dict[str, Any] = {"time": _time(path, fields[0], line), **info.groupdict(), "version": fields[1]}
    *pairs, perf = fields[3:-2]
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ParseError(path, f"expected a key=value field, found {pair!r}", line)
        row[_RENAME_3X.get(key, key)] = _null(value)
    var, sep, value = perf.rpartition("=")
    if not sep or not var:
        raise ParseError(path, f"expected '<variable>=<value>' before the ref field, found {perf!r}", line)
    ref = _REF_3X.match(fields[-2])
    row.update(_perf(var, _float(path, value, var, line, nullable=False), fields[-1],
                     _float(path, ref["ref"], "ref", line, nullable=True),
                     _float(path, ref["lower"], "l", line, nullable=True),
                     _float(path, ref["upper"], "u", line, nullable=True)))
    return row


# --- JSON run reports ----------------------------------------------------------------------


def final_attempts(runs: list[dict]) -> list[dict]:
    """The test cases of a report's ``runs`` as ReFrame itself counts them after ``--max-retries``:
    every case that did not fail, and the failures of the last run (a failed attempt that a
    retry replaced is left out, as ReFrame's own report tables and comparisons do)."""
    last = len(runs) - 1
    return [case for r, run in enumerate(runs) for case in run.get("testcases", [])
            if case.get("result") != "fail" or r == last]


def read_report(path: str | Path) -> pd.DataFrame:
    """Long table of a JSON run report; a test case without performance values gives one row
    with ``variable`` NA, so failures (``fail_reason``) stay visible."""
    return _read_report(Path(path))[0]


def _read_report(path: Path) -> tuple[pd.DataFrame, str | None]:
    try:
        doc = json.loads(path.read_text(errors="replace"))
    except json.JSONDecodeError as exc:
        raise ParseError(path, f"invalid JSON: {exc.msg}", exc.lineno) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise ParseError(path, "expected a ReFrame run report: a JSON object with a 'runs' list")
    rows = []
    for r, run in enumerate(doc["runs"]):
        cases = run.get("testcases") if isinstance(run, dict) else None
        if not isinstance(cases, list):
            raise ParseError(path, f"runs[{r}] has no 'testcases' list")
        for t, case in enumerate(cases):
            if not isinstance(case, dict):
                raise ParseError(path, f"runs[{r}].testcases[{t}] is not an object")
            base = _case_fields(path, case)
            perf = _case_perf(path, case, f"runs[{r}].testcases[{t}]")
            rows.extend({**base, **p} for p in perf or [_perf(None, None, None, None, None, None)])
    if not rows:
        raise ParseError(path, "the report has no test cases")
    session = doc.get("session_info")
    version = session.get("data_version") if isinstance(session, dict) else None
    return _frame(rows), None if version is None else str(version)


def _xfmt(value: Any) -> str | None:
    """A report value as ReFrame prints it in a perflog (``_xfmt`` of reframe.core.logging)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple | set):
        return ",".join(v if isinstance(v, str) else json.dumps(v) for v in value)
    return json.dumps(value)


def _case_fields(path: Path, case: dict[str, Any]) -> dict[str, Any]:
    system, _, partition = str(case.get("system", "")).partition(":")
    name_key = "display_name" if case.get("display_name") else "name"
    row: dict[str, Any] = {
        "time": _time(path, case.get("job_completion_time"), None),
        "test": case.get(name_key),
        "system": system or None,
        # 3.x reports name the partition inside "system" ("sys:part") and call environ "environment".
        "partition": case.get("partition") or partition or None,
        "environ": case.get("environ") or case.get("environment"),
        "job_id": _xfmt(case.get("jobid")),
        "result": _RESULTS_3X.get(case.get("result"), case.get("result")),
        "nodelist": _xfmt(case.get("job_nodelist", case.get("nodelist"))),
        "fail_reason": _xfmt(case.get("fail_reason")),
    }
    consumed = {"job_completion_time", name_key, "system", "partition", "environ", "environment",
                "jobid", "result", "job_nodelist", "nodelist", "fail_reason", "perfvalues", "perfvars"}
    row.update((key, _xfmt(value)) for key, value in case.items() if key not in consumed)
    return row


def _case_perf(path: Path, case: dict[str, Any], where: str) -> list[dict[str, Any]]:
    if isinstance(case.get("perfvalues"), dict):
        entries = []
        for key, info in case["perfvalues"].items():
            if not isinstance(info, list) or len(info) < 5:
                raise ParseError(path, f"{where}.perfvalues[{key!r}]: expected [value, ref, lower, upper, unit, ...]")
            entries.append((key.split(":")[-1], *info[:5]))
    elif isinstance(case.get("perfvars"), list):
        try:
            entries = [(v["name"], v["value"], v["reference"], v["thres_lower"], v["thres_upper"], v["unit"])
                       for v in case["perfvars"]]
        except (KeyError, TypeError):
            raise ParseError(path, f"{where}.perfvars: expected objects with name, value, reference, "
                                   "thres_lower, thres_upper, unit") from None
    else:
        return []
    # A test that failed before its performance stage (sanity, run) has no values: one row each, NA.
    failed = _RESULTS_3X.get(case.get("result"), case.get("result")) not in (None, "pass")
    return [_perf(var, _number(path, value, f"{where} {var} value", nullable=failed), unit,
                  _number(path, ref, f"{where} {var} reference", nullable=True),
                  _number(path, lower, f"{where} {var} lower threshold", nullable=True),
                  _number(path, upper, f"{where} {var} upper threshold", nullable=True))
            for var, value, ref, lower, upper, unit in entries]


def _number(path: Path, value: Any, what: str, *, nullable: bool) -> float | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError(path, f"expected a number for {what}, found {value!r}")
    return float(value)


# --- writing -------------------------------------------------------------------------------


def write_perflog(path: str | Path, records: Iterable[Mapping[str, Any]], fields: Sequence[str]) -> None:
    """Append ``records`` to a 4.x perflog as ReFrame's ``filelog`` handler does.

    ``fields`` are the header names in order (format attributes without ``check_``); the name
    ``perfvalues`` marks where the per-variable columns go. Each record maps those names to
    values, formatted like ReFrame (strings as is, lists joined with ``,``, datetimes in ISO
    8601, anything else JSON-encoded, so a missing field or None is ``null``), and
    ``record["perfvalues"]`` maps each variable (``<var>`` or ReFrame's key
    ``<system>:<partition>:<var>``) to ``(value, ref, lower_thres, upper_thres, unit)`` (ReFrame's
    order), printed with ``str``. The header is written when the file is new; when it differs
    from the file's header ReFrame keeps the old file as ``<name>.h<N>`` and starts a new one, and
    so does this function.
    """
    path = Path(path)
    current = _first_line(path)
    for header, group in itertools.groupby(records, key=lambda record: _header_line(fields, record)):
        lines = "".join(_record_line(fields, record) + "\n" for record in group)
        if header == current:
            with path.open("a") as handle:
                handle.write(lines)
        else:
            if current is not None:
                path.rename(_free_name(path))
            path.write_text(header + "\n" + lines)
            current = header


def _first_line(path: Path) -> str | None:
    if not path.exists() or path.stat().st_size == 0:
        return None
    with path.open() as handle:
        return handle.readline().rstrip("\n")


def _free_name(path: Path) -> Path:
    count = 0
    while path.with_name(f"{path.name}.h{count}").exists():
        count += 1
    return path.with_name(f"{path.name}.h{count}")


def _header_line(fields: Sequence[str], record: Mapping[str, Any]) -> str:
    if not record.get("perfvalues"):
        raise ValueError("every perflog record needs a non-empty 'perfvalues' mapping")
    names = []
    for field in fields:
        if field == "perfvalues":
            # ReFrame keys perfvalues by "<system>:<partition>:<var>" and names columns by <var>.
            names.extend(f"{var.split(':')[-1]}_{suffix}" for var in record["perfvalues"]
                         for suffix in PERFVAR_SUFFIXES)
        else:
            names.append(field)
    return "|".join(names)


def _record_line(fields: Sequence[str], record: Mapping[str, Any]) -> str:
    values = []
    for field in fields:
        if field == "perfvalues":
            for value, ref, lower, upper, unit in record["perfvalues"].values():
                values.extend(str(v) for v in (value, unit, ref, lower, upper))
        else:
            values.append(_format_field(record.get(field)))
    if any("|" in v or "\n" in v for v in values):
        raise ValueError(f"perflog values may not contain '|' or newlines: {values}")
    return "|".join(values)


def _format_field(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    formatted = _xfmt(value)
    return "null" if formatted is None else formatted
