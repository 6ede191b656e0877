"""LDMS ``store_csv`` files: streaming reader, per-producer counter deltas, and writer.

This module owns the CSV files written by the LDMS ``store_csv`` store plugin (also the variant of
``store_function_csv`` with ``DT,DT_usec`` columns)::

    #Time,Time_usec,ProducerName,component_id,job_id,app_id,rx_bytes#eth0,...
    1558387831.001798,1798,s0,0,0,0,12328527,...

Layout rules (from the store_csv sources and man page):

* Columns are found by name, never by position. ``Time`` is epoch seconds with the microseconds as
  the fraction (``Time_msec`` + ``Time_usec`` with ``time_format=1``); ``DT,DT_usec`` may follow;
  ``ProducerName`` is the sampling host. ``component_id``, ``job_id`` and ``app_id`` are metrics of
  the LDMS set but identifiers here; a store without them reads as 0 (what store_function_csv writes
  for a set lacking them). Every other column is a metric and keeps its original name, including
  per-device columns ``name#dev`` (see :func:`split_device`).
* The header is the file's first line, or with ``altheader=1`` the first line of ``<name>.HEADER``
  (``<name>.HEADER.<epoch>`` for the rollover data file ``<name>.<epoch>``).
* With rollover one store is several files ``<name>.<epoch>``, read in epoch order (in order of
  their first sample time when the names carry no epoch). ``.HEADER``/``.KIND`` files passed in
  the path list are skipped: they are companions, not data.
* Rows are in arrival order: producers interleave, and one producer's rows may be late by up to a
  bounded window (``reorder_window`` of :func:`iter_deltas`).

Column types are explicit (pyarrow ``column_types``), taken from the first data row of the store:
a metric printed with a decimal point, exponent, nan or inf is float64, a negative integer makes
it int64, any other integer is uint64 (LDMS counters are u64 and reach 2**63 near a 64-bit wrap).
A later value that does not fit the column's type is a :class:`ParseError`, as is a missing or
unknown header, a row with the wrong number of fields, a truncated last line, or a missing
required column; the error names the file and the 1-based line.

Public API: :func:`sniff`, :func:`read`, :func:`describe`, :func:`iter_chunks`,
:func:`iter_deltas` (with :class:`DeltaStats` and :class:`Reset`), :func:`split_device`,
:func:`slice_window` (a run's window of a store, for its raw directory), :class:`StoreCsvWriter`.
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from hpcvar.fileio import atomic_write_bytes
from hpcvar.parsers.errors import ParseError

KIND = "ldms_store_csv"
CHUNK_ROWS = 100_000
REORDER_WINDOW = 60.0
WRAP_FRACTION = 1 / 16

TIME, TIME_MSEC, TIME_USEC, PRODUCER = "Time", "Time_msec", "Time_usec", "ProducerName"
IDS = ("component_id", "job_id", "app_id")
_NOT_METRICS = frozenset({TIME, TIME_MSEC, TIME_USEC, "DT", "DT_usec", PRODUCER, *IDS})
_HEADER_HINT = "'#Time,Time_usec,ProducerName,...'"

# pyarrow's streaming reader keeps a few dozen blocks in flight: 1 MiB blocks bound its memory
# to tens of MB and read as fast as bigger ones. Rows are then regrouped into chunk_rows tables.
_BLOCK = 1 << 20

_COMPANION = re.compile(r"\.(HEADER|KIND)(\.\d+)?$")
_EPOCH_SUFFIX = re.compile(r"\.(\d+)$")
_HEADER_LINE = re.compile(r"#(Time|Time_msec),Time_usec,")
# A headerless (altheader) data row: the Time fraction is repeated as Time_usec.
_DATA_LINE = re.compile(r"(\d+)\.(\d{6}),(\d+),")
_INTEGER = re.compile(r"-?\d+")


# ----------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class _Layout:
    """One data file: where its header came from, its columns and its first data row."""

    path: Path
    header_path: Path
    names: tuple[str, ...]
    skip_rows: int  # 1 when the header is the data file's own first line
    first_row: tuple[str, ...] | None
    row_bytes: int

    @property
    def time_column(self) -> str:
        return self.names[0]

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in _NOT_METRICS)

    def first_time(self) -> float:
        """Time of the first data row (inf if none or unreadable): orders rollover files."""
        try:
            value = float(self.first_row[0]) if self.first_row else float("inf")
        except ValueError:
            return float("inf")
        return value / 1000 if self.time_column == TIME_MSEC else value


def _read_layout(path: Path) -> _Layout:
    with path.open("rb") as fh:
        first = fh.readline()
        data = fh.readline() if first.startswith(b"#") else first
    if not first:
        raise ParseError(path, f"empty file: expected a store_csv header line {_HEADER_HINT}", line=1)
    if first.startswith(b"#"):
        header_path, header, skip = path, first, 1
    else:
        header_path = _header_file(path)
        with header_path.open("rb") as fh:
            header, skip = fh.readline(), 0
    names = _parse_header(header_path, header)
    first_row = _split_row(data) if data else None
    usable = first_row if first_row is not None and len(first_row) == len(names) else None
    return _Layout(path, header_path, names, skip, usable, len(data) or len(header))


def _header_file(path: Path) -> Path:
    """The altheader file of a headerless data file, ParseError when there is none."""
    candidates = []
    epoch = _EPOCH_SUFFIX.search(path.name)
    if epoch:
        candidates.append(path.with_name(f"{path.name[: epoch.start()]}.HEADER.{epoch[1]}"))
    candidates.append(path.with_name(path.name + ".HEADER"))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    names = " or ".join(c.name for c in candidates)
    raise ParseError(path, f"no header: expected a first line {_HEADER_HINT} or a header file {names}",
                     line=1)


def _parse_header(path: Path, raw: bytes) -> tuple[str, ...]:
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ParseError(path, f"unknown header: not UTF-8 text, expected {_HEADER_HINT}", line=1) from None
    if not text.startswith("#"):
        raise ParseError(path, f"unknown header: expected {_HEADER_HINT}, found {text[:60]!r}", line=1)
    # ietfcsv=1 quotes the metric names: parse the header as CSV.
    names = tuple(next(csv.reader([text[1:]])))
    if names[0] not in (TIME, TIME_MSEC):
        raise ParseError(path, "missing required column 'Time': a store_csv header starts with '#Time' "
                         f"(or '#Time_msec' with time_format=1), found {'#' + names[0]!r}", line=1)
    required = [PRODUCER] + ([TIME_USEC] if names[0] == TIME_MSEC else [])
    missing = [name for name in required if name not in names]
    if missing:
        raise ParseError(path, f"missing required column(s) {missing} in the header", line=1)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ParseError(path, f"duplicate column name(s) {repeated}: expected unique header names", line=1)
    return names


def _split_row(raw: bytes) -> tuple[str, ...]:
    return tuple(next(csv.reader([raw.decode("utf-8", errors="replace").rstrip("\r\n")]), []))


def _infer_type(text: str) -> pa.DataType:
    if _INTEGER.fullmatch(text):
        return pa.int64() if text.startswith("-") else pa.uint64()
    return pa.float64()


# ------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class _Plan:
    """The files of one store in reading order and the metric types shared by all of them."""

    layouts: tuple[_Layout, ...]
    types: dict[str, pa.DataType]


def _plan(paths: str | Path | Iterable[str | Path]) -> _Plan:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    data_paths = [Path(p) for p in paths if not _COMPANION.search(Path(p).name)]
    if not data_paths:
        raise ValueError("no store_csv data files given (.HEADER/.KIND files are companions)")
    layouts = [_read_layout(p) for p in data_paths]
    epochs = [_EPOCH_SUFFIX.search(layout.path.name) for layout in layouts]
    if all(epochs):
        order = sorted(range(len(layouts)), key=lambda i: int(epochs[i][1]))
    else:
        order = sorted(range(len(layouts)), key=lambda i: layouts[i].first_time())
    layouts = [layouts[i] for i in order]
    types: dict[str, pa.DataType] = {}
    for layout in layouts:
        if layout.first_row is not None:
            for name, text in zip(layout.names, layout.first_row):
                if name not in _NOT_METRICS:
                    types.setdefault(name, _infer_type(text))
    for layout in layouts:
        for name in layout.metrics:
            types.setdefault(name, pa.uint64())
    return _Plan(tuple(layouts), types)


def _column_types(layout: _Layout, metric_types: dict[str, pa.DataType]) -> dict[str, pa.DataType]:
    types = {TIME: pa.float64(), TIME_MSEC: pa.int64(), TIME_USEC: pa.int64(), PRODUCER: pa.string()}
    types.update({ident: pa.int64() for ident in IDS})
    types.update(metric_types)
    return {name: types[name] for name in layout.names if name in types}


def _included(layout: _Layout, metrics: Sequence[str]) -> list[str]:
    missing = [m for m in metrics if m not in layout.metrics]
    if missing:
        raise ParseError(layout.header_path, f"missing column(s) {missing}: requested metrics must be "
                         "metric columns in the header of every file of the store", line=1)
    base = [layout.time_column, PRODUCER, *(i for i in IDS if i in layout.names)]
    if layout.time_column == TIME_MSEC:
        base.insert(1, TIME_USEC)
    return base + list(metrics)


# ------------------------------------------------------------------------------- streaming


def _file_chunks(layout: _Layout, types: dict[str, pa.DataType], include: list[str],
                 chunk_rows: int) -> Iterator[tuple[int, pa.Table]]:
    """(file row index of the first row, table of ``chunk_rows`` rows; fewer at the end), streamed."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    column_types = _column_types(layout, types)
    read_opts = pacsv.ReadOptions(column_names=list(layout.names), skip_rows=layout.skip_rows,
                                  block_size=max(_BLOCK, 4 * layout.row_bytes))
    # Blank lines stay rows (and fail) so that row numbers map to line numbers.
    parse_opts = pacsv.ParseOptions(ignore_empty_lines=False)
    convert_opts = pacsv.ConvertOptions(column_types={n: column_types[n] for n in include},
                                        include_columns=include, null_values=[],
                                        strings_can_be_null=False, quoted_strings_can_be_null=False)
    held: list[pa.RecordBatch] = []
    held_rows = yielded = 0
    for batch in _batches(layout, column_types, include, read_opts, parse_opts, convert_opts):
        held.append(batch)
        held_rows += batch.num_rows
        while held_rows >= chunk_rows:
            table = pa.Table.from_batches(held)
            yield yielded, table.slice(0, chunk_rows)
            held = table.slice(chunk_rows).to_batches()
            held_rows -= chunk_rows
            yielded += chunk_rows
    if held_rows:
        yield yielded, pa.Table.from_batches(held)


