"""The MPI microbenchmarks (reframe_tests/microbenchmarks): built with make, run for real with
mpirun on this machine, their CSV output read back with hpcvar.parsers.microbenchmarks.

Needs mpicc and mpirun (OpenMPI: ``apt-get install openmpi-bin libopenmpi-dev``); without them
the tests fail (they do not skip)."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcvar.parsers import detect, inspect, microbenchmarks as mb
from hpcvar.parsers.errors import ParseError

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "reframe_tests" / "microbenchmarks" / "src"
SUMMARY_COLLECTIVES = re.compile(
    r"^hpcvar-collectives: (?P<coll>bcast|reduce|alltoall|allreduce) size=(?P<size>\d+) iterations=(?P<iters>\d+) "
    r"min_us=(?P<min>[\d.]+) median_us=(?P<median>[\d.]+) mean_us=(?P<mean>[\d.]+) max_us=(?P<max>[\d.]+)$")
SUMMARY_OVERTIME = re.compile(
    r"^hpcvar-overtime: cycle=(?P<cycle>\d+) phase=(?P<phase>latency|bandwidth|allreduce) size=(?P<size>\d+) "
    r"iterations=(?P<iters>\d+) start_epoch=(?P<epoch>[\d.]+) duration_s=(?P<dur>[\d.]+) min_us=(?P<min>[\d.]+) "
    r"median_us=(?P<median>[\d.]+) max_us=(?P<max>[\d.]+)$")
SUMMARY_CONFIDENCE = re.compile(
    r"^hpcvar-confidence: ranks=(?P<ranks>\d+) cycles=(?P<cycles>\d+) trials=(?P<trials>\d+) "
    r"min_pairwise_us=(?P<min>[\d.]+) timer_min_us=(?P<timer>[\d.]+)$")


def mpi_env() -> dict:
    env = dict(os.environ)
    # OpenMPI refuses to run as root without these (containers, CI).
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    return env


@pytest.fixture(scope="module")
def bindir(tmp_path_factory) -> Path:
    missing = [tool for tool in ("mpicc", "mpirun", "make") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: the microbenchmark tests build and run real MPI programs; "
                    "install OpenMPI (apt-get install openmpi-bin libopenmpi-dev make gcc)")
    build = tmp_path_factory.mktemp("mb") / "src"
    shutil.copytree(SRC, build, ignore=shutil.ignore_patterns("hpcvar-*", "*.o"))
    done = subprocess.run(["make", "CC=mpicc"], cwd=build, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"make failed:\n{done.stdout}\n{done.stderr}"
    assert "warning" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
    for name in ("hpcvar-collectives", "hpcvar-overtime", "hpcvar-confidence"):
        assert os.access(build / name, os.X_OK), name
    return build


def mpirun(bindir: Path, program: str, *args: str, np_: int = 2, cwd: Path, check: bool = True):
    cmd = ["mpirun", "-np", str(np_), "--oversubscribe", str(bindir / program), *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env=mpi_env())
    if check:
        assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


# --- hpcvar-collectives --------------------------------------------------------------------

ITERS = 200
SIZES = (8, 1024, 65536)


@pytest.fixture(scope="module")
def collectives(bindir, tmp_path_factory):
    out = tmp_path_factory.mktemp("coll")
    before = time.time()
    done = mpirun(bindir, "hpcvar-collectives", "-s", ",".join(map(str, SIZES)), "-i", str(ITERS), "-w", "10",
                  "-o", "coll.csv", cwd=out)
    return done.stdout, mb.read_collectives(out / "coll.csv"), before, out / "coll.csv"


def test_collectives_every_iteration_recorded(collectives):
    stdout, frame, before, _ = collectives
    assert len(frame) == len(mb.COLLECTIVES) * len(SIZES) * ITERS
    for (coll, size), group in frame.groupby(["collective", "size_bytes"]):
        assert group["iteration"].tolist() == list(range(ITERS)), (coll, size)
    assert set(frame["collective"]) == set(mb.COLLECTIVES) and set(frame["size_bytes"]) == set(SIZES)
    meta = frame.attrs["meta"]
    assert meta["nranks"] == 2 and len(meta["hosts"]) == 2
    assert "Open MPI" in meta["mpi_library"]
    assert before - 5 <= meta["start_epoch"] <= time.time()


def test_collectives_times_are_physical(collectives):
    _, frame, _, _ = collectives
    assert (frame["min_us"] > 0).all()
    assert (frame["min_us"] <= frame["mean_us"] + 1e-3).all() and (frame["mean_us"] <= frame["max_us"] + 1e-3).all()
    assert frame["max_rank"].isin([0, 1]).all()
    medians = frame.groupby(["collective", "size_bytes"])["max_us"].median()
    assert medians[("allreduce", 8)] < 10_000  # 8 bytes between two local ranks: far below 10 ms
    assert (frame["max_us"] < 5e6).all()
    # noise only adds time, so the fastest of 200 iterations is a robust figure: moving 64 KiB
    # (8192 times the data) is never faster than moving 8 bytes
    fastest = frame.groupby(["collective", "size_bytes"])["max_us"].min()
    for coll in mb.COLLECTIVES:
        assert fastest[(coll, 65536)] > fastest[(coll, 8)], coll


def test_collectives_stdout_summary_matches_csv(collectives):
    stdout, frame, _, path = collectives
    lines = stdout.strip().splitlines()
    assert re.fullmatch(r"hpcvar-collectives: done rows=(\d+) file=coll\.csv", lines[-1])
    assert lines[-1].split()[2] == f"rows={len(frame)}"
    summaries = [SUMMARY_COLLECTIVES.match(line) for line in lines[:-1]]
    assert all(summaries) and len(summaries) == len(mb.COLLECTIVES) * len(SIZES)
    for m in summaries:
        group = frame[(frame["collective"] == m["coll"]) & (frame["size_bytes"] == int(m["size"]))]["max_us"]
        assert int(m["iters"]) == ITERS
        assert float(m["median"]) == pytest.approx(group.median(), abs=2e-3)
        assert float(m["min"]) == pytest.approx(group.min(), abs=2e-3)
        assert float(m["max"]) == pytest.approx(group.max(), abs=2e-3)
    assert detect(path) is mb
    described = inspect(path)
    assert described["ok"] and described["kind"] == mb.KIND_COLLECTIVES and described["records"] == len(frame)


def test_collectives_bad_options_fail_without_done_line(bindir, tmp_path):
    bad = mpirun(bindir, "hpcvar-collectives", "-c", "allgather", cwd=tmp_path, check=False)
    assert bad.returncode != 0 and "unknown collective 'allgather'" in bad.stderr
    assert "done" not in bad.stdout
    odd = mpirun(bindir, "hpcvar-collectives", "-s", "12", "-c", "allreduce", cwd=tmp_path, check=False)
    assert odd.returncode != 0 and "multiples of 8" in odd.stderr


# --- hpcvar-confidence ---------------------------------------------------------------------

CYCLES, TRIALS, TIMER_SAMPLES, S, NBINS = 4, 100, 20000, 0.05, 256


@pytest.fixture(scope="module", params=[2, 3], ids=["2ranks", "3ranks"])
def confidence(request, bindir, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"conf{request.param}")
    done = mpirun(bindir, "hpcvar-confidence", "-n", str(CYCLES), "-t", str(TRIALS), "-T", str(TIMER_SAMPLES),
                  "-S", str(S), "-C", str(NBINS), "-r", "-o", "conf", np_=request.param, cwd=out)
    return (request.param, done.stdout, mb.read_confidence_histogram(out / "conf-hist.csv"),
            mb.read_confidence_minima(out / "conf-minima.csv"), mb.read_confidence_samples(out / "conf-samples.csv"),
            out)


def pairs_of(n: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(n) for b in range(a + 1, n)]


def test_confidence_every_pair_every_cycle(confidence):
    n, stdout, hist, minima, samples, _ = confidence
    expected = {(c, a, b) for c in range(CYCLES) for a, b in pairs_of(n)}
    assert set(zip(minima["cycle"], minima["rank_a"], minima["rank_b"])) == expected
    assert len(minima) == len(expected)
    per = samples.groupby(["cycle", "rank_a", "rank_b"]).size()
    assert set(per.index) == expected and (per == TRIALS).all()
    assert (minima["trials"] == TRIALS).all()
    lines = stdout.strip().splitlines()
    assert lines[-1] == "hpcvar-confidence: done"
    m = SUMMARY_CONFIDENCE.match(lines[-2])
    assert m and int(m["ranks"]) == n and float(m["min"]) == pytest.approx(minima["min_pairwise_us"].min(), abs=1e-4)


def test_confidence_minima_bound_every_sample(confidence):
    _, _, _, minima, samples, _ = confidence
    key = ["cycle", "rank_a", "rank_b"]
    exact = samples.groupby(key).agg(pair=("pairwise_us", "min"), a=("a_us", "min"), b=("b_us", "min"))
    joined = minima.set_index(key).join(exact)
    assert np.allclose(joined["min_pairwise_us"], joined["pair"], atol=1e-6)
    assert np.allclose(joined["min_a_us"], joined["a"], atol=1e-6)
    assert np.allclose(joined["min_b_us"], joined["b"], atol=1e-6)
    merged = samples.merge(minima, on=key)
    assert (merged["min_pairwise_us"] <= merged["pairwise_us"] + 1e-6).all()
    assert (merged["median_pairwise_us"] >= merged["min_pairwise_us"]).all()
    assert np.allclose(samples["pairwise_us"], (samples["a_us"] + samples["b_us"]) / 2, rtol=1e-12, atol=1e-12)
    # 1-byte exchanges between local ranks: positive, and far below 10 ms on the median
    assert (minima["min_pairwise_us"] > 0).all() and samples["pairwise_us"].median() < 10_000


def test_confidence_histograms_count_every_sample(confidence):
    n, _, hist, minima, samples, _ = confidence
    counts = hist.groupby(["kind", "rank_a", "rank_b"])["count"].sum()
    for a, b in pairs_of(n):
        assert counts[("pairwise", a, b)] == CYCLES * TRIALS
        assert counts[("minima", a, b)] == CYCLES
        assert counts[("onesided", a, b)] == CYCLES * TRIALS and counts[("onesided", b, a)] == CYCLES * TRIALS
    for r in range(n):
        assert counts[("timer", r, -1)] == TIMER_SAMPLES
    assert (hist["count"] > 0).all()  # only non-empty bins are written


def test_confidence_c_and_python_bins_agree(confidence):
    n, _, hist, minima, samples, _ = confidence
    meta = hist.attrs["meta"]
    assert meta["bin_size_us"] == S and meta["nbins"] == NBINS
    edges = mb.log_bin_edges(S, NBINS)
    assert np.allclose(hist["lower_us"], edges[hist["bin"]], rtol=1e-9, atol=1e-6)
    last = hist["bin"] == NBINS - 1
    assert np.isinf(hist.loc[last, "upper_us"]).all()
    assert np.allclose(hist.loc[~last, "upper_us"], edges[hist.loc[~last, "bin"] + 1], rtol=1e-9, atol=1e-6)

    def c_counts(kind, a, b):
        rows = hist[(hist["kind"] == kind) & (hist["rank_a"] == a) & (hist["rank_b"] == b)]
        dense = np.zeros(NBINS, dtype=int)
        dense[rows["bin"].to_numpy()] = rows["count"].to_numpy()
        return dense

    for a, b in pairs_of(n):
        pair = samples[(samples["rank_a"] == a) & (samples["rank_b"] == b)]
        assert (c_counts("pairwise", a, b) == mb.histogram(pair["pairwise_us"], S, NBINS)).all()
        assert (c_counts("onesided", a, b) == mb.histogram(pair["a_us"], S, NBINS)).all()
        assert (c_counts("onesided", b, a) == mb.histogram(pair["b_us"], S, NBINS)).all()
        cycle_minima = pair.groupby("cycle")["pairwise_us"].min()
        assert (c_counts("minima", a, b) == mb.histogram(cycle_minima, S, NBINS)).all()


def test_confidence_timer_calibrated_and_subtracted(confidence):
    n, _, hist, minima, samples, _ = confidence
    timer_min = hist.attrs["meta"]["timer_min_us"]
    assert len(timer_min) == n and all(0 < t < 100 for t in timer_min)
    assert minima.attrs["meta"]["timer_min_us"] == timer_min
    timer = hist[hist["kind"] == "timer"]
    for r in range(n):
        # the calibration samples minus their own minimum: the smallest lands in bin 0 (starts at 0)
        assert timer[timer["rank_a"] == r]["bin"].min() == 0
    assert (samples[["a_us", "b_us"]] >= 0).all().all()


def test_confidence_pair_minima_helper(confidence):
    n, _, hist, minima, samples, path = confidence
    table = mb.pair_minima(hist, minima)
    assert list(zip(table["rank_a"], table["rank_b"])) == pairs_of(n)
    assert (table["samples"] == CYCLES * TRIALS).all() and (table["cycles"] == CYCLES).all()
    assert (table["min_lower_us"] <= table["min_us"] + 1e-6).all()
    assert (table["min_us"] < table["min_upper_us"]).all()
    assert (table["min_us"] <= table["median_cycle_min_us"]).all()
    assert (table["median_cycle_min_us"] <= table["max_cycle_min_us"]).all()
    for f in ("conf-hist.csv", "conf-minima.csv", "conf-samples.csv"):
        described = inspect(path / f)
        assert described["ok"], described


# --- hpcvar-overtime -----------------------------------------------------------------------

OT_CYCLES, LAT_ITERS, BW_ITERS, BW_BYTES, WINDOW, AR_ITERS = 3, 2000, 10, 262144, 4, 500


@pytest.fixture(scope="module")
def overtime(bindir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ot")
    before = time.time()
    done = mpirun(bindir, "hpcvar-overtime", "-n", str(OT_CYCLES), "-l", str(LAT_ITERS), "-b", str(BW_ITERS),
                  "-B", str(BW_BYTES), "-W", str(WINDOW), "-a", str(AR_ITERS), "-o", "ot", cwd=out)
    after = time.time()
    return (done.stdout, mb.read_overtime_phases(out / "ot-phases.csv"),
            mb.read_overtime_iterations(out / "ot-iterations.csv"), before, after, out)


def test_overtime_phases_alternate_with_equal_idle(overtime):
    _, phases, _, _, _, _ = overtime
    expected = ["latency", "idle", "bandwidth", "idle", "allreduce", "idle"] * OT_CYCLES
    assert phases["phase"].tolist() == expected
    assert phases["cycle"].tolist() == [c for c in range(OT_CYCLES) for _ in range(6)]
    work, idle = phases.iloc[0::2].reset_index(drop=True), phases.iloc[1::2].reset_index(drop=True)
    assert (idle["follows"] == work["phase"]).all()
    assert (work["duration_s"] > 0).all()
    # an idle phase lasts as long as the phase before it (rank 0's view): never shorter, and longer
    # only by the time the OS takes to run the woken rank (microseconds on an idle machine, tens of
    # milliseconds when other work competes for the 2 cores of a test machine)
    assert (idle["duration_s"] >= work["duration_s"] - 1e-6).all()
    assert (idle["duration_s"] <= 0.1 + 1.1 * work["duration_s"]).all()


def test_overtime_boundaries_monotonic_and_on_the_wall_clock(overtime):
    _, phases, _, before, after, _ = overtime
    for clock in ("wtime", "epoch"):
        start, end = phases[f"start_{clock}_s"].to_numpy(), phases[f"end_{clock}_s"].to_numpy()
        assert (end >= start).all(), clock
        assert (start[1:] >= end[:-1] - 1e-6).all(), clock
    idle = phases["phase"] == "idle"
    # an idle phase starts where its work phase ended
    assert np.array_equal(phases.loc[idle, "start_wtime_s"].to_numpy(),
                          phases["end_wtime_s"].shift(1)[idle].to_numpy())
    assert np.allclose(phases["end_wtime_s"] - phases["start_wtime_s"], phases["duration_s"], atol=1e-8)
    # both clocks agree on every duration, and the epochs fall inside the run
    assert np.allclose(phases["end_epoch_s"] - phases["start_epoch_s"], phases["duration_s"], atol=2e-2)
    assert before - 1 <= phases["start_epoch_s"].min() and phases["end_epoch_s"].max() <= after + 1


def test_overtime_iterations_recorded(overtime):
    stdout, phases, its, _, _, path = overtime
    counts = its.groupby(["cycle", "phase"]).size()
    for c in range(OT_CYCLES):
        assert counts[(c, "latency")] == LAT_ITERS and counts[(c, "bandwidth")] == BW_ITERS
        assert counts[(c, "allreduce")] == AR_ITERS
    assert len(its) == OT_CYCLES * (LAT_ITERS + BW_ITERS + AR_ITERS)
    assert (its["min_us"] > 0).all()
    by = its.groupby("phase")
    assert (by.get_group("latency")["ranks"] == 1).all() and (by.get_group("allreduce")["ranks"] == 2).all()
    assert by.get_group("latency")["max_us"].median() < 10_000
    bw = by.get_group("bandwidth")
    assert (bw["bytes"] == BW_BYTES * WINDOW).all()
    mb_per_s = bw["bytes"] / bw["max_us"]  # bytes/us = MB/s
    assert (mb_per_s < 1e6).all() and mb_per_s.median() > 1  # below 1 TB/s, above 1 MB/s
    lines = stdout.strip().splitlines()
    assert lines[-1] == f"hpcvar-overtime: done cycles={OT_CYCLES} phases={6 * OT_CYCLES}"
    summaries = [SUMMARY_OVERTIME.match(line) for line in lines[:-1]]
    assert all(summaries) and len(summaries) == 3 * OT_CYCLES
    work = phases[phases["phase"] != "idle"].reset_index(drop=True)
    for m, (_, row) in zip(summaries, work.iterrows()):
        assert m["phase"] == row["phase"] and int(m["cycle"]) == row["cycle"]
        assert float(m["epoch"]) == pytest.approx(row["start_epoch_s"], abs=1e-5)
    for f in ("ot-phases.csv", "ot-iterations.csv"):
        assert inspect(path / f)["ok"]


def test_overtime_fixed_idle_and_duration_mode(bindir, tmp_path):
    mpirun(bindir, "hpcvar-overtime", "-n", "2", "-p", "allreduce", "-a", "50", "-I", "0.05", "-o", "fixed",
           cwd=tmp_path)
    phases = mb.read_overtime_phases(tmp_path / "fixed-phases.csv")
    assert phases["phase"].tolist() == ["allreduce", "idle"] * 2
    fixed = phases.loc[phases["phase"] == "idle", "duration_s"]
    assert ((fixed >= 0.05 - 1e-6) & (fixed <= 0.05 + 0.1)).all()
    mpirun(bindir, "hpcvar-overtime", "-d", "0.3", "-p", "latency", "-l", "200", "-I", "0.02", "-o", "timed",
           cwd=tmp_path)
    phases = mb.read_overtime_phases(tmp_path / "timed-phases.csv")
    assert phases["cycle"].nunique() >= 2
    assert phases["end_wtime_s"].max() - phases["start_wtime_s"].min() >= 0.3 - 0.05


# --- log bins ------------------------------------------------------------------------------


def test_log_bins_follow_confidence_equation_two():
    widths = mb.log_bin_widths(0.05, 5)
    assert widths[0] == 0.05
    assert np.allclose(widths[1:], [math.exp(0.05 * i) - 1 for i in range(1, 5)])
    edges = mb.log_bin_edges(0.05, 5)
    assert edges[0] == 0 and np.allclose(np.diff(edges), widths)
    assert (np.diff(widths[1:]) > 0).all()  # logarithmic: widths grow
    idx = mb.bin_index([0.0, 0.049999, 0.05, edges[2], edges[5] + 100, -1.0], 0.05, 5)
    assert idx.tolist() == [0, 0, 1, 2, 4, 0]
    assert mb.histogram([0.01, 0.02, 1e9], 0.05, 5).tolist() == [2, 0, 0, 0, 1]


# --- malformed input -----------------------------------------------------------------------


def _data_start(text: str) -> int:
    lines = text.splitlines()
    return next(i for i, line in enumerate(lines) if not line.startswith("#")) + 1  # 1-based header line


def test_truncated_mid_row_names_file_and_line(collectives, tmp_path):
    text = collectives[3].read_text()
    cut = text[: len(text) - 12]  # inside the last row
    bad = tmp_path / "coll.csv"
    bad.write_text(cut)
    with pytest.raises(ParseError) as err:
        mb.read_collectives(bad)
    assert err.value.path == str(bad) and err.value.line == len(cut.splitlines())
    assert f"{bad}:{err.value.line}:" in str(err.value)
    result = inspect(bad)
    assert not result["ok"] and result["line"] == err.value.line and result["kind"] == "microbenchmarks"


def test_truncated_files_of_every_kind_are_rejected(confidence, overtime, tmp_path):
    out_c, out_o = confidence[5], overtime[5]
    files = [out_c / "conf-hist.csv", out_c / "conf-minima.csv", out_c / "conf-samples.csv",
             out_o / "ot-phases.csv", out_o / "ot-iterations.csv"]
    for src in files:
        text = src.read_text()
        lines = text.splitlines(keepends=True)
        # cut in the middle of a row (last line unterminated, or a short row)
        mid = tmp_path / f"mid-{src.name}"
        mid.write_text("".join(lines[:-3]) + lines[-3][: len(lines[-3]) // 2])
        with pytest.raises(ParseError) as err:
            mb.read(mid)
        assert err.value.path == str(mid) and err.value.line == len(lines) - 2, src.name
        # cut at a row boundary: fewer rows than the metadata announces
        short = tmp_path / f"short-{src.name}"
        short.write_text("".join(lines[:-2]))
        with pytest.raises(ParseError, match="truncated") as err:
            mb.read(short)
        assert err.value.path == str(short) and err.value.line is not None, src.name


def test_wrong_header_names_the_header_line(collectives, tmp_path):
    text = collectives[3].read_text()
    header = _data_start(text)
    lines = text.splitlines(keepends=True)
    lines[header - 1] = lines[header - 1].replace("max_us", "maximum_us")
    bad = tmp_path / "coll.csv"
    bad.write_text("".join(lines))
    with pytest.raises(ParseError, match="expected header") as err:
        mb.read_collectives(bad)
    assert err.value.path == str(bad) and err.value.line == header


def test_malformed_values_and_versions(collectives, tmp_path):
    text = collectives[3].read_text()
    header = _data_start(text)
    lines = text.splitlines(keepends=True)
    broken = list(lines)
    broken[header + 3] = broken[header + 3].replace(",", ",x", 1)  # size_bytes "x8": not an integer
    bad = tmp_path / "value.csv"
    bad.write_text("".join(broken))
    with pytest.raises(ParseError) as err:
        mb.read_collectives(bad)
    assert err.value.line == header + 4
    v2 = tmp_path / "v2.csv"
    v2.write_text(text.replace("# hpcvar collectives v1", "# hpcvar collectives v2", 1))
    with pytest.raises(ParseError, match="version 2") as err:
        mb.read(v2)
    assert err.value.line == 1
    with pytest.raises(ParseError, match="expected a mb_overtime_phases file"):
        mb.read_overtime_phases(collectives[3])
    empty = tmp_path / "header-only.csv"
    empty.write_text("".join(lines[:header]))
    with pytest.raises(ParseError, match="no data rows") as err:
        mb.read(empty)
    assert err.value.line == header
