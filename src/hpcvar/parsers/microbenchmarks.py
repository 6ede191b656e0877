"""Output of the project's MPI microbenchmarks (``reframe_tests/microbenchmarks``).

This module owns the seven CSV files the four C benchmarks write (format version 1), documented in
``reframe_tests/microbenchmarks/README.md``. Every file is::

    # hpcvar <file kind> v1                 magic line: which file, which format version
    # nranks=2                              "# key=value" metadata (split at the first "=");
    # hosts=node1,node2                     nranks, hosts (per rank), mpi_library, start_epoch,
    # mpi_library=Open MPI v4.1.4, ...      start_wtime, wtick, then the benchmark's options
    # start_epoch=1712345678.123456
    ...
    <header row>
    <data rows>

========================================  ==================================================================
magic (kind)                              header row
========================================  ==================================================================
``hpcvar collectives v1``                 ``collective,size_bytes,iteration,max_us,min_us,mean_us,max_rank``
(``mb_collectives``)
``hpcvar overtime phases v1``             ``index,cycle,phase,follows,iterations,size_bytes,start_epoch_s,``
(``mb_overtime_phases``)                  ``end_epoch_s,start_wtime_s,end_wtime_s,duration_s``
``hpcvar overtime iterations v1``         ``cycle,phase,iteration,size_bytes,bytes,ranks,max_us,min_us,mean_us``
(``mb_overtime_iterations``)
``hpcvar confidence histogram v1``        ``kind,rank_a,rank_b,bin,lower_us,upper_us,count``
(``mb_confidence_histogram``)
``hpcvar confidence minima v1``           ``cycle,rank_a,rank_b,trials,min_pairwise_us,min_a_us,min_b_us,``
(``mb_confidence_minima``)                ``median_pairwise_us``
``hpcvar confidence samples v1``          ``cycle,rank_a,rank_b,trial,a_us,b_us,pairwise_us``
(``mb_confidence_samples``)
``hpcvar aggressor v1``                   ``iteration,start_epoch_s,comm_max_us,comm_min_us,comm_mean_us``
(``mb_aggressor``)
========================================  ==================================================================

Times are microseconds (``_us``) or seconds (``_s``; ``epoch`` = seconds since 1970 UTC from
``CLOCK_REALTIME``, ``wtime`` = ``MPI_Wtime``). The benchmarks always end a file with a newline
and write every row they announce in the metadata, so a file whose last line is unterminated,
a row with the wrong number of fields or a non-numeric value, and a file with fewer rows than its
metadata promises (iterations per collective and size, iterations per phase, one minima row per
pair and cycle) are all rejected with a :class:`ParseError` naming the file and line.

Every reader returns a DataFrame with the columns of the header row (in that order) and the
file's metadata in ``frame.attrs["meta"]`` (``nranks`` int, ``hosts`` list, ``start_epoch``
float, other values as strings).

Confidence's logarithmic bins (Settlemyer et al., eq. 2) are bin *widths* ``lw_0 = S``,
``lw_i = e^(S*i) - 1`` for ``0 < i < C`` with ``S`` and the widths in microseconds; bin ``i``
covers ``[edge_i, edge_(i+1))`` with ``edge_0 = 0`` and ``edge_(i+1) = edge_i + lw_i``, and the
last bin also counts everything beyond its upper edge (written as ``inf``).
:func:`log_bin_widths`, :func:`log_bin_edges` and :func:`bin_index` compute exactly what the C
code does; :func:`pair_minima` turns a histogram file (and optionally the minima file) into one
row per rank pair.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.parsers.errors import ParseError
from hpcvar.util.fileio import atomic_write_text

_MAGIC = re.compile(r"^# hpcvar (collectives|overtime phases|overtime iterations|confidence histogram|"
                    r"confidence minima|confidence samples|aggressor) v(\d+)\s*$")
SUPPORTED_VERSIONS = {"1"}

KIND_COLLECTIVES = "mb_collectives"
KIND_OVERTIME_PHASES = "mb_overtime_phases"
KIND_OVERTIME_ITERATIONS = "mb_overtime_iterations"
KIND_CONFIDENCE_HISTOGRAM = "mb_confidence_histogram"
KIND_CONFIDENCE_MINIMA = "mb_confidence_minima"
KIND_CONFIDENCE_SAMPLES = "mb_confidence_samples"
KIND_AGGRESSOR = "mb_aggressor"
_KINDS = {
    "collectives": KIND_COLLECTIVES,
    "overtime phases": KIND_OVERTIME_PHASES,
    "overtime iterations": KIND_OVERTIME_ITERATIONS,
    "confidence histogram": KIND_CONFIDENCE_HISTOGRAM,
    "confidence minima": KIND_CONFIDENCE_MINIMA,
    "confidence samples": KIND_CONFIDENCE_SAMPLES,
    "aggressor": KIND_AGGRESSOR,
}

COLLECTIVES = ("bcast", "reduce", "alltoall", "allreduce")
WORK_PHASES = ("latency", "bandwidth", "allreduce")
HISTOGRAM_KINDS = ("timer", "onesided", "pairwise", "minima")
AGGRESSOR_PATTERNS = ("periodic-allreduce", "uniform-random")


def _time(path: Path, text: str, line: int, column: str) -> float:
    """A non-negative finite number (a time, a count of microseconds)."""
    value = _float(path, text, line, column)
    if not math.isfinite(value) or value < 0:
        raise ParseError(path, f"column {column}: expected a finite non-negative number, got {text!r}", line)
    return value


def _float(path: Path, text: str, line: int, column: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParseError(path, f"column {column}: expected a number, got {text!r}", line) from None


def _int(path: Path, text: str, line: int, column: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ParseError(path, f"column {column}: expected an integer, got {text!r}", line) from None


def _upper(path: Path, text: str, line: int, column: str) -> float:
    value = _float(path, text, line, column)
    if math.isnan(value) or value < 0:
        raise ParseError(path, f"column {column}: expected a non-negative number or inf, got {text!r}", line)
    return value


def _choice(options: Sequence[str]) -> Callable[[Path, str, int, str], str]:
    def parse(path: Path, text: str, line: int, column: str) -> str:
        if text not in options:
            raise ParseError(path, f"column {column}: expected one of {', '.join(options)}, got {text!r}", line)
        return text
    return parse


# Column name -> field parser, per file kind (the header row must be exactly these names).
_COLUMNS: dict[str, dict[str, Callable]] = {
    KIND_COLLECTIVES: {"collective": _choice(COLLECTIVES), "size_bytes": _int, "iteration": _int,
                       "max_us": _time, "min_us": _time, "mean_us": _time, "max_rank": _int},
    KIND_OVERTIME_PHASES: {"index": _int, "cycle": _int, "phase": _choice((*WORK_PHASES, "idle")),
                           "follows": _choice(("", *WORK_PHASES)), "iterations": _int, "size_bytes": _int,
                           "start_epoch_s": _time, "end_epoch_s": _time, "start_wtime_s": _float,
                           "end_wtime_s": _float, "duration_s": _time},
    KIND_OVERTIME_ITERATIONS: {"cycle": _int, "phase": _choice(WORK_PHASES), "iteration": _int,
                               "size_bytes": _int, "bytes": _int, "ranks": _int, "max_us": _time,
                               "min_us": _time, "mean_us": _time},
    KIND_CONFIDENCE_HISTOGRAM: {"kind": _choice(HISTOGRAM_KINDS), "rank_a": _int, "rank_b": _int, "bin": _int,
                                "lower_us": _time, "upper_us": _upper, "count": _int},
    KIND_CONFIDENCE_MINIMA: {"cycle": _int, "rank_a": _int, "rank_b": _int, "trials": _int,
                             "min_pairwise_us": _time, "min_a_us": _time, "min_b_us": _time,
                             "median_pairwise_us": _time},
    KIND_CONFIDENCE_SAMPLES: {"cycle": _int, "rank_a": _int, "rank_b": _int, "trial": _int, "a_us": _time,
                              "b_us": _time, "pairwise_us": _time},
    KIND_AGGRESSOR: {"iteration": _int, "start_epoch_s": _time, "comm_max_us": _time, "comm_min_us": _time,
                     "comm_mean_us": _time},
}


# --- Confidence's logarithmic bins -----------------------------------------------------------


def log_bin_widths(size_us: float, nbins: int) -> np.ndarray:
    """Confidence's log bin widths: ``lw_0 = S``, ``lw_i = e^(S*i) - 1`` (``0 < i < C``), in us."""
    if not size_us > 0 or nbins < 1:
        raise ValueError("need S > 0 and at least one bin")
    return np.array([size_us if i == 0 else math.exp(size_us * i) - 1.0 for i in range(nbins)])


