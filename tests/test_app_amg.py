"""AMG 1.1 and AMG2023 for real: toy-sized runs of the pinned programs (tests/captured/amg2013/,
tests/captured/amg2023/, SOURCES.md there), read by hpcvar's AMG parser, against the programs' own
timers, the simulator's AMG 1.1 writer and truncation.

The captures are ``mpirun -np 2 stdbuf -oL amg -P 2 1 1 -n N N N -problem 2 -printstats | ts '%.s'``
with the toy-sized inputs of reframe_tests/apps/amg/amg.py (AMG 1.1 ``-n 24 24 24``, AMG2023
``-n 40 40 40``).

What the programs time (read in their sources):

* AMG 1.1 (test/amg.c, problem 2): one timer around the whole time-step loop -- barrier, start,
  six steps (each: GMRES and BoomerAMG created, ``Solver: AMG-GMRES`` printed, AMG setup, one
  GMRES solve to 1e-8 and four fixed-iteration solves), barrier, stop -- printed as ``Problem 2:
  Cumulative AMG-GMRES Solve Time``. No step is timed on its own, so ``reported_s`` is NaN and
  the per-step check is on what the timer covers: the six steps' ``ts`` durations (first
  ``Solver:`` line to the cumulative block's title) must add up to its wall clock time. The
  timer also covers the few microseconds between its start and the first ``Solver:`` line.
* AMG2023 (amg.c, problem 2): barrier, start, PCG solve, barrier, stop, ``Problem 2: AMG-PCG
  Solve Time``; the step runs from the setup block's title (printed as the setup timer stops) to
  the solve block's title, so it also holds the setup block's remaining lines, the FOM_Setup line
  and a barrier: microseconds. ``reported_s`` is the solve's wall clock time.

Both wall clock times are the maximum over ranks (MPI_Allreduce after the title is printed).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcvar.parsers import apps
from hpcvar.parsers.errors import ParseError, TruncatedOutput

REPO = Path(__file__).resolve().parents[1]
CAPTURED = Path(__file__).resolve().parent / "captured"
AMG11 = CAPTURED / "amg2013" / "amg-1.1_problem2_np2_n24.out"
AMG11_PIPE_UNBUFFERED = CAPTURED / "amg2013" / "amg-1.1_problem2_np1_n24_pipe_unbuffered.out"
AMG11_PIPE_STDBUF = CAPTURED / "amg2013" / "amg-1.1_problem2_np1_n24_pipe_stdbuf.out"
AMG2023 = CAPTURED / "amg2023" / "amg2023-6b1514a_problem2_np2_n40.out"

_NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]\d+)?"


def stamped(path: Path) -> list[tuple[float, str]]:
    rows = []
    for raw in path.read_text().splitlines():
        stamp, _, text = raw.partition(" ")
        rows.append((float(stamp), text))
    return rows


def printed_wall(path: Path, title: str) -> float:
    """The ``wall clock time`` of the timing block titled ``title``, read from the text."""
    texts = [text for _, text in stamped(path)]
    at = texts.index(title)
    wall = next(t for t in texts[at:] if "wall clock time" in t)
    return float(re.search(rf"wall clock time = ({_NUMBER}) seconds", wall)[1])


@pytest.fixture(scope="module")
def amg11() -> apps.AppOutput:
    return apps.read(AMG11)


@pytest.fixture(scope="module")
def amg2023() -> apps.AppOutput:
    return apps.read(AMG2023)


def describe_amg_tests(tmp_path: Path, size: str) -> dict[str, dict]:
    """ReFrame's description of the two AMG tests at ``HPCVAR_RFM_SIZE=size``."""
    env = {**os.environ, "HPCVAR_RFM_SIZE": size, "HPCVAR_RFM_PREFIX": str(tmp_path / "rfm")}
    env.pop("HPCVAR_RFM_NODES", None)
    out = subprocess.run([str(Path(sys.executable).with_name("reframe")), "-C", "config/reframe/settings.py",
                          "--system", "generic-slurm", "-c", "reframe_tests/apps/amg/amg.py", "-n", "AMG20(13|23)",
                          "--describe"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return {t["display_name"]: t for t in json.loads(out.stdout)}


def test_reframe_tests_datasets_and_inputs(tmp_path: Path) -> None:
    """AMG 1.1 stays in amg-N, AMG2023 gets amg2023-N; Table I's -n 32 32 32 unless toy-sized,
    where the captured runs' sizes are the defaults."""
    full, toy = describe_amg_tests(tmp_path, "full"), describe_amg_tests(tmp_path, "toy")
    assert {name: (t["dataset"], t["local_size"]) for name, t in full.items()} == {
        "AMG2013 %num_nodes=128": ("amg-128", "32 32 32"), "AMG2013 %num_nodes=512": ("amg-512", "32 32 32"),
        "AMG2023 %num_nodes=128": ("amg2023-128", "32 32 32"), "AMG2023 %num_nodes=512": ("amg2023-512", "32 32 32")}
    assert {name: (t["dataset"], t["local_size"], t["expected_steps"]) for name, t in toy.items()} == {
        "AMG2013 %num_nodes=1": ("amg-1", "24 24 24", 6), "AMG2023 %num_nodes=1": ("amg2023-1", "40 40 40", 1)}
    for path, n in ((AMG11, 24), (AMG2023, 40)):  # 2 ranks: -P 2 1 1
        texts = [text for _, text in stamped(path)]
        assert f"    (Nx, Ny, Nz) = ({2 * n}, {n}, {n})" in texts
        assert "    (Px, Py, Pz) = (2, 1, 1)" in texts


# --- AMG 1.1 ---------------------------------------------------------------------------------------

def test_amg11_real_output_steps(amg11) -> None:
    rows = stamped(AMG11)
    texts = [text for _, text in rows]
    starts = [i for i, text in enumerate(texts) if text == "Solver: AMG-GMRES"]
    assert (amg11.app, amg11.nranks, amg11.timestamped) == ("amg2013", 2, True)
    assert len(amg11.steps) == len(starts) == 6 and amg11.checks["time_steps"] == 6
    assert amg11.steps["problem"].tolist() == [2] * 6
    # Each step's iterations: the five GMRES solves printed inside it.
    bounds = [*starts, texts.index("Problem 2: Cumulative AMG-GMRES Solve Time:")]
    expected = [sum(int(m[1]) for t in texts[a:b] if (m := re.fullmatch(r"GMRES Iterations = (\d+)", t)))
                for a, b in zip(bounds, bounds[1:])]
    assert amg11.steps["iterations"].tolist() == expected
    assert sum(expected) == amg11.checks["iterations"] == 211  # "Cum. No. of Iterations = 211"
    assert amg11.steps["final_residual"].iloc[-1] == amg11.checks["final_residual"] == 6.41935e-16
    assert (amg11.steps["final_residual"] < 1e-6).all()
    # Step boundaries are the stamps of the 'Solver:' lines and of the cumulative block's title.
    assert amg11.steps["start"].tolist() == [rows[i][0] for i in bounds[:-1]]
    assert amg11.steps["end"].tolist() == [rows[i][0] for i in bounds[1:]]


def test_amg11_prints_no_per_step_time(amg11) -> None:
    """reported_s is NaN for every step; the one printed solve time is the loop's, in total_s."""
    assert amg11.steps["reported_s"].isna().all()
    wall = printed_wall(AMG11, "Problem 2: Cumulative AMG-GMRES Solve Time:")
    assert amg11.total_s == wall == 2.534662


def test_amg11_steps_add_up_to_its_timer(amg11) -> None:
    """What AMG 1.1's timer covers -- the six steps -- agrees with the ts stamps within 5%
    (here 0.3%), and every step is a real step, not a buffer flush."""
    durations = amg11.steps["duration_s"]
    assert durations.sum() == pytest.approx(amg11.total_s, rel=0.05)
    assert durations.sum() == pytest.approx(amg11.total_s, rel=0.005)
    assert (durations > 0.1).all()  # 0.21-0.71 s on the shared 2-core machine


def test_stdbuf_fixes_time_steps_read_through_a_pipe() -> None:
    """AMG 1.1 does not flush in its time-step loop. Through a pipe (srun without -u: the case of
    the issue) and without stdbuf, stdio's block buffer reaches ``ts`` in bursts: steps of 0.4 ms
    next to steps of 0.6 s, and the first 'Solver:' line stamped late, so the steps fall a quarter
    short of AMG's own loop time. The same run under ``stdbuf -oL`` agrees with it."""
    unbuffered, fixed = apps.read(AMG11_PIPE_UNBUFFERED), apps.read(AMG11_PIPE_STDBUF)
    assert len(unbuffered.steps) == len(fixed.steps) == 6
    lumpy = unbuffered.steps["duration_s"]
    assert lumpy.min() < 0.005 and lumpy.max() > 0.5
    assert lumpy.sum() < 0.8 * unbuffered.total_s  # 1.126 s of 1.502 s
    even = fixed.steps["duration_s"]
    assert even.sum() == pytest.approx(fixed.total_s, rel=0.005)  # 1.92696 s of 1.928751 s
    assert even.min() > 0.25 and even.max() < 0.4


def test_amg11_reads_the_same_without_timestamps(tmp_path: Path, amg11) -> None:
    plain = tmp_path / "amg.out"
    plain.write_text("".join(f"{text}\n" for _, text in stamped(AMG11)))
    out = apps.read(plain)
    assert out.timestamped is False and len(out.steps) == 6
    assert out.steps["iterations"].tolist() == amg11.steps["iterations"].tolist()
    assert out.total_s == amg11.total_s


# --- AMG2023 ---------------------------------------------------------------------------------------

def test_amg2023_real_output_step(amg2023) -> None:
    rows = stamped(AMG2023)
    texts = [text for _, text in rows]
    assert (amg2023.app, amg2023.nranks) == ("amg2023", 2)
    assert len(amg2023.steps) == 1 and amg2023.checks["solves"] == 1
    step = amg2023.steps.iloc[0]
    assert step["reported_s"] == printed_wall(AMG2023, "Problem 2: AMG-PCG Solve Time:") == 0.33349
    assert (step["problem"], step["iterations"], step["final_residual"]) == (2, 14, 6.840136e-09)
    assert amg2023.checks["setup_s"] == printed_wall(AMG2023, "Problem 2: AMG Setup Time:")
    assert amg2023.checks["fom"] == float(re.search(rf"\(FOM\): .* ({_NUMBER})$", texts[-2])[1])
    assert step["start"] == rows[texts.index("Problem 2: AMG Setup Time:")][0]
    assert step["end"] == rows[texts.index("Problem 2: AMG-PCG Solve Time:")][0]
    # AMG2023 prints "Solver: AMG-PCG" (-printstats) but no "No. of Time Steps": one step, its solve.
    assert "Solver: AMG-PCG" in texts and amg2023.checks["time_steps"] is None


def test_amg2023_step_agrees_with_its_solve_timer(amg2023) -> None:
    step = amg2023.steps.iloc[0]
    assert step["duration_s"] == pytest.approx(step["reported_s"], rel=0.05)
    assert abs(step["duration_s"] - step["reported_s"]) < 0.002  # 0.332923 s against 0.33349 s


# --- simulator --------------------------------------------------------------------------------------

def test_simulated_amg11_output_matches_the_real_one(tmp_path: Path, amg11) -> None:
    """The simulator's AMG 1.1 output, for the real run's steps, rank count and -n, reads into the
    same columns and figures, and is the real output line for line up to the numbers printed
    (each number and the padding before it compared as one field: hypre's fixed-width formats)."""
    spans = list(zip(amg11.steps["start"], amg11.steps["end"]))
    path = apps.write_timestamped(tmp_path / "sim.out", "amg2013", spans, nranks=2, n=24,
                                  gmres_iterations=(16, 6, 5, 4, 3))
    sim = apps.read(path)
    assert list(sim.steps.columns) == list(amg11.steps.columns)
    assert (sim.steps.dtypes == amg11.steps.dtypes).all()
    assert sorted(sim.checks) == sorted(amg11.checks)
    assert (sim.app, sim.nranks, len(sim.steps)) == (amg11.app, amg11.nranks, len(amg11.steps))
    np.testing.assert_allclose(sim.steps["duration_s"], amg11.steps["duration_s"], atol=2e-6)
    assert sim.steps["reported_s"].isna().all()

    def shape(p: Path) -> list[str]:
        return [re.sub(rf" *{_NUMBER}", " N", text) for _, text in stamped(p)]

    real, simulated = shape(AMG11), shape(path)
    assert len(simulated) == len(real) == 587
    assert [i for i, (a, b) in enumerate(zip(real, simulated)) if a != b] == []


def test_simulated_amg11_hierarchy_follows_the_problem_size(tmp_path: Path) -> None:
    """-n 16 on 2 ranks ends on 7 rows (Gaussian elimination, relax type 9, as the real run at -n
    16 printed); -n 24 ends on 18 rows (relax type 18)."""
    texts = {n: [t for _, t in stamped(apps.write_timestamped(tmp_path / f"n{n}.out", "amg2013", [(1.0, 2.0)],
                                                             nranks=2, n=n))] for n in (16, 24)}
    assert " 0    8192   198904  0.003     8   27  24.3   5.000e-01   1.950e+01" in texts[16]
    assert "   Type 0=Jac, 3=hGS, 6=hSGS, 9=GE:     18   18     9 " in texts[16]
    assert "   Type 0=Jac, 3=hGS, 6=hSGS, 9=GE:     18   18    18 " in texts[24]
    real24 = [t for _, t in stamped(AMG11)]
    assert " 0   27648   695800  0.001     8   27  25.2   5.000e-01   1.950e+01" in real24
    assert real24[real24.index("Operator Matrix Information:") + 5] in texts[24]


# --- truncated output -------------------------------------------------------------------------------

def cut(tmp_path: Path, source: Path, keep: int) -> Path:
    path = tmp_path / source.name
    path.write_text("".join(source.read_text().splitlines(keepends=True)[:keep]))
    return path


def test_amg11_cut_inside_a_time_step_raises(tmp_path: Path) -> None:
    """A run that died in its fourth time step: truncated output naming the file and its last
    line, carrying the three time steps completed before (each closed by the next one's start;
    collation keeps them in the quarantine record)."""
    texts = [text for _, text in stamped(AMG11)]
    fourth = [i for i, t in enumerate(texts) if t == "Solver: AMG-GMRES"][3]
    path = cut(tmp_path, AMG11, fourth + 40)
    with pytest.raises(TruncatedOutput) as info:
        apps.read(path)
    error = info.value
    assert error.path == str(path) and error.line == fourth + 40
    assert "truncated" in error.message and "Solve Time" in error.message
    full = apps.read(AMG11).steps
    assert [c["step"] for c in error.completed] == [1, 2, 3]
    assert [c["duration_s"] for c in error.completed] == pytest.approx(list(full["duration_s"].iloc[:3]))
    assert all(c["reported_s"] is None for c in error.completed)  # AMG 1.1 times the loop, not a step


def test_amg2023_cut_inside_the_solve_block_raises(tmp_path: Path) -> None:
    texts = [text for _, text in stamped(AMG2023)]
    title = texts.index("Problem 2: AMG-PCG Solve Time:")
    path = cut(tmp_path, AMG2023, title + 3)  # the block's title, rule and phase name: no wall clock time
    with pytest.raises(ParseError) as info:
        apps.read(path)
    error = info.value
    assert error.path == str(path) and error.line == title + 3
    assert "truncated" in error.message and "wall clock time" in error.message
    assert isinstance(error, TruncatedOutput) and error.completed == []  # its one step never finished
    assert not math.isnan(apps.read(AMG2023).steps["reported_s"].iloc[0])