def _batches(layout: _Layout, types: dict[str, pa.DataType], include: list[str],
             *options: object) -> Iterator[pa.RecordBatch]:
    """pyarrow's streaming reader, with its errors turned into ParseErrors naming the line."""
    rows = 0
    try:
        reader = pacsv.open_csv(layout.path, *options)
    except pa.ArrowInvalid as exc:
        raise _locate(layout, types, include, rows, exc) from exc
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except pa.ArrowInvalid as exc:
            raise _locate(layout, types, include, rows, exc) from exc
        rows += batch.num_rows
        yield batch


def _locate(layout: _Layout, types: dict[str, pa.DataType], include: list[str], rows_done: int,
            exc: Exception) -> ParseError:
    """pyarrow does not say which line failed: re-scan the failing block in Python."""
    start = layout.skip_rows + rows_done + 1
    checks = [(layout.names.index(name), name, types[name]) for name in include if name != PRODUCER]
    with layout.path.open("rb") as fh:
        for lineno, raw in enumerate(itertools.islice(fh, start - 1, None), start):
            problem = _line_problem(raw, len(layout.names), checks)
            if problem:
                return ParseError(layout.path, problem, line=lineno)
    return ParseError(layout.path, f"unreadable CSV at or after this line: {exc}", line=start)


