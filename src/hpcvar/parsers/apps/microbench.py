"""MPI microbenchmark tables: OSU micro-benchmarks and Intel MPI Benchmarks (IMB).

Both give a long ``table`` instead of steps: one row per (table, message size, measured column)
with columns ``benchmark``, ``size_bytes`` (<NA> for size-less tables such as Barrier),
``metric``, ``value``, ``unit`` (as printed: ``us``, ``MB/s``, ``usec``, ``Mbytes/sec``),
``repetitions`` (IMB ``#repetitions``), ``processes`` (IMB ``#processes``), ``instance``
(1-based table number in the file), ``section`` (OSU: the last non-table line before the
banner, e.g. the job script's node-pair label) and ``ts`` (the row's ``ts`` epoch or NaN).

* OSU: each ``# OSU MPI <title> Test v<version>`` banner opens a table; ``#`` lines after it
  up to the first data row are comments, the last one being the column header
  (``# Size  Latency (us)``). Benchmark names follow the binaries: ``osu_latency``, ``osu_bw``,
  ``osu_allreduce`` (``<collective> Latency`` titles), ...
* IMB: ``# Benchmarking <name>`` opens a table, ``# #processes = N`` sets its process count, the
  ``#bytes #repetitions t_min[usec] ...`` line is the header, a blank line ends the table; the
  run must reach ``# All processes entering MPI_Finalize``. Metrics: ``t`` (PingPong ``t[usec]``),
  ``t_min``, ``t_max``, ``t_avg``, ``bandwidth`` (``Mbytes/sec``), ``message_rate``.

Inside a table every line that starts with a digit is a data row and must parse completely.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from hpcvar.parsers.apps._core import AppOutput, Line, integer, number, steps_frame
from hpcvar.parsers.errors import ParseError

TABLE_COLUMNS = ("benchmark", "size_bytes", "metric", "value", "unit", "repetitions", "processes", "instance",
                 "section", "ts")
_BARE_UNITS = {"mb/s": ("bandwidth", "MB/s"), "mbytes/sec": ("bandwidth", "Mbytes/sec"),
               "messages/s": ("message_rate", "messages/s"), "msg/sec": ("message_rate", "Msg/sec")}
_OSU_BANNER = re.compile(r"# OSU (?:MPI )?(.+?) Test v?(\S+)\s*")
_OSU_NAMES = {"latency": "osu_latency", "bandwidth": "osu_bw", "bi-directional bandwidth": "osu_bibw",
              "multiple bandwidth / message rate": "osu_mbw_mr", "multi-threaded latency": "osu_latency_mt"}
_OSU_COLUMN = re.compile(r"(.+?)\s*\((.+)\)")
_IMB_BANNER = re.compile(r"#\s+Intel ?\(R\) MPI Benchmarks (.+?), (\S+) part\s*")
_IMB_BENCHMARK = re.compile(r"# Benchmarking (\S+)\s*")
_IMB_PROCESSES = re.compile(r"# #processes = (\d+)\s*")
_IMB_WAITING = re.compile(r"# \( (\d+) additional process(?:es)? waiting in MPI_Barrier\)\s*")
_IMB_COLUMN = re.compile(r"(\w+)\[(.+)\]")
IMB_FINALIZE = "# All processes entering MPI_Finalize"


def _snake(name: str) -> str:
    return re.sub(r"\W+", "_", name.strip().lower()).strip("_")


def _metric(name: str, unit: str | None) -> tuple[str, str | None]:
    """(metric, unit) of a measured column; unit-only headers like ``MB/s`` name a rate."""
    if unit is None and name.lower() in _BARE_UNITS:
        return _BARE_UNITS[name.lower()]
    return _snake(name), unit


@dataclass
class _Columns:
    """A parsed column header: where size and repetitions sit, and the measured columns."""

    size: int | None
    repetitions: int | None
    measured: list[tuple[int, str, str | None]]
    width: int


def _osu_columns(header: str) -> _Columns:
    names = re.split(r"\s{2,}", header.lstrip("#").strip())
    size = names.index("Size") if "Size" in names else None
    measured = []
    for k, name in enumerate(names):
        if k != size:
            match = _OSU_COLUMN.fullmatch(name)
            measured.append((k, *(_metric(match[1], match[2]) if match else _metric(name, None))))
    return _Columns(size, None, measured, len(names))


def _imb_columns(header: str) -> _Columns:
    names = header.split()
    size = names.index("#bytes") if "#bytes" in names else None
    repetitions = names.index("#repetitions") if "#repetitions" in names else None
    measured = []
    for k, name in enumerate(names):
        if k not in (size, repetitions):
            match = _IMB_COLUMN.fullmatch(name)
            measured.append((k, *(_metric(match[1], match[2]) if match else _metric(name, None))))
    return _Columns(size, repetitions, measured, len(names))


@dataclass
class _Table:
    benchmark: str
    opened: Line
    instance: int
    processes: int | None = None
    section: str | None = None
    columns: _Columns | None = None
    rows: int = 0


class _Tables:
    """Accumulates long-format rows; shared by the OSU and IMB readers."""

    def __init__(self, path: str | Path):
        self.path = path
        self.records: list[dict] = []
        self.tables: list[_Table] = []

    def open(self, benchmark: str, line: Line, **kw) -> _Table:
        self.require_rows()
        self.tables.append(_Table(benchmark, line, len(self.tables) + 1, **kw))
        return self.tables[-1]

    def require_rows(self) -> None:
        if self.tables and self.tables[-1].rows == 0:
            table = self.tables[-1]
            raise ParseError(self.path, f"the {table.benchmark} table opened here has no data rows", table.opened.no)

    def row(self, line: Line) -> None:
        table = self.tables[-1]
        cols = table.columns
        fields = line.text.split()
        if len(fields) != cols.width:
            raise ParseError(self.path, f"expected {cols.width} columns in a {table.benchmark} row, "
                                        f"found {len(fields)}", line.no)
        values = [number(self.path, line, field, f"{table.benchmark} column {k + 1}") for k, field in enumerate(fields)]
        size = None if cols.size is None else integer(self.path, line, fields[cols.size], "message size")
        repetitions = None if cols.repetitions is None else integer(self.path, line, fields[cols.repetitions],
                                                                    "#repetitions")
        for k, metric, unit in cols.measured:
            self.records.append({"benchmark": table.benchmark, "size_bytes": size, "metric": metric, "value": values[k],
                                 "unit": unit, "repetitions": repetitions, "processes": table.processes,
                                 "instance": table.instance, "section": table.section, "ts": line.ts})
        table.rows += 1

    def frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self.records, columns=list(TABLE_COLUMNS))
        for name in ("size_bytes", "repetitions", "processes"):
            frame[name] = frame[name].astype("Int64")
        frame["instance"] = frame["instance"].astype("int64")
        frame["value"] = frame["value"].astype("float64")
        frame["ts"] = frame["ts"].astype("float64")
        return frame


def _is_row(text: str) -> bool:
    stripped = text.lstrip()
    return bool(stripped) and stripped[0].isdigit()


def _osu_benchmark(title: str) -> str:
    key = title.lower()
    if key in _OSU_NAMES:
        return _OSU_NAMES[key]
    if key.endswith(" latency"):
        return "osu_" + _snake(key.removesuffix(" latency"))
    return "osu_" + _snake(key)


def _result(app: str, version: str | None, nranks: int | None, tables: _Tables, timestamped: bool) -> AppOutput:
    table = tables.frame()
    checks = {"tables": len(tables.tables), "rows": len(table)}
    return AppOutput(app=app, version=version, nranks=nranks, timestamped=timestamped,
                     steps=steps_frame([], [], timestamped), total_s=None, checks=checks, table=table)


def parse_osu(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    tables = _Tables(path)
    version = None
    section = None
    table: _Table | None = None
    header: str | None = None
    for line in lines:
        text = line.text
        if match := _OSU_BANNER.fullmatch(text):
            table = tables.open(_osu_benchmark(match[1]), line, section=section)
            header = None
            version = version or match[2]
        elif text.startswith("#") and table is not None and table.rows == 0:
            header = text
        elif _is_row(text):
            if table is None or header is None:
                raise ParseError(path, "data row outside an OSU table (no '# OSU ... Test' banner and "
                                       "'# Size ...' header before it)", line.no)
            if table.columns is None:
                table.columns = _osu_columns(header)
            tables.row(line)
        elif text.strip():
            tables.require_rows()
            table = None
            section = text.strip()
    if not tables.tables:
        raise ParseError(path, "no '# OSU ... Test' banner", lines[-1].no)
    tables.require_rows()
    return _result("osu", version, None, tables, timestamped)


class _ImbReader:
    def __init__(self, path: str | Path):
        self.path = path
        self.tables = _Tables(path)
        self.table: _Table | None = None
        self.version: str | None = None
        self.nranks = 0
        self.finalized = False

    def feed(self, line: Line) -> None:
        text = line.text
        if match := _IMB_BANNER.fullmatch(text):
            self.version = match[1].strip()
        elif match := _IMB_BENCHMARK.fullmatch(text):
            self.table = self.tables.open(match[1], line)
        elif self.table is not None and (match := _IMB_PROCESSES.fullmatch(text)):
            self.table.processes = int(match[1])
            self.nranks = max(self.nranks, self.table.processes)
        elif self.table is not None and (match := _IMB_WAITING.fullmatch(text)):
            self.nranks = max(self.nranks, (self.table.processes or 0) + int(match[1]))
        elif text.split()[:1] in (["#bytes"], ["#repetitions"]):
            if self.table is None:
                raise ParseError(self.path, "column header before any '# Benchmarking <name>' line", line.no)
            self.table.columns = _imb_columns(text)
        elif _is_row(text):
            if self.table is None or self.table.columns is None:
                raise ParseError(self.path, "data row outside an IMB table (no '# Benchmarking' line and "
                                            "'#bytes #repetitions ...' header before it)", line.no)
            self.tables.row(line)
        elif not text.strip():
            self._end_table()
        elif text.strip() == IMB_FINALIZE:
            self.finalized = True

    def _end_table(self) -> None:
        """A blank line after the column header ends the table (blank lines before it do not)."""
        if self.table is not None and self.table.columns is not None:
            self.tables.require_rows()
            self.table = None

    def finish(self, last: Line) -> None:
        if not self.finalized:
            raise ParseError(self.path, f"truncated: no '{IMB_FINALIZE}' line", last.no)
        if not self.tables.tables:
            raise ParseError(self.path, "no '# Benchmarking <name>' table", last.no)
        self.tables.require_rows()


def parse_imb(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _ImbReader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    return _result("imb", reader.version, reader.nranks or None, reader.tables, timestamped)
