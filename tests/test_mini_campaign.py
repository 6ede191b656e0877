"""The real mini-campaign (config/campaign-mini.yaml) on the local Slurm cluster: one round of
hpcvar's AMG proxy, of every Table I code when a source mirror is set (toy-sized, mpiP on), and of
the campaign microbenchmarks, with the suite's Aggressor as a job alongside, through `snakemake
--profile profiles/local-slurm --configfile ...`: imported, collated, analysed, reported. Runs
after tests/test_real_apps.py built the applications into the session's build cache (it waits for
that build otherwise)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from conftest import NEEDS_MIRROR, REPO, build_cache, machine, snakemake, source_mirror
from hpcvar.data.dataset import Dataset
from test_campaign import PROFILE, cluster  # noqa: F401  (the dev Slurm cluster fixture)
from test_real_apps import APP_TESTS, LOOP_TIMER_ONLY, OWN_APPS, STAMP_JITTER_S, STEP_TOLERANCE

#: whole_machine: the module holds the machine itself, alone for the round (see `mini`).
pytestmark = [pytest.mark.slow, pytest.mark.whole_machine]
MICROBENCHMARKS = ("collectives", "overtime", "confidence")


@pytest.fixture(scope="module")
def mini(tmp_path_factory, cluster):  # noqa: F811
    wd = tmp_path_factory.mktemp("mini")
    for item in ("Snakefile", "workflow", "config"):
        subprocess.run(["cp", "-r", str(REPO / item), str(wd / item)], check=True)
    (wd / "reframe_tests").symlink_to(REPO / "reframe_tests")  # the project's suite: ReFrame runs here
    config = yaml.safe_load((REPO / "config" / "campaign-mini.yaml").read_text())
    config["results"] = "results"
    mirror = source_mirror()
    # As a user with a mirror runs it: the mirror comes from the environment.
    env = {**cluster, "HPCVAR_SOURCE_MIRROR": str(mirror or "")}
    config["campaign"]["environment"].update(HPCVAR_BUILD_CACHE=str(build_cache(tmp_path_factory)))
    (wd / "mini.yaml").write_text(yaml.safe_dump(config))
    # The round alone on the machine: the test compares the stamped step times with the programs'
    # own, and another test's CPU load starves `ts` and srun as an unplanned CPU hog would (in a
    # full suite the proxy's last step was stamped 69 ms late, beside the round's own Aggressor
    # and the other worker). The round and its import (about a second) hold the machine alone;
    # collation, the analyses and the report share it.
    last = f"results/rounds/{config['campaign']['rounds']:03d}/imported.json"
    with machine(exclusive=True):
        out = snakemake(last, "--profile", PROFILE, "--configfile", "mini.yaml", cwd=wd, env=env, timeout=2400)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    with machine(exclusive=False):
        out = snakemake("--profile", PROFILE, "--configfile", "mini.yaml", cwd=wd, env=env, timeout=2400)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    res = wd / "results"
    ds = Dataset(res / "dataset")  # a table no run has (mpi_profile without mpiP) reads empty
    return res, {t: ds.read(t) for t in ("runs", "steps", "mpi_profile", "neighbourhood")}


def round_apps() -> dict:
    """The applications a round runs here: the proxy always, Table I's codes with a mirror."""
    return {**(APP_TESTS if source_mirror() else {}), **OWN_APPS}


def test_one_round_of_every_application_and_microbenchmark(mini):
    _, t = mini
    runs = t["runs"]
    expected = sorted([f"{prefix}-1" for _, prefix in round_apps().values()] + [f"{m}-1" for m in MICROBENCHMARKS])
    assert sorted(runs["dataset"]) == expected
    assert (runs["state"] == "COMPLETED").all()
    apps = runs[runs["num_steps"] > 0]
    assert len(apps) == len(round_apps())
    steps = t["steps"].merge(apps[["run_id", "dataset"]], on="run_id")
    assert steps.groupby("dataset").size().to_dict() == apps.set_index("dataset")["num_steps"].to_dict()
    # ... which are the steps each application's ReFrame test expects (and its sanity checked).
    res, _ = mini
    report = json.loads(next((res / "rounds").glob("*/reframe-report.json")).read_text())
    expected_steps = {c["dataset"]: c["expected_steps"] for run in report["runs"] for c in run["testcases"]
                      if c.get("expected_steps")}
    assert apps.set_index("dataset")["num_steps"].to_dict() == expected_steps
    timed = steps[steps["reported_s"].notna()]
    assert set(timed["dataset"]) == {f"{prefix}-1" for t, (_, prefix) in round_apps().items() if t not in LOOP_TIMER_ONLY}
    diff = (timed["duration_s"] - timed["reported_s"]).abs()
    assert ((diff <= STEP_TOLERANCE * timed["reported_s"]) | (diff <= STAMP_JITTER_S)).all(), timed.to_string()


@NEEDS_MIRROR  # mpiP is built from the mirror
def test_every_application_run_has_its_mpip_profile(mini):
    _, t = mini
    apps = t["runs"][t["runs"]["num_steps"] > 0]
    assert set(t["mpi_profile"]["run_id"]) == set(apps["run_id"])


def test_the_aggressor_is_in_every_runs_neighbourhood(mini):
    res, t = mini
    # The aggressor's job: the job of the round's alongside ReFrame run.
    reports = list((res / "reframe" / "rounds").glob("*/alongside/reframe-report.json"))
    assert len(reports) == 1
    cases = [c for run in json.loads(reports[0].read_text())["runs"] for c in run["testcases"]
             if c["display_name"].startswith("Aggressor")]
    job = str(cases[0]["jobid"])
    neigh = t["neighbourhood"]
    assert set(neigh.loc[neigh["job_id"] == job, "run_id"]) == set(t["runs"]["run_id"])


def test_the_report_covers_the_round(mini):
    res, t = mini
    assert f"{len(t['runs'])} runs" in (res / "summary.txt").read_text().splitlines()[0]
    html = (res / "report.html").read_text()
    for dataset in t["runs"]["dataset"]:
        assert dataset in html, dataset
