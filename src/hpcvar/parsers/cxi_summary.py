"""Cray MPICH's Slingshot counter report at ``MPI_Finalize`` (``MPICH_OFI_CXI_COUNTER_REPORT``).

With ``MPICH_OFI_CXI_COUNTER_REPORT`` set, HPE Cray MPICH samples the Cassini NIC counters at
``MPI_Init`` and ``MPI_Finalize`` and rank 0 prints, on the job's stdout (after the
application's own output)::

    MPICH Slingshot Network Summary: 0 network timeouts
    MPICH Slingshot CXI Counter Summary:
    Counter                                Samples          Min         (/s)         Mean         (/s)          Max         (/s)
    hni_rx_paused_0                             64       371553        323.1      1960270       1704.6      5466732       4753.7
    ...

Sources of this layout (the HPE documentation pages themselves could not be retrieved in full):

* The counter-summary header and the column order (name, samples, min, min per second, mean,
  mean per second, max, max per second) as quoted, with the ``MPICH Slingshot CXI Counter
  Summary:`` marker, by the parser of the Perlmutter variability study:
  https://github.com/hpcgroup/perf-variability-ipdps26/blob/d02504627d087e56acd2b19cace50100eac94447/extract_data_perlmutter/extract_ml.py
  (``parse_counters``); its published per-counter data
  (``plot/perlmutter/counter_corr/*.csv`` in the same repository) give the counter names
  (``atu_cache_evictions``, ``hni_rx_paused_0``, ``rh:nacks``, ...).
* ``MPICH Slingshot Network Summary: <n> network timeouts``: the one-line report printed by
  default, quoted in job scripts that grep for it and in HPE's ``dgnettest`` output
  (``... Network Summary: 1 network timeouts``).
* Report levels (0 off; 1 timeouts line; 2 adds the counter summary; 3-5 add per-NIC detail
  *files*, not stdout): the Open MPI port of the same feature,
  https://docs.open-mpi.org/en/main/features/hwpc-cxi.html, which follows HPE's
  https://cpe.ext.hpe.com/docs/latest/getting_started/HPE-Cassini-Performance-Counters.html and
  ``intro_mpi`` (https://cpe.ext.hpe.com/docs/latest/mpt/mpich/intro_mpi.html).

Reading rules: lines may carry a ``ts '%.s'`` prefix and/or an ``srun -l`` rank label
(``0: ``); both are stripped. A counter row is whitespace-separated: a name without spaces, an
integer sample count and six numbers. The table ends at the first non-blank line that is not a
row (blank lines inside are skipped). The marker without the header line right after it is a
:class:`ParseError`, as is a file with neither report line. Several reports in one file (several
``srun`` steps in one job's output) are kept apart (``report`` 1, 2, ...); a Network Summary line
opens a report and the counter summary that follows joins it.

The report level printed on stdout can only be inferred: ``1`` when only the timeouts line is
there, ``>=2`` with the counter summary (levels 3-5 differ only in files written elsewhere). When
the output echoes the setting itself (``MPICH_OFI_CXI_COUNTER_REPORT=<n>``, e.g. from ``set -x``
or ``MPICH_ENV_DISPLAY``), that value is reported as ``report_level_set``.

API: :func:`sniff`, :func:`parse` -> :class:`CxiReport`, :func:`read` (long table),
:func:`describe`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from hpcvar.parsers.errors import ParseError

KIND = "cxi_counter_summary"
NETWORK_MARK = "MPICH Slingshot Network Summary:"
COUNTER_MARK = "MPICH Slingshot CXI Counter Summary:"
SOURCE_URL = ("https://github.com/hpcgroup/perf-variability-ipdps26/blob/d02504627d087e56acd2b19cace50100eac94447/"
              "extract_data_perlmutter/extract_ml.py")

_PREFIX = re.compile(r"^(?:(\d{9,11}\.\d{6}) ?)?(?:\s*\d+: )?")
_NETWORK = re.compile(re.escape(NETWORK_MARK) + r"\s*(\d+) network timeouts?\b")
_HEADER = re.compile(r"^Counter\s+Samples\s+Min\s+\(/s\)\s+Mean\s+\(/s\)\s+Max\s+\(/s\)\s*$")
_NUM = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_ROW = re.compile(rf"^(\S+)\s+(\d+)\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+({_NUM})\s+({_NUM})\s*$")
_LEVEL_SET = re.compile(r"MPICH_OFI_CXI_COUNTER_REPORT\s*[=:]\s*\"?(\d)")
STATS = ("samples", "min", "min_per_s", "mean", "mean_per_s", "max", "max_per_s")


@dataclass
class Report:
    """One ``MPI_Finalize`` report: network timeouts and/or the counter table."""

    index: int
    line: int
    ts: float = math.nan
    network_timeouts: int | None = None
    counters: list[dict] = field(default_factory=list)
    has_counter_summary: bool = False

    @property
    def report_level(self) -> str:
        return ">=2" if self.has_counter_summary else "1"


@dataclass
class CxiReport:
    reports: list[Report]
    report_level_set: int | None
    timestamped: bool


def _strip(text: str) -> tuple[str, float]:
    m = _PREFIX.match(text)
    ts = float(m[1]) if m and m[1] else math.nan
    return text[m.end():] if m else text, ts


def sniff(head: str, name: str) -> bool:
    return COUNTER_MARK in head or NETWORK_MARK in head


def parse(path: str | Path) -> CxiReport:
    path = Path(path)
    raw = path.read_text(encoding="utf-8", errors="replace").splitlines()
    reports: list[Report] = []
    level_set = None
    timestamped = False
    current: Report | None = None
    i = 0
    while i < len(raw):
        text, ts = _strip(raw[i])
        timestamped |= not math.isnan(ts)
        level = _LEVEL_SET.search(text)
        if level:
            level_set = int(level[1])
        net = _NETWORK.search(text)
        if net:
            current = Report(len(reports) + 1, i + 1, ts, network_timeouts=int(net[1]))
            reports.append(current)
        elif NETWORK_MARK in text:
            raise ParseError(path, f"expected '{NETWORK_MARK} <n> network timeouts', found {text.strip()[:80]!r}",
                             i + 1)
        if COUNTER_MARK in text:
            if current is None or current.has_counter_summary:
                current = Report(len(reports) + 1, i + 1, ts)
                reports.append(current)
            current.has_counter_summary = True
            header = _strip(raw[i + 1])[0] if i + 1 < len(raw) else ""
            if not _HEADER.match(header.strip()):
                raise ParseError(path, "expected the header 'Counter  Samples  Min  (/s)  Mean  (/s)  Max  (/s)' "
                                       f"after {COUNTER_MARK!r}, found {header.strip()[:80]!r}", i + 2)
            i += 2
            while i < len(raw):
                text, _ = _strip(raw[i])
                if not text.strip():
                    i += 1
                    continue
                row = _ROW.match(text.strip())
                if not row:
                    break
                values = [int(row[2]), *(float(v) for v in row.groups()[2:])]
                current.counters.append({"counter": row[1], **dict(zip(STATS, values)), "line": i + 1})
                i += 1
            continue
        i += 1
    if not reports:
        raise ParseError(path, f"no Cray MPICH report: expected a line {NETWORK_MARK!r} or {COUNTER_MARK!r} "
                               "(is MPICH_OFI_CXI_COUNTER_REPORT set?)", 1)
    return CxiReport(reports, level_set, timestamped)


def read(path: str | Path) -> pd.DataFrame:
    """Long table: ``report, counter, samples, min, min_per_s, mean, mean_per_s, max, max_per_s, line``.

    ``attrs["reports"]`` lists each report's ``index``, ``line``, ``ts`` (epoch of its first line
    when ``ts``-stamped, else NaN), ``network_timeouts`` (None if not printed), ``report_level``
    (``"1"`` or ``">=2"``, inferred) and ``counters``; ``attrs["report_level_set"]`` is the
    echoed setting or None.
    """
    parsed = parse(path)
    rows = [{"report": r.index, **c} for r in parsed.reports for c in r.counters]
    frame = pd.DataFrame(rows, columns=["report", "counter", *STATS, "line"])
    frame = frame.astype({"report": "int64", "samples": "int64", "line": "int64",
                          **{s: "float64" for s in STATS if s != "samples"}})
    frame.attrs["reports"] = [{"index": r.index, "line": r.line, "ts": r.ts, "network_timeouts": r.network_timeouts,
                               "report_level": r.report_level, "counters": len(r.counters)}
                              for r in parsed.reports]
    frame.attrs["report_level_set"] = parsed.report_level_set
    frame.attrs["timestamped"] = parsed.timestamped
    return frame


def describe(path: str | Path) -> dict:
    frame = read(path)
    reports = frame.attrs["reports"]
    timeouts = [r["network_timeouts"] for r in reports if r["network_timeouts"] is not None]
    stamps = [r["ts"] for r in reports if not math.isnan(r["ts"])]
    figures: dict[str, object] = {
        "reports": len(reports),
        "network_timeouts": sum(timeouts) if timeouts else None,
        "report_level": ",".join(sorted({r["report_level"] for r in reports})),
        "report_level_set": frame.attrs["report_level_set"],
        "counters": int(frame["counter"].nunique()),
    }
    for name in ("hni_rx_paused_0", "hni_tx_paused_0", "rh:nacks"):
        hit = frame[frame["counter"] == name]
        if len(hit):
            figures[f"max {name}"] = float(hit["max"].max())
    span = ([datetime.fromtimestamp(t, tz=timezone.utc).isoformat() for t in (min(stamps), max(stamps))]
            if stamps else None)
    return {"kind": KIND, "format_version": None, "records": int(len(frame)) or len(reports),
            "time_span": span, "figures": figures}
