"""Aries router counter names -> the paper's Table II abbreviations, and the derived counters.

Real counter names come per tile and sometimes with an AriesNCL event qualifier:
``AR_RTR_3_5_INQ_PRF_INCOMING_FLIT_VC0`` (router tile row 3, column 5),
``AR_RTR_PT_5_0_INQ_PRF_REQ_ROWBUS_STALL_CNT`` (processor tile), ``...STALL_RQ:VC_PTR``.
The study uses router-level values, i.e. the sum over tiles; :func:`base_name` strips the tile
indices and qualifier, :func:`to_table2` sums per base name, renames to Table II abbreviations
and adds the derived totals.
"""

from __future__ import annotations

import re

import pandas as pd

# Table II of Bhatele et al. (SC'20): raw counters, base (tile-less) name -> abbreviation.
RAW = {
    "AR_RTR_INQ_PRF_ROWBUS_2X_USAGE_CNT": "RT_RB_2X_USG",
    "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT": "RT_RB_STL",
    "AR_RTR_PT_COLBUF_PERF_STALL_RQ": "PT_CB_STL_RQ",
    "AR_RTR_PT_COLBUF_PERF_STALL_RS": "PT_CB_STL_RS",
    "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC0": "PT_FLIT_VC0",
    "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC4": "PT_FLIT_VC4",
    "AR_RTR_PT_INQ_PRF_REQ_ROWBUS_STALL_CNT": "PT_RB_STL_RQ",
    "AR_RTR_PT_INQ_PRF_RSP_ROWBUS_STALL_CNT": "PT_RB_STL_RS",
    "AR_RTR_PT_INQ_PRF_ROWBUS_2X_USAGE_CNT": "PT_RB_2X_USG",
    # Totals given directly (some collectors pre-sum the virtual channels).
    "AR_RTR_INQ_PRF_INCOMING_FLIT_TOTAL": "RT_FLIT_TOT",
    "AR_RTR_INQ_PRF_INCOMING_PKT_TOTAL": "RT_PKT_TOT",
    "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_TOTAL": "PT_FLIT_TOT",
    "AR_RTR_PT_INQ_PRF_INCOMING_PKT_TOTAL": "PT_PKT_TOT",
}
ABBREV_TO_RAW = {v: k for k, v in RAW.items()}

# Derived counters: abbreviation -> regex of the base names summed to make it.
DERIVED = {
    "RT_FLIT_TOT": re.compile(r"^AR_RTR_INQ_PRF_INCOMING_FLIT_VC\d$"),
    "RT_PKT_TOT": re.compile(r"^AR_RTR_INQ_PRF_INCOMING_PKT_VC\d(_FILTER_FLIT\d_CNT)?$"),
    "PT_FLIT_TOT": re.compile(r"^AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC\d$"),
    "PT_PKT_TOT": re.compile(r"^AR_RTR_PT_INQ_PRF_INCOMING_PKT_VC\d(_FILTER_FLIT\d_CNT)?$"),
}
# Table II defines a combined processor-tile row-bus stall as RQ + RS.
SUMS = {"PT_RB_STL": ("PT_RB_STL_RQ", "PT_RB_STL_RS")}

#: Every abbreviation hpcvar can produce, in Table II order.
TABLE2 = ("RT_FLIT_TOT", "RT_PKT_TOT", "RT_RB_2X_USG", "RT_RB_STL", "PT_CB_STL_RQ", "PT_CB_STL_RS",
          "PT_FLIT_VC0", "PT_FLIT_VC4", "PT_FLIT_TOT", "PT_PKT_TOT", "PT_RB_STL_RQ", "PT_RB_STL_RS",
          "PT_RB_2X_USG", "PT_RB_STL")

_TILE = re.compile(r"^AR_RTR_(PT_)?\d+_\d+_")


def base_name(name: str) -> str:
    """``AR_RTR_PT_5_0_INQ_PRF_INCOMING_FLIT_VC0:X`` -> ``AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC0``."""
    name = name.split(":", 1)[0].strip()
    return _TILE.sub(lambda m: f"AR_RTR_{m.group(1) or ''}", name)


def is_counter(name: str) -> bool:
    """True for Aries router counters (raw or Table II abbreviations) that :func:`to_table2` uses."""
    b = base_name(name)
    return b in RAW or name in TABLE2 or any(p.match(b) for p in DERIVED.values())


def to_table2(wide: pd.DataFrame) -> pd.DataFrame:
    """Wide frame of counter columns (any naming above) -> Table II abbreviation columns.

    Columns that are not Aries counters are left out; callers keep their own key columns.
    Tile columns with the same base name are summed; derived totals are computed only when the
    source does not give them directly.
    """
    by_base: dict[str, pd.Series] = {}
    given: dict[str, pd.Series] = {}  # combined abbreviations given directly (e.g. PT_RB_STL)
    for col in wide.columns:
        if col in SUMS:
            given[col] = wide[col].astype("float64")
            continue
        if not is_counter(col):
            continue
        b = ABBREV_TO_RAW.get(col, base_name(col))
        by_base[b] = by_base[b] + wide[col] if b in by_base else wide[col].astype("float64")
    out = {RAW[b]: s for b, s in by_base.items() if b in RAW}
    for abbrev, pattern in DERIVED.items():
        parts = [s for b, s in by_base.items() if pattern.match(b)]
        if abbrev not in out and parts:
            out[abbrev] = sum(parts[1:], parts[0])
    for abbrev, (a, b) in SUMS.items():
        if abbrev in given:
            out[abbrev] = given[abbrev]
        elif a in out and b in out:
            out[abbrev] = out[a] + out[b]
    order = [c for c in TABLE2 if c in out]
    return pd.DataFrame({c: out[c] for c in order}, index=wide.index)
