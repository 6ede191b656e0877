"""Aries counter names -> Table II (hpcvar.system.aries) and the per-step counter files (parsers.counters).

The names come from real counter lists: AriesNCL's ``tests/counters.txt`` (PAPI names, 40 router
tiles 0_0..4_7 and 8 processor tiles PT_5_0..PT_5_7) and the LDMS aries_rtr_mmr metric set for
row 0 (tiles r_0 and r_1 of rows 0..4).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcvar.parsers import counters
from hpcvar.parsers.errors import ParseError
from hpcvar.system import aries

LISTS = "ldms/aries_metric_lists"
REAL_LISTS = ("ariesncl_counters.txt", "aries_rtr_mmr_metric_set_rtr_0.txt")


def _names(samples: Path, name: str) -> list[str]:
    return [line.strip() for line in (samples / LISTS / name).read_text().splitlines()
            if line.strip() and not line.startswith("#")]


# --- base_name / is_counter ------------------------------------------------------------------

@pytest.mark.parametrize("name, base", [
    ("AR_RTR_3_5_INQ_PRF_INCOMING_FLIT_VC0", "AR_RTR_INQ_PRF_INCOMING_FLIT_VC0"),
    ("AR_RTR_0_0_INQ_PRF_ROWBUS_STALL_CNT", "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT"),
    ("AR_RTR_4_7_INQ_PRF_INCOMING_PKT_VC7_FILTER_FLIT7_CNT", "AR_RTR_INQ_PRF_INCOMING_PKT_VC7_FILTER_FLIT7_CNT"),
    ("AR_RTR_PT_5_0_COLBUF_PERF_STALL_RQ:VC_PTR", "AR_RTR_PT_COLBUF_PERF_STALL_RQ"),
    ("AR_RTR_PT_5_7_INQ_PRF_RSP_ROWBUS_STALL_CNT", "AR_RTR_PT_INQ_PRF_RSP_ROWBUS_STALL_CNT"),
    ("AR_RTR_2_6_COLBUF_PERF_STALL_RS:COL_BUF_PERF_STALL_RS", "AR_RTR_COLBUF_PERF_STALL_RS"),
    # Only the leading tile is stripped, not digits further in the name.
    ("AR_RTR_1_2_INQ_PRF_MATCH_FLIT_3_TO_0_FILTERING_CNT", "AR_RTR_INQ_PRF_MATCH_FLIT_3_TO_0_FILTERING_CNT"),
    # Already tile-less, and non-router counters, are unchanged.
    ("AR_RTR_INQ_PRF_ROWBUS_STALL_CNT", "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT"),
    ("AR_NL_PRF_PTILE_3_REQ_IN_NW_FLITS", "AR_NL_PRF_PTILE_3_REQ_IN_NW_FLITS"),
    ("AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS", "AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS"),
    (" AR_RTR_1_1_INQ_PRF_ROWBUS_STALL_CNT ", "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT"),
])
def test_base_name(name, base):
    assert aries.base_name(name) == base


@pytest.mark.parametrize("listing", REAL_LISTS)
def test_base_name_strips_every_real_tile(samples: Path, listing):
    tile = re.compile(r"^AR_RTR_(PT_)?\d+_\d+_")
    for name in _names(samples, listing):
        b = aries.base_name(name)
        if name.startswith("AR_RTR_"):
            stem = name.split(":")[0]
            prefix = "AR_RTR_PT_" if stem.startswith("AR_RTR_PT_") else "AR_RTR_"
            assert not tile.match(b) and ":" not in b, name
            assert b.startswith(prefix) and stem.endswith(b[len(prefix):]), name
        else:
            assert b == name


def test_real_ariesncl_list_has_the_expected_tiles(samples: Path):
    names = _names(samples, "ariesncl_counters.txt")
    assert len(names) == len(set(names)) == 1411
    assert sum(n.endswith("_INQ_PRF_ROWBUS_STALL_CNT") and not n.startswith("AR_RTR_PT") for n in names) == 40
    assert sum(n.startswith("AR_RTR_PT_5_") for n in names) == 8 * 18


@pytest.mark.parametrize("name, expected", [
    ("AR_RTR_3_5_INQ_PRF_INCOMING_FLIT_VC0", True),
    ("AR_RTR_PT_5_0_COLBUF_PERF_STALL_RQ", True),
    ("AR_RTR_PT_5_3_INQ_PRF_INCOMING_PKT_VC2_FILTER_FLIT2_CNT", True),
    ("AR_RTR_0_0_INQ_PRF_ROWBUS_2X_USAGE_CNT", True),
    ("AR_RTR_INQ_PRF_INCOMING_FLIT_TOTAL", True),
    ("RT_RB_STL", True),
    ("PT_FLIT_TOT", True),
    ("AR_RTR_0_0_INQ_PRF_PKT_TO_DEAD_LINK_CNT", False),
    ("AR_RTR_0_0_COLBUF_PERF_STALL_RQ:VC_PTR", False),  # network-tile colbuf is not in Table II
    ("AR_NL_PRF_PTILE_0_REQ_IN_NW_FLITS", False),
    ("AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS", False),
    ("step", False),
    ("ProducerName", False),
])
def test_is_counter(name, expected):
    assert aries.is_counter(name) is expected


# --- to_table2 -------------------------------------------------------------------------------

def test_to_table2_small_frame_by_hand():
    wide = pd.DataFrame({
        "AR_RTR_3_5_INQ_PRF_INCOMING_FLIT_VC0": [1, 10],
        "AR_RTR_0_0_INQ_PRF_INCOMING_FLIT_VC7": [2, 20],
        "AR_RTR_0_0_INQ_PRF_ROWBUS_STALL_CNT": [100, 0],
        "AR_RTR_4_7_INQ_PRF_ROWBUS_STALL_CNT": [5, 7],
        "AR_RTR_PT_5_0_INQ_PRF_REQ_ROWBUS_STALL_CNT": [10, 1],
        "AR_RTR_PT_5_1_INQ_PRF_RSP_ROWBUS_STALL_CNT": [20, 2],
        "AR_RTR_PT_5_1_INQ_PRF_RSP_ROWBUS_STALL_CNT_x": [999, 999],  # not a counter: left out
        "AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS": [999, 999],
    }, index=[7, 9])
    out = aries.to_table2(wide)
    assert list(out.columns) == ["RT_FLIT_TOT", "RT_RB_STL", "PT_RB_STL_RQ", "PT_RB_STL_RS", "PT_RB_STL"]
    assert list(out.index) == [7, 9]
    assert out.to_dict("list") == {"RT_FLIT_TOT": [3.0, 30.0], "RT_RB_STL": [105.0, 7.0],
                                   "PT_RB_STL_RQ": [10.0, 1.0], "PT_RB_STL_RS": [20.0, 2.0],
                                   "PT_RB_STL": [30.0, 3.0]}
    assert all(out.dtypes == "float64")


def _hand_table2(wide: pd.DataFrame) -> dict[str, pd.Series]:
    """Expected Table II values written out name by name, independently of hpcvar.system.aries.

    Only the abbreviations whose source columns are present are expected.
    """
    rt, pt = r"AR_RTR_\d_\d_", r"AR_RTR_PT_\d_\d_"
    sources = {
        "RT_FLIT_TOT": rt + r"INQ_PRF_INCOMING_FLIT_VC[0-7]",
        "RT_PKT_TOT": rt + r"INQ_PRF_INCOMING_PKT_VC([0-7])_FILTER_FLIT\1_CNT",
        "RT_RB_2X_USG": rt + "INQ_PRF_ROWBUS_2X_USAGE_CNT",
        "RT_RB_STL": rt + "INQ_PRF_ROWBUS_STALL_CNT",
        "PT_CB_STL_RQ": pt + "COLBUF_PERF_STALL_RQ",
        "PT_CB_STL_RS": pt + "COLBUF_PERF_STALL_RS",
        "PT_FLIT_VC0": pt + "INQ_PRF_INCOMING_FLIT_VC0",
        "PT_FLIT_VC4": pt + "INQ_PRF_INCOMING_FLIT_VC4",
        "PT_FLIT_TOT": pt + "INQ_PRF_INCOMING_FLIT_VC[0-7]",
        "PT_PKT_TOT": pt + r"INQ_PRF_INCOMING_PKT_VC([0-7])_FILTER_FLIT\1_CNT",
        "PT_RB_STL_RQ": pt + "INQ_PRF_REQ_ROWBUS_STALL_CNT",
        "PT_RB_STL_RS": pt + "INQ_PRF_RSP_ROWBUS_STALL_CNT",
        "PT_RB_2X_USG": pt + "INQ_PRF_ROWBUS_2X_USAGE_CNT",
    }
    exp = {}
    for abbrev, pattern in sources.items():
        cols = [c for c in wide.columns if re.fullmatch(pattern, c)]
        if cols:
            exp[abbrev] = wide[cols].sum(axis=1).astype("float64")
    if "PT_RB_STL_RQ" in exp and "PT_RB_STL_RS" in exp:
        exp["PT_RB_STL"] = exp["PT_RB_STL_RQ"] + exp["PT_RB_STL_RS"]
    return exp


@pytest.mark.parametrize("listing", REAL_LISTS)
def test_to_table2_on_every_real_name(samples: Path, listing):
    names = _names(samples, listing)
    rng = np.random.default_rng(7)
    wide = pd.DataFrame(rng.integers(0, 10**9, size=(3, len(names))), columns=names)
    out = aries.to_table2(wide)
    exp = _hand_table2(wide)
    assert {"RT_FLIT_TOT", "RT_PKT_TOT", "RT_RB_STL"} <= set(exp)
    assert list(out.columns) == [c for c in aries.TABLE2 if c in exp]
    for abbrev, series in exp.items():
        np.testing.assert_array_equal(out[abbrev].to_numpy(), series.to_numpy(), err_msg=abbrev)


def test_to_table2_full_ariesncl_list_gives_all_of_table2(samples: Path):
    names = _names(samples, "ariesncl_counters.txt")
    out = aries.to_table2(pd.DataFrame(np.ones((1, len(names))), columns=names))
    assert list(out.columns) == list(aries.TABLE2)
    # With every counter = 1 the totals count the contributing columns: 40 tiles x 8 VCs etc.
    assert out.iloc[0].to_dict() == {
        "RT_FLIT_TOT": 320.0, "RT_PKT_TOT": 320.0, "RT_RB_2X_USG": 40.0, "RT_RB_STL": 40.0,
        "PT_CB_STL_RQ": 8.0, "PT_CB_STL_RS": 8.0, "PT_FLIT_VC0": 8.0, "PT_FLIT_VC4": 8.0,
        "PT_FLIT_TOT": 16.0, "PT_PKT_TOT": 64.0, "PT_RB_STL_RQ": 8.0, "PT_RB_STL_RS": 8.0,
        "PT_RB_2X_USG": 8.0, "PT_RB_STL": 16.0}


def test_to_table2_given_totals_win_over_derived():
    vcs = {f"AR_RTR_{t}_INQ_PRF_INCOMING_FLIT_VC{v}": [1.0] for t in ("0_0", "1_3") for v in range(8)}
    ptvcs = {"AR_RTR_PT_5_0_INQ_PRF_INCOMING_FLIT_VC0": [2.0], "AR_RTR_PT_5_0_INQ_PRF_INCOMING_FLIT_VC4": [3.0]}
    derived = aries.to_table2(pd.DataFrame(vcs | ptvcs))
    assert derived[["RT_FLIT_TOT", "PT_FLIT_TOT"]].iloc[0].tolist() == [16.0, 5.0]
    given_raw = aries.to_table2(pd.DataFrame(vcs | ptvcs | {"AR_RTR_INQ_PRF_INCOMING_FLIT_TOTAL": [999.0]}))
    assert given_raw["RT_FLIT_TOT"].iloc[0] == 999.0
    assert given_raw["PT_FLIT_TOT"].iloc[0] == 5.0
    given_abbrev = aries.to_table2(pd.DataFrame(vcs | ptvcs | {"RT_FLIT_TOT": [42.0], "PT_FLIT_TOT": [7.0]}))
    assert given_abbrev[["RT_FLIT_TOT", "PT_FLIT_TOT"]].iloc[0].tolist() == [42.0, 7.0]


def test_to_table2_accepts_table2_abbreviations():
    out = aries.to_table2(pd.DataFrame({"RT_RB_STL": [4], "PT_RB_STL_RQ": [1], "PT_RB_STL_RS": [2]}))
    assert out.iloc[0].to_dict() == {"RT_RB_STL": 4.0, "PT_RB_STL_RQ": 1.0, "PT_RB_STL_RS": 2.0, "PT_RB_STL": 3.0}


def test_to_table2_of_no_counters_is_empty():
    out = aries.to_table2(pd.DataFrame({"AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS": [1.0]}))
    assert out.columns.empty and len(out) == 1


def test_to_table2_leaves_out_non_numeric_key_columns():
    out = aries.to_table2(pd.DataFrame({"ProducerName": ["nid00001"],
                                        "AR_RTR_0_0_INQ_PRF_ROWBUS_STALL_CNT": [3]}))
    assert out.iloc[0].to_dict() == {"RT_RB_STL": 3.0}


def test_to_table2_keeps_given_pt_rb_stl():
    assert aries.is_counter("PT_RB_STL")
    out = aries.to_table2(pd.DataFrame({"PT_RB_STL": [5.0]}))
    assert out["PT_RB_STL"].tolist() == [5.0]


# --- counters.csv: writer and reader ---------------------------------------------------------

def _write_text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "counters.csv"
    path.write_text(text)
    return path


def test_write_read_round_trip(tmp_path: Path):
    steps = np.arange(1, 5)
    data = {
        "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT": np.array([8.0e6, 1.234e12, 0.0, 7.0]),
        "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC0": np.array([6e6, 6e6, 1, 2]),
        "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC4": np.array([5e6, 4e6, 3, 4]),
        "AR_RTR_PT_INQ_PRF_REQ_ROWBUS_STALL_CNT": np.array([10, 20, 30, 40]),
        "AR_RTR_PT_INQ_PRF_RSP_ROWBUS_STALL_CNT": np.array([1, 2, 3, 4]),
    }
    path = tmp_path / "counters.csv"
    counters.write(path, steps, data, comment="AriesNCL via PAPI, summed over 3 routers")
    lines = path.read_text().splitlines()
    assert lines[:2] == [counters.MAGIC, "# AriesNCL via PAPI, summed over 3 routers"]
    assert counters.sniff(path.read_text()[:8192], path.name)

    wide = counters.read_wide(path)
    assert list(wide.columns) == ["step", *data]
    assert wide["step"].tolist() == [1, 2, 3, 4]
    for name, values in data.items():
        assert wide[name].tolist() == values.tolist(), name

    long = counters.read(path)
    assert list(long.columns) == ["step", "counter", "value"]
    got = long.pivot(index="step", columns="counter", values="value")
    assert sorted(got.columns) == sorted(["RT_RB_STL", "PT_FLIT_VC0", "PT_FLIT_VC4", "PT_FLIT_TOT",
                                          "PT_RB_STL_RQ", "PT_RB_STL_RS", "PT_RB_STL"])
    assert got["RT_RB_STL"].tolist() == [8.0e6, 1.234e12, 0.0, 7.0]
    assert got["PT_FLIT_TOT"].tolist() == [11e6, 10e6, 4.0, 6.0]
    assert got["PT_RB_STL"].tolist() == [11.0, 22.0, 33.0, 44.0]
    assert len(long) == 4 * 7


def test_write_without_comment(tmp_path: Path):
    path = tmp_path / "counters.csv"
    counters.write(path, np.array([1]), {"RT_RB_STL": np.array([3])})
    assert path.read_text() == f"{counters.MAGIC}\nstep,RT_RB_STL\n1,3\n"


def test_read_per_tile_columns(tmp_path: Path):
    header = ["step", "AR_RTR_0_0_INQ_PRF_ROWBUS_STALL_CNT", "AR_RTR_3_5_INQ_PRF_ROWBUS_STALL_CNT",
              "AR_RTR_3_5_INQ_PRF_INCOMING_FLIT_VC0", "AR_RTR_4_7_INQ_PRF_INCOMING_FLIT_VC6",
              "AR_RTR_PT_5_0_COLBUF_PERF_STALL_RQ", "AR_RTR_PT_5_6_COLBUF_PERF_STALL_RQ",
              "AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS"]
    path = _write_text(tmp_path, f"{counters.MAGIC}\n# per-tile\n{','.join(header)}\n"
                                 "1,1,2,30,40,5,6,1000\n2,10,20,300,400,50,60,1000\n\n")
    got = counters.read(path).pivot(index="step", columns="counter", values="value")
    # Router tiles summed into Table II counters; the NIC counter kept under its own name.
    assert got.to_dict("list") == {"PT_CB_STL_RQ": [11.0, 110.0], "RT_FLIT_TOT": [70.0, 700.0],
                                   "RT_RB_STL": [3.0, 30.0], "AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS": [1000.0, 1000.0]}


def test_sniff_has_no_false_positives_on_real_samples(samples: Path):
    files = [p for p in samples.rglob("*") if p.is_file()]
    assert len(files) > 10
    for p in files:
        head = p.read_bytes()[:8192].decode("utf-8", errors="replace")
        assert not counters.sniff(head, p.name), p


@pytest.mark.parametrize("text, line, message", [
    ("step,RT_RB_STL\n1,2\n", 1, "expected first line"),
    ("", 1, "expected first line"),
    ("# hpcvar step counters v2\nstep,RT_RB_STL\n1,2\n", 1, "expected first line"),
    (f"{counters.MAGIC}\n# comment\n", 2, "no header row"),
    (f"{counters.MAGIC}\n# comment\ntime,RT_RB_STL\n1,2\n", 3, "header must start with 'step'"),
    (f"{counters.MAGIC}\nstep\n1\n", 2, "header must start with 'step'"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n", 2, "no data rows"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL,RT_PKT_TOT\n1,2,3\n2,4\n", 4, "expected 3 fields, found 2"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL,RT_PKT_TOT\n1,2,3\n2,4,5,6\n", 4, "expected 3 fields, found 4"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1,2\n2,abc\n", 4, "non-numeric"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1,2\n2,\n", 4, "non-numeric"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1.5,2\n", 3, "non-numeric"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1,2\n2,3\n4,5\n", 5, "step 4 follows step 2"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1,2\n1,3\n", 4, "step 1 follows step 1"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1,2\n2,-5\n", 4, "non-negative"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1,nan\n", 3, "finite"),
    (f"{counters.MAGIC}\nstep,RT_RB_STL\n1,inf\n", 3, "finite"),
])
def test_read_errors(tmp_path: Path, text, line, message):
    path = _write_text(tmp_path, text)
    with pytest.raises(ParseError, match=message) as err:
        counters.read(path)
    assert err.value.line == line
    assert err.value.path == str(path)


def test_non_aries_counters_keep_their_names(tmp_path: Path):
    """Counters from other networks (a node sampler's InfiniBand or NIC counters) are data too:
    kept under their own names beside the Table II abbreviations."""
    path = _write_text(tmp_path, f"{counters.MAGIC}\nstep,infiniband_port_xmit_wait,AR_RTR_INQ_PRF_ROWBUS_STALL_CNT,"
                                 "AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS\n1,2,3,4\n2,5,6,7\n")
    long = counters.read(path)
    wide = long.pivot(index="step", columns="counter", values="value")
    assert wide.loc[2, "infiniband_port_xmit_wait"] == 5
    assert wide.loc[2, "AR_NIC_NETMON_ORB_EVENT_CNTR_REQ_FLITS"] == 7
    assert wide.loc[1, "RT_RB_STL"] == 3  # the Aries router counter under its Table II name
    assert "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT" not in wide.columns


def test_describe(tmp_path: Path):
    path = tmp_path / "counters.csv"
    counters.write(path, np.arange(1, 4), {
        "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT": np.array([5, 6, 7]),
        "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC0": np.array([1, 2, 3]),
        "AR_RTR_PT_INQ_PRF_INCOMING_FLIT_VC4": np.array([10, 20, 30]),
    })
    assert counters.describe(path) == {
        "kind": "step_counters", "format_version": "1", "records": 3, "time_span": None,
        "figures": {"steps": 3, "counters": 4,  # RT_RB_STL, PT_FLIT_VC0, PT_FLIT_VC4, PT_FLIT_TOT
                    "total RT_RB_STL": 18.0, "total PT_FLIT_TOT": 66.0},
    }
