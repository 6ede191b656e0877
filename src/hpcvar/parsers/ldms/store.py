"""LDMS ``store_csv`` files, read: the store's layout (header, rollover files, column types),
the streaming reader (:func:`iter_chunks`, :func:`read`), :func:`sniff` and :func:`describe`.
The layout rules are in :mod:`hpcvar.parsers.ldms`."""

from __future__ import annotations

import csv
import itertools
import queue
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

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


def _read_ahead(items: Iterator, ahead: int = 1) -> Iterator:
    """``items``, produced by a thread of their own at most ``ahead`` items before they are taken:
    pyarrow parses the next chunk (C++, without the GIL) while the caller works on this one, so
    the memory is that of ``ahead`` more chunks. An exception of ``items`` reaches the caller
    where it occurred, after every item before it; closing the iterator stops the thread."""
    done = object()
    handoff: queue.Queue = queue.Queue()
    slots = threading.Semaphore(ahead)  # taken before an item is read, given back as it is taken
    stop = threading.Event()

    def reserve() -> bool:
        while not stop.is_set():
            if slots.acquire(timeout=0.1):
                return True
        return False

    def produce() -> None:
        try:
            while reserve():
                try:
                    item = next(items)
                except StopIteration:
                    handoff.put((done, None))
                    return
                handoff.put((item, None))
        except BaseException as exc:  # noqa: BLE001  (handed to the caller, raised there)
            handoff.put((done, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="hpcvar-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = handoff.get()
            if item is done:
                if exc is not None:
                    raise exc
                return
            slots.release()
            yield item
    finally:
        stop.set()
        if thread is not threading.current_thread():  # the collector may close a stream on any thread
            thread.join()


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
    bounded (the chunk being taken, the next one, read ahead by a thread while this one is
    used, and pyarrow's read-ahead of 1 MiB blocks) whatever the file size.
    """
    plan = _plan(paths)
    for layout in plan.layouts:
        metrics = _select_metrics(layout, columns)
        include = _included(layout, metrics)
        for start, table in _read_ahead(_file_chunks(layout, plan.types, include, chunk_rows)):
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