def _line_problem(raw: bytes, width: int, checks: list[tuple[int, str, pa.DataType]]) -> str | None:
    complete = raw.endswith(b"\n")
    fields = _split_row(raw)
    if raw.startswith(b"#"):
        return "a second header line (the store was reopened): expected a data row"
    if len(fields) != width:
        if not complete:
            return f"truncated last line: no newline at end of file and {len(fields)} of {width} fields"
        if not fields:
            return f"empty line: expected a data row with {width} fields"
        return f"expected {width} comma-separated fields as in the header, found {len(fields)}"
    for index, name, typ in checks:
        if not _fits(fields[index], typ):
            return f"column {name!r}: expected {_type_words(typ)}, found {fields[index]!r}"
    return None


def _fits(text: str, typ: pa.DataType) -> bool:
    if pa.types.is_floating(typ):
        try:
            float(text)
        except ValueError:
            return False
        return True
    if not _INTEGER.fullmatch(text):
        return False
    info = np.iinfo(typ.to_pandas_dtype())
    return info.min <= int(text) <= info.max


def _type_words(typ: pa.DataType) -> str:
    if pa.types.is_floating(typ):
        return "a number"
    if pa.types.is_unsigned_integer(typ):
        return "a non-negative integer < 2**64 (column typed unsigned from the first data row)"
    return "a signed 64-bit integer"


def _columns(table: pa.Table, layout: _Layout, metrics: Sequence[str],
             first_line: int) -> dict[str, pa.ChunkedArray | pa.Array]:
    """The output columns of one chunk: time, producer, ids, metrics."""
    if layout.time_column == TIME_MSEC:
        time = pc.add(pc.divide(pc.cast(table.column(TIME_MSEC), pa.float64()), 1e3),
                      pc.divide(pc.cast(table.column(TIME_USEC), pa.float64()), 1e6))
    else:
        time = table.column(TIME)
    finite = pc.is_finite(time)
    if pc.any(pc.invert(finite)).as_py():
        row = pc.index(finite, False).as_py()
        raise ParseError(layout.path, f"{layout.time_column} must be a finite epoch time",
                         line=first_line + row)
    columns = {"time": time, "producer": table.column(PRODUCER)}
    for ident in IDS:
        if ident in layout.names:
            columns[ident] = table.column(ident)
        elif ident != "app_id":
            columns[ident] = pa.array(np.zeros(table.num_rows, dtype=np.int64))
    columns.update((m, table.column(m)) for m in metrics)
    return columns


