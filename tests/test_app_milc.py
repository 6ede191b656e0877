"""MILC 7.8.1 su3_rmd (ks_imp_dyn) for real: the captured toy run of the ReFrame test, read by
hpcvar's MILC parser, against MILC's own timer, the simulator's writer and truncation.

The capture (tests/captured/milc/, SOURCES.md there) is ``mpirun -np 2 stdbuf -oL -eL su3_rmd
su3_rmd.in | ts '%.s'`` with the deck reframe_tests/apps/milc/milc.py writes when toy-sized.

What MILC times: 7.8.1's ks_imp_dyn/control.c starts ``dtime = -dclock()`` after reading the
parameter set (before the warm-ups) and prints ``Time = <s> seconds`` after the last measurement.
Nothing else in the trajectory loop is timed (update.c's timer is commented out; the Makefile's
CTIME flags would add CG/force/link-fattening component timers, never a trajectory's), so there
is no per-trajectory figure to compare each step with: ``reported_s`` is NaN. What can be compared
with MILC's own clock is the whole loop: the ``ts`` stamps from the last line MILC prints before
the warm-ups to the ``Time =`` line, which the steps, the warm-up and the last measurement tile.
"""

from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import numpy as np
import pytest

from hpcvar.parsers import apps
from hpcvar.parsers.errors import ParseError, TruncatedOutput
from hpcvar.util.grids import factor

REPO = Path(__file__).resolve().parents[1]
CAPTURED = Path(__file__).resolve().parent / "captured" / "milc"
REAL = CAPTURED / "su3_rmd_toy_np2.out"
DECK = CAPTURED / "su3_rmd_toy_np2.in"
# Line numbers in REAL (1-based): the last line readin() prints, WARMUPS COMPLETED, the PLAQ: lines,
# RUNNING COMPLETED and the loop's Time line.
READIN_END, WARMUPS, PLAQS, COMPLETED, TIME = 70, 79, (88, 141, 194, 247), 292, 294


def stamped_lines(path: Path = REAL) -> list[tuple[float, str]]:
    rows = []
    for raw in path.read_text().splitlines():
        stamp, _, text = raw.partition(" ")
        rows.append((float(stamp), text))
    return rows


@pytest.fixture(scope="module")
def real() -> apps.AppOutput:
    return apps.read(REAL)


def test_capture_is_the_reframe_toy_deck() -> None:
    """The captured run read exactly the deck milc.py writes toy-sized (2 ranks, 6^4 sites per rank,
    1 warm-up, 4 trajectories): the fixture stays tied to the test that produces such runs."""
    path = REPO / "reframe_tests" / "apps" / "milc" / "milc.py"
    module = importlib.import_module("reframe_tests.apps.milc.milc")
    source = path.read_text()
    nx, ny, nz, nt = (6 * g for g in factor(2, 4))
    assert DECK.read_text() == module.su3_rmd_deck(nx, ny, nz, nt, seed=5682304, warms=1, trajecs=4)
    for name, toy in (("sites_per_rank", "6"), ("trajectories", "4"), ("warmups", "1")):
        assert re.search(rf"{name} = variable\(int, value=sized\(\d+, {toy}\)\)", source), name


def test_real_output_steps_and_sanity_figures(real: apps.AppOutput) -> None:
    assert (real.app, real.version, real.nranks, real.timestamped) == ("milc", "7.8.1", 2, True)
    # one step per measured trajectory; the warm-up is not a step
    assert real.checks["trajectories"] == 4 == len(real.steps) and real.checks["warmups"] == 1
    assert real.steps["step"].tolist() == [1, 2, 3, 4]
    rows = stamped_lines()
    assert real.steps["start"].tolist() == [rows[WARMUPS - 1][0], *(rows[n - 1][0] for n in PLAQS[:-1])]
    assert real.steps["end"].tolist() == [rows[n - 1][0] for n in PLAQS]
    # plaquettes of the fresh (unit, 3.0) start fall as the gauge field thermalises
    assert real.steps["plaq_ss"].tolist() == [2.817437, 2.744823, 2.679818, 2.622426]
    assert real.steps["plaq_st"].tolist() == [2.818456, 2.747611, 2.683684, 2.624392]
    assert (real.steps["plaq_ss"].diff().dropna() < 0).all()
    # CG: 2 solves per microcanonical step x 4 steps per trajectory, plus the 2 x 2 solves of the
    # previous trajectory's PBP measurements from step 2 on; every solve converged
    assert real.steps["cg_solves"].tolist() == [8, 12, 12, 12]
    assert real.steps["cg_iters"].tolist() == [186, 258, 264, 270]
    assert real.steps["cg_max_iters"].max() < 300  # max_cg_iterations
    assert real.checks["cg_not_converged"] == 0
    assert real.checks["total_iters"] == 1226
    assert real.total_s == 12.03566 and real.checks["segment_time_s"] == [12.03566]


def test_milc_prints_no_per_trajectory_time(real: apps.AppOutput) -> None:
    """reported_s is NaN because the real output holds no per-trajectory timer: its only timing
    lines are the setup's unitarity check and the whole loop's Time line."""
    assert real.steps["reported_s"].isna().all()
    timers = [text for _, text in stamped_lines() if re.search(r"\btime\b", text, re.IGNORECASE)]
    assert timers == ["Time to check unitarity = 9.584427e-05", "Time = 1.203566e+01 seconds"]