def log_bin_edges(size_us: float, nbins: int) -> np.ndarray:
    """The ``C + 1`` finite bin edges ``0, lw_0, lw_0 + lw_1, ...`` (summed in the C code's order)."""
    edges = [0.0]
    for width in log_bin_widths(size_us, nbins):
        edges.append(edges[-1] + float(width))
    return np.array(edges)


def bin_index(values_us, size_us: float, nbins: int) -> np.ndarray:
    """The bin of every value, as hpcvar-confidence bins it (last bin open-ended, negatives -> 0)."""
    edges = log_bin_edges(size_us, nbins)
    values = np.asarray(values_us, dtype=float)
    index = np.searchsorted(edges[:-1], values, side="right") - 1
    return np.clip(index, 0, nbins - 1)


def histogram(values_us, size_us: float, nbins: int) -> np.ndarray:
    """Counts per bin of ``values_us`` (length ``nbins``)."""
    return np.bincount(bin_index(values_us, size_us, nbins), minlength=nbins)


def pair_minima(hist: pd.DataFrame, minima: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per measured rank pair from a Confidence histogram file (and its minima file).

    From the ``pairwise`` histogram: ``samples`` and the lowest non-empty bin (``min_bin``,
    ``min_lower_us``, ``min_upper_us``: the pair's fastest sample lies in it). From the ``minima``
    histogram: ``cycles`` and the most common bin of the per-cycle minima (``minima_mode_lower_us``,
    ``minima_mode_upper_us``). With ``minima`` (the minima file) also the exact ``min_us`` (over all
    cycles), ``median_cycle_min_us`` and ``max_cycle_min_us``.
    """
    key = ["rank_a", "rank_b"]
    pairwise = hist[hist["kind"] == "pairwise"]
    if pairwise.empty:
        raise ValueError("no pairwise histogram rows")
    nonempty = pairwise[pairwise["count"] > 0].sort_values([*key, "bin"])
    lowest = nonempty.groupby(key, as_index=False).first()[[*key, "bin", "lower_us", "upper_us"]]
    lowest = lowest.rename(columns={"bin": "min_bin", "lower_us": "min_lower_us", "upper_us": "min_upper_us"})
    samples = pairwise.groupby(key, as_index=False)["count"].sum().rename(columns={"count": "samples"})
    table = samples.merge(lowest, on=key, how="left")
    mins = hist[hist["kind"] == "minima"]
    cycles = mins.groupby(key, as_index=False)["count"].sum().rename(columns={"count": "cycles"})
    mode = (mins.sort_values([*key, "count", "bin"], ascending=[True, True, False, True])
            .groupby(key, as_index=False).first()[[*key, "lower_us", "upper_us"]]
            .rename(columns={"lower_us": "minima_mode_lower_us", "upper_us": "minima_mode_upper_us"}))
    table = table.merge(cycles, on=key, how="left").merge(mode, on=key, how="left")
    table["cycles"] = table["cycles"].fillna(0).astype(int)
    if minima is not None:
        exact = minima.groupby(key)["min_pairwise_us"].agg(min_us="min", median_cycle_min_us="median",
                                                            max_cycle_min_us="max").reset_index()
        table = table.merge(exact, on=key, how="left")
    return table.sort_values(key, ignore_index=True)


# --- reading ---------------------------------------------------------------------------------


def sniff(head: str, name: str) -> bool:
    return _MAGIC.match(head.split("\n", 1)[0].rstrip("\r")) is not None


def _kind_of(path: Path, first: str) -> tuple[str, str]:
    match = _MAGIC.match(first)
    if match is None:
        raise ParseError(path, "expected a first line '# hpcvar <collectives|overtime phases|overtime iterations|"
                               "confidence histogram|confidence minima|confidence samples|aggressor> v1'", 1)
    if match.group(2) not in SUPPORTED_VERSIONS:
        raise ParseError(path, f"format version {match.group(2)} not supported (this hpcvar reads "
                               f"{', '.join(sorted(SUPPORTED_VERSIONS))})", 1)
    return _KINDS[match.group(1)], match.group(2)


def _meta_value(path: Path, key: str, value: str, line: int):
    if key == "nranks":
        n = _int(path, value, line, "nranks")
        if n < 1:
            raise ParseError(path, f"nranks must be >= 1, got {value!r}", line)
        return n
    if key == "hosts":
        return value.split(",") if value else []
    if key in ("start_epoch", "start_wtime", "wtick", "bin_size_us", "compute_s"):
        return _float(path, value, line, key)
    if key == "timer_min_us":
        return [_float(path, v, line, key) for v in value.split(",")]
    if key in ("iterations", "warmup", "cycles", "trials", "nbins", "timer_samples", "messages") or key.endswith(
            ("_iterations", "_bytes", "_window")):
        return _int(path, value, line, key)
    return value


def _read(path: str | Path, expect: str | None = None) -> pd.DataFrame:
    """Any of the six files: typed columns, metadata in ``attrs``; ``kind`` and the header line too."""
    path = Path(path)
    text = path.read_text(errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif text:
        raise ParseError(path, "last line is not terminated by a newline (file truncated?)", len(lines))
    if not lines:
        raise ParseError(path, "empty file", 1)
    kind, version = _kind_of(path, lines[0].rstrip("\r"))
    if expect is not None and kind != expect:
        raise ParseError(path, f"expected a {expect} file, this is a {kind} file", 1)
    meta: dict = {}
    i = 1
    while i < len(lines) and lines[i].startswith("#"):
        key, sep, value = lines[i][1:].strip().partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][\w]*", key):
            meta[key] = _meta_value(path, key, value.rstrip("\r"), i + 1)
        i += 1
    columns = _COLUMNS[kind]
    expected = list(columns)
    if i >= len(lines):
        raise ParseError(path, f"no header row (expected {','.join(expected)!r}; file truncated?)", len(lines))
    header = lines[i].rstrip("\r").split(",")
    if header != expected:
        raise ParseError(path, f"expected header {','.join(expected)!r}, got {lines[i]!r}", i + 1)
    header_line = i + 1
    parsers = list(columns.values())
    data: list[list] = [[] for _ in expected]
    line_numbers = []
    for j in range(i + 1, len(lines)):
        raw = lines[j].rstrip("\r")
        if not raw.strip():
            raise ParseError(path, "blank line among the data rows", j + 1)
        fields = raw.split(",")
        if len(fields) != len(expected):
            raise ParseError(path, f"expected {len(expected)} fields, found {len(fields)} (truncated row?)", j + 1)
        for k, (parse, name, field) in enumerate(zip(parsers, expected, fields)):
            data[k].append(parse(path, field, j + 1, name))
        line_numbers.append(j + 1)
    if not line_numbers:
        raise ParseError(path, "no data rows after the header (file truncated?)", header_line)
    frame = pd.DataFrame(dict(zip(expected, data)))
    frame.attrs.update({"meta": meta, "kind": kind, "format_version": version, "header_line": header_line,
                        "path": str(path)})
    _CHECKS[kind](path, frame, meta, line_numbers)
    return frame


def _need(path: Path, meta: dict, key: str, header_line: int):
    if key not in meta:
        raise ParseError(path, f"metadata line '# {key}=...' missing before the header", header_line)
    return meta[key]


def _complete(path: Path, frame: pd.DataFrame, group: list[str], position: str, expected: dict,
              line_numbers: list[int], what: str) -> None:
    """Every group has exactly positions 0..n-1 in order; ``expected`` maps group -> n (missing -> error)."""
    last_line = line_numbers[-1]
    seen: dict = {}
    for row, (values, pos) in enumerate(zip(frame[group].itertuples(index=False, name=None), frame[position])):
        n = seen.get(values, 0)
        if pos != n:
            raise ParseError(path, f"{what} {values}: expected {position} {n}, found {pos}", line_numbers[row])
        seen[values] = n + 1
    for values, n in expected.items():
        if seen.get(values, 0) != n:
            raise ParseError(path, f"{what} {values}: expected {n} rows, found {seen.get(values, 0)} "
                                   f"(file truncated?)", last_line)
    extra = set(seen) - set(expected)
    if extra:
        row = next(r for r, v in enumerate(frame[group].itertuples(index=False, name=None)) if v in extra)
        raise ParseError(path, f"{what} {sorted(extra)[0]} not announced in the metadata", line_numbers[row])


def _check_collectives(path: Path, frame: pd.DataFrame, meta: dict, line_numbers: list[int]) -> None:
    h = frame.attrs["header_line"]
    iterations = _need(path, meta, "iterations", h)
    sizes = [_int(path, s, h, "sizes") for s in str(_need(path, meta, "sizes", h)).split(",")]
    collectives = str(_need(path, meta, "collectives", h)).split(",")
    expected = {(c, s): iterations for c in collectives for s in sizes}
    _complete(path, frame, ["collective", "size_bytes"], "iteration", expected, line_numbers, "collective, size")


def _check_overtime_phases(path: Path, frame: pd.DataFrame, meta: dict, line_numbers: list[int]) -> None:
    h = frame.attrs["header_line"]
    cycles = _need(path, meta, "cycles", h)
    phases = str(_need(path, meta, "phases", h)).split(",")
    expected = [(c, p, f) for c in range(cycles) for work in phases for p, f in ((work, ""), ("idle", work))]
    rows = zip(frame["index"], frame["cycle"], frame["phase"], frame["follows"])
    for row, (index, cycle, phase, follows) in enumerate(rows):
        if index != row:
            raise ParseError(path, f"expected index {row}, found {index}", line_numbers[row])
        if row >= len(expected) or (cycle, phase, follows) != expected[row]:
            want = "no more rows" if row >= len(expected) else "cycle {}, phase {}, follows {!r}".format(*expected[row])
            raise ParseError(path, f"expected {want} (work phases of '# phases=' each followed by an idle phase), "
                                   f"found cycle {cycle}, phase {phase}, follows {follows!r}", line_numbers[row])
    if len(frame) != len(expected):
        raise ParseError(path, f"expected {len(expected)} phases ({cycles} cycles), found {len(frame)} "
                               f"(file truncated?)", line_numbers[-1])


def _check_overtime_iterations(path: Path, frame: pd.DataFrame, meta: dict, line_numbers: list[int]) -> None:
    h = frame.attrs["header_line"]
    cycles = _need(path, meta, "cycles", h)
    phases = str(_need(path, meta, "phases", h)).split(",")
    expected = {(c, p): _need(path, meta, f"{p}_iterations", h) for c in range(cycles) for p in phases}
    _complete(path, frame, ["cycle", "phase"], "iteration", expected, line_numbers, "cycle, phase")


def _check_histogram(path: Path, frame: pd.DataFrame, meta: dict, line_numbers: list[int]) -> None:
    h = frame.attrs["header_line"]
    nbins = _need(path, meta, "nbins", h)
    _need(path, meta, "bin_size_us", h)
    bad = np.flatnonzero((frame["bin"] < 0) | (frame["bin"] >= nbins) | (frame["count"] < 0)
                         | (frame["upper_us"] <= frame["lower_us"]))
    if bad.size:
        raise ParseError(path, f"bin outside 0..{nbins - 1}, negative count or empty bin range",
                         line_numbers[bad[0]])
    nranks = _need(path, meta, "nranks", h)
    cycles, trials = _need(path, meta, "cycles", h), _need(path, meta, "trials", h)
    samples = _need(path, meta, "timer_samples", h)
    # every histogram the metadata announces, with every sample counted
    expected = {("timer", r, -1): samples for r in range(nranks)}
    for a in range(nranks):
        for b in range(nranks):
            if a != b:
                expected[("onesided", a, b)] = cycles * trials
            if a < b:
                expected[("pairwise", a, b)] = cycles * trials
                expected[("minima", a, b)] = cycles
    totals = frame.groupby(["kind", "rank_a", "rank_b"])["count"].sum()
    for key, count in totals.items():
        if key not in expected:
            row = int(np.flatnonzero((frame["kind"] == key[0]) & (frame["rank_a"] == key[1])
                                     & (frame["rank_b"] == key[2]))[0])
            raise ParseError(path, f"histogram {key} not expected for {nranks} ranks", line_numbers[row])
    for key, count in expected.items():
        found = int(totals.get(key, 0))
        if found != count:
            raise ParseError(path, f"histogram {key}: counts sum to {found}, expected {count} (file truncated?)",
                             line_numbers[-1])


def _check_minima(path: Path, frame: pd.DataFrame, meta: dict, line_numbers: list[int]) -> None:
    h = frame.attrs["header_line"]
    cycles = _need(path, meta, "cycles", h)
    nranks = _need(path, meta, "nranks", h)
    if len(frame) != cycles * nranks * (nranks - 1) // 2:
        raise ParseError(path, f"expected {cycles * nranks * (nranks - 1) // 2} rows (one per pair and cycle), "
                               f"found {len(frame)} (file truncated?)", line_numbers[-1])


def _check_samples(path: Path, frame: pd.DataFrame, meta: dict, line_numbers: list[int]) -> None:
    h = frame.attrs["header_line"]
    cycles, trials = _need(path, meta, "cycles", h), _need(path, meta, "trials", h)
    nranks = _need(path, meta, "nranks", h)
    expected = cycles * trials * nranks * (nranks - 1) // 2
    if len(frame) != expected:
        raise ParseError(path, f"expected {expected} samples, found {len(frame)} (file truncated?)", line_numbers[-1])


def _check_aggressor(path: Path, frame: pd.DataFrame, meta: dict, line_numbers: list[int]) -> None:
    h = frame.attrs["header_line"]
    pattern = _need(path, meta, "pattern", h)
    if pattern not in AGGRESSOR_PATTERNS:
        raise ParseError(path, f"pattern {pattern!r}: expected one of {', '.join(AGGRESSOR_PATTERNS)}", h)
    _need(path, meta, "size_bytes", h)
    _complete(path, frame, [], "iteration", {(): _need(path, meta, "iterations", h)}, line_numbers, "aggressor")
    starts = frame["start_epoch_s"].to_numpy()
    later = np.flatnonzero(starts[1:] < starts[:-1])
    if later.size:
        raise ParseError(path, "start_epoch_s goes back in time", line_numbers[later[0] + 1])


_CHECKS = {
    KIND_COLLECTIVES: _check_collectives,
    KIND_OVERTIME_PHASES: _check_overtime_phases,
    KIND_OVERTIME_ITERATIONS: _check_overtime_iterations,
    KIND_CONFIDENCE_HISTOGRAM: _check_histogram,
    KIND_CONFIDENCE_MINIMA: _check_minima,
    KIND_CONFIDENCE_SAMPLES: _check_samples,
    KIND_AGGRESSOR: _check_aggressor,
}


def read(path: str | Path) -> pd.DataFrame:
    """Any microbenchmark CSV (kind from the magic line, in ``frame.attrs["kind"]``)."""
    return _read(path)


def read_collectives(path: str | Path) -> pd.DataFrame:
    """hpcvar-collectives: one row per collective, size and iteration (times over ranks, us)."""
    return _read(path, KIND_COLLECTIVES)


def read_overtime_phases(path: str | Path) -> pd.DataFrame:
    """hpcvar-overtime phase boundaries; ``follows`` is ``""`` for work phases."""
    return _read(path, KIND_OVERTIME_PHASES)


def read_overtime_iterations(path: str | Path) -> pd.DataFrame:
    """hpcvar-overtime: one row per cycle, work phase and iteration (over measuring ranks, us)."""
    return _read(path, KIND_OVERTIME_ITERATIONS)


def read_confidence_histogram(path: str | Path) -> pd.DataFrame:
    """hpcvar-confidence histograms, non-empty bins only (``upper_us`` of the last bin is inf)."""
    return _read(path, KIND_CONFIDENCE_HISTOGRAM)


def read_confidence_minima(path: str | Path) -> pd.DataFrame:
    """hpcvar-confidence: one row per cycle and rank pair (``rank_a < rank_b``)."""
    return _read(path, KIND_CONFIDENCE_MINIMA)


def read_confidence_samples(path: str | Path) -> pd.DataFrame:
    """hpcvar-confidence ``-r``: every timed exchange (one-sided and pairwise latency, us)."""
    return _read(path, KIND_CONFIDENCE_SAMPLES)


def read_aggressor(path: str | Path) -> pd.DataFrame:
    """hpcvar-aggressor: one row per iteration (its communication phase over ranks, us)."""
    return _read(path, KIND_AGGRESSOR)


def write_collectives(path: str | Path, frame: pd.DataFrame, *, hosts: Sequence[str], start_epoch: float,
                      mpi_library: str, warmup: int = 10) -> None:
    """Write an hpcvar-collectives file (format v1) as the C benchmark does, for the simulator.

    ``frame`` has the header row's columns, one row per collective, size and iteration in the
    benchmark's order; the metadata (iterations, sizes, collectives) is derived from it.
    """
    cols = list(_COLUMNS[KIND_COLLECTIVES])
    missing = set(cols) - set(frame.columns)
    if missing:
        raise ValueError(f"collectives frame lacks columns {sorted(missing)}")
    iterations = int(frame.groupby(["collective", "size_bytes"]).size().iloc[0])
    lines = ["# hpcvar collectives v1", f"# nranks={len(hosts)}", f"# hosts={','.join(hosts)}",
             f"# mpi_library={mpi_library}", f"# start_epoch={start_epoch:.6f}", "# start_wtime=0.000000000",
             "# wtick=1e-09", f"# iterations={iterations}", f"# warmup={warmup}",
             f"# sizes={','.join(str(s) for s in pd.unique(frame['size_bytes']))}",
             f"# collectives={','.join(pd.unique(frame['collective']))}", ",".join(cols)]
    body = frame[cols].to_csv(header=False, index=False, float_format="%.3f", lineterminator="\n")
    atomic_write_text(path, "\n".join(lines) + "\n" + body)


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat()


def describe(path: str | Path) -> dict:
    frame = _read(path)
    meta, kind = frame.attrs["meta"], frame.attrs["kind"]
    figures: dict[str, object] = {"nranks": meta.get("nranks"), "started": _iso(meta.get("start_epoch"))}
    span = None
    if kind == KIND_COLLECTIVES:
        figures["collectives"] = ",".join(frame["collective"].unique())
        figures["sizes"] = ",".join(str(s) for s in frame["size_bytes"].unique())
        figures["iterations"] = meta.get("iterations")
        for (coll, size), group in frame.groupby(["collective", "size_bytes"], sort=False):
            figures[f"median_us {coll} {size}"] = round(float(group["max_us"].median()), 3)
    elif kind == KIND_OVERTIME_PHASES:
        span = [_iso(float(frame["start_epoch_s"].min())), _iso(float(frame["end_epoch_s"].max()))]
        figures["cycles"] = int(frame["cycle"].nunique())
        figures["phases"] = ",".join(p for p in frame["phase"].unique())
        work = frame[frame["phase"] != "idle"]["duration_s"].to_numpy()
        idle = frame[frame["phase"] == "idle"]["duration_s"].to_numpy()
        figures["max_idle_minus_phase_s"] = float(np.max(np.abs(idle - work)))
    elif kind == KIND_OVERTIME_ITERATIONS:
        figures["cycles"] = int(frame["cycle"].nunique())
        for phase, group in frame.groupby("phase", sort=False):
            figures[f"median_us {phase}"] = round(float(group["max_us"].median()), 3)
    elif kind == KIND_CONFIDENCE_HISTOGRAM:
        figures["bin_size_us"] = meta.get("bin_size_us")
        figures["nbins"] = meta.get("nbins")
        figures["pairs"] = int(len(frame[frame["kind"] == "pairwise"][["rank_a", "rank_b"]].drop_duplicates()))
        figures["pairwise samples"] = int(frame.loc[frame["kind"] == "pairwise", "count"].sum())
        if meta.get("timer_min_us"):
            figures["timer_min_us"] = min(meta["timer_min_us"])
    elif kind == KIND_CONFIDENCE_MINIMA:
        figures["pairs"] = int(len(frame[["rank_a", "rank_b"]].drop_duplicates()))
        figures["cycles"] = int(frame["cycle"].nunique())
        figures["min_pairwise_us"] = float(frame["min_pairwise_us"].min())
        figures["median_cycle_min_us"] = float(frame["min_pairwise_us"].median())
    elif kind == KIND_AGGRESSOR:
        span = [_iso(float(frame["start_epoch_s"].min())), _iso(float(frame["start_epoch_s"].max()))]
        figures.update(pattern=meta.get("pattern"), size_bytes=meta.get("size_bytes"), iterations=len(frame),
                       median_comm_us=round(float(frame["comm_max_us"].median()), 3))
    else:
        figures["samples"] = len(frame)
        figures["median_pairwise_us"] = float(frame["pairwise_us"].median())
    return {"kind": kind, "format_version": frame.attrs["format_version"], "records": len(frame),
            "time_span": span, "figures": figures}
