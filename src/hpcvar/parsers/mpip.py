"""mpiP text reports (``<exe>.<ntasks>.<pid>.<index>.mpiP``), mpiP 3.4 and 3.5.

This module owns the report header (``@ Command``, ``@ Version``, ``@ Start time``, ...), the
``MPI Time (seconds)`` per-task table, the ``Callsites`` list, the ``Aggregate Time (top twenty,
descending, milliseconds)`` table and the ``Callsite Time statistics (all, milliseconds)`` table.
The other sections (message sizes, I/O, collective histograms) are skipped.

Layout differences handled: mpiP 3.4 prints ``Call Site Time App% MPI% [COV]`` in the aggregate
table, 3.5 adds ``Count``; ``-e`` prints ``%.3f`` instead of ``%.3g``; a callsite is either
``file line function`` or ``0xaddress [unknown]``. mpiP always closes a report with an
``@--- End of Report`` section, so a file without one is truncated. Concise (``-c``) reports have
no per-task table and are rejected.

Numbers are read as printed: three significant digits for times, two decimals for percentages.
Routine names are the ones mpiP prints, without the ``MPI_`` prefix (``Allreduce``, ``Waitall``).

:func:`write` produces an mpiP 3.5 report (same sections and column layout) for the simulator.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.parsers.errors import ParseError

KIND = "mpip"
WRITER_VERSION = "3.5.0"

_HEADING = re.compile(r"^@--- (.*?)\s*-*$")
_RULE = re.compile(r"^-{20,}\s*$")
_HEADER_LINE = re.compile(r"^@ (.+?)\s*: ?(.*)$")
_TIME_FORMAT = "%Y %m %d %H:%M:%S"
# mpiP prints a callsite as "ID Lev File Line Function Call" or, when the source location is
# unknown, "ID Lev 0xAddress Function Call" (no line column).
_CALLSITE_ROW = re.compile(r"^\s*(\d+)\s+0\s+(\S+)\s+(?:(\d+)\s+)?(\S.*?)\s+(\S+)\s*$")
_AGGREGATE_COLUMNS = {"Call", "Site", "Time", "App%", "MPI%"}
_STATS_COLUMNS = ["Name", "Site", "Rank", "Count", "Max", "Mean", "Min", "App%", "MPI%"]
_RULE_TEXT = "-" * 75

TASK_COLUMNS = ["rank", "host", "app_time_s", "mpi_time_s", "mpi_pct"]
ROUTINE_COLUMNS = ["routine", "time_s", "app_pct", "mpi_pct", "count", "sites"]
CALLSITE_COLUMNS = ["site", "routine", "rank", "count", "max_ms", "mean_ms", "min_ms",
                    "app_pct", "mpi_pct", "file", "line", "parent"]


@dataclass(frozen=True)
class MpipReport:
    """One mpiP report.

    ``tasks``: one row per MPI rank: ``rank, host`` (from ``@ MPI Task Assignment``; missing ->
    NA), ``app_time_s, mpi_time_s, mpi_pct``.
    ``routines``: one row per MPI routine, largest time first: ``routine, time_s`` (sum over its
    callsites of the aggregate time; sites beyond mpiP's top twenty are taken from the callsite
    statistics ``*`` rows as count x mean), ``app_pct, mpi_pct`` (summed over sites), ``count``
    (calls, from the ``*`` rows; the 3.5 aggregate ``Count`` when there are no statistics; NA in
    a 3.4 report without statistics) and ``sites``.
    ``callsites``: the callsite time statistics rows: ``site, routine, rank`` (NA for mpiP's ``*``
    aggregate row), ``count, max_ms, mean_ms, min_ms, app_pct, mpi_pct`` and the source location
    from the ``Callsites`` section: ``file`` (file name or 0x address), ``line``, ``parent``.
    """

    version: str
    command: str
    start: datetime | None
    stop: datetime | None
    ntasks: int
    app_time_s: float
    mpi_time_s: float
    mpi_pct: float
    tasks: pd.DataFrame
    routines: pd.DataFrame
    callsites: pd.DataFrame


@dataclass
class _Section:
    """A section: its title, the line number of its heading, and its body ``lines[start:stop]``."""

    title: str
    line: int
    lines: list[str]
    start: int
    stop: int

    @property
    def last_line(self) -> int:
        """Line number of the section's last line (its heading's when it has no body)."""
        return self.stop if self.stop > self.start else self.line


class _Rows:
    """A table's non-blank rows, ``lines[start:stop]`` without the blank ones: ``texts`` for
    column-wise parsing, ``rows[i]`` -> ``(line number, text)`` to name a line in an error.
    The line numbers are worked out only when asked for (a 512-node report has ~200k rows)."""

    def __init__(self, lines: list[str], start: int, stop: int):
        chunk = lines[start:stop]
        self.texts = [t for t in chunk if t and not t.isspace()]
        self._start = start
        self._numbers = None if len(self.texts) == len(chunk) else \
            [start + j + 1 for j, t in enumerate(chunk) if t and not t.isspace()]

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> tuple[int, str]:
        i = range(len(self.texts))[i]
        return (self._start + i + 1 if self._numbers is None else self._numbers[i]), self.texts[i]

    def __iter__(self):
        return (self[i] for i in range(len(self.texts)))


def sniff(head: str, name: str) -> bool:
    return head.lstrip("\ufeff").split("\n", 1)[0].strip() == "@ mpiP"


def read(path: str | Path) -> MpipReport:
    """Parse an mpiP report; :class:`ParseError` on a truncated or malformed one."""
    path = Path(path)
    lines = path.read_text(errors="replace").splitlines()
    if not lines or lines[0].strip() != "@ mpiP":
        raise ParseError(path, "expected first line '@ mpiP' (not an mpiP report)", 1)
    header, sections = _split(path, lines)
    by_title = {s.title.split(":")[0]: s for s in sections}
    if "MPI Time (seconds)" not in by_title:
        raise ParseError(path, "no '@--- MPI Time (seconds)' section (concise -c reports are not supported)",
                         sections[0].line)
    tasks = _tasks(path, by_title["MPI Time (seconds)"], _hosts(path, header))
    locations = _locations(path, by_title.get("Callsites"))
    aggregate = _aggregate(path, by_title.get("Aggregate Time (top twenty, descending, milliseconds)"))
    stats = _stats(path, by_title.get("Callsite Time statistics (all, milliseconds)"))
    total = tasks.iloc[-1]
    tasks = tasks.iloc[:-1].reset_index(drop=True)
    tasks["rank"] = tasks["rank"].astype("int64")
    return MpipReport(
        version=_header_value(header, "Version") or "",
        command=_header_value(header, "Command") or "",
        start=_header_time(path, header, "Start time"),
        stop=_header_time(path, header, "Stop time"),
        ntasks=len(tasks),
        app_time_s=float(total["app_time_s"]),
        mpi_time_s=float(total["mpi_time_s"]),
        mpi_pct=float(total["mpi_pct"]),
        tasks=tasks,
        routines=_routines(aggregate, stats),
        callsites=_with_locations(stats, locations),
    )


def describe(path: str | Path) -> dict:
    report = read(path)
    top = report.routines.iloc[0] if len(report.routines) else None
    span = None
    if report.start is not None and report.stop is not None:
        span = [report.start.isoformat(), report.stop.isoformat()]
    return {
        "kind": KIND,
        "format_version": report.version or None,
        "records": report.ntasks,
        "time_span": span,
        "figures": {
            "ntasks": report.ntasks,
            # mpiP's aggregate ('*') row: the sum over all tasks, printed to 3 significant digits
            "app_time_s": report.app_time_s,
            "app_time_is": "sum over all tasks (mpiP's '*' row, 3 significant digits)",
            "task_app_time_max_s": _task_stat(report, "max"),
            "task_app_time_mean_s": _task_stat(report, "mean"),
            "mpi_time_s": report.mpi_time_s,
            "mpi_pct": report.mpi_pct,
            "routines": len(report.routines),
            "callsites": int(report.routines["sites"].sum()) if len(report.routines) else 0,
            "top_routine": None if top is None else top["routine"],
            "top_routine_time_s": None if top is None else float(top["time_s"]),
        },
    }


def _task_stat(report: MpipReport, how: str) -> float | None:
    """The slowest (``max``, about the job's wall time) or mean task's own AppTime."""
    times = report.tasks["app_time_s"].dropna()
    return float(getattr(times, how)()) if len(times) else None


# --- reading -------------------------------------------------------------------------------


def _split(path: Path, lines: list[str]) -> tuple[list[tuple[int, str, str]], list[_Section]]:
    """The header's ``(line number, key, value)`` fields before the first ``@---`` heading, and the
    sections after it."""
    heads = [i for i, text in enumerate(lines) if text.startswith("@--- ")]
    header = []
    for number, text in enumerate(lines[:heads[0] if heads else len(lines)], start=1):
        match = _HEADER_LINE.match(text)
        if match:
            header.append((number, match.group(1), match.group(2)))
    sections = [_Section(_HEADING.match(lines[i]).group(1), i + 1, lines, i + 1, stop)
                for i, stop in zip(heads, [*heads[1:], len(lines)])]
    if not sections or sections[-1].title != "End of Report":
        where = f" inside section {sections[-1].title!r}" if sections else ""
        raise ParseError(path, f"file ends{where} without the '@--- End of Report' section (truncated report)",
                         len(lines))
    return header, sections


def _header_value(header: list[tuple[int, str, str]], key: str) -> str | None:
    return next((value.strip() for _, name, value in header if name == key), None)


def _header_time(path: Path, header: list[tuple[int, str, str]], key: str) -> datetime | None:
    for number, name, value in header:
        if name == key:
            try:
                return datetime.strptime(value.strip(), _TIME_FORMAT)
            except ValueError:
                raise ParseError(path, f"expected '@ {key} : YYYY MM DD HH:MM:SS'", number) from None
    return None


def _hosts(path: Path, header: list[tuple[int, str, str]]) -> dict[int, str]:
    hosts = {}
    for number, name, value in header:
        if name == "MPI Task Assignment":
            rank, _, host = value.partition(" ")
            if not rank.isdigit() or not host.strip():
                raise ParseError(path, "expected '@ MPI Task Assignment : <rank> <host>'", number)
            hosts[int(rank)] = host.strip()
    return hosts


def _table(path: Path, section: _Section, first_column: str) -> tuple[list[str], _Rows]:
    """Column names and the non-blank rows of a section's table."""
    lines, start, stop = section.lines, section.start, section.stop
    if start >= stop or not _RULE.match(lines[start]):
        raise ParseError(path, f"expected a line of dashes after the {section.title!r} heading", section.line + 1)
    if stop - start < 2 or not lines[start + 1].split() or lines[start + 1].split()[0] != first_column:
        raise ParseError(path, f"expected the {section.title!r} column header starting with {first_column!r}",
                         section.line + 2)
    columns = lines[start + 1].split()
    for i in range(start + 2, stop):
        if lines[i].startswith("-") and _RULE.match(lines[i]):
            return columns, _Rows(lines, start + 2, i)
    raise ParseError(path, f"table {section.title!r} is not closed by a line of dashes", section.last_line)


def _number(path: Path, number: int, token: str, column: str) -> float:
    try:
        return float(token)
    except ValueError:
        raise ParseError(path, f"expected a number in column {column!r}, found {token!r}", number) from None


def _integer(path: Path, number: int, token: str, column: str) -> int:
    if not token.isdigit():
        raise ParseError(path, f"expected a non-negative integer in column {column!r}, found {token!r}", number)
    return int(token)


def _fields(path: Path, number: int, text: str, columns: list[str], table: str) -> list[str]:
    fields = text.split()
    if len(fields) != len(columns):
        raise ParseError(path, f"expected {len(columns)} columns ({' '.join(columns)}) in {table!r}, "
                               f"found {len(fields)}", number)
    return fields


def _tasks(path: Path, section: _Section, hosts: dict[int, str]) -> pd.DataFrame:
    """Per-task rows followed by the ``*`` aggregate row (rank NA)."""
    columns, rows = _table(path, section, "Task")
    if columns != ["Task", "AppTime", "MPITime", "MPI%"]:
        raise ParseError(path, "expected columns 'Task AppTime MPITime MPI%'", section.line + 2)
    cols = _columns(path, rows, columns, section.title)
    star = np.flatnonzero((cols["Task"].astype(str) == "*").to_numpy())
    if star.size == 0 or star[0] != len(rows) - 1:
        if star.size:
            raise ParseError(path, "rows after the '*' aggregate row", rows[star[0] + 1][0])
        raise ParseError(path, "the MPI Time table has no '*' aggregate row", section.last_line)
    ranks = _integers(path, rows, cols["Task"].iloc[:-1].astype(str), "Task")
    wrong = np.flatnonzero(ranks != np.arange(len(ranks)))
    if wrong.size:
        i = int(wrong[0])
        raise ParseError(path, f"expected task {i}, found {ranks[i]}", rows[i][0])
    frame = pd.DataFrame({
        "rank": pd.array([*ranks, pd.NA], dtype="Int64"),
        "host": [*(str(hosts.get(r)) for r in ranks), "None"],
        **{name: _numbers(path, rows, cols[col], col) for name, col in zip(TASK_COLUMNS[2:], columns[1:])}})
    return frame[TASK_COLUMNS]


def _locations(path: Path, section: _Section | None) -> pd.DataFrame:
    """Level-0 frame of every callsite: ``site, file, line, parent``; deeper frames are skipped."""
    rows = []
    if section is not None:
        _, table = _table(path, section, "ID")
        for number, text in table:
            fields = text.split()
            if len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
                raise ParseError(path, "expected 'ID Lev File/Address [Line] Parent_Funct MPI_Call'", number)
            if fields[1] != "0":
                continue
            match = _CALLSITE_ROW.match(text)
            if match is None:
                raise ParseError(path, "expected 'ID Lev File/Address [Line] Parent_Funct MPI_Call'", number)
            site, file, line, parent, _ = match.groups()
            rows.append([int(site), file, None if line is None else int(line), parent])
        declared = re.fullmatch(r"Callsites: (\d+)", section.title)
        if declared is None:
            raise ParseError(path, "expected heading '@--- Callsites: <count>'", section.line)
        if len(rows) != int(declared.group(1)):
            raise ParseError(path, f"heading announces {declared.group(1)} callsites, the table lists {len(rows)}",
                             section.line)
    frame = pd.DataFrame(rows, columns=["site", "file", "line", "parent"])
    frame["line"] = frame["line"].astype("Int64")
    return frame


def _aggregate(path: Path, section: _Section | None) -> pd.DataFrame:
    """Aggregate Time rows: ``routine, site, time_ms, app_pct, mpi_pct, count`` (count NA in 3.4)."""
    rows = []
    if section is not None:
        columns, table = _table(path, section, "Call")
        if not _AGGREGATE_COLUMNS <= set(columns):
            raise ParseError(path, f"expected aggregate columns {sorted(_AGGREGATE_COLUMNS)}, found {columns}",
                             section.line + 2)
        for number, text in table:
            row = dict(zip(columns, _fields(path, number, text, columns, section.title)))
            rows.append([row["Call"], _integer(path, number, row["Site"], "Site"),
                         _number(path, number, row["Time"], "Time"),
                         _number(path, number, row["App%"], "App%"),
                         _number(path, number, row["MPI%"], "MPI%"),
                         _integer(path, number, row["Count"], "Count") if "Count" in row else None])
    frame = pd.DataFrame(rows, columns=["routine", "site", "time_ms", "app_pct", "mpi_pct", "count"])
    frame["count"] = frame["count"].astype("Int64")
    return frame


def _stats(path: Path, section: _Section | None) -> pd.DataFrame:
    if section is None:
        frame = pd.DataFrame(columns=CALLSITE_COLUMNS[:9])
        frame["rank"] = frame["rank"].astype("Int64")
        return frame
    columns, table = _table(path, section, "Name")
    if columns != _STATS_COLUMNS:
        raise ParseError(path, f"expected columns {' '.join(_STATS_COLUMNS)}", section.line + 2)
    # A 512-node report has ~200k rows here: split and convert column-wise, and only when a
    # check fails go back to the row to name its line.
    cols = _columns(path, table, columns, section.title)
    rank_star = cols["Rank"].astype(str) == "*"
    rank = _integers(path, table, cols["Rank"].astype(str).where(~rank_star, "0"), "Rank")
    frame = pd.DataFrame({
        "site": _integers(path, table, cols["Site"], "Site"), "routine": cols["Name"],
        "rank": pd.array(np.where(rank_star, 0, rank), dtype="Int64"),
        "count": _integers(path, table, cols["Count"], "Count"),
        **{name: _numbers(path, table, cols[col], col) for name, col in zip(CALLSITE_COLUMNS[4:9], columns[4:])}})
    frame.loc[rank_star.to_numpy(), "rank"] = pd.NA
    return frame[CALLSITE_COLUMNS[:9]]


def _columns(path: Path, table: _Rows, columns: list[str], title: str) -> pd.DataFrame:
    """The rows of ``table`` as columns, parsed by pandas' C reader (numbers typed where they parse).

    A row with the wrong number of fields names its line; a value that does not parse leaves its
    column as text, and :func:`_integers`/:func:`_numbers` then name the offending line.
    """
    try:
        frame = pd.read_csv(io.StringIO("\n".join(table.texts)), sep=r"\s+", header=None,
                            names=columns, engine="c", na_filter=False, dtype={c: str for c in ("Name", "Call")})
    except (pd.errors.ParserError, ValueError):
        frame = None
    if frame is None or len(frame) != len(table) or frame.isna().any().any():
        for number, text in table:
            _fields(path, number, text, columns, title)  # raises with the line
        raise ParseError(path, f"could not read table {title!r}", table[0][0] if table else None)
    return frame


def _integers(path: Path, table: _Rows, values: pd.Series, column: str) -> np.ndarray:
    if pd.api.types.is_integer_dtype(values) and (values >= 0).all():
        return values.to_numpy(dtype="int64")
    text = values.astype(str)
    ok = text.str.isdigit().to_numpy(dtype=bool)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        _integer(path, table[i][0], text.iloc[i], column)  # raises with the line
    return text.astype("int64").to_numpy()


def _numbers(path: Path, table: _Rows, values: pd.Series, column: str) -> np.ndarray:
    if pd.api.types.is_numeric_dtype(values):
        return values.to_numpy(dtype=float)
    out = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    bad = np.isnan(out) & ~values.astype(str).str.lower().isin(["nan", "-nan"]).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _number(path, table[i][0], values.iloc[i], column)  # raises with the line
    return out


def _routines(aggregate: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
    """Per-routine totals over callsites.

    mpiP lists only the top twenty sites in the aggregate table, so sites missing there are
    filled from the ``*`` rows of the callsite statistics (time = count x mean).
    """
    star = stats[stats["rank"].isna()]
    from_stats = pd.DataFrame({
        "routine": star["routine"], "site": star["site"], "time_ms": star["count"] * star["mean_ms"],
        "app_pct": star["app_pct"], "mpi_pct": star["mpi_pct"], "count": star["count"].astype("Int64"),
    })
    sites = pd.concat([aggregate, from_stats[~from_stats["site"].isin(aggregate["site"])]], ignore_index=True)
    if len(star):
        # The per-site call count of the statistics covers 3.4 reports, which have no Count column.
        sites["count"] = sites["site"].map(dict(zip(star["site"], star["count"]))).astype("Int64")
    routines = sites.groupby("routine", sort=False).agg(
        time_ms=("time_ms", "sum"), app_pct=("app_pct", "sum"), mpi_pct=("mpi_pct", "sum"),
        count=("count", lambda c: c.sum() if c.notna().all() else pd.NA), sites=("site", "nunique"),
    ).reset_index()
    routines.insert(1, "time_s", routines.pop("time_ms") / 1000.0)
    routines["count"] = routines["count"].astype("Int64")
    routines["sites"] = routines["sites"].astype("int64")
    routines["routine"] = routines["routine"].astype("str")
    return routines.sort_values("time_s", ascending=False, kind="stable").reset_index(drop=True)[ROUTINE_COLUMNS]


def _with_locations(stats: pd.DataFrame, locations: pd.DataFrame) -> pd.DataFrame:
    frame = stats.merge(locations, on="site", how="left")
    frame["line"] = frame["line"].astype("Int64")
    for column in ("routine", "file", "parent"):
        frame[column] = frame[column].astype("str")
    return frame[CALLSITE_COLUMNS]


# --- writing -------------------------------------------------------------------------------


def write(path: str | Path, *, command: str, hosts: Sequence[str], app_time_s: Sequence[float],
          routine_time_s: Mapping[str, Sequence[float]], routine_count: Mapping[str, Sequence[int]],
          start: datetime, stop: datetime, pid: int = 0) -> None:
    """Write an mpiP 3.5 report of one run.

    ``hosts[r]`` and ``app_time_s[r]`` describe rank ``r``; ``routine_time_s[name][r]`` (seconds)
    and ``routine_count[name][r]`` are the time in and calls of MPI routine ``name`` (``MPI_``
    prefix optional) on rank ``r``. As in mpiP, a rank's MPI time is the sum of its routine
    times. Each routine is one callsite (an address, as mpiP prints sites without debug info);
    only totals per rank are known, so a rank's Max and Min per call equal its Mean. Sections:
    header, MPI Time, Callsites, Aggregate Time (with Count and COV), Callsite Time statistics.
    ``read`` of the file returns these values rounded as mpiP prints them (3 significant digits).
    """
    ntasks = len(app_time_s)
    if len(hosts) != ntasks:
        raise ValueError(f"{len(hosts)} hosts for {ntasks} ranks")
    sites = _sites(routine_time_s, routine_count, ntasks)
    mpi = np.zeros(ntasks)
    for _, times, _ in sites:  # rank by rank, in site order, as a sum over the sites would
        mpi = mpi + np.asarray(times)
    mpi_time_s = mpi.tolist()
    lines = [*_write_header(command, hosts, start, stop, pid),
             *_write_tasks(app_time_s, mpi_time_s),
             *_write_callsites(sites),
             *_write_aggregate(sites, sum(app_time_s), sum(mpi_time_s)),
             *_write_stats(sites, app_time_s, mpi_time_s),
             *_heading("End of Report"), ""]
    Path(path).write_text("\n".join(lines))


def _sites(routine_time_s: Mapping[str, Sequence[float]], routine_count: Mapping[str, Sequence[int]],
           ntasks: int) -> list[tuple[str, list[float], list[int]]]:
    """``(routine, time_s per rank, calls per rank)`` of each called routine, site id = index + 1."""
    if set(routine_time_s) != set(routine_count):
        raise ValueError("routine_time_s and routine_count must name the same routines")
    sites = []
    for name, times in routine_time_s.items():
        counts = list(routine_count[name])
        if len(times) != ntasks or len(counts) != ntasks:
            raise ValueError(f"{name}: expected {ntasks} per-rank values")
        t, c = np.asarray(times, dtype=float), np.asarray(counts)
        if ((c < 0) | (t < 0) | ((c == 0) & (t > 0))).any():
            raise ValueError(f"{name}: times and counts must be non-negative, and time needs calls")
        if sum(counts):
            sites.append((name.removeprefix("MPI_"), t.tolist(), counts))
    return sites


def _heading(title: str) -> list[str]:
    text = f"@--- {title} "
    return [_RULE_TEXT, text + "-" * max(0, 75 - len(text)), _RULE_TEXT]


def _write_header(command: str, hosts: Sequence[str], start: datetime, stop: datetime, pid: int) -> list[str]:
    def intro(name: str, value: object) -> str:
        return f"@ {name:<25}: {value}"

    # mpiP prints its C __DATE__/__TIME__ build stamp; the simulated build is stamped with the start.
    build = f"{start:%b} {start.day:2d} {start.year}, {start:%H:%M:%S}"
    return ["@ mpiP", f"@ Command : {command} ", intro("Version", WRITER_VERSION), intro("MPIP Build date", build),
            intro("Start time", f"{start:{_TIME_FORMAT}}"), intro("Stop time", f"{stop:{_TIME_FORMAT}}"),
            intro("Timer Used", "PMPI_Wtime"), intro("MPIP env var", "[null]"), intro("Collector Rank", 0),
            intro("Collector PID", pid), intro("Final Output Dir", "."),
            intro("Report generation", "Single collector task"),
            *(f"@ {'MPI Task Assignment':<25}: {rank} {host}" for rank, host in enumerate(hosts)), ""]


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def _pcts(part: Sequence[float], whole: Sequence[float]) -> list[float]:
    """:func:`_pct` of each pair (the same float operations, element-wise)."""
    part, whole = np.asarray(part, dtype=float), np.asarray(whole, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, 100.0 * part / whole, 0.0).tolist()


def _write_tasks(app_time_s: Sequence[float], mpi_time_s: Sequence[float]) -> list[str]:
    rows = ["%4d %10.3g %10.3g    %5.2f" % row
            for row in zip(range(len(app_time_s)), app_time_s, mpi_time_s, _pcts(mpi_time_s, app_time_s))]
    app, mpi = sum(app_time_s), sum(mpi_time_s)
    return [*_heading("MPI Time (seconds)"), "%-4s %10s %10s    %5s" % ("Task", "AppTime", "MPITime", "MPI%"),
            *rows, "   * %10.3g %10.3g    %5.2f" % (app, mpi, _pct(mpi, app))]


def _address(site: int) -> str:
    return f"0x{0x400000 + 0x40 * site:012x}"


def _write_callsites(sites: list[tuple[str, list[float], list[int]]]) -> list[str]:
    rows = ["%3d %3d %-24s %-24s %s" % (i, 0, _address(i), "[unknown]", name)
            for i, (name, _, _) in enumerate(sites, start=1)]
    return [*_heading(f"Callsites: {len(sites)}"),
            "%3s %3s %-18s %5s %-24s %s" % ("ID", "Lev", "File/Address", "Line", "Parent_Funct", "MPI_Call"), *rows]


def _cov(values: list[float]) -> float:
    """mpiP's coefficient of variation of a site's per-rank times (sample standard deviation)."""
    if len(values) <= 1:
        return 0.0
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / mean


def _write_aggregate(sites: list[tuple[str, list[float], list[int]]], app_total: float, mpi_total: float) -> list[str]:
    ranked = sorted(enumerate(sites, start=1), key=lambda item: -sum(item[1][1]))
    rows = []
    for site, (name, times, counts) in ranked[:20]:
        total = sum(times)
        if total > 0:
            called = [t for t, c in zip(times, counts) if c > 0]
            rows.append("%-20s %4d %10.3g  %6.2f  %6.2f %10d %6.2f" % (
                name, site, total * 1e3, _pct(total, app_total), _pct(total, mpi_total), sum(counts), _cov(called)))
    header = "%-20s %4s %12s%6s  %6s     %6s %6s" % ("Call", "Site", "Time  ", "App%", "MPI%", "Count", "COV")
    return [*_heading("Aggregate Time (top twenty, descending, milliseconds)"), header, *rows]


def _write_stats(sites: list[tuple[str, list[float], list[int]]], app_time_s: Sequence[float],
                 mpi_time_s: Sequence[float]) -> list[str]:
    app_total, mpi_total = sum(app_time_s), sum(mpi_time_s)
    entries = sum(1 for _, _, counts in sites for c in counts if c > 0)
    lines = [*_heading(f"Callsite Time statistics (all, milliseconds): {entries}"),
             "%-17s %4s %4s %6s %8s %8s %8s %6s %6s" % tuple(_STATS_COLUMNS)]
    # mpiP sorts by routine name, then site, then rank, with a blank line between sites.
    for index, (site, (name, times, counts)) in enumerate(sorted(enumerate(sites, start=1),
                                                                 key=lambda item: (item[1][0], item[0]))):
        if index:
            lines.append("")
        t, c = np.asarray(times, dtype=float), np.asarray(counts)
        ranks = np.flatnonzero((c != 0) & (np.asarray(mpi_time_s) > 0))
        means = (t[ranks] * 1e3 / c[ranks]).tolist()
        prefix = "%-17s %4d " % (name, site)
        lines.extend(prefix + "%4d %6d %8.3g %8.3g %8.3g %6.2f %6.2f" % (rank, calls, mean, mean, mean, app, mpi)
                     for rank, calls, mean, app, mpi in zip(
                         ranks.tolist(), c[ranks].tolist(), means,
                         _pcts(t[ranks], np.asarray(app_time_s, dtype=float)[ranks]),
                         _pcts(t[ranks], np.asarray(mpi_time_s, dtype=float)[ranks])))
        total = sum(times)
        lines.append("%-17s %4d %4s %6d %8.3g %8.3g %8.3g %6.2f %6.2f" % (
            name, site, "*", sum(counts), max(means, default=0.0), total * 1e3 / sum(counts),
            min(means, default=0.0), _pct(total, app_total), _pct(total, mpi_total)))
    return lines
