"""An LDMS ``store_csv`` file written as the store plugin writes it (:class:`StoreCsvWriter`):
what the simulator and the testbed's link sampler write."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from hpcvar.parsers.ldms.store import PRODUCER, TIME, TIME_USEC, _NOT_METRICS


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
