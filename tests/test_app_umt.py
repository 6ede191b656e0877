"""UMT 2.0 (SuOlsonTest) end to end: real captured runs (tests/captured/umt/, SOURCES.md there)
through hpcvar's UMT parser, the simulator's writer against them, bad input, and the deck the
ReFrame test generates."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import SHARED_DATA, lines_of, parse_error, write_lines
from hpcvar.parsers import apps
from hpcvar.parsers.errors import TruncatedOutput

CAPTURED = Path(__file__).resolve().parent / "captured" / "umt"
PLAIN = CAPTURED / "suolson_toy_np2.out"          # mpirun ... > file
STAMPED = CAPTURED / "suolson_toy_np2_ts.out"     # mpirun ... | ts '%.s' > file
REFRAME = CAPTURED / "suolson_toy_np2_reframe.out"  # the ReFrame test's app.out (ts inside the job)
REAL_RUNS = [PLAIN, STAMPED, REFRAME]

# What the pinned SuOlsonTest does on this deck, whatever the machine's speed: the time loop of
# SuOlsonTest.cc (3e-6, then 6e-5, the last step cut to the goal 0.000334) and the iterations.
FLUX_ITERS = [3, 3, 4, 4, 4, 4, 3]
TIMERAD = [3e-06, 6.3e-05, 0.000123, 0.000183, 0.000243, 0.000303, 0.000334]


def printed(path: Path, pattern: str) -> list[str]:
    """The first group of ``pattern`` on every line of ``path`` (``ts`` prefixes stripped),
    read independently of the parser."""
    text = re.sub(r"^\d{10}\.\d{6} ", "", path.read_text(), flags=re.MULTILINE)
    return re.findall(pattern, text, flags=re.MULTILINE)


# --- the real runs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", REAL_RUNS, ids=lambda p: p.name)
def test_real_run_steps_and_own_timer(path: Path) -> None:
    assert apps.detect_app(path.read_text()[:8192]) == "umt"
    out = apps.read(path)
    assert (out.app, out.nranks, out.timestamped) == ("umt", 2, path != PLAIN)
    steps = out.steps
    assert steps["step"].tolist() == list(range(1, 8))
    # reported_s is exactly the RADTR cycle time each block printed (seconds).
    radtr = [float(v) for v in printed(path, r"^RADTR\s+=\s+(\S+)\s+\S+\s*$")]
    assert len(radtr) == 7
    assert steps["reported_s"].tolist() == radtr
    if path == PLAIN:
        assert steps["duration_s"].tolist() == radtr and steps["start"].isna().all()
    # Physics, identical in every run: iterations and the radiation time line.
    assert steps["flux_iters"].tolist() == FLUX_ITERS == steps["temp_iters"].tolist()
    assert steps["gta_iters"].tolist() == [0] * 7  # SuOlsonTest runs without acceleration
    assert steps["timerad"].tolist() == TIMERAD
    np.testing.assert_allclose(steps["dtrad"], [3e-6] + [6e-5] * 5 + [3.1e-5], rtol=1e-9)
    assert (steps["tr_max"].diff().dropna() > 0).all() and (steps["te_max"].diff().dropna() > 0).all()
    checks = out.checks
    assert checks["flux_iters"] == 25 == sum(FLUX_ITERS)  # cumulativeIterationCount
    assert checks["completed_time"] == checks["goal_time"] == 0.000334 and checks["last_dt"] == 3.1e-05
    assert (checks["deck"], checks["groups"], checks["quadrature"], checks["polar"], checks["azimuthal"],
            checks["omp_threads"]) == ("custom_2.cmg", 4, "product", 4, 4, 1)
    assert checks["analytic"] == [(0.1, 0.00533343, 0.00468, 0.000653428)]
    # cumulativeWorkTime is the sum of the cycle times, printed to 6 significant digits.
    assert out.total_s == checks["work_time_s"] == float(printed(path, r"cumulativeWorkTime=(\S+) s\.")[0])
    assert out.total_s == pytest.approx(sum(radtr), rel=1e-5)
    assert checks["figure_of_merit"] == pytest.approx(checks["num_unknowns"] / out.total_s * 25, rel=1e-4)


@pytest.mark.parametrize("path", [STAMPED, REFRAME], ids=lambda p: p.name)
def test_stamped_step_durations_match_the_own_timer(path: Path) -> None:
    """Each step runs from the previous CYCLE line (step 1: 'Starting time advance...') to its
    CYCLE line, the first line printed after the cycle's timer stopped; the ts durations and
    RADTR agree to well within 5% (cycles of 0.27-1.04 s in these captures, 0.12 s on an idle
    machine, still within 0.5%; the loop adds only newDT and the printing to the timed cycle)."""
    out = apps.read(path)
    stamps = {text: float(ts) for ts, text in (line.split(" ", 1) for line in lines_of(path))
              if text.startswith(("CYCLE ", " Starting time advance"))}
    ends = [stamps[f"CYCLE {n} timerad = {t:g}"] for n, t in enumerate(TIMERAD, 1)]
    assert out.steps["end"].tolist() == ends
    assert out.steps["start"].tolist() == [stamps[" Starting time advance..."], *ends[:-1]]
    steps = out.steps
    np.testing.assert_allclose(steps["duration_s"], steps["end"] - steps["start"])
    assert (steps["reported_s"] > 0.1).all()  # long against ts's and the pipe's millisecond jitter
    relative = (steps["duration_s"] - steps["reported_s"]).abs() / steps["reported_s"]
    assert relative.max() < 0.05, relative.tolist()


def test_plain_and_stamped_runs_agree_on_everything_but_time() -> None:
    plain, stamped = apps.read(PLAIN), apps.read(STAMPED)
    physics = ["step", "flux_iters", "temp_iters", "gta_iters", "timerad", "dtrad", "tr_max", "te_max"]
    pd.testing.assert_frame_equal(plain.steps[physics], stamped.steps[physics])
    untimed = {"work_time_s", "figure_of_merit"}
    assert {k: v for k, v in plain.checks.items() if k not in untimed} == \
           {k: v for k, v in stamped.checks.items() if k not in untimed}


# --- the simulator's writer against the real run -------------------------------------------------------

def test_simulated_output_has_the_real_step_columns(tmp_path: Path) -> None:
    real = apps.read(STAMPED)
    spans = list(zip(real.steps["start"], real.steps["end"]))
    path = apps.write_timestamped(tmp_path / "sim.out", "umt", spans, nranks=2,
                                  reported_s=real.steps["reported_s"].tolist(), deck="custom_2.cmg")
    sim = apps.read(path)
    assert (sim.app, sim.nranks, sim.timestamped) == ("umt", 2, True)
    assert list(sim.steps.columns) == list(real.steps.columns)
    pd.testing.assert_frame_equal(sim.steps, real.steps, check_exact=False, rtol=1e-12, atol=0)
    assert set(sim.checks) == set(real.checks)
    for key in ("time_steps", "flux_iters", "completed_time", "goal_time", "last_dt", "deck", "groups", "polar",
                "azimuthal", "analytic"):
        assert sim.checks[key] == real.checks[key], key
    assert sim.total_s == pytest.approx(real.total_s, rel=1e-5)
    # Line for line the same text, apart from the run-dependent times and the zone/rank of the
    # temperature maxima (the writer prints one zone).
    def shape(p: Path) -> list[str]:
        text = [line.split(" ", 1)[1] for line in lines_of(p)]
        return [re.sub(r"(RADTR\s+= )\S+\s+\S+|(cumulativeWorkTime=)\S+|(figure of merit = )\S+|"
                       r"(numUnknowns = )\S+|in Zone \d+ on Node \d+", r"\1\2\3\4", t) for t in text]
    assert shape(path) == shape(STAMPED)


def test_simulated_campaign_output_reads_back(tmp_path: Path) -> None:
    """The simulator's default: Table I's 7 cycles of 45 s on 8,192 ranks."""
    spans = [(1.7e9 + 45 * k, 1.7e9 + 45 * (k + 1)) for k in range(7)]
    out = apps.read(apps.write_timestamped(tmp_path / "umt.out", "umt", spans, nranks=8192))
    assert (out.nranks, len(out.steps), out.checks["deck"]) == (8192, 7, "custom_8k.cmg")
    assert out.steps["duration_s"].tolist() == [45.0] * 7 == out.steps["reported_s"].tolist()
    assert out.steps["timerad"].tolist() == TIMERAD and out.checks["completed_time"] == 0.000334


@pytest.mark.parametrize("n", [1, 2, 6, 8, 12])
def test_writer_keeps_suolson_time_loop_for_other_step_counts(tmp_path: Path, n: int) -> None:
    spans = [(1e9 + k, 1e9 + k + 1) for k in range(n)]
    out = apps.read(apps.write_timestamped(tmp_path / "umt.out", "umt", spans, nranks=4, flux_iters=5))
    assert len(out.steps) == n and out.steps["flux_iters"].tolist() == [5] * n and out.checks["flux_iters"] == 5 * n
    assert (out.steps["dtrad"] > 0).all() and out.steps["timerad"].is_monotonic_increasing
    assert out.checks["completed_time"] == out.checks["goal_time"] == out.steps["timerad"].iloc[-1]
    with pytest.raises(ValueError, match="goal_time"):
        apps.write_timestamped(tmp_path / "bad.out", "umt", spans, nranks=4, goal_time=1.0)


# --- bad input ----------------------------------------------------------------------------------------

def cycle_line(lines: list[str], n: int) -> int:
    """0-based index of the ``CYCLE n`` line."""
    return next(i for i, line in enumerate(lines) if re.search(rf"(^| )CYCLE {n} timerad", line))


@pytest.mark.parametrize("path", [PLAIN, STAMPED], ids=lambda p: p.name)
def test_output_cut_inside_a_cycle_block_is_an_error_naming_file_and_line(tmp_path: Path, path: Path) -> None:
    """A run killed mid-step: the parser rejects the file (the run did not finish), naming the
    file and its last line, and the error carries the three cycles completed before the cut
    (CYCLE 4's block has no timer yet), which collation keeps in the quarantine record."""
    lines = lines_of(path)
    cut = cycle_line(lines, 4) + 3  # CYCLE 4, its blank line and the iterations line
    target = write_lines(tmp_path, lines[:cut])
    error = parse_error(target)
    assert error.path == str(target) and error.line == cut
    assert "CYCLE 4" in error.message and "truncated" in error.message and "completed at time" in error.message
    assert str(error).startswith(f"{target}:{cut}: ")
    assert isinstance(error, TruncatedOutput)
    full = apps.read(path).steps
    assert [c["step"] for c in error.completed] == [1, 2, 3]
    assert [c["reported_s"] for c in error.completed] == pytest.approx(list(full["reported_s"].iloc[:3]))
    if path == STAMPED:
        assert [c["duration_s"] for c in error.completed] == pytest.approx(list(full["duration_s"].iloc[:3]))


def test_output_cut_between_cycles_is_an_error(tmp_path: Path) -> None:
    lines = lines_of(STAMPED)
    cut = cycle_line(lines, 5)  # everything up to CYCLE 4's block
    error = parse_error(write_lines(tmp_path, lines[:cut]))
    assert error.line == cut and "after CYCLE 4" in error.message


def test_block_without_its_timer_or_iterations_is_an_error(tmp_path: Path) -> None:
    lines = lines_of(PLAIN)
    radtr = [i for i, line in enumerate(lines) if line.startswith("RADTR")]
    no_timer = lines[:radtr[1]] + lines[radtr[1] + 1:]  # drop CYCLE 2's RADTR line
    error = parse_error(write_lines(tmp_path, no_timer))
    assert error.line == cycle_line(no_timer, 3) + 1 and "CYCLE 2" in error.message and "RADTR" in error.message
    iters = [i for i, line in enumerate(lines) if line.startswith("TempIters")]
    no_iters = lines[:iters[6]] + lines[iters[6] + 1:]  # CYCLE 7 without its iterations
    error = parse_error(write_lines(tmp_path, no_iters))
    assert "CYCLE 7" in error.message and "FluxIters" in error.message
    assert no_iters[error.line - 1].startswith(" SuOlson Test version")


def test_skipped_cycle_and_inconsistent_total_are_errors(tmp_path: Path) -> None:
    lines = lines_of(PLAIN)
    skipped = list(lines)
    skipped[cycle_line(lines, 3)] = skipped[cycle_line(lines, 3)].replace("CYCLE 3", "CYCLE 4")
    error = parse_error(write_lines(tmp_path, skipped))
    assert error.line == cycle_line(lines, 3) + 1 and "expected CYCLE 3, found CYCLE 4" in error.message
    total = [line.replace("cumulativeIterationCount= 25", "cumulativeIterationCount= 24") for line in lines]
    error = parse_error(write_lines(tmp_path, total))
    assert "not the sum" in error.message and total[error.line - 1].startswith("cumulativeIterationCount= 24")


def test_run_that_never_reached_the_time_loop(tmp_path: Path) -> None:
    lines = lines_of(PLAIN)[:10]  # died while initialising Teton
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 10 and "Starting time advance" in error.message


# --- the deck the ReFrame test writes -----------------------------------------------------------------

@pytest.fixture(scope="module")
def rfm_umt():
    return importlib.import_module("reframe_tests.apps.umt.umt")


def test_the_deck_generator_writes_umts_own_format(rfm_umt) -> None:
    """UMT 2.0's own benchmarks/grid16MPI_3x6x8.cmg (16 ranks as 4 x 2 x 2), byte for byte. UMT's
    file is not part of this project: it is read from ../shared/data (its README names the
    upstream commit and sha256)."""
    deck = SHARED_DATA / "umt" / "grid16MPI_3x6x8.cmg"
    if not deck.is_file():
        pytest.skip(f"UMT's grid16MPI_3x6x8.cmg not found at {deck} (../shared/data, or set HPCVAR_SHARED_DATA)")
    assert rfm_umt.cmg_deck((4, 2, 2), (3, 6, 8)) == deck.read_text()


def test_generated_decks(rfm_umt) -> None:
    # The toy deck the captured runs used, and Table I's name and grid for 128 x 64 ranks.
    assert rfm_umt.cmg_deck((2, 1, 1), (3, 6, 8)) == (CAPTURED / "custom_2.cmg").read_text()
    assert rfm_umt.deck_name(2) == "custom_2.cmg" and rfm_umt.deck_name(128 * 64) == "custom_8k.cmg"
    deck = rfm_umt.cmg_deck((32, 16, 16), (3, 6, 8))
    assert "sms(32,16,16)" in deck and "blk(on,0:31,0:15,0:15)" in deck
    assert 'tag("zMaxFaces",face,(0:32,0:16,16:16))' in deck
