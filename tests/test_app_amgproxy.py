"""hpcvar's AMG proxy end to end: real captured runs (tests/captured/amgproxy/, SOURCES.md there)
through its parser, checked against the program's own printed figures; the simulator's writer
against the real output's shape; truncated and malformed output."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import lines_of, parse_error, write_lines
from hpcvar.parsers import apps
from hpcvar.parsers.errors import TruncatedOutput

CAPTURED = Path(__file__).resolve().parent / "captured" / "amgproxy"
TOY = CAPTURED / "amgproxy-1.0_np2_n32_27pt.out"   # the toy-sized AMGProxy test's launch
SEVEN = CAPTURED / "amgproxy-1.0_np2_n32_7pt.out"
STEP = re.compile(r"Step (\d+): assembly (\S+) s, setup (\S+) s, solve (\S+) s, step (\S+) s, "
                  r"PCG iterations (\d+), relative residual (\S+), norm (\S+)")


def stamped(path: Path) -> list[tuple[float, str]]:
    """(epoch, text) of every line, read independently of the parser."""
    return [(float(ts), text) for ts, text in (line.split(" ", 1) for line in path.read_text().splitlines())]


def printed_steps(path: Path) -> list[tuple]:
    return [STEP.fullmatch(text).groups() for _, text in stamped(path) if text.startswith("Step ")]


def test_real_run_steps_are_the_programs_own_figures() -> None:
    assert apps.detect_app(TOY.read_text()[:8192]) == "amgproxy"
    out = apps.read(TOY)
    assert (out.app, out.version, out.nranks, out.timestamped) == ("amgproxy", "1.0", 2, True)
    printed = printed_steps(TOY)
    steps = out.steps
    assert steps["step"].tolist() == [int(p[0]) for p in printed] == [1, 2, 3, 4, 5, 6]
    assert steps["reported_s"].tolist() == [float(p[4]) for p in printed]
    assert steps["setup_s"].tolist() == [float(p[2]) for p in printed]
    assert steps["iterations"].tolist() == [7] * 6
    assert (steps["final_residual"] < 1e-8).all()
    assert steps["norm"].is_monotonic_decreasing
    # The program's total is the sum of its step times (printed to the microsecond).
    done = [text for _, text in stamped(TOY) if text.startswith("Time stepping done: ")]
    assert done == ["Time stepping done: 6 steps, 1.123541 s"]
    assert out.total_s == 1.123541
    assert steps["reported_s"].sum() == pytest.approx(out.total_s, abs=6e-6)
    assert out.checks["iterations"] == 42 and out.checks["stencil"] == 27 and out.checks["box"] == "32x32x32"
    assert out.checks["hypre"] == "2.26.0" and out.checks["fom"] == pytest.approx(3.0e5, rel=0.5)
    assert list(steps.columns) == ["step", "start", "end", "duration_s", "reported_s", "assembly_s", "setup_s",
                                   "solve_s", "iterations", "final_residual", "norm"]


def test_stamped_steps_run_from_line_to_line_and_match_the_own_timer() -> None:
    """Step 1 runs from 'Time stepping:' (printed right before its timer starts), step i from
    step i-1's line (the next timer starts right after it): the stamps bound the steps, and the
    program's own step times agree with them within 5% or a few ms of output forwarding."""
    out = apps.read(TOY)
    lines = stamped(TOY)
    marks = [ts for ts, text in lines if text.startswith(("Time stepping: ", "Step "))]
    assert out.steps["start"].tolist() == marks[:-1] and out.steps["end"].tolist() == marks[1:]
    steps = out.steps
    np.testing.assert_allclose(steps["duration_s"], steps["end"] - steps["start"])
    diff = (steps["duration_s"] - steps["reported_s"]).abs()
    assert ((diff <= 0.05 * steps["reported_s"]) | (diff <= 0.02)).all(), diff.tolist()
    assert diff.max() < 0.01


def test_the_seven_point_run() -> None:
    out = apps.read(SEVEN)
    assert out.checks["stencil"] == 7 and out.checks["time_steps"] == 4 and len(out.steps) == 4
    assert out.steps["iterations"].tolist() == [6, 6, 6, 6]
    assert out.total_s == 0.395514


def test_plain_output_takes_the_programs_step_times(tmp_path) -> None:
    plain = write_lines(tmp_path, [text for _, text in stamped(TOY)])
    out = apps.read(plain)
    assert not out.timestamped and out.steps["start"].isna().all()
    assert out.steps["duration_s"].tolist() == out.steps["reported_s"].tolist()


