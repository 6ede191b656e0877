"""Per-producer counter deltas of an LDMS store (:func:`iter_deltas`): rows put back in time order
within a bounded window, 64-bit and narrower wraps told from resets (:class:`Reset`), with the
figures of what was done (:class:`DeltaStats`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from hpcvar.parsers.errors import ParseError
from hpcvar.parsers.ldms.store import (CHUNK_ROWS, REORDER_WINDOW, WRAP_FRACTION, _columns, _file_chunks, _included,
                                       _plan, _read_ahead)


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


def _by_producer(pid: np.ndarray) -> np.ndarray:
    """The rows' order by producer, ties in arrival order (``np.argsort(pid, kind="stable")``).
    Producer numbers below 2**16 are sorted as 16-bit integers, for which NumPy's stable sort is
    a radix sort: a third of the time of the 64-bit sort, the same order."""
    narrow = pid.astype(np.uint16) if pid.size and 0 <= pid.min() and pid.max() < 2**16 else pid
    return np.argsort(narrow, kind="stable")


def _in_time_order(pid: np.ndarray, time: np.ndarray) -> bool:
    """Whether rows sorted by producer have each producer's times nondecreasing."""
    return bool(np.all((pid[1:] != pid[:-1]) | (time[1:] >= time[:-1])))


def _order(pid: np.ndarray, time: np.ndarray) -> np.ndarray:
    """The rows' order by (producer, time), ties in arrival order: ``np.lexsort((time, pid))``.
    A store's rows usually come in time order, and then a stable sort by producer alone gives
    that order (in a fraction of lexsort's time); otherwise lexsort does."""
    order = _by_producer(pid)
    if _in_time_order(pid[order], time[order]):
        return order
    return np.lexsort((time, pid))


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


def counter_delta(value: np.ndarray, prev: np.ndarray, bits: int,
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
        self.name_array = pa.array([], type=pa.large_string())  # self.names, for the output's producer column
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
            self.name_array = pa.array(self.names, type=pa.large_string())
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
        # The rows in (producer, time) order, as an index: each column is copied once, into the
        # final rows or the held-back ones, not first into a sorted copy of them all.
        order = self._drop_duplicates(merged, _order(merged.pid, merged.time))
        final = merged.time[order] < self.newest[merged.pid[order]] - self.window
        self.pending = merged.take(order[~final])
        return self._deltas(merged.take(order[final]))

    def flush(self) -> pd.DataFrame | None:
        rows, self.pending = self.pending, self._rows_of_length(0)
        return self._deltas(rows)

    def _error(self, rows: _Rows, i: int, message: str) -> ParseError:
        return ParseError(self.files[rows.file[i]], message, line=int(rows.line[i]))

    def _check_order(self, rows: _Rows) -> None:
        """A row later than the window behind its producer's newest sample cannot be placed."""
        order = _by_producer(rows.pid)
        if _in_time_order(rows.pid[order], rows.time[order]):
            running = rows.time  # each producer's newest so far is the row itself
        else:
            running = pd.Series(rows.time).groupby(rows.pid).cummax().to_numpy()
        newest = np.maximum(running, self.newest[rows.pid])
        late = np.flatnonzero(newest - rows.time > self.window)
        if late.size:
            i = late[0]
            raise self._error(rows, i, f"non-monotonic time: sample of producer {self.names[rows.pid[i]]!r} "
                              f"at {rows.time[i]:.6f} comes after one {newest[i] - rows.time[i]:.6f} s newer "
                              f"(expected at most the reorder window, {self.window} s)")
        np.maximum.at(self.newest, rows.pid, rows.time)

    def _drop_duplicates(self, rows: _Rows, order: np.ndarray) -> np.ndarray:
        """``order`` (rows in (producer, time) order) without repeated (producer, time) samples;
        differing values for one sample are an error."""
        pid, time = rows.pid[order], rows.time[order]
        dup = np.flatnonzero((pid[1:] == pid[:-1]) & (time[1:] == time[:-1])) + 1
        if not dup.size:
            return order
        this, other = order[dup], order[dup - 1]
        differ = np.zeros(dup.size, dtype=bool)
        for column in [rows.component_id, rows.job_id, *rows.values]:
            same = column[this] == column[other]
            if column.dtype.kind == "f":
                same |= np.isnan(column[this]) & np.isnan(column[other])
            differ |= ~same
        if differ.any():
            i, j = this[differ][0], other[differ][0]
            raise self._error(rows, i, f"two different samples of producer {self.names[rows.pid[i]]!r} at "
                              f"{rows.time[i]:.6f} (the other: {self.files[rows.file[j]].name} line "
                              f"{rows.line[j]}); expected one sample per producer and time")
        self.stats.duplicates += dup.size
        keep = np.ones(len(order), dtype=bool)
        keep[dup] = False
        return order[keep]

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
               "producer": pd.array(self.name_array.take(pid[has_prev]), dtype="str"),
               "component_id": rows.component_id[has_prev], "job_id": rows.job_id[has_prev]}
        resets = []
        for name, value, last_value in zip(self.metrics, rows.values, self.last_values):
            prev = np.roll(value, 1)
            prev[first] = last_value[pid[first]]
            delta, wrapped, reset = counter_delta(value, prev, self.bits, self.fraction)
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
        for start, table in _read_ahead(_file_chunks(layout, plan.types, include, chunk_rows)):
            first_line = layout.skip_rows + start + 1
            columns = _columns(table, layout, chosen, first_line)
            out = engine.feed(engine.rows(columns, layout.path, first_line))
            if out is not None:
                yield out
    out = engine.flush()
    if out is not None:
        yield out
