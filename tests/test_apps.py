"""Application stdout (hpcvar.parsers.apps): real samples, ts-prefixed variants, writers, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcvar.parsers import apps
from hpcvar.parsers.errors import ParseError

APPS_DIR = SAMPLES / "apps"
SAMPLE_FILES = sorted(p for p in APPS_DIR.glob("*/*") if p.name != "SOURCES.md")
# Files kept next to the outputs that are not application stdout: stderr dumps and a MILC input deck.
NOT_STDOUT = {"amg2023_aws-pcluster_32n_20-iter-1.err", "milc_su3_rmd_cori_128rank_mpip.err",
              "milc_ks_imp_dyn_test_su3_rmd.1.sample-in"}
FOLDER_APPS = {"amg": {"amg2013", "amg2023"}, "milc": {"milc"}, "umt": {"umt"}, "minivite": {"minivite"},
               "osu": {"osu"}, "imb": {"imb"}}
BASE = 1_700_000_000.0
TICK = 0.125  # exact in binary: stamped times compare with ==


def sample(folder: str, name: str) -> Path:
    return APPS_DIR / folder / name


def stamp(text: str, base: float = BASE) -> str:
    """``text`` as ``ts '%.s'`` prints it, line n stamped ``base + n * TICK``."""
    return "".join(f"{base + n * TICK:.6f} {line}\n" for n, line in enumerate(text.splitlines(), 1))


def at(line_no: int, base: float = BASE) -> float:
    return base + line_no * TICK


def write_lines(tmp_path: Path, lines: list[str], name: str = "out.txt") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def sample_lines(folder: str, name: str) -> list[str]:
    return sample(folder, name).read_text().splitlines()


# --- every sample ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_every_sample_file(path: Path) -> None:
    head = path.read_text(errors="replace")[:8192]
    if path.name in NOT_STDOUT:
        assert not apps.sniff(head, path.name)
        with pytest.raises(ParseError, match="unknown application output"):
            apps.read(path)
        return
    assert apps.sniff(head, path.name)
    out = apps.read(path)
    assert out.app in FOLDER_APPS[path.parent.name]
    assert out.app == apps.detect_app(head)
    assert not out.timestamped
    assert list(out.steps.columns[:5]) == ["step", "start", "end", "duration_s", "reported_s"]
    if out.table is None:
        assert len(out.steps) > 0
        assert out.steps["step"].tolist() == list(range(1, len(out.steps) + 1))
        assert out.steps["start"].isna().all()
    else:
        assert out.steps.empty and len(out.table) > 0
    summary = apps.describe(path)
    assert summary["kind"] == "app_stdout" and summary["records"] > 0 and summary["time_span"] is None


@pytest.mark.parametrize("path", sorted(p for folder in ("mpiP", "ldms", "slurm", "reframe")
                                        for p in (SAMPLES / folder).rglob("*") if p.is_file()),
                         ids=lambda p: p.name)
def test_no_false_positive_on_other_formats(path: Path) -> None:
    assert not apps.sniff(path.read_text(errors="replace")[:8192], path.name)


# --- real values, checked by reading the files --------------------------------------------------------

def test_amg2023_aws() -> None:
    out = apps.read(sample("amg", "amg2023_aws-pcluster_32n_20-iter-1.out"))
    assert (out.app, out.version, out.nranks) == ("amg2023", None, 16 * 8 * 8)
    assert len(out.steps) == 1
    step = out.steps.iloc[0]
    assert step["reported_s"] == 42.876666 and step["duration_s"] == 42.876666
    assert (step["problem"], step["iterations"], step["final_residual"]) == (2, 31, 7.743764e-09)
    assert out.checks["setup_s"] == 31.330013 and out.total_s == 42.876666


def test_amg2023_azure_differs_from_aws() -> None:
    out = apps.read(sample("amg", "amg2023_azure-cyclecloud_32n_amg-32n-164-iter-1.out"))
    assert out.steps["reported_s"].tolist() == [32.599525]
    assert out.checks["final_residual"] == 6.785159e-09


def test_amg2023_lanl_two_runs_in_one_file() -> None:
    out = apps.read(sample("amg", "amg2023_lanl_amg-1.1.32.out"))
    assert out.nranks == 24 * 12 * 12
    assert out.steps["problem"].tolist() == [1, 2]
    assert out.steps["reported_s"].tolist() == [1.317902, 1.251026]
    assert out.steps["iterations"].tolist() == [12, 26]
    assert out.steps["final_residual"].tolist() == [4.474272e-13, 8.681188e-09]
    assert out.checks["iterations"] == 38 and out.checks["solves"] == 2
    assert out.total_s == pytest.approx(1.317902 + 1.251026)


def test_amg2013_problem1_and_problem2_without_stats() -> None:
    p1 = apps.read(sample("amg", "amg_llnl2017_generated_problem1_np8_n25.out"))
    assert (p1.app, p1.nranks) == ("amg2013", 8)
    assert p1.steps[["reported_s", "iterations", "final_residual"]].values.tolist() == [[0.604431, 20, 6.184256e-09]]
    p2 = apps.read(sample("amg", "amg_llnl2017_generated_problem2_np8_n40.out"))
    assert p2.steps["reported_s"].tolist() == [38.623759]
    assert p2.checks["iterations"] == 214 and p2.checks["time_steps"] == 6
    assert p2.checks["final_residual"] == 4.731988e-15


def test_amg2013_printstats_gives_time_steps() -> None:
    out = apps.read(sample("amg", "amg_llnl2017_generated_problem2_printstats_np8_n25.out"))
    assert out.steps["iterations"].tolist() == [34, 34, 35, 35, 36, 38]
    assert out.steps["reported_s"].isna().all()
    assert out.steps["final_residual"].iloc[-1] == 2.174974e-15
    assert out.checks["iterations"] == 212 == out.steps["iterations"].sum()
    assert out.total_s == 9.743951


def test_milc_reference_outputs() -> None:
    rmd = apps.read(sample("milc", "milc_ks_imp_dyn_test_su3_rmd.1.sample-out"))
    assert (rmd.app, rmd.version, rmd.nranks) == ("milc", "7.7.13", 1)
    assert rmd.steps["plaq_ss"].tolist() == [1.804905, 1.805980]
    assert rmd.steps["reported_s"].isna().all()
    assert rmd.total_s == 3.950893 and rmd.checks["total_iters"] == 1446
    # ' OK converged ... iters= N': 8 molecular-dynamics solves, then also the 4 of the measurements
    assert rmd.steps["cg_solves"].tolist() == [8, 12] and rmd.steps["cg_iters"].tolist() == [305, 398]
    assert rmd.checks["cg_not_converged"] == 0
    l832 = apps.read(sample("milc", "milc_ks_imp_dyn_test_l832.su3_rmd.1.sample-out"))
    assert (l832.version, len(l832.steps), l832.total_s) == ("7", 2, 2991.595)
    hisq = apps.read(sample("milc", "milc_ks_imp_rhmc_test_su3_rhmd_hisq.1.sample-out"))
    assert (len(hisq.steps), hisq.steps["plaq_st"].iloc[0], hisq.total_s) == (1, 1.864015, 19.03348)


def test_milc_cori_two_parameter_sets() -> None:
    out = apps.read(sample("milc", "milc_su3_rmd_cori_128rank_mpip.out"))
    assert out.nranks == 128
    assert out.steps["segment"].tolist() == [1] * 4 + [2] * 4
    assert out.steps["plaq_ss"].iloc[4] == 1.539922
    assert out.checks == {"segments": 2, "warmups": 0, "trajectories": 8, "measurements": 8, "total_iters": 66088,
                          "cg_not_converged": 0, "segment_time_s": [37.805, 311.735],
                          "loop_stamped_s": [None, None]}  # the sample has no ts stamps
    # a CTIME build: 'CONGRAD5: time = ... iters = N' per solve, no ' OK converged' lines
    assert out.steps["cg_solves"].tolist() == [10, 14, 14, 14, 30, 34, 34, 34]
    assert out.steps["cg_max_iters"].tolist() == [5, 7, 7, 7, 584, 525, 542, 566]
    assert out.total_s == pytest.approx(37.805 + 311.735)  # INIT_TIME + NERSC_TIME


@pytest.mark.parametrize(("name", "nranks", "step", "radtr_min", "total_s", "flux"), [
    ("umt_umt_run_artifacts_1-p1.out", 1, 1, 1.93986156, 581.864, 15),
    ("umt_umt_run_artifacts_32-p1.out", 32, 1, 0.17633768, 49.6981, 33),
    ("umt_spp1_V100_run.blueos.1.log", 1, 2, 0.00975027, 3.27888, 10),
    ("umt_spp1_V100_run.blueos.2.log", 1, 5, 0.01061014, 3.35281, 10),
])
def test_umt(name: str, nranks: int, step: int, radtr_min: float, total_s: float, flux: int) -> None:
    out = apps.read(sample("umt", name))
    assert (out.nranks, len(out.steps), out.total_s) == (nranks, 5, total_s)
    assert out.steps["reported_s"].iloc[step - 1] == pytest.approx(radtr_min * 60)
    assert out.checks == {"time_steps": 5, "flux_iters": flux, "result_check": "PASSED"}
    assert out.steps["flux_iters"].sum() == flux


@pytest.mark.parametrize(("name", "nranks", "seconds", "modularity", "iterations"), [
    ("minivite_generated_np4_n100000.out", 4, 1.1567, 0.739367, 19),
    ("minivite_generated_DEBUG_PRINTF_np2_n20000.out", 2, 0.1172, 0.733236, 15),
])
def test_minivite(name: str, nranks: int, seconds: float, modularity: float, iterations: int) -> None:
    out = apps.read(sample("minivite", name))
    assert out.nranks == nranks and out.total_s == seconds
    assert out.steps[["reported_s", "modularity", "louvain_iterations"]].values.tolist() == [
        [seconds, modularity, iterations]]
    assert out.checks["modularity"] == modularity


def value(table, **where) -> float:
    rows = table
    for column, wanted in where.items():
        rows = rows[rows[column] == wanted]
    assert len(rows) == 1, rows
    return rows["value"].iloc[0]


def test_osu_single_benchmarks() -> None:
    lat = apps.read(sample("osu", "osu_latency_v5.3_baseline.out"))
    assert (lat.app, lat.version, len(lat.table)) == ("osu", "5.3", 24)
    assert value(lat.table, size_bytes=1024) == 22.21
    kinds = set(zip(lat.table["benchmark"], lat.table["metric"], lat.table["unit"]))
    assert kinds == {("osu_latency", "latency", "us")}
    bw = apps.read(sample("osu", "osu_bw_v5.3_baseline.out"))
    assert value(bw.table, size_bytes=4194304, metric="bandwidth") == 1191.14
    assert bw.table["unit"].unique().tolist() == ["MB/s"]


def test_osu_concatenated_tables() -> None:
    out = apps.read(sample("osu", "osu_v5.8_aws-pcluster_32n_pairwise_latency_bw_allreduce.out"))
    assert out.checks["tables"] == 57
    assert out.table.groupby("benchmark")["instance"].nunique().to_dict() == {
        "osu_allreduce": 1, "osu_bw": 28, "osu_latency": 28}
    assert value(out.table, instance=1, size_bytes=0) == 15.62
    assert out.table[out.table["instance"] == 1]["section"].iloc[0] == (
        "Point-to-point pairwise experiments for nodes queue1-dy-hpc6a48xlarge-11 queue1-dy-hpc6a48xlarge-15")
    allreduce = out.table[out.table["benchmark"] == "osu_allreduce"]
    assert value(allreduce, size_bytes=1048576) == 7572.44
    assert allreduce["metric"].unique().tolist() == ["avg_latency"]
    assert allreduce["section"].iloc[0] == "Allreduce iteration 0"


def test_imb_pingpong() -> None:
    old = apps.read(sample("imb", "imb2018u1_pingpong.out"))
    assert (old.version, old.nranks) == ("2018 Update 1", 2)
    assert value(old.table, size_bytes=4194304, metric="t") == 351.35
    assert value(old.table, size_bytes=4194304, metric="bandwidth") == 11937.62
    new = apps.read(sample("imb", "imb2019u5_pingpong_ompi4_ib.out"))
    assert new.version == "2019 Update 5"
    assert value(new.table, size_bytes=0, metric="t") == 0.84
    assert set(new.table["repetitions"][new.table["size_bytes"] == 65536]) == {640}


def test_imb_collectives_and_npmin_doubling() -> None:
    out = apps.read(sample("imb", "imb_generated_allreduce_barrier_pingpong_np4.out"))
    assert (out.version, out.nranks, out.checks["tables"]) == ("2021.11", 4, 5)
    allreduce = out.table[out.table["benchmark"] == "Allreduce"]
    assert value(allreduce, processes=4, size_bytes=1024, metric="t_avg") == 12.16
    assert value(allreduce, processes=2, size_bytes=1024, metric="t_avg") == 7.47
    assert value(allreduce, processes=4, size_bytes=65536, metric="t_max") == 98.21
    barrier = out.table[(out.table["benchmark"] == "Barrier") & (out.table["processes"] == 4)]
    assert barrier["size_bytes"].isna().all()
    assert value(barrier, metric="t_avg") == 5.42
    assert set(barrier["unit"]) == {"usec"}


# --- ts-prefixed real samples ----------------------------------------------------------------------

def stamped_sample(tmp_path: Path, folder: str, name: str) -> apps.AppOutput:
    path = tmp_path / name
    path.write_text(stamp(sample(folder, name).read_text()))
    return apps.read(path)


@pytest.mark.parametrize(("folder", "name", "boundaries"), [
    # UMT: loop-start line, then one 'TIME STEP n' line per step
    ("umt", "umt_umt_run_artifacts_1-p1.out", [(8, 19), (19, 68), (68, 117), (117, 166), (166, 215)]),
    # MILC: 'WARMUPS COMPLETED' starts each parameter set's loop, 'PLAQ:' ends each trajectory
    ("milc", "milc_su3_rmd_cori_128rank_mpip.out",
     [(68, 119), (119, 182), (182, 245), (245, 308), (359, 510), (510, 673), (673, 836), (836, 999)]),
    # AMG2023: from the setup block's title to the solve block's title, per run
    ("amg", "amg2023_lanl_amg-1.1.32.out", [(28, 36), (82, 90)]),
    # AMG2013 -printstats: 'Solver:' line per time step, the last ends at the cumulative solve title
    ("amg", "amg_llnl2017_generated_problem2_printstats_np8_n25.out",
     [(28, 118), (118, 210), (210, 302), (302, 392), (392, 484), (484, 577)]),
    # miniVite: graph-ready line to the 'Average total time' line
    ("minivite", "minivite_generated_np4_n100000.out", [(14, 18)]),
    ("minivite", "minivite_generated_DEBUG_PRINTF_np2_n20000.out", [(20, 284)]),
])
def test_timestamped_sample_boundaries(tmp_path: Path, folder: str, name: str,
                                       boundaries: list[tuple[int, int]]) -> None:
    plain = apps.read(sample(folder, name))
    out = stamped_sample(tmp_path, folder, name)
    assert out.timestamped and out.app == plain.app
    assert out.steps["start"].tolist() == [at(a) for a, _ in boundaries]
    assert out.steps["end"].tolist() == [at(b) for _, b in boundaries]
    assert out.steps["duration_s"].tolist() == [(b - a) * TICK for a, b in boundaries]
    # the app's own figures stay next to the timestamps
    np.testing.assert_array_equal(out.steps["reported_s"], plain.steps["reported_s"])
    assert out.total_s == plain.total_s


def test_timestamped_table_rows_carry_their_time(tmp_path: Path) -> None:
    out = stamped_sample(tmp_path, "osu", "osu_latency_v5.3_baseline.out")
    assert out.timestamped and len(out.table) == 24
    assert out.table["ts"].iloc[0] == at(3) and out.table["ts"].iloc[-1] == at(26)
    span = apps.describe(tmp_path / "osu_latency_v5.3_baseline.out")["time_span"]
    assert span == ["2023-11-14T22:13:20.375000+00:00", "2023-11-14T22:13:23.250000+00:00"]


def test_timestamped_head_is_sniffed() -> None:
    head = stamp(sample("umt", "umt_umt_run_artifacts_1-p1.out").read_text())[:8192]
    assert apps.sniff(head, "umt.out") and apps.detect_app(head) == "umt"


# --- writer round trips ------------------------------------------------------------------------------

#: Rank count a written output carries: miniVite 1.0 reading Table I's graph file (the writer's
#: default) prints none (tests/test_app_minivite.py covers its generated-graph output, which does).
def written_nranks(app: str, nranks: int) -> int | None:
    return None if app == "minivite" else nranks


def contiguous(start: float, durations: list[float]) -> list[tuple[float, float]]:
    edges = [round(start + sum(durations[:k]), 6) for k in range(len(durations) + 1)]
    return list(zip(edges[:-1], edges[1:]))


@pytest.mark.parametrize("app", apps.WRITABLE_APPS)
def test_writer_round_trip(tmp_path: Path, app: str) -> None:
    steps = contiguous(1_700_000_123.123456, [1.5, 2.000001, 0.75, 13.333333, 0.000001, 4.25])
    path = apps.write_timestamped(tmp_path / f"{app}.out", app, steps, nranks=16)
    assert apps.sniff(path.read_text()[:8192], path.name)
    out = apps.read(path)
    assert (out.app, out.nranks, out.timestamped, len(out.steps)) == (app, written_nranks(app, 16), True, 6)
    assert out.steps["start"].tolist() == [a for a, _ in steps]
    assert out.steps["end"].tolist() == [b for _, b in steps]
    np.testing.assert_allclose(out.steps["duration_s"], [b - a for a, b in steps], atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(app=st.sampled_from(apps.WRITABLE_APPS), nranks=st.integers(1, 4096),
       first_us=st.integers(1_600_000_000_000_000, 1_900_000_000_000_000),
       durations_us=st.lists(st.integers(0, 10**9), min_size=1, max_size=12))
def test_writer_round_trip_any_steps(tmp_path_factory, app: str, nranks: int, first_us: int,
                                     durations_us: list[int]) -> None:
    edges = np.cumsum([first_us, *durations_us])
    steps = [(int(a) / 1e6, int(b) / 1e6) for a, b in zip(edges[:-1], edges[1:])]
    path = apps.write_timestamped(tmp_path_factory.mktemp("w") / "out", app, steps, nranks=nranks)
    out = apps.read(path)
    assert (out.nranks, len(out.steps)) == (written_nranks(app, nranks), len(steps))
    assert list(zip(out.steps["start"], out.steps["end"])) == steps


def test_writer_app_specific_figures(tmp_path: Path) -> None:
    steps = contiguous(1_700_000_000.5, [60.0, 90.0])
    umt = apps.read(apps.write_timestamped(tmp_path / "umt.out", "umt", steps, nranks=4, reported_s=[55.5, 88.25]))
    assert umt.steps["reported_s"].tolist() == pytest.approx([55.5, 88.25])
    assert umt.total_s == 143.75  # UMT 2.0's cumulativeWorkTime: the sum of its RADTR cycle times
    vite = apps.read(apps.write_timestamped(tmp_path / "vite.out", "minivite", steps, nranks=4, modularity=0.7125,
                                            louvain_iterations=12))
    assert vite.steps["reported_s"].tolist() == [60.0, 90.0]
    assert (vite.checks["modularity"], vite.checks["louvain_iterations"]) == (0.7125, 12)
    milc = apps.read(apps.write_timestamped(tmp_path / "milc.out", "milc", steps, nranks=4, version="7.8.1"))
    assert (milc.version, milc.checks["trajectories"], milc.total_s) == ("7.8.1", 2, 150.0)
    amg = apps.read(apps.write_timestamped(tmp_path / "amg.out", "amg2013", steps, nranks=12,
                                           gmres_iterations=(10, 5)))
    assert amg.steps["iterations"].tolist() == [15, 15] and amg.checks["time_steps"] == 2


def test_writer_rejects_bad_requests(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="contiguous"):
        apps.write_timestamped(tmp_path / "x", "umt", [(0.0, 1.0), (2.0, 3.0)], nranks=1)
    with pytest.raises(ValueError, match="no version"):
        apps.write_timestamped(tmp_path / "x", "umt", [(0.0, 1.0)], nranks=1, version="1.0")
    with pytest.raises(ValueError, match="no writer"):
        apps.write_timestamped(tmp_path / "x", "osu", [(0.0, 1.0)], nranks=1)
    with pytest.raises(ValueError, match="2 values for 1 steps"):
        apps.write_timestamped(tmp_path / "x", "minivite", [(0.0, 1.0)], nranks=1, reported_s=[1.0, 2.0])


# --- bad input ---------------------------------------------------------------------------------------

def parse_error(path: Path) -> ParseError:
    with pytest.raises(ParseError) as info:
        apps.read(path)
    return info.value


def test_amg_truncated_solve_block(tmp_path: Path) -> None:
    lines = sample_lines("amg", "amg2023_aws-pcluster_32n_20-iter-1.out")[:39]  # stops before 'Iterations = 31'
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 39 and "truncated" in error.message and "Iterations" in error.message


def test_amg_without_final_solve_section(tmp_path: Path) -> None:
    lines = sample_lines("amg", "amg2023_aws-pcluster_32n_20-iter-1.out")[:33]  # ends after the setup block
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 33 and "Solve Time" in error.message


def test_amg2013_time_step_count_mismatch(tmp_path: Path) -> None:
    lines = sample_lines("amg", "amg_llnl2017_generated_problem2_printstats_np8_n25.out")
    del lines[117]  # the second 'Solver: AMG-GMRES' line
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 576 and "expected 6 'Solver:'" in error.message


def test_umt_cut_inside_a_step_block(tmp_path: Path) -> None:
    lines = sample_lines("umt", "umt_umt_run_artifacts_1-p1.out")[:125]  # inside TIME STEP 3, before RADTR
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 125 and "inside the TIME STEP 3 report" in error.message


def test_umt_step_block_without_run_time(tmp_path: Path) -> None:
    lines = sample_lines("umt", "umt_umt_run_artifacts_1-p1.out")
    del lines[79]  # the RADTR line of TIME STEP 2
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 116 and "TIME STEP 2" in error.message and "RADTR" in error.message


def test_milc_without_completion(tmp_path: Path) -> None:
    lines = sample_lines("milc", "milc_ks_imp_dyn_test_su3_rmd.1.sample-out")[:150]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 150 and "RUNNING COMPLETED" in error.message and "line 74" in error.message


def test_milc_missing_trajectory(tmp_path: Path) -> None:
    lines = sample_lines("milc", "milc_ks_imp_dyn_test_su3_rmd.1.sample-out")
    del lines[135]  # the second PLAQ line
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 180 and "expected 2 PLAQ: lines" in error.message


def test_minivite_result_without_modularity(tmp_path: Path) -> None:
    lines = sample_lines("minivite", "minivite_generated_np4_n100000.out")
    del lines[18]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 20 and "Modularity" in error.message


def test_timestamps_going_backwards(tmp_path: Path) -> None:
    lines = stamp(sample("umt", "umt_umt_run_artifacts_1-p1.out").read_text()).splitlines()
    lines[99] = f"{at(50):.6f} " + lines[99].split(" ", 1)[1]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 100 and "backwards" in error.message


def test_line_missing_its_timestamp(tmp_path: Path) -> None:
    lines = stamp(sample("minivite", "minivite_generated_np4_n100000.out").read_text()).splitlines()
    lines[9] = lines[9].split(" ", 1)[1]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 10 and "ts" in error.message


def test_osu_malformed_number(tmp_path: Path) -> None:
    lines = sample_lines("osu", "osu_latency_v5.3_baseline.out")
    assert lines[13].split() == ["1024", "22.21"]
    lines[13] = lines[13].replace("22.21", "22.2x")
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 14 and "'22.2x'" in error.message


def test_osu_header_without_rows(tmp_path: Path) -> None:
    lines = sample_lines("osu", "osu_latency_v5.3_baseline.out")[:2]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 1 and "no data rows" in error.message


def test_imb_row_missing_a_column(tmp_path: Path) -> None:
    lines = sample_lines("imb", "imb2019u5_pingpong_ompi4_ib.out")
    lines[40] = lines[40].rsplit(None, 1)[0]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 41 and "expected 4 columns" in error.message


def test_imb_truncated(tmp_path: Path) -> None:
    lines = sample_lines("imb", "imb_generated_allreduce_barrier_pingpong_np4.out")[:100]
    error = parse_error(write_lines(tmp_path, lines))
    assert error.line == 100 and "MPI_Finalize" in error.message


def test_unknown_and_empty_input(tmp_path: Path) -> None:
    sacct = next((SAMPLES / "slurm" / "sacct").glob("*.log"))
    error = parse_error(sacct)
    assert error.line == 1 and "unknown application output" in error.message
    assert "empty" in parse_error(write_lines(tmp_path, ["", "  "])).message


def test_describe_figures() -> None:
    summary = apps.describe(sample("umt", "umt_umt_run_artifacts_1-p1.out"))
    assert summary["format_version"] is None and summary["records"] == 5
    figures = summary["figures"]
    assert (figures["app"], figures["steps"], figures["total_s"], figures["result_check"]) == ("umt", 5, 581.864,
                                                                                               "PASSED")
    assert figures["mean_step_s"] == pytest.approx(9.69242230 * 60 / 5)  # RADTR accumulated minutes
    assert not any(isinstance(v, float) and math.isnan(v) for v in figures.values())


def test_amg_figure_of_merit_and_a_file_of_two_problems(samples):
    """AMG prints its Figure of Merit; the LANL output holds problem 1 (GMRES) then problem 2
    (PCG): inspect gives each problem's figures and no mean step mixing the two solves."""
    from hpcvar.parsers.apps import describe

    amg = samples / "apps" / "amg"
    one = apps.read(amg / "amg2023_aws-pcluster_32n_20-iter-1.out")
    assert one.checks["fom"] == 6.481247e+08  # "Figure of Merit (FOM): nnz_AP / (...) 6.481247e+08"
    assert apps.read(amg / "amg_llnl2017_generated_problem2_np8_n40.out").checks["fom"] == 8.371585e+07  # (FOM_2)
    info = describe(amg / "amg2023_lanl_amg-1.1.32.out")["figures"]
    assert info["problems"] == "1,2" and info["mean_step_s"] is None and "2 different problems" in info["note"]
    assert (info["problem_1_solve_s"], info["problem_1_iterations"], info["problem_1_fom"]) == (1.317902, 12, 4.363696e+09)
    assert (info["problem_2_solve_s"], info["problem_2_iterations"], info["problem_2_fom"]) == (1.251026, 26, 1.733236e+09)
    assert info["problem_1_setup_s"] + info["problem_2_setup_s"] == pytest.approx(info["setup_s"])
    assert "fom" not in info