def test_no_other_code_is_taken_for_the_proxy(samples) -> None:
    """AMG prints the same 'Running with these driver parameters:'; only the banner tells them
    apart. Every real application output of the samples and captures keeps its own app."""
    outputs = [p for p in [*(samples / "apps").rglob("*"), *(CAPTURED.parent).rglob("*.out")]
               if p.is_file() and p.suffix not in (".md",) and "amgproxy" not in p.name]
    detected = {p: apps.detect_app(p.read_text(errors="replace")[:8192]) for p in outputs}
    assert any(app in ("amg2013", "amg2023") for app in detected.values())
    assert "amgproxy" not in detected.values()


# --- bad input ---------------------------------------------------------------------------------

def test_output_cut_mid_run_is_a_truncated_run_with_its_completed_steps(tmp_path) -> None:
    lines = lines_of(TOY)
    cut = next(i for i, line in enumerate(lines) if " Step 4: " in line)
    path = write_lines(tmp_path, lines[:cut])
    with pytest.raises(TruncatedOutput) as info:
        apps.read(path)
    err = info.value
    assert err.line == cut and str(path) in str(err) and "after 3 steps" in str(err)
    assert [s["step"] for s in err.completed] == [1, 2, 3]
    assert [s["reported_s"] for s in err.completed] == [float(p[4]) for p in printed_steps(TOY)[:3]]


def test_a_run_that_died_before_its_first_step_is_truncated(tmp_path) -> None:
    lines = lines_of(TOY)
    path = write_lines(tmp_path, lines[:lines.index(next(line for line in lines if "Time stepping: " in line)) + 1])
    with pytest.raises(TruncatedOutput) as info:
        apps.read(path)
    assert info.value.completed == []


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("PCG iterations 7", "PCG iterations seven", 1), "expected an integer for PCG iterations"),
    (lambda t: t.replace("setup 0.123711 s", "setup nan s", 1), "expected a number for setup_s"),
    (lambda t: t.replace("Step 3:", "Step 4:", 1), "expected step 3, found step 4"),
    (lambda t: t.replace("Time stepping done: 6 steps", "Time stepping done: 5 steps", 1),
     "'Time stepping done' says 5 steps, the output has 6"),
    (lambda t: t.replace("  time steps = 6", "  time steps = 8", 1), "ask for 8 time steps, the output has 6"),
])
def test_malformed_output_names_file_and_line(tmp_path, edit, message) -> None:
    path = tmp_path / "app.out"
    path.write_text(edit(TOY.read_text()))
    err = parse_error(path)
    assert message in str(err) and str(path) in str(err) and err.line is not None


# --- the simulator's writer --------------------------------------------------------------------

def _shape(text: str) -> str:
    return re.sub(r"[-+]?\d+(?:\.\d+)?(?:e[-+]\d+)?", "#", text)


def test_writer_gives_back_its_steps_and_prints_what_the_program_prints(tmp_path) -> None:
    spans = [(1795740000.0 + 0.2 * k, 1795740000.0 + 0.2 * (k + 1)) for k in range(6)]
    own = [0.19, 0.2, 0.18, 0.21, 0.195, 0.199]
    path = apps.write_timestamped(tmp_path / "sim.out", "amgproxy", spans, nranks=2, reported_s=own, version="1.0")
    out = apps.read(path)
    assert (out.app, out.version, out.nranks) == ("amgproxy", "1.0", 2)
    np.testing.assert_allclose(out.steps["start"], [a for a, _ in spans], atol=1e-6)
    np.testing.assert_allclose(out.steps["end"], [b for _, b in spans], atol=1e-6)
    assert out.steps["reported_s"].tolist() == own
    assert out.total_s == pytest.approx(sum(own), abs=1e-6)
    assert out.steps["norm"].is_monotonic_decreasing and (out.steps["final_residual"] < 1e-8).all()
    # Line for line the real output's shape (numbers aside).
    real = [_shape(text) for _, text in stamped(TOY)]
    written = [_shape(text) for _, text in stamped(path)]
    assert written == real


def test_a_run_profiled_with_mpip_is_read_after_mpips_greeting_and_mpip_covers_its_steps() -> None:
    """mpiP, preloaded, prints its greeting before the program's banner. Its AppTime (MPI_Init to
    MPI_Finalize, per task) covers the program's own step times."""
    from hpcvar.parsers import mpip

    path = CAPTURED / "amgproxy-1.0_np2_n32_27pt_mpip_reframe.out"
    assert stamped(path)[0][1].startswith("mpiP: ")
    out = apps.read(path)
    assert out.app == "amgproxy" and len(out.steps) == 6 and out.total_s == pytest.approx(out.steps["reported_s"].sum(),
                                                                                         abs=6e-6)
    report = mpip.read(CAPTURED / "hpcvar-amgproxy.2.3959.1.mpiP")
    assert report.ntasks == out.nranks == 2
    # AppTime is printed to 3 significant digits (17.7 and 17.6 s): the steps lie within it.
    assert out.total_s <= report.app_time_s / report.ntasks * 1.01
    assert out.total_s >= 0.9 * report.app_time_s / report.ntasks