def _select_metrics(layout: _Layout, columns: Sequence[str] | None) -> list[str]:
    return list(layout.metrics) if columns is None else list(columns)


def iter_chunks(paths: str | Path | Iterable[str | Path], columns: Sequence[str] | None = None,
                chunk_rows: int = CHUNK_ROWS) -> Iterator[pd.DataFrame]:
    """Stream the rows of a store (one file or its rollover files) as DataFrames.

    Each frame holds at most ``chunk_rows`` rows in file order with columns ``time`` (float epoch
    seconds including the microseconds), ``producer`` (str), ``component_id`` and ``job_id``
    (int64, 0 when the store lacks them), ``app_id`` when the store has it, then the metric columns
    under their original names (uint64, int64 or float64, see the module docstring). ``columns``
    picks metrics (default: all); a named metric missing from a file is a ParseError. Memory is
    bounded (one chunk plus pyarrow's read-ahead of 1 MiB blocks) whatever the file size.
    """
    plan = _plan(paths)
    for layout in plan.layouts:
        metrics = _select_metrics(layout, columns)
        include = _included(layout, metrics)
        for start, table in _file_chunks(layout, plan.types, include, chunk_rows):
            first_line = layout.skip_rows + start + 1
            frame = pa.Table.from_pydict(_columns(table, layout, metrics, first_line))
            # split_blocks: one array per column, no copy into a consolidated 2-D block.
            yield frame.to_pandas(split_blocks=True)


def read(path: str | Path) -> pd.DataFrame:
    """Whole file (with its ``.HEADER`` if separate) as one DataFrame: the :func:`iter_chunks` columns."""
    frames = list(iter_chunks([path]))
    if frames:
        return pd.concat(frames, ignore_index=True)
    plan = _plan([path])
    layout = plan.layouts[0]
    include = _included(layout, layout.metrics)
    types = _column_types(layout, plan.types)
    empty = pa.table({n: pa.array([], types[n]) for n in include})
    return pa.Table.from_pydict(_columns(empty, layout, layout.metrics, 1)).to_pandas()


# ---------------------------------------------------------------------------------- deltas


@dataclass(frozen=True)
class Reset:
    """A counter decrease that is not a wrap: the sampler or node restarted between two samples."""

    producer: str
    time: float
    t_prev: float
    metrics: tuple[str, ...]


@dataclass
class DeltaStats:
    """What :func:`iter_deltas` saw; pass one in and read it after consuming the iterator."""

    samples: int = 0
    intervals: int = 0
    duplicates: int = 0
    wraps: int = 0
    resets: list[Reset] = field(default_factory=list)


@dataclass
class _Rows:
    """Samples as parallel arrays; ``file``/``line`` say where each came from (for errors)."""

    pid: np.ndarray
    time: np.ndarray
    component_id: np.ndarray
    job_id: np.ndarray
    file: np.ndarray
    line: np.ndarray
    values: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.pid)

    def take(self, index: np.ndarray) -> _Rows:
        return _Rows(self.pid[index], self.time[index], self.component_id[index], self.job_id[index],
                     self.file[index], self.line[index], [v[index] for v in self.values])

    @staticmethod
    def concat(a: _Rows, b: _Rows) -> _Rows:
        return _Rows(*(np.concatenate([x, y]) for x, y in
                       zip([a.pid, a.time, a.component_id, a.job_id, a.file, a.line],
                           [b.pid, b.time, b.component_id, b.job_id, b.file, b.line])),
                     [np.concatenate([x, y]) for x, y in zip(a.values, b.values)])


def _wrap_bounds(dtype: np.dtype, bits: int, fraction: float) -> tuple[object, object, object] | None:
    """(lowest, highest previous value counted as a wrap, the 2**bits to add), in ``dtype``.

    None when no value of ``dtype`` can be near the top of a ``bits``-bit counter.
    """
    top = 2**bits
    low, high = top - int(top * fraction), top - 1
    if dtype.kind == "f":
        return float(low), float(high), float(top)
    info = np.iinfo(dtype)
    if low > info.max:
        return None
    # uint64 arithmetic is modulo 2**64, so adding 2**64 is adding 0.
    modulus = top % 2**64 if dtype.kind == "u" else top
    return dtype.type(low), dtype.type(min(high, info.max)), dtype.type(modulus)


