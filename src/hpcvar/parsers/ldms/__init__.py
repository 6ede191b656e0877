"""LDMS ``store_csv`` files: streaming reader, per-producer counter deltas, slicing, and writer.

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

Public API, from four modules: :mod:`~hpcvar.parsers.ldms.store` (the layout and the streaming
reader: :func:`sniff`, :func:`read`, :func:`describe`, :func:`iter_chunks`, :func:`split_device`),
:mod:`~hpcvar.parsers.ldms.deltas` (:func:`iter_deltas` with :class:`DeltaStats` and
:class:`Reset`; :func:`counter_delta`, the wrap-or-reset rule, which the node samplers' parser
shares), :mod:`~hpcvar.parsers.ldms.slicing` (:func:`slice_window`, a run's window of a store,
for its raw directory) and :mod:`~hpcvar.parsers.ldms.writer` (:class:`StoreCsvWriter`).
"""

from hpcvar.parsers.ldms.deltas import DeltaStats, Reset, counter_delta, iter_deltas
from hpcvar.parsers.ldms.slicing import slice_window
from hpcvar.parsers.ldms.store import (CHUNK_ROWS, IDS, KIND, PRODUCER, REORDER_WINDOW, TIME, TIME_MSEC, TIME_USEC,
                                       WRAP_FRACTION, describe, iter_chunks, read, sniff, split_device)
from hpcvar.parsers.ldms.writer import StoreCsvWriter

__all__ = ["CHUNK_ROWS", "IDS", "KIND", "PRODUCER", "REORDER_WINDOW", "TIME", "TIME_MSEC", "TIME_USEC",
           "WRAP_FRACTION", "DeltaStats", "Reset", "StoreCsvWriter", "counter_delta", "describe", "iter_chunks",
           "iter_deltas", "read", "slice_window", "sniff", "split_device"]
