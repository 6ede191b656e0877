"""miniVite end to end: real captured runs (tests/captured/minivite/, SOURCES.md there) through
hpcvar's miniVite parser, the simulator's writer against them, bad input, and the job script the
toy-sized ReFrame test generates (its repetitions)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import lines_of, parse_error, write_lines
from hpcvar.parsers import apps
from hpcvar.parsers.errors import TruncatedOutput

REPO = Path(__file__).resolve().parents[1]
CAPTURED = Path(__file__).resolve().parent / "captured" / "minivite"
V10 = CAPTURED / "minivite-1.0_n40000_np2_x6.ts.out"  # the toy-sized ReFrame test's app.out
V12 = CAPTURED / "minivite-1.2_n40000_np2_x3.ts.out"  # miniVite 1.2, same graph, same launch
REFRAME = str(Path(sys.executable).with_name("reframe"))
CONFIG = str(REPO / "config" / "reframe" / "settings.py")

# The graph miniVite generates from `-n 40000` on 2 ranks (its generator's seed is a constant):
# the same Louvain result from every launch and from both releases.
MODULARITY, ITERATIONS = 0.741677, 9
GRAPH_READY = "Time to generate distributed graph of 40000 vertices (in s): "
RESULT_10 = re.compile(r"Modularity: (\S+), Iterations: (\S+), Time \(in s\): (\S+)")


def stamped(path: Path) -> list[tuple[float, str]]:
    """(epoch, text) of every line, read independently of the parser."""
    return [(float(ts), text) for ts, text in (line.split(" ", 1) for line in path.read_text().splitlines())]


# --- the real runs ------------------------------------------------------------------------------------

def test_real_run_steps_and_own_timer() -> None:
    assert apps.detect_app(V10.read_text()[:8192]) == "minivite"
    out = apps.read(V10)
    # Format 1.0 names no rank count; its generator's random-number count (2N / ranks) gives it.
    assert (out.app, out.version, out.nranks, out.timestamped) == ("minivite", "1.0", 2, True)
    steps = out.steps
    assert steps["step"].tolist() == [1, 2, 3, 4, 5, 6]
    # reported_s is exactly the Louvain-phase time each repetition printed.
    printed = [RESULT_10.fullmatch(text).groups() for _, text in stamped(V10) if text.startswith("Modularity: ")]
    assert len(printed) == 6
    assert steps["reported_s"].tolist() == [float(t) for _, _, t in printed]
    assert out.total_s == pytest.approx(sum(float(t) for _, _, t in printed), rel=1e-12)
    # Same graph, same threshold, one thread per rank: the same Louvain result every repetition.
    assert steps["modularity"].tolist() == [MODULARITY] * 6 == [float(m) for m, _, _ in printed]
    assert steps["louvain_iterations"].tolist() == [ITERATIONS] * 6
    assert out.checks == {"repetitions": 6, "modularity": MODULARITY, "louvain_iterations": ITERATIONS}
    assert list(steps.columns) == ["step", "start", "end", "duration_s", "reported_s", "modularity",
                                   "louvain_iterations"]


def test_stamped_step_durations_match_the_own_timer() -> None:
    """A step runs from its repetition's graph-ready line to its result line. miniVite 1.0's
    printed time is rank 0's MPI_Wtime between the barriers around distLouvainMethod; the stamped
    span adds only the barrier before the phase (after the graph-ready line is printed) and the
    difference of the two lines' forwarding delays (stdbuf -> mpirun -> ts). It excludes what
    lies outside the step: mpirun start-up, MPI_Init, graph generation (printed separately,
    1-2 s here) and MPI_Finalize. The steps are short (0.05-0.2 s) but agree within 5%; the
    largest gap is 2.2 ms."""
    out = apps.read(V10)
    lines = stamped(V10)
    starts = [ts for ts, text in lines if text.startswith(GRAPH_READY)]
    ends = [ts for ts, text in lines if text.startswith("Modularity: ")]
    assert out.steps["start"].tolist() == starts and out.steps["end"].tolist() == ends
    steps = out.steps
    np.testing.assert_allclose(steps["duration_s"], steps["end"] - steps["start"])
    relative = (steps["duration_s"] - steps["reported_s"]) / steps["reported_s"]
    assert relative.abs().max() < 0.05, relative.tolist()
    assert (steps["duration_s"] - steps["reported_s"]).abs().max() < 0.0025
    # Each repetition is a whole launch around its step: 0.8-1.5 s from its first line (printed
    # during graph generation) to its result, of which the step is a small part.
    firsts = [ts for ts, text in lines if text.startswith("Average time to generate 40000 random numbers")]
    assert len(firsts) == 6
    spans = np.array(ends) - np.array(firsts)
    assert ((spans > 0.5) & (spans < 2.0)).all() and (steps["duration_s"] < spans / 3).all()


def test_release_1_2_format_reads_to_the_same_columns() -> None:
    v10, v12 = apps.read(V10), apps.read(V12)
    assert (v12.app, v12.version, v12.nranks, v12.timestamped) == ("minivite", "1.2", 2, True)
    assert list(v12.steps.columns) == list(v10.steps.columns) and len(v12.steps) == 3
    averages = [float(m[1]) for m in re.finditer(r"Average total time \(in s\), #Processes: (\S+), 2$",
                                                V12.read_text(), re.MULTILINE)]
    assert v12.steps["reported_s"].tolist() == averages
    # The same graph gives the same Louvain result in both releases.
    assert v12.steps["modularity"].tolist() == [MODULARITY] * 3
    assert v12.steps["louvain_iterations"].tolist() == [ITERATIONS] * 3


# --- the simulator's writer against the real run -------------------------------------------------------

def numbers_blanked(lines: list[str]) -> list[str]:
    """Line texts without ts prefixes, every number replaced by '#'."""
    texts = [line.split(" ", 1)[1] if re.match(r"\d{10}\.\d{6} ", line) else line for line in lines]
    return [re.sub(r"\d+(?:\.\d+)?(?:e[+-]\d+)?", "#", text) for text in texts]


def test_simulated_output_is_the_real_format_with_the_real_columns(tmp_path: Path) -> None:
    real = apps.read(V10)
    spans = list(zip(real.steps["start"], real.steps["end"]))
    path = apps.write_timestamped(tmp_path / "sim.out", "minivite", spans, nranks=2, vertices=40000,
                                  reported_s=real.steps["reported_s"].tolist(), modularity=MODULARITY,
                                  louvain_iterations=ITERATIONS)
    sim = apps.read(path)
    assert (sim.app, sim.version, sim.nranks, sim.timestamped) == ("minivite", "1.0", 2, True)
    pd.testing.assert_frame_equal(sim.steps, real.steps, check_exact=False, rtol=1e-12, atol=0)
    assert sim.checks == real.checks and sim.total_s == pytest.approx(real.total_s, rel=1e-12)
    # Line for line the real text, up to the run-dependent numbers.
    assert numbers_blanked(lines_of(path)) == numbers_blanked(lines_of(V10))
    sim_text = [line.split(" ", 1)[1] for line in lines_of(path)]
    real_text = [text for _, text in stamped(V10)]
    for prefix in ("Generated Random Geometric Graph with d: ", "Number of vertices: ", "Modularity: "):
        assert [t for t in sim_text if t.startswith(prefix)] == [t for t in real_text if t.startswith(prefix)]


def test_simulated_campaign_output_reads_back(tmp_path: Path) -> None:
    """The simulator's default: Table I's graph file (no rank count printed), six contiguous steps."""
    spans = [(1.7e9 + 55 * k, 1.7e9 + 55 * (k + 1)) for k in range(6)]
    path = apps.write_timestamped(tmp_path / "vite.out", "minivite", spans, nranks=8192)
    out = apps.read(path)
    assert (out.version, out.nranks, len(out.steps)) == ("1.0", None, 6)
    assert out.steps["duration_s"].tolist() == [55.0] * 6 == out.steps["reported_s"].tolist()
    text = [line.split(" ", 1)[1] for line in lines_of(path)]
    assert text[:3] == ["Time to read input file and create distributed graph (in s): 1.27803",
                        "Modularity: 0.741677, Iterations: 9, Time (in s): 55", "*" * 70]
    assert len(text) == 18


@pytest.mark.parametrize("nranks", [1, 2, 64, 4096])
def test_generated_graph_output_carries_its_rank_count(tmp_path: Path, nranks: int) -> None:
    spans = [(1e9, 1e9 + 1.5), (1e9 + 3.25, 1e9 + 4.0)]  # with a gap: a relaunch between steps
    out = apps.read(apps.write_timestamped(tmp_path / "v.out", "minivite", spans, nranks=nranks, vertices=2**20))
    assert out.nranks == nranks and out.steps["start"].tolist() == [1e9, 1e9 + 3.25]
    assert out.steps["duration_s"].tolist() == [1.5, 0.75]


def test_writer_rejects_what_minivite_cannot_print(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="power-of-two"):
        apps.write_timestamped(tmp_path / "x", "minivite", [(0.0, 1.0)], nranks=3, vertices=3000)
    with pytest.raises(ValueError, match="power-of-two"):
        apps.write_timestamped(tmp_path / "x", "minivite", [(0.0, 1.0)], nranks=4, vertices=1002)
    with pytest.raises(ValueError, match="before step 1 ends"):
        apps.write_timestamped(tmp_path / "x", "minivite", [(0.0, 1.0), (0.5, 2.0)], nranks=1)


# --- bad input ----------------------------------------------------------------------------------------

def indices(lines: list[str], prefix: str) -> list[int]:
    return [i for i, line in enumerate(lines) if line.split(" ", 1)[1].startswith(prefix)]


def test_truncated_output_keeps_the_completed_repetitions(tmp_path: Path) -> None:
    """A run killed during repetition 4 (after its graph was ready, or while printing its
    result) is truncated output, naming file and line, and carries the three completed steps
    (collation keeps them in the quarantine record)."""
    lines = lines_of(V10)
    graph = indices(lines, GRAPH_READY)[3]
    result = indices(lines, "Modularity: ")[3]
    full = apps.read(V10).steps
    for cut in (lines[:graph + 1], lines[:result] + [lines[result][:60]]):
        path = write_lines(tmp_path, cut)
        with pytest.raises(TruncatedOutput) as err:
            apps.read(path)
        assert err.value.path == str(path) and err.value.line == len(cut)
        assert f"graph was ready at line {graph + 1}" in err.value.message
        kept = pd.DataFrame(err.value.completed)
        assert list(kept["step"]) == [1, 2, 3]
        for column in ("start", "end", "duration_s", "reported_s"):
            assert list(kept[column]) == pytest.approx(list(full[column].iloc[:3]))
    # Cut between repetitions (after a result line): a complete output of three repetitions,
    # which the test's sanity (six steps) fails.
    third = indices(lines, "Modularity: ")[2]
    assert len(apps.read(write_lines(tmp_path, lines[:third + 1])).steps) == 3


def test_output_without_any_result_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    lines = lines_of(V10)
    cut = indices(lines, "Modularity: ")[0]  # killed during the first Louvain phase
    target = write_lines(tmp_path, lines[:cut])
    error = parse_error(target)
    assert error.path == str(target) and error.line == cut and "truncated" in error.message
    assert str(error).startswith(f"{target}:{cut}: ")


def test_repetition_on_another_rank_count_is_an_error(tmp_path: Path) -> None:
    """What the old repeat hook produced: repetitions 2..N launched as `mpirun -np 1`, which
    draws 2N random numbers on its one rank (and so builds another graph)."""
    lines = lines_of(V10)
    lcg = indices(lines, "Average time to generate 40000 random numbers")[1]
    lines[lcg] = lines[lcg].replace("generate 40000 random", "generate 80000 random")
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == indices(lines, GRAPH_READY)[1] + 1
    assert "1 ranks" in error.message and "on 2" in error.message


def test_result_without_its_graph_line_is_an_error(tmp_path: Path) -> None:
    lines = lines_of(V10)
    del lines[indices(lines, GRAPH_READY)[2]]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == indices(lines, "Modularity: ")[2] + 1 and "outside a time-step loop" in error.message


def test_mixed_release_formats_are_an_error(tmp_path: Path) -> None:
    lines = lines_of(V10) + lines_of(V12)
    error = parse_error(write_lines(tmp_path, lines))
    first_12 = len(lines_of(V10)) + indices(lines_of(V12), "Average total time")[0] + 1
    assert error.line == first_12 and "1.2-format result after 1.0-format" in error.message


# --- the job script of the toy-sized ReFrame test -------------------------------------------------------

@pytest.fixture(scope="module")
def toy_job_script(tmp_path_factory) -> str:
    prefix = tmp_path_factory.mktemp("rfm-minivite")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCVAR_RFM_")}
    env.update({"HPCVAR_RFM_SIZE": "toy", "HPCVAR_RFM_PREFIX": str(prefix)})
    out = subprocess.run([REFRAME, "-C", CONFIG, "--system", "local", "-c", "reframe_tests/apps/minivite/minivite.py",
                          "-n", "^MiniVite", "--dry-run"], cwd=REPO, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    scripts = [p for p in (prefix / "stage").rglob("rfm_job.sh") if p.parent.name.startswith("MiniVite_")]
    assert len(scripts) == 1, scripts
    return scripts[0].read_text()


def test_every_repetition_is_the_same_launch(toy_job_script: str, tmp_path: Path) -> None:
    script = toy_job_script.splitlines()
    launches = [i for i, line in enumerate(script) if line.startswith("mpirun ")]
    assert len(launches) == 1, script  # one launch line, run `repetitions` times
    (at,) = launches
    assert script[at - 1] == "for hpcvar_rep in $(seq 1 6); do" and script[at + 1] == "done"
    assert re.fullmatch(r"mpirun -np 2 stdbuf -oL -eL \S+/install/bin/miniVite -n 40000 -t 1E-02", script[at])
    # The loop wraps the launch only: output timestamping and the counter sampler start before
    # it and stop after it.
    assert script.index("exec 3>&1 > >(ts '%.s' | tee app.out)") < at - 1
    assert any("hpcvar sample" in line for line in script[:at - 1])
    assert script[at + 2:] == ["kill -TERM $HPCVAR_SAMPLER_PID 2>/dev/null; wait $HPCVAR_SAMPLER_PID || true",
                               "exec 1>&3 3>&-", "wait $HPCVAR_TS_PID"]
    assert "export OMP_NUM_THREADS=1" in script
    # Run the loop as the job would, with mpirun recording its arguments: six identical launches.
    calls = tmp_path / "calls"
    loop = "\n".join(script[at - 1:at + 2])
    subprocess.run(["bash", "-c", f'mpirun() {{ echo "$*" >> {calls}; }}\n{loop}'], check=True)
    recorded = calls.read_text().splitlines()
    assert len(recorded) == 6 and set(recorded) == {script[at].removeprefix("mpirun ")}
    assert all(line.startswith("-np 2 ") for line in recorded)
