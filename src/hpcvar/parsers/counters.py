"""Per-step network counter files (``counters.csv`` in a run directory).

Written by the ReFrame tests' counter collection (AriesNCL/PAPI read around every time step) and
by the simulator. Format, version 1::

    # hpcvar step counters v1
    # <free comment lines>
    step,AR_RTR_INQ_PRF_ROWBUS_STALL_CNT,AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC0,...
    1,1.234e9,5.6e8,...

``step`` is the 1-based time step; every other column is the *change* of a counter over that
step, summed over the routers serving the job's nodes. Column names may be per tile
(``AR_RTR_3_5_...``), tile-less, or Table II abbreviations: :func:`hpcvar.system.aries.to_table2`
normalises them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.parsers.errors import ParseError
from hpcvar.system import aries

MAGIC = "# hpcvar step counters v1"
KIND = "step_counters"


def sniff(head: str, name: str) -> bool:
    return head.startswith(MAGIC)


def read_wide(path: str | Path) -> pd.DataFrame:
    """The file as written: ``step`` plus one column per counter (original names)."""
    path = Path(path)
    lines = path.read_text().splitlines()
    if not lines or not lines[0].startswith(MAGIC):
        raise ParseError(path, f"expected first line {MAGIC!r}", 1)
    header_idx = next((i for i, line in enumerate(lines) if not line.startswith("#")), None)
    if header_idx is None:
        raise ParseError(path, "no header row (expected 'step,<counter>,...')", len(lines))
    header = lines[header_idx].split(",")
    if header[0] != "step" or len(header) < 2:
        raise ParseError(path, f"header must start with 'step' and name counters, got {lines[header_idx]!r}",
                         header_idx + 1)
    rows = []
    for i in range(header_idx + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) != len(header):
            raise ParseError(path, f"expected {len(header)} fields, found {len(fields)} (truncated?)", i + 1)
        try:
            step = int(fields[0])
            values = [float(f) for f in fields[1:]]
        except ValueError as exc:
            raise ParseError(path, f"non-numeric value: {exc}", i + 1) from exc
        if rows and step != rows[-1][0] + 1:
            raise ParseError(path, f"step {step} follows step {rows[-1][0]}: steps must be consecutive", i + 1)
        if any(v < 0 or not np.isfinite(v) for v in values):
            raise ParseError(path, "counter changes must be finite and non-negative", i + 1)
        rows.append([step, *values])
    if not rows:
        raise ParseError(path, "no data rows after the header", header_idx + 1)
    wide = pd.DataFrame(rows, columns=header)
    wide.attrs["header_line"] = header_idx + 1
    return wide


def read(path: str | Path) -> pd.DataFrame:
    """Long table ``step, counter, value``: Aries counters under their Table II abbreviations
    (derived ones included); any other counter (a node sampler's ``infiniband_port_xmit_wait``,
    ``net_rx_bytes``, ...) under its own column name."""
    return long_table(read_wide(path))


def long_table(wide: pd.DataFrame) -> pd.DataFrame:
    """:func:`read`'s long table from a wide one (``step`` plus one column per counter)."""
    counters = wide.drop(columns="step")
    table2 = aries.to_table2(counters)
    others = [c for c in counters.columns if not aries.is_counter(c) and c not in aries.SUMS]
    table2 = pd.concat([table2, counters[others]], axis=1)
    table2.insert(0, "step", wide["step"])
    return table2.melt(id_vars="step", var_name="counter", value_name="value")


def write(path: str | Path, steps: np.ndarray, counters: dict[str, np.ndarray], comment: str = "") -> None:
    """Write one run's per-step counter changes (``counters`` maps column name -> values per step)."""
    names = list(counters)
    with open(path, "w") as fh:
        fh.write(MAGIC + "\n")
        if comment:
            fh.write(f"# {comment}\n")
        fh.write(",".join(["step", *names]) + "\n")
        cols = [np.asarray(counters[n]) for n in names]
        for i, s in enumerate(steps):
            fh.write(",".join([str(int(s)), *(f"{c[i]:.0f}" for c in cols)]) + "\n")


def describe(path: str | Path) -> dict:
    long = read(path)
    totals = long.groupby("counter")["value"].sum()
    return {
        "kind": KIND,
        "format_version": "1",
        "records": int(long["step"].nunique()),
        "time_span": None,
        "figures": {"steps": int(long["step"].max()), "counters": int(totals.size),
                    **{f"total {c}": float(totals[c]) for c in ("RT_RB_STL", "PT_FLIT_TOT") if c in totals}},
    }
