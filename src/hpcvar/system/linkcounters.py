"""Link counters of routers that are not Aries: the emulated cluster's (``hpcvar dev slurm up
--nodes N``) global and node links, sampled by :mod:`hpcvar.dev.linksampler`.

Names are ``<class>_<metric>``, per link end as LDMS ``name#dev`` columns (``GL_OVERLIMITS#r1``);
per router, a counter is the sum over its link ends (:func:`router_totals`). Classes and what they
stand for on an Aries router (docs/counters.md):

* ``GL``: global links, router to router: the router tiles (``RT_``);
* ``NL``: node links, router to node: the processor tiles (``PT_``).

Metrics (cumulative): ``TX_BYTES`` and ``TX_PKTS`` (as flits and packets), ``QUEUED_US`` and
``BACKLOG_BMS`` (time with a queue and queued bytes over time: as the stall counters),
``OVERLIMITS`` (packets held back by the rate: grows with the traffic as well as with congestion)
and ``DROPS`` (stays 0 with TCP, whose window backs off before the queue overflows).
"""

from __future__ import annotations

import pandas as pd

LINK_CLASSES = ("GL", "NL")
LINK_METRICS = ("TX_BYTES", "TX_PKTS", "DROPS", "OVERLIMITS", "QUEUED_US", "BACKLOG_BMS")
#: Every router-level link counter, global links first: the analyses' job counters of a testbed.
LINK_COUNTERS = tuple(f"{c}_{m}" for c in LINK_CLASSES for m in LINK_METRICS)
#: Aries counters whose part each link counter plays (docs/counters.md).
ARIES_ANALOGUE = {
    "GL_TX_BYTES": "RT_FLIT_TOT", "GL_TX_PKTS": "RT_PKT_TOT", "GL_QUEUED_US": "RT_RB_STL",
    "GL_BACKLOG_BMS": "RT_RB_STL", "NL_TX_BYTES": "PT_FLIT_TOT", "NL_TX_PKTS": "PT_PKT_TOT",
    "NL_QUEUED_US": "PT_RB_STL", "NL_BACKLOG_BMS": "PT_RB_STL",
}


_CLASS_WORDS = {"GL": "the global links", "NL": "the node links"}
_METRIC_WORDS = {"TX_BYTES": "bytes sent on", "TX_PKTS": "packets sent on", "DROPS": "packets dropped on",
                 "OVERLIMITS": "packets held back by the rate of", "QUEUED_US": "time with a queue on",
                 "BACKLOG_BMS": "queued bytes over time on"}


def meaning(counter: str) -> str | None:
    """``GL_OVERLIMITS`` -> "packets held back by the rate of the global links"; None for a name
    that is not a link counter."""
    cls, _, metric = base_name(counter).partition("_")
    if cls not in _CLASS_WORDS or metric not in _METRIC_WORDS:
        return None
    return f"{_METRIC_WORDS[metric]} {_CLASS_WORDS[cls]}"


def base_name(column: str) -> str:
    """``GL_OVERLIMITS#r1`` -> ``GL_OVERLIMITS``."""
    return column.split("#", 1)[0]


def is_counter(column: str) -> bool:
    return base_name(column) in LINK_COUNTERS


def router_totals(wide: pd.DataFrame) -> pd.DataFrame:
    """Link-counter columns (per link end or already per router) summed per router-level name;
    other columns are left out."""
    out = {}
    for col in wide.columns:
        if is_counter(col):
            name = base_name(col)
            out[name] = out[name] + wide[col].astype("float64") if name in out else wide[col].astype("float64")
    return pd.DataFrame(out, index=wide.index, columns=[c for c in LINK_COUNTERS if c in out])
