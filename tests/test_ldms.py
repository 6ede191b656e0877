"""LDMS store_csv: real samples, layout variants, bad input, deltas (wraps, resets, reordering), writer."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcvar.parsers import ldms
from hpcvar.parsers.errors import ParseError

LDMS_DIR = SAMPLES / "ldms"
SAMPLE_FILES = sorted(LDMS_DIR.glob("*.csv"))
MINIMAL = LDMS_DIR / "store_csv_test_minimal_header.csv"
NETDEV = LDMS_DIR / "store_csv_procnetdev_quickstart_example.csv"

# Checked by reading the files: (rows, producers, metrics).
EXPECTED = {
    MINIMAL.name: (14, {"host1", "host2", "host3"}, 0),
    NETDEV.name: (9, {"s0", "s1"}, 16),
}


def _deltas(paths, **kwargs) -> pd.DataFrame:
    frames = list(ldms.iter_deltas(paths, **kwargs))
    return pd.concat(frames).sort_values(["producer", "time"], ignore_index=True)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ real samples


def test_sample_folder_is_covered():
    assert sorted(p.name for p in SAMPLE_FILES) == sorted(EXPECTED)


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_every_sample_parses(path: Path):
    rows, producers, metrics = EXPECTED[path.name]
    frame = ldms.read(path)
    assert len(frame) == rows
    assert set(frame["producer"]) == producers
    info = ldms.describe(path)
    assert info["kind"] == "ldms_store_csv"
    assert info["records"] == rows
    assert info["figures"]["producers"] == len(producers)
    assert info["figures"]["metrics"] == metrics
    assert ldms.sniff(path.read_text()[:8192], path.name)


def test_minimal_sample_values():
    frame = ldms.read(MINIMAL)
    assert list(frame.columns) == ["time", "producer", "component_id", "job_id"]
    # Line 13 repeats host1's 2.1 sample after its 5.1 sample (the file's out-of-order row).
    assert frame.loc[11, ["time", "producer", "component_id"]].tolist() == [2.1, "host1", 1]
    assert (frame["component_id"] == frame["producer"].str[-1].astype(int)).all()
    assert (frame["job_id"] == 0).all()  # no job_id column: reads as 0
    info = ldms.describe(MINIMAL)
    assert info["time_span"] == ["1970-01-01T00:00:01.100000+00:00", "1970-01-01T00:00:05.100000+00:00"]
    assert info["figures"]["interval_median_s"] == 1.0


def test_procnetdev_sample_values():
    frame = ldms.read(NETDEV)
    row = frame.loc[2]  # line 4: first s1 sample
    assert row["producer"] == "s1"
    assert row["time"] == 1558387832.001929
    assert row["rx_bytes#lo"] == 3323644475
    assert row["rx_multicast#lo"] == 12898
    assert row["tx_packets#lo"] == 1336419
    assert frame["rx_bytes#lo"].dtype == np.uint64
    assert (frame["app_id"] == 0).all()
    assert frame.columns[:5].tolist() == ["time", "producer", "component_id", "job_id", "app_id"]
    assert [ldms.split_device(c) for c in frame.columns[5:7]] == [("rx_bytes", "lo"), ("rx_packets", "lo")]
    info = ldms.describe(NETDEV)
    assert info["format_version"] == "store_csv"
    assert info["figures"]["devices"] == "lo"
    assert info["figures"]["interval_median_s"] == 1.000096
    assert info["time_span"] == ["2019-05-20T21:30:31.001798+00:00", "2019-05-20T21:30:35.001274+00:00"]


def test_procnetdev_deltas():
    stats = ldms.DeltaStats()
    deltas = _deltas(NETDEV, stats=stats)
    s0 = deltas[deltas["producer"] == "s0"]
    s1 = deltas[deltas["producer"] == "s1"]
    assert s0["rx_bytes#lo"].tolist() == [13626, 4688, 2248, 2248]
    assert s1["rx_bytes#lo"].tolist() == [0, 2759, 64]
    assert s1["tx_bytes#lo"].tolist() == [0, 1646, 0]
    assert s1["t_prev"].iloc[0] == 1558387832.001929 and s1["time"].iloc[0] == 1558387833.002025
    assert (stats.samples, stats.intervals, stats.duplicates, stats.resets) == (9, 7, 0, [])


def test_minimal_sample_duplicate_and_reorder_window():
    stats = ldms.DeltaStats()
    deltas = _deltas(MINIMAL, stats=stats)
    assert deltas.groupby("producer").size().to_dict() == {"host1": 4, "host2": 3, "host3": 3}
    assert stats.duplicates == 1  # the late repeat of host1 at 2.1
    with pytest.raises(ParseError, match="non-monotonic time") as err:
        list(ldms.iter_deltas(MINIMAL, reorder_window=2.0))
    assert err.value.line == 13 and err.value.path == str(MINIMAL)


def test_sniff_rejects_other_formats():
    others = [p for p in SAMPLES.rglob("*") if p.is_file() and p.suffix != ".csv" and p.name != "SOURCES.md"]
    assert len(others) > 20
    for path in others:
        assert not ldms.sniff(path.read_bytes()[:8192].decode("utf-8", "replace"), path.name), path


def test_sniff_headerless_data_and_companions():
    assert ldms.sniff("1558387831.001798,1798,s0,0,0\n", "netdev")
    assert not ldms.sniff("1558387831.001798,1799,s0,0,0\n", "netdev")
    assert not ldms.sniff(NETDEV.read_text(), "netdev.HEADER.1558387800")


# ------------------------------------------------------------------------ layout variants


def _split_sample() -> tuple[str, list[str]]:
    header, *rows = NETDEV.read_text().splitlines(keepends=True)
    return header, rows


def test_separate_header_file(tmp_path: Path):
    header, rows = _split_sample()
    _write(tmp_path / "netdev.HEADER", header)
    data = _write(tmp_path / "netdev", "".join(rows))
    pd.testing.assert_frame_equal(ldms.read(data), ldms.read(NETDEV))
    assert ldms.describe(data)["format_version"] == "store_csv altheader"
    # rollover naming: <name>.HEADER.<epoch> next to <name>.<epoch>
    _write(tmp_path / "netdev.HEADER.1558387800", header)
    rolled = _write(tmp_path / "netdev.1558387800", "".join(rows))
    pd.testing.assert_frame_equal(ldms.read(rolled), ldms.read(NETDEV))


def test_headerless_file_without_header_file(tmp_path: Path):
    _, rows = _split_sample()
    data = _write(tmp_path / "netdev", "".join(rows))
    with pytest.raises(ParseError, match="no header.*netdev.HEADER") as err:
        ldms.read(data)
    assert err.value.line == 1


def test_rollover_files_in_epoch_order(tmp_path: Path):
    header, rows = _split_sample()
    late = _write(tmp_path / "netdev.1558387834", header + "".join(rows[5:]))
    early = _write(tmp_path / "netdev.1558387830", header + "".join(rows[:5]))
    _write(tmp_path / "netdev.KIND.1558387830", "#ignored companion\n")
    paths = sorted(tmp_path.iterdir(), reverse=True)  # late first, plus the .KIND companion
    chunks = pd.concat(ldms.iter_chunks(paths, chunk_rows=2), ignore_index=True)
    pd.testing.assert_frame_equal(chunks, ldms.read(NETDEV))
    pd.testing.assert_frame_equal(_deltas([late, early]), _deltas(NETDEV))


def test_dt_columns_of_store_function_csv(tmp_path: Path):
    path = _write(tmp_path / "fn.csv",
                  "#Time,Time_usec,DT,DT_usec,ProducerName,component_id,job_id,Active,Active.Flag,Flag\n"
                  "1466700001.001882,1882,1.000012,12,nid00012,12,4242,1000,0,0\n"
                  "1466700002.001894,1894,1.000012,12,nid00012,12,4242,1500,0,0\n")
    frame = ldms.read(path)
    assert frame.columns.tolist() == ["time", "producer", "component_id", "job_id", "Active", "Active.Flag",
                                      "Flag"]
    assert frame["job_id"].tolist() == [4242, 4242]
    assert ldms.describe(path)["format_version"] == "store_csv with DT"
    assert _deltas(path, metrics=["Active"])["Active"].tolist() == [500]


def test_time_msec_format(tmp_path: Path):
    path = _write(tmp_path / "ms.csv", "#Time_msec,Time_usec,ProducerName,component_id,m\n"
                                       "1466700001001,882,n1,1,5\n")
    frame = ldms.read(path)
    assert frame["time"].iloc[0] == pytest.approx(1466700001.001882, abs=1e-6)
    assert ldms.describe(path)["format_version"] == "store_csv time_format=1"


def test_iter_chunks_selects_columns_and_sizes():
    frames = list(ldms.iter_chunks(NETDEV, columns=["rx_bytes#lo"], chunk_rows=4))
    assert [len(f) for f in frames] == [4, 4, 1]
    assert frames[0].columns.tolist() == ["time", "producer", "component_id", "job_id", "app_id",
                                          "rx_bytes#lo"]
    for wrong in (["rx_bytes#eth0"], ["job_id"]):
        with pytest.raises(ParseError, match="missing column") as err:
            list(ldms.iter_chunks(NETDEV, columns=wrong))
        assert err.value.line == 1


def test_header_only_file(tmp_path: Path):
    path = _write(tmp_path / "empty.csv", "#Time,Time_usec,ProducerName,component_id,job_id,m\n")
    frame = ldms.read(path)
    assert frame.columns.tolist() == ["time", "producer", "component_id", "job_id", "m"] and frame.empty
    info = ldms.describe(path)
    assert (info["records"], info["time_span"], info["figures"]["metrics"]) == (0, None, 1)
    assert list(ldms.iter_deltas(path)) == []


# ----------------------------------------------------------------------------- bad input

GOOD = "#Time,Time_usec,ProducerName,component_id,m\n1.000001,1,h1,1,10\n2.000001,1,h1,1,20\n"


@pytest.mark.parametrize("text, line, message", [
    ("", 1, "empty file"),
    ("hello,world\n1,2\n", 1, "no header"),
    ("# hpcvar step counters v1\nstep,a\n", 1, "missing required column 'Time'"),
    ("#Time,Time_usec,component_id,m\n1.0,0,1,2\n", 1, "ProducerName"),
    ("#Time,Time_usec,ProducerName,m,m\n", 1, "duplicate column"),
    (GOOD + "3.000001,1,h1,1,30,99\n", 4, "expected 5 comma-separated fields as in the header, found 6"),
    (GOOD + "3.000001,1,h1,1,abc\n", 4, "column 'm': expected a non-negative integer"),
    (GOOD + "3.000001,1,h1,1,-4\n", 4, "column 'm': expected a non-negative integer"),
    (GOOD + "3.000001,1,h1,x,30\n", 4, "column 'component_id': expected a signed 64-bit integer"),
    (GOOD + "3.0000x1,1,h1,1,30\n", 4, "column 'Time': expected a number"),
    (GOOD + "3.000001,1,h1", 4, "truncated last line"),
    (GOOD + "\n3.000001,1,h1,1,30\n", 4, "empty line"),
    (GOOD + GOOD, 4, "a second header line"),
    (GOOD + "nan,1,h1,1,30\n", 4, "Time must be a finite epoch time"),
])
def test_bad_input(tmp_path: Path, text: str, line: int, message: str):
    path = _write(tmp_path / "bad.csv", text)
    with pytest.raises(ParseError) as err:
        ldms.read(path)
    assert err.value.line == line
    assert message in err.value.message
    assert err.value.path == str(path)


def test_conflicting_duplicate_sample(tmp_path: Path):
    path = _write(tmp_path / "dup.csv", GOOD + "2.000001,1,h1,1,21\n")
    with pytest.raises(ParseError, match="two different samples of producer 'h1'") as err:
        list(ldms.iter_deltas(path))
    assert err.value.line == 4


def test_error_line_is_found_past_the_first_block(tmp_path: Path):
    path = tmp_path / "big.csv"
    n = 60_000
    with ldms.StoreCsvWriter(path, ["a", "b"]) as writer:
        values = np.arange(2 * n, dtype=np.uint64).reshape(n, 2)
        writer.write_rows(1e9 + np.arange(n), "nid00001", 1, 0, values)
    lines = path.read_bytes().split(b"\n")
    assert path.stat().st_size > 2 * 2**20  # several pyarrow blocks
    lines[50_000] = lines[50_000].rsplit(b",", 1)[0] + b",1e3"
    path.write_bytes(b"\n".join(lines))
    got = []
    with pytest.raises(ParseError, match="column 'b'") as err:
        for frame in ldms.iter_chunks(path, chunk_rows=7_000):
            got.append(frame)
    assert err.value.line == 50_001
    # The chunks read ahead before the bad line all arrived first, whole and in order.
    rows = pd.concat(got, ignore_index=True)
    assert 0 < len(rows) <= 49_999 and len(rows) % 7_000 == 0
    np.testing.assert_array_equal(rows[["a", "b"]].to_numpy(), values[: len(rows)])


def test_a_stream_left_early_stops_its_read_ahead(tmp_path: Path):
    """The thread that reads the next chunk ahead ends when the caller stops taking chunks."""
    import threading

    path = tmp_path / "store.csv"
    with ldms.StoreCsvWriter(path, ["a"]) as writer:
        writer.write_rows(1e9 + np.arange(5_000), "nid00001", 1, 0, np.arange(5_000, dtype=np.uint64)[:, None])
    stream = ldms.iter_deltas(path, chunk_rows=100)
    assert len(next(stream)) > 0
    assert any(t.name == "hpcvar-read-ahead" for t in threading.enumerate())
    stream.close()
    assert not any(t.name == "hpcvar-read-ahead" for t in threading.enumerate())


# ---------------------------------------------------------------------- wraps and resets


def _series_file(path: Path, values: list[int], dtype=np.uint64) -> Path:
    with ldms.StoreCsvWriter(path, ["ctr"]) as writer:
        n = len(values)
        writer.write_rows(1e9 + np.arange(n), "nid00007", 7, 0, np.array(values, dtype=dtype).reshape(n, 1))
    return path


def test_wrap_and_reset_of_32_bit_counter(tmp_path: Path):
    path = _series_file(tmp_path / "c32.csv", [100, 2**32 - 10, 5, 1000, 10])
    stats = ldms.DeltaStats()
    deltas = _deltas(path, counter_bits=32, stats=stats)
    assert deltas["ctr"].tolist() == [2**32 - 110, 15, 995, 10]
    assert stats.wraps == 1
    assert stats.resets == [ldms.Reset("nid00007", 1e9 + 4, 1e9 + 3, ("ctr",))]


def test_wrap_of_64_bit_counter(tmp_path: Path):
    path = _series_file(tmp_path / "c64.csv", [2**64 - 6, 4, 2])
    stats = ldms.DeltaStats()
    deltas = _deltas(path, stats=stats)
    assert deltas["ctr"].tolist() == [10, 2]
    assert deltas["ctr"].dtype == np.uint64
    assert stats.wraps == 1 and [r.time for r in stats.resets] == [1e9 + 2]


def test_32_bit_wrap_is_a_reset_for_64_bit_counters(tmp_path: Path):
    path = _series_file(tmp_path / "c.csv", [2**32 - 10, 5])
    stats = ldms.DeltaStats()
    assert _deltas(path, stats=stats)["ctr"].tolist() == [5]
    assert stats.wraps == 0 and len(stats.resets) == 1


# ------------------------------------------------------------------------------- writer


def test_writer_layout_and_round_trip(tmp_path: Path):
    metrics = ["AR_RTR_INQ_PRF_INCOMING_FLIT_VC0", "AR_RTR_INQ_PRF_ROWBUS_STALL_CNT"]
    time = np.array([1466700001.001882, 1466700001.002001, 1466700002.0])
    values = np.array([[0, 2**63 + 5], [17, 2**64 - 1], [10**12, 3]], dtype=np.uint64)
    producers = np.array(["nid00012", "nid00013", "nid00012"])
    for header_file in (False, True):
        path = tmp_path / f"router{int(header_file)}.csv"
        with ldms.StoreCsvWriter(path, metrics, header_file=header_file) as writer:
            writer.write_rows(time, producers, [12, 13, 12], 4242, values)
        header = (path.with_name(path.name + ".HEADER") if header_file else path).read_text().splitlines()[0]
        assert header == "#Time,Time_usec,ProducerName,component_id,job_id," + ",".join(metrics)
        assert "1466700001.001882,1882,nid00012,12,4242,0,9223372036854775813\n" in path.read_text()
        frame = ldms.read(path)
        np.testing.assert_array_equal(np.rint(frame["time"] * 1e6), np.rint(time * 1e6))
        assert frame["producer"].tolist() == producers.tolist()
        assert frame["component_id"].tolist() == [12, 13, 12] and (frame["job_id"] == 4242).all()
        np.testing.assert_array_equal(frame[metrics].to_numpy(), values)


def test_writer_float_values_read_back_exactly(tmp_path: Path):
    values = np.array([[3.0, 1e20], [0.1, -2.5], [1e-7, 12345.678]])
    path = tmp_path / "gauges.csv"
    with ldms.StoreCsvWriter(path, ["load", "temp"]) as writer:
        writer.write_rows(np.array([1.5, 2.5, 3.5]), ["a", "b", "c"], 0, 0, values)
    frame = ldms.read(path)
    assert frame["load"].dtype == np.float64
    np.testing.assert_array_equal(frame[["load", "temp"]].to_numpy(), values)


def test_writer_rejects_bad_input(tmp_path: Path):
    with pytest.raises(ValueError, match="metric names"):
        ldms.StoreCsvWriter(tmp_path / "x.csv", ["job_id"])
    with ldms.StoreCsvWriter(tmp_path / "y.csv", ["a"]) as writer, pytest.raises(ValueError, match="shape"):
        writer.write_rows([1.0], ["h"], 0, 0, np.zeros((1, 2)))


# ------------------------------------------------------------- property: streamed deltas

WINDOW_US = 3_000_000
BASE_US = 1_466_700_000_000_000


@st.composite
def stores(draw):
    """Cumulative counters of random producers, arrival order shuffled within the window."""
    bits = draw(st.sampled_from([32, 64]))
    top = 2**bits
    samples = {}
    for p in range(draw(st.integers(1, 4))):
        value = draw(st.integers(0, top - 1))
        series = []
        offset = draw(st.integers(0, 999_999))
        for k in range(draw(st.integers(1, 12))):
            move = draw(st.sampled_from(["inc", "inc", "near_top", "reset"]))
            if move == "inc":
                value = (value + draw(st.integers(0, 5000))) % top  # crossing the top is a wrap
            elif move == "near_top":
                value = top - draw(st.integers(1, 3000))
            else:
                value = draw(st.integers(0, value))
            series.append((BASE_US + k * 1_000_000 + offset, value))
        samples[f"nid{p:05d}"] = series
    rows = [(t + draw(st.integers(0, WINDOW_US - 1)), p, t, v)
            for p, series in samples.items() for t, v in series]
    duplicates = draw(st.lists(st.sampled_from(rows), max_size=3))
    rows += [(t + draw(st.integers(0, WINDOW_US - 1)), p, t, v) for _, p, t, v in duplicates]
    rows.sort(key=lambda row: row[0])
    cuts = sorted(draw(st.sets(st.integers(1, len(rows) - 1), max_size=3))) if len(rows) > 1 else []
    return bits, samples, [r[1:] for r in rows], cuts, len(duplicates)


def _expected(samples: dict, bits: int) -> tuple[list[tuple], set[tuple]]:
    """Reference: per producer, differences of consecutive samples with the wrap/reset rule."""
    top, rows, resets = 2**bits, [], set()
    for producer, series in samples.items():
        for (t0, v0), (t1, v1) in zip(series, series[1:]):
            if v1 >= v0:
                delta = v1 - v0
            elif top - top // 16 <= v0 < top:
                delta = v1 + top - v0
            else:
                delta = v1
                resets.add((producer, t1))
            rows.append((producer, t1, t0, delta, 1))
    return sorted(rows), resets


def _write_store(directory: Path, rows: list[tuple], cuts: list[int]) -> list[Path]:
    """Rollover files router.<epoch>, every other one with its header in a .HEADER file.

    Metric ``step`` counts samples (1 per second), so its delta is always 1.
    """
    paths = []
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(rows)])):
        part = rows[a:b]
        path = directory / f"router.{1000 + i}"
        with ldms.StoreCsvWriter(path, ["ctr", "step"], header_file=i % 2 == 1) as writer:
            values = np.array([[v, (t - BASE_US) // 1_000_000] for _, t, v in part], dtype=np.uint64)
            writer.write_rows(np.array([t for _, t, _ in part]) / 1e6, [p for p, _, _ in part],
                              [int(p[3:]) for p, _, _ in part], 0, values)
        paths.append(path)
    return paths


def _observed(paths: list[Path], bits: int, chunk_rows: int) -> tuple[list[tuple], ldms.DeltaStats]:
    stats = ldms.DeltaStats()
    frames = list(ldms.iter_deltas(paths, counter_bits=bits, chunk_rows=chunk_rows,
                                   reorder_window=WINDOW_US / 1e6, stats=stats))
    if not frames:
        return [], stats
    frame = pd.concat(frames)
    time, t_prev = (np.rint(frame[c].to_numpy() * 1e6).astype(np.int64).tolist() for c in ("time", "t_prev"))
    return sorted(zip(frame["producer"], time, t_prev, frame["ctr"].tolist(), frame["step"].tolist())), stats


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(store=stores(), chunk_rows=st.integers(1, 40))
def test_streamed_deltas_match_per_producer_differences(store, chunk_rows):
    bits, samples, rows, cuts, duplicates = store
    expected, expected_resets = _expected(samples, bits)
    with tempfile.TemporaryDirectory() as tmp:
        paths = _write_store(Path(tmp), rows, cuts)
        observed, stats = _observed(sorted(Path(tmp).iterdir(), reverse=True), bits, chunk_rows)
        again, _ = _observed(paths, bits, 1000)
    assert observed == expected
    assert again == observed  # chunking does not change the result
    assert stats.duplicates == duplicates
    assert {(r.producer, round(r.time * 1e6)) for r in stats.resets if "ctr" in r.metrics} == expected_resets
    assert stats.samples == len(rows) and stats.intervals == len(expected)


# ------------------------------------------------------------------------------- slicing


def test_slice_window_copies_the_rows_of_the_window_byte_for_byte(tmp_path: Path):
    header, rows = _split_sample()
    written = ldms.slice_window(NETDEV, 1558387832.5, 1558387834.5, tmp_path / "slice")
    assert written == [tmp_path / "slice" / NETDEV.name]
    # Rows sampled at 833.00x and 834.00x (both producers), in the store's order, as ldmsd wrote them.
    assert written[0].read_text() == header + "".join(rows[3:7])
    assert list(ldms.read(written[0])["producer"]) == ["s0", "s1", "s0", "s1"]
    assert ldms.slice_window(NETDEV, 1558387900, 1558387999, tmp_path / "none") == []
    assert not (tmp_path / "none").exists()


def test_slice_window_over_rollover_files_skips_files_outside_and_inlines_altheaders(tmp_path: Path):
    header, rows = _split_sample()
    store = tmp_path / "store"
    store.mkdir()
    _write(store / "netdev.HEADER.1558387830", header)
    _write(store / "netdev.1558387830", "".join(rows[:5]))
    # The file ldmsd is still appending to: its last line has no newline yet.
    _write(store / "netdev.1558387834", header + "".join(rows[5:]) + "1558387836.0011")
    written = ldms.slice_window(sorted(store.iterdir()), 1558387833.5, 1e10, tmp_path / "slice")
    assert [p.name for p in written] == ["netdev.1558387834"]
    assert written[0].read_text() == header + "".join(rows[5:])
    both = ldms.slice_window(sorted(store.iterdir()), 0, 1e10, tmp_path / "all")
    assert [p.name for p in both] == ["netdev.1558387830", "netdev.1558387834"]
    assert both[0].read_text() == header + "".join(rows[:5])  # the altheader now inline
    pd.testing.assert_frame_equal(_deltas(both), _deltas(NETDEV))


def test_slice_window_names_a_bad_time_with_its_line(tmp_path: Path):
    header, rows = _split_sample()
    bad = _write(tmp_path / "netdev.csv", header + "".join(rows[:2]) + "yesterday" + rows[2][17:])
    with pytest.raises(ParseError, match="Time 'yesterday' is not a number") as err:
        ldms.slice_window(bad, 0, 1e10, tmp_path / "slice")
    assert err.value.line == 4 and err.value.path == str(bad)


def test_rows_by_producer_are_numpys_stable_sort_at_any_number_of_producers():
    """Producer numbers below 2**16 are sorted as 16-bit integers (a radix sort), wider ones as
    they are: the order is numpy's stable argsort of the numbers either way."""
    from hpcvar.parsers.ldms.deltas import _by_producer

    rng = np.random.default_rng(3)
    for high in (5, 2**16, 2**20):
        pid = rng.integers(0, high, 20_000)
        assert np.array_equal(_by_producer(pid), np.argsort(pid, kind="stable")), high
    assert _by_producer(np.empty(0, dtype=np.int64)).size == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 1.0, 1.0, 2.0, 3.5, float("nan")])), max_size=40),
       st.booleans())
def test_rows_are_put_in_producer_and_time_order_as_lexsort_puts_them(rows, presorted):
    """The deltas' row order (the fast path for rows already in time order, lexsort otherwise):
    by producer, then time, ties and NaN times as np.lexsort places them."""
    from hpcvar.parsers.ldms.deltas import _order

    if presorted:  # a store's usual case: every producer's rows in time order
        rows = sorted(rows, key=lambda r: (np.isnan(r[1]), r[1]))
    pid = np.array([r[0] for r in rows], dtype=np.int64)
    time = np.array([r[1] for r in rows], dtype=float)
    assert np.array_equal(_order(pid, time), np.lexsort((time, pid)))


def test_the_read_ahead_holds_at_most_one_chunk_more_than_the_caller():
    """Memory stays one chunk above the caller's: the thread reads the next chunk, then waits."""
    import time

    from hpcvar.parsers.ldms.store import _read_ahead

    made = []

    def chunks():
        for i in range(10):
            made.append(i)
            yield i

    stream = _read_ahead(chunks())
    assert next(stream) == 0
    time.sleep(0.3)  # time for the thread to run ahead as far as it may
    assert made in ([0], [0, 1])
    stream.close()