def _counter_delta(value: np.ndarray, prev: np.ndarray, bits: int,
                   fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(delta, wrapped mask, reset mask) of a cumulative counter between ``prev`` and ``value``."""
    down = value < prev
    delta = value - prev
    if not down.any():
        return delta, down, down
    bounds = _wrap_bounds(value.dtype, bits, fraction)
    if bounds is None:
        wrapped = np.zeros_like(down)
    else:
        low, high, modulus = bounds
        wrapped = down & (prev >= low) & (prev <= high)
        delta[wrapped] = value[wrapped] - prev[wrapped] + modulus
    reset = down & ~wrapped
    delta[reset] = value[reset]
    return delta, wrapped, reset


class _DeltaEngine:
    """Per-producer deltas over a stream of unsorted sample batches.

    Rows of a producer are held back until they are older than that producer's newest sample by
    more than the reorder window: no later row can precede them, so they are final.
    """

    def __init__(self, metrics: list[str], dtypes: list[np.dtype], bits: int, window: float,
                 fraction: float, stats: DeltaStats):
        self.metrics, self.dtypes = metrics, dtypes
        self.bits, self.window, self.fraction, self.stats = bits, window, fraction, stats
        self.files: list[Path] = []
        self.names: list[str] = []
        self.ids: dict[str, int] = {}
        self.newest = np.empty(0)
        self.last_time = np.empty(0)
        self.has_last = np.empty(0, dtype=bool)
        self.last_values = [np.empty(0, dtype=d) for d in dtypes]
        self.pending = self._rows_of_length(0)

    def _rows_of_length(self, n: int) -> _Rows:
        ints = np.zeros(n, dtype=np.int64)
        return _Rows(ints, np.zeros(n), ints, ints, ints, ints, [np.zeros(n, dtype=d) for d in self.dtypes])

    def _producer_ids(self, producers: pa.ChunkedArray) -> np.ndarray:
        distinct = pc.unique(producers)
        lookup = np.array([self.ids.setdefault(name, len(self.ids)) for name in distinct.to_pylist()],
                          dtype=np.int64)
        grow = len(self.ids) - len(self.names)
        if grow:
            self.names = list(self.ids)
            self.newest = np.concatenate([self.newest, np.full(grow, -np.inf)])
            self.last_time = np.concatenate([self.last_time, np.zeros(grow)])
            self.has_last = np.concatenate([self.has_last, np.zeros(grow, dtype=bool)])
            self.last_values = [np.concatenate([v, np.zeros(grow, dtype=v.dtype)]) for v in self.last_values]
        return lookup[pc.index_in(producers, value_set=distinct).to_numpy()]

    def rows(self, columns: dict[str, pa.ChunkedArray | pa.Array], path: Path, first_line: int) -> _Rows:
        if not self.files or self.files[-1] != path:
            self.files.append(path)
        n = len(columns["time"])
        return _Rows(self._producer_ids(columns["producer"]), columns["time"].to_numpy(),
                     columns["component_id"].to_numpy(), columns["job_id"].to_numpy(),
                     np.full(n, len(self.files) - 1), first_line + np.arange(n),
                     [columns[m].to_numpy() for m in self.metrics])

    def feed(self, rows: _Rows) -> pd.DataFrame | None:
        self.stats.samples += len(rows)
        self._check_order(rows)
        merged = _Rows.concat(self.pending, rows)
        merged = self._drop_duplicates(merged.take(np.lexsort((merged.time, merged.pid))))
        final = merged.time < self.newest[merged.pid] - self.window
        self.pending = merged.take(~final)
        return self._deltas(merged.take(final))

    def flush(self) -> pd.DataFrame | None:
        rows, self.pending = self.pending, self._rows_of_length(0)
        return self._deltas(rows)

    def _error(self, rows: _Rows, i: int, message: str) -> ParseError:
        return ParseError(self.files[rows.file[i]], message, line=int(rows.line[i]))

    def _check_order(self, rows: _Rows) -> None:
        """A row later than the window behind its producer's newest sample cannot be placed."""
        running = pd.Series(rows.time).groupby(rows.pid).cummax().to_numpy()
        newest = np.maximum(running, self.newest[rows.pid])
        late = np.flatnonzero(newest - rows.time > self.window)
        if late.size:
            i = late[0]
            raise self._error(rows, i, f"non-monotonic time: sample of producer {self.names[rows.pid[i]]!r} "
                              f"at {rows.time[i]:.6f} comes after one {newest[i] - rows.time[i]:.6f} s newer "
                              f"(expected at most the reorder window, {self.window} s)")
        np.maximum.at(self.newest, rows.pid, rows.time)

    def _drop_duplicates(self, rows: _Rows) -> _Rows:
        """Drop repeated (producer, time) samples; differing values for one sample are an error."""
        dup = np.flatnonzero((rows.pid[1:] == rows.pid[:-1]) & (rows.time[1:] == rows.time[:-1])) + 1
        if not dup.size:
            return rows
        differ = np.zeros(dup.size, dtype=bool)
        for column in [rows.component_id, rows.job_id, *rows.values]:
            same = column[dup] == column[dup - 1]
            if column.dtype.kind == "f":
                same |= np.isnan(column[dup]) & np.isnan(column[dup - 1])
            differ |= ~same
        if differ.any():
            i = dup[differ][0]
            raise self._error(rows, i, f"two different samples of producer {self.names[rows.pid[i]]!r} at "
                              f"{rows.time[i]:.6f} (the other: {self.files[rows.file[i - 1]].name} line "
                              f"{rows.line[i - 1]}); expected one sample per producer and time")
        self.stats.duplicates += dup.size
        keep = np.ones(len(rows), dtype=bool)
        keep[dup] = False
        return rows.take(keep)

    def _deltas(self, rows: _Rows) -> pd.DataFrame | None:
        """Deltas of final rows sorted by (producer, time), against each producer's previous sample."""
        if not len(rows):
            return None
        pid = rows.pid
        first = np.r_[True, pid[1:] != pid[:-1]]
        last = np.r_[pid[1:] != pid[:-1], True]
        t_prev = np.roll(rows.time, 1)
        t_prev[first] = self.last_time[pid[first]]
        has_prev = ~first | self.has_last[pid]
        out = {"time": rows.time[has_prev], "t_prev": t_prev[has_prev],
               "producer": pd.array(np.array(self.names, dtype=object)[pid[has_prev]], dtype="str"),
               "component_id": rows.component_id[has_prev], "job_id": rows.job_id[has_prev]}
        resets = []
        for name, value, last_value in zip(self.metrics, rows.values, self.last_values):
            prev = np.roll(value, 1)
            prev[first] = last_value[pid[first]]
            delta, wrapped, reset = _counter_delta(value, prev, self.bits, self.fraction)
            out[name] = delta[has_prev]
            self.stats.wraps += int((wrapped & has_prev).sum())
            resets.append(reset & has_prev)
            last_value[pid[last]] = value[last]
        self.last_time[pid[last]] = rows.time[last]
        self.has_last[pid[last]] = True
        self._record_resets(rows, t_prev, resets)
        self.stats.intervals += int(has_prev.sum())
        return pd.DataFrame(out) if has_prev.any() else None

    def _record_resets(self, rows: _Rows, t_prev: np.ndarray, resets: list[np.ndarray]) -> None:
        if not resets:
            return
        matrix = np.column_stack(resets)
        for i in np.flatnonzero(matrix.any(axis=1)):
            self.stats.resets.append(Reset(self.names[rows.pid[i]], float(rows.time[i]), float(t_prev[i]),
                                           tuple(m for m, hit in zip(self.metrics, matrix[i]) if hit)))


def iter_deltas(paths: str | Path | Iterable[str | Path], metrics: Sequence[str] | None = None,
                counter_bits: int = 64, chunk_rows: int = CHUNK_ROWS, *,
                reorder_window: float = REORDER_WINDOW, wrap_fraction: float = WRAP_FRACTION,
                stats: DeltaStats | None = None) -> Iterator[pd.DataFrame]:
    """Per-producer changes of cumulative counters between consecutive samples, streamed.

    Frames have ``time`` (end of the interval), ``t_prev`` (its start), ``producer``,
    ``component_id``, ``job_id`` (of the end sample) and one column per metric with the change, in
    the metric's dtype. ``metrics`` defaults to every integer metric of the first file (float
    metrics are gauges). Rows come sorted by (producer, time) within a frame; frames follow the
    stream, so sort the concatenation if a global order is needed. A producer's first sample opens
    its first interval and yields no row. The state per producer carries across chunks and
    rollover files.

    A decrease is a wrap when the previous value lies in the top ``wrap_fraction`` of a
    ``counter_bits`` counter (delta = value + 2**bits - prev), otherwise a reset of the sampler or
    node (delta = value, counting from 0), appended to ``stats.resets`` as a :class:`Reset`.
    Rows may arrive out of order by up to ``reorder_window`` seconds per producer; a row later than
    that is a ParseError (non-monotonic time) naming its file and line. An exact repeat of a
    (producer, time) sample is skipped and counted in ``stats.duplicates``; a repeat with other
    values is a ParseError.
    """
    if not 1 <= counter_bits <= 64:
        raise ValueError(f"counter_bits must be in 1..64, got {counter_bits}")
    plan = _plan(paths)
    chosen = list(metrics) if metrics is not None else [
        m for m in plan.layouts[0].metrics if pa.types.is_integer(plan.types[m])]
    dtypes = [np.dtype(plan.types[m].to_pandas_dtype()) for m in chosen]
    engine = _DeltaEngine(chosen, dtypes, counter_bits, reorder_window, wrap_fraction,
                          stats if stats is not None else DeltaStats())
    for layout in plan.layouts:
        include = _included(layout, chosen)
        for start, table in _file_chunks(layout, plan.types, include, chunk_rows):
            first_line = layout.skip_rows + start + 1
            columns = _columns(table, layout, chosen, first_line)
            out = engine.feed(engine.rows(columns, layout.path, first_line))
            if out is not None:
                yield out
    out = engine.flush()
    if out is not None:
        yield out


# --------------------------------------------------------------------- sniff and describe


def sniff(head: str, name: str) -> bool:
    """A store_csv header line, or a headerless data row whose Time fraction repeats as Time_usec."""
    if _COMPANION.search(name):
        return False
    first = head.split("\n", 1)[0]
    if _HEADER_LINE.match(first):
        return True
    row = _DATA_LINE.match(first)
    return bool(row) and int(row[2]) == int(row[3])


def split_device(metric: str) -> tuple[str, str | None]:
    """``'rx_bytes#eth0'`` -> ``('rx_bytes', 'eth0')``; a metric without a device -> ``(name, None)``."""
    base, sep, device = metric.rpartition("#")
    return (base, device) if sep and base else (metric, None)


def describe(path: str | Path) -> dict:
    """Parse the whole file (streamed) and summarise it for ``hpcvar inspect``."""
    layout = _plan([path]).layouts[0]
    parts = [(f["time"].to_numpy(), f["producer"].to_numpy(dtype=object)) for f in iter_chunks([path])]
    time = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
    producer = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=object)
    version = ["store_csv"]
    if "DT" in layout.names:
        version.append("with DT")
    if layout.time_column == TIME_MSEC:
        version.append("time_format=1")
    if layout.header_path != layout.path:
        version.append("altheader")
    figures: dict[str, object] = {"producers": len(set(producer)), "metrics": len(layout.metrics),
                                  "interval_median_s": _median_interval(time, producer)}
    devices = sorted({d for d in (split_device(m)[1] for m in layout.metrics) if d})
    if devices:
        figures["devices"] = ",".join(devices)
    span = [_iso(time.min()), _iso(time.max())] if time.size else None
    return {"kind": KIND, "format_version": " ".join(version), "records": int(time.size),
            "time_span": span, "figures": figures}