def test_timestamps_agree_with_milcs_own_loop_timer(real: apps.AppOutput) -> None:
    """MILC's dclock() loop time against the ts stamps of the same interval: within 5% (here the
    stamps agree to 0.1 ms in 12 s). The steps, the warm-up before them and the last measurement
    after them tile the interval, so every step's stamps are the ones MILC's clock brackets."""
    rows = stamped_lines()
    assert rows[READIN_END - 1][1].strip().startswith("2 0") and "converged" in rows[READIN_END][1]
    assert rows[TIME - 1][1] == "Time = 1.203566e+01 seconds"
    stamped = rows[TIME - 1][0] - rows[READIN_END - 1][0]
    assert stamped == pytest.approx(real.total_s, rel=0.05)
    assert abs(stamped - real.total_s) < 1e-3
    # The parser measures the same span: what the testbed and one-node checks compare with MILC's timer.
    assert real.checks["loop_stamped_s"] == [pytest.approx(stamped, abs=1e-9)]
    warmup = rows[WARMUPS - 1][0] - rows[READIN_END - 1][0]
    tail = rows[TIME - 1][0] - real.steps["end"].iloc[-1]
    assert warmup + real.steps["duration_s"].sum() + tail == pytest.approx(stamped, abs=1e-6)
    # steps are contiguous and each is a real trajectory (~0.3 s and more), not a buffer flush
    np.testing.assert_array_equal(real.steps["start"].iloc[1:].to_numpy(), real.steps["end"].iloc[:-1].to_numpy())
    assert (real.steps["duration_s"] > 0.3).all()


def test_simulated_output_has_the_real_format(tmp_path: Path, real: apps.AppOutput) -> None:
    spans = list(zip(real.steps["start"], real.steps["end"]))
    path = apps.write_timestamped(tmp_path / "sim.out", "milc", spans, nranks=2, version="7.8.1", sites_per_rank=6)
    sim = apps.read(path)
    assert (sim.app, sim.version, sim.nranks, len(sim.steps)) == (real.app, real.version, real.nranks, 4)
    assert list(sim.steps.columns) == list(real.steps.columns)
    assert sim.steps.dtypes.equals(real.steps.dtypes)
    assert set(sim.checks) == set(real.checks)
    np.testing.assert_allclose(sim.steps["end"], real.steps["end"], atol=1e-6)
    assert sim.steps["reported_s"].isna().all()
    # No warm-ups: the stamped loop starts at the line before WARMUPS COMPLETED, and is MILC's Time.
    assert sim.checks["loop_stamped_s"] == [pytest.approx(sim.total_s, abs=1e-5)]
    # line for line the real format (numbers masked), but for the real run's one warm-up
    # trajectory (8 CG lines before WARMUPS COMPLETED): the simulator writes none, as Table I's deck.
    number = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")

    def masked(rows: list[tuple[float, str]]) -> list[str]:
        return [number.sub("N", text) for _, text in rows]

    real_rows = stamped_lines()
    del real_rows[READIN_END:WARMUPS - 1]
    assert masked(stamped_lines(path)) == masked(real_rows)


def test_truncated_mid_trajectory_raises_naming_file_and_line(tmp_path: Path) -> None:
    """A copy cut inside trajectory 3 (a killed run) is refused with a ParseError naming the file
    and its last line, not read as 2 steps: the run did not complete its trajectories."""
    lines = REAL.read_text().splitlines()[:160]  # after PLAQ 2 (line 141), before PLAQ 3 (194)
    cut = tmp_path / "cut.out"
    cut.write_text("\n".join(lines) + "\n")
    with pytest.raises(ParseError) as info:
        apps.read(cut)
    error = info.value
    assert (error.path, error.line) == (str(cut), 160)
    assert "truncated" in error.message and f"line {WARMUPS}" in error.message
    assert str(error).startswith(f"{cut}:160: ")
    # The two trajectories completed before the cut, for the quarantine record.
    assert isinstance(error, TruncatedOutput)
    full = apps.read(REAL).steps
    assert [c["step"] for c in error.completed] == [1, 2]
    assert [c["duration_s"] for c in error.completed] == pytest.approx(list(full["duration_s"].iloc[:2]))


def test_not_converged_solve_is_counted(tmp_path: Path) -> None:
    """MILC's ' NOT converged' report (printed whatever the build) reaches checks and the step."""
    rows = stamped_lines()
    stamp, text = rows[125 - 1]  # a PBP solve in step 2
    assert text.startswith(" OK converged") and text.endswith("iters= 25")
    rows[125 - 1] = (stamp, text.replace(" OK converged", " NOT converged").replace("iters= 25", "iters= 300 "))
    path = tmp_path / "bad.out"
    path.write_text("".join(f"{t:.6f} {line}\n" for t, line in rows))
    out = apps.read(path)
    assert out.checks["cg_not_converged"] == 1
    assert out.steps["cg_max_iters"].tolist() == [24, 300, 27, 28]
    assert not math.isnan(out.total_s)