def _median_interval(time: np.ndarray, producer: np.ndarray) -> float | None:
    frame = pd.DataFrame({"p": producer, "t": time}).drop_duplicates().sort_values(["p", "t"])
    steps = frame.groupby("p")["t"].diff().dropna()
    return round(float(steps.median()), 6) if len(steps) else None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(float(epoch), tz=timezone.utc).isoformat()


# --------------------------------------------------------------------------------- slicing


def _last_time(layout: _Layout) -> float:
    """Time of the file's last complete row (-inf if none): read from its tail, not the whole file."""
    size = layout.path.stat().st_size
    offset = max(0, size - max(64 * 1024, 4 * layout.row_bytes))
    with layout.path.open("rb") as fh:
        fh.seek(offset)
        lines = fh.read().split(b"\n")
    # The last piece is empty or a line still being written; the first may start mid-line.
    for raw in reversed(lines[1 if offset else 0:-1]):
        field = raw.split(b",", 1)[0]
        try:
            value = float(field)
        except ValueError:
            continue
        return value / 1000 if layout.time_column == TIME_MSEC else value
    return float("-inf")


def slice_window(paths: str | Path | Iterable[str | Path], start: float, end: float,
                 out_dir: str | Path) -> list[Path]:
    """Copy the rows of a store sampled in ``[start, end]`` (epoch seconds) into ``out_dir``.

    One output file per data file that has such rows, under the data file's own name, its header
    line first (an ``altheader`` file's header is put inline): the slice is itself a store_csv
    store that :func:`iter_deltas` reads. Rows are copied byte for byte, in their order. Files
    wholly before or after the window are skipped by their first and last rows; a last line
    without its newline (ldmsd still writing it) is not copied. Returns the files written.
    """
    plan = _plan(paths)
    out_dir = Path(out_dir)
    written = []
    for layout in plan.layouts:
        if layout.first_time() > end + REORDER_WINDOW or _last_time(layout) < start - REORDER_WINDOW:
            continue
        scale = 1000.0 if layout.time_column == TIME_MSEC else 1.0
        with layout.header_path.open("rb") as fh:
            header = fh.readline()
        kept = []
        with layout.path.open("rb") as src:
            for lineno, raw in enumerate(src, start=1):
                if lineno <= layout.skip_rows or not raw.endswith(b"\n"):
                    continue
                field = raw.split(b",", 1)[0]
                try:
                    t = float(field) / scale
                except ValueError:
                    text = field[:40].decode("utf-8", errors="replace")
                    raise ParseError(layout.path, f"{layout.time_column} {text!r} is not a number",
                                     line=lineno) from None
                if start <= t <= end:
                    kept.append(raw)
        if not kept:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        dst = out_dir / layout.path.name
        atomic_write_bytes(dst, header + b"".join(kept))
        written.append(dst)
    return written


# ---------------------------------------------------------------------------------- writer


class StoreCsvWriter:
    """Write one store_csv file as LDMS store_csv does (time_format=0, userdata=0).

    Header ``#Time,Time_usec,ProducerName,component_id,job_id,<metrics>`` (in ``<path>.HEADER``
    instead, with ``header_file=True``, like ``altheader=1``), then one row per sample::

        1466700001.001882,1882,nid00012,12,0,<values>

    Time is written from microseconds (``round(time * 1e6)``). Integer values are written as
    integers; float values in shortest round-trip form with a '.' or exponent (LDMS prints ``%lf``;
    the shortest form keeps ``read`` exact and still reads back as float64). Use as a context
    manager; :meth:`write_rows` appends rows in the order given, so a simulator can interleave
    producers as an aggregator would.
    """

    def __init__(self, path: str | Path, metrics: list[str], header_file: bool = False):
        _check_metric_names(metrics)
        self.path = Path(path)
        self.metrics = list(metrics)
        self.header_path = self.path.with_name(self.path.name + ".HEADER") if header_file else self.path
        header = ("#" + ",".join([TIME, TIME_USEC, PRODUCER, "component_id", "job_id", *self.metrics])
                  + "\n").encode()
        if header_file:
            self.header_path.write_bytes(header)
        self._file = self.path.open("wb")
        if not header_file:
            self._file.write(header)
        self.rows = 0

    def __enter__(self) -> StoreCsvWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def flush(self) -> None:
        """Put the rows written so far in the file (a live store's readers see whole lines)."""
        self._file.flush()

    def write_rows(self, time: np.ndarray, producer: np.ndarray, component_id: np.ndarray,
                   job_id: np.ndarray, values: np.ndarray) -> None:
        """Append ``len(time)`` rows; ``values`` is (rows, metrics); ids and producer may be scalars."""
        time = np.asarray(time, dtype=np.float64)
        n = time.shape[0]
        values = np.asarray(values)
        if values.shape != (n, len(self.metrics)):
            raise ValueError(f"values must have shape ({n}, {len(self.metrics)}), got {values.shape}")
        usec_total = np.rint(time * 1e6).astype(np.int64)
        sec, usec = np.divmod(usec_total, 1_000_000)
        usec_text = pc.utf8_lpad(pa.array(usec).cast(pa.string()), width=6, padding="0")
        columns = [pc.binary_join_element_wise(pa.array(sec).cast(pa.string()), usec_text, "."),
                   pa.array(usec),
                   pa.array(np.broadcast_to(np.asarray(producer, dtype=object), (n,)), pa.string()),
                   pa.array(np.broadcast_to(np.asarray(component_id, dtype=np.int64), (n,))),
                   pa.array(np.broadcast_to(np.asarray(job_id, dtype=np.int64), (n,)))]
        columns += [_value_text(column) for column in np.ascontiguousarray(values.T)]
        table = pa.Table.from_arrays(columns, names=[str(i) for i in range(len(columns))])
        pacsv.write_csv(table, self._file, pacsv.WriteOptions(include_header=False, quoting_style="none"))
        self.rows += n


def _value_text(column: np.ndarray) -> pa.Array:
    if column.dtype.kind in "iu":
        return pa.array(column)
    text = pa.array(column, pa.float64()).cast(pa.string())
    # Arrow prints 3.0 as "3": keep a '.' so the reader types the column float64 again.
    return pc.if_else(pc.match_substring_regex(text, r"^-?\d+$"),
                      pc.binary_join_element_wise(text, ".0", ""), text)


def _check_metric_names(metrics: Sequence[str]) -> None:
    bad = [m for m in metrics if not m or m in _NOT_METRICS or any(c in m for c in ',"\r\n')]
    if bad:
        raise ValueError(f"metric names must be non-empty, not a store_csv id/time column and free of "
                         f"',', quotes and newlines: {bad}")
    if len(set(metrics)) != len(metrics):
        raise ValueError("metric names must be unique")
