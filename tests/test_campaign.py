"""A campaign on a real Slurm cluster: `hpcvar dev slurm up`, then `snakemake --profile
profiles/local-slurm` with `source: campaign` — ReFrame submits the microbenchmarks round by
round, another Unix user's job runs alongside, and the rounds land in the dataset and the report.
Faults: a job scancel'ed mid-run, Snakemake killed during a round, collation run twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, snakemake
from hpcvar.dev import slurm as dev
from hpcvar.util.anonymise import Pseudonymiser

pytestmark = pytest.mark.slow
PROFILE = str(REPO / "profiles" / "local-slurm")
OTHER = dev.DEFAULT_EXTRA_USER
CAMPAIGN = """source: campaign
campaign:
  rounds: {rounds}
  system: local-slurm
  checks: [reframe_tests/microbenchmarks]
  tests: [Collectives, Confidence]
  options: ["-S", "Collectives.iterations={iterations}"{extra}]
# No interference experiment: the default's simulated one (about 40 s of CPU) is the main job's
# to test (test_workflow), not these rounds'.
interference:
  experiment: null
"""


def _hpcvar(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "hpcvar", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("the Slurm dev cluster needs root")
    up = _hpcvar("dev", "slurm", "up", "--link-etc", "--extra-user", OTHER)
    assert up.returncode == 0, up.stdout + up.stderr
    env = dev.slurm_env(dev.Layout(dev.state_dir()))
    yield env
    down = _hpcvar("dev", "slurm", "down")
    assert down.returncode == 0, down.stdout + down.stderr


def _sh(env, *cmd, user=None) -> str:
    full = ["runuser", "-u", user, "--", *cmd] if user else list(cmd)
    out = subprocess.run(full, env=env, capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _wait_running(env, name: str, timeout=120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = _sh(env, "squeue", "--all", "-h", "-o", "%i %j %T")
        for line in out.splitlines():
            job, jobname, state = line.split()
            if name in jobname and state == "RUNNING":
                return job
        time.sleep(0.5)
    pytest.fail(f"no running job named like {name!r}: {out}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, cluster):
    wd = tmp_path_factory.mktemp("campaign")
    for item in ("Snakefile", "workflow", "config"):
        subprocess.run(["cp", "-r", str(REPO / item), str(wd / item)], check=True)
    (wd / "reframe_tests").symlink_to(REPO / "reframe_tests")  # the project's suite: ReFrame runs here
    return wd


def _config(rounds, iterations, extra=()):
    return CAMPAIGN.format(rounds=rounds, iterations=iterations, extra="".join(f', "{o}"' for o in extra))


#: Collectives iterations of a round: every one is a latency row that collation and the
#: distributions analysis read (2,000 of each of 4 collectives x 3 sizes per run).
ITERATIONS = 2000


#: The workflow's target up to collation (the checkpoint): rounds 1-4 test how rounds, failed
#: and interrupted ones too, are collected, and stop there; round 5 runs the analyses and the
#: report too, once, on a dataset holding every round and both failures. Each analysis is a
#: Slurm job of its own, about 14 s apiece on this cluster (a pass of them takes about 70 s).
COLLATED = "results/dataset/collated.json"


def _run(wd, env, rounds, iterations=ITERATIONS, extra=(), targets=(), **kw):
    (wd / "campaign.yaml").write_text(_config(rounds, iterations, extra))
    # The targets first: --configfile takes every word after it.
    return snakemake(*targets, "--profile", PROFILE, "--configfile", "campaign.yaml", cwd=wd, env=env, **kw)


def test_two_rounds_with_another_users_job_alongside(cluster, workdir):
    aggressor = _sh(cluster, "sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", "-n", "2",
                    "--job-name=aggressor", "--wrap", "sleep 300", user=OTHER)
    try:
        out = _run(workdir, cluster, rounds=2, targets=[COLLATED])
    finally:
        _sh(cluster, "scancel", aggressor)
    assert out.returncode == 0, out.stderr[-4000:]
    res = workdir / "results"
    runs = pd.read_parquet(res / "dataset" / "runs")
    assert sorted(runs["dataset"]) == ["collectives-1", "collectives-1", "confidence-1", "confidence-1"]
    assert (runs["state"] == "COMPLETED").all() and runs["job_id"].is_unique
    # Every run's job is in sacct, and the other user's job is in every run's neighbourhood.
    for run_id in runs["run_id"]:
        assert (res / "raw" / "runs" / run_id / "sacct.txt").exists()
    salt = (workdir / ".hpcvar-salt").read_text().strip().encode()
    neigh = pd.read_parquet(res / "dataset" / "neighbourhood")
    theirs = neigh[neigh["job_id"] == aggressor]
    assert set(theirs["run_id"]) == set(runs["run_id"])
    assert set(theirs["user"]) == {Pseudonymiser(salt)(OTHER)} and OTHER not in set(neigh["user"])
    latency = pd.read_parquet(res / "dataset" / "latency")
    assert len(latency[latency["benchmark"] == "collectives"]) == 2 * 4 * 3 * ITERATIONS
    # Collation's summary counts this dataset.
    assert "4 runs" in (res / "summary.txt").read_text().splitlines()[0]
    # Nothing to do again.
    again = _run(workdir, cluster, rounds=2, targets=[COLLATED])
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_a_cancelled_run_is_recorded_as_failed_and_the_campaign_goes_on(cluster, workdir):
    """Round 3 with a long collectives run, scancel'ed once it runs."""
    parts = {p: p.read_bytes() for p in (workdir / "results" / "dataset").glob("*/part-*.parquet")}
    (workdir / "campaign.yaml").write_text(_config(3, 3_000_000))
    proc = subprocess.Popen([str(Path(sys.executable).with_name("snakemake")), COLLATED, "--profile", PROFILE,
                             "--configfile", "campaign.yaml"], cwd=workdir, env=cluster,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    job = _wait_running(cluster, "rfm_Collectives")
    _sh(cluster, "scancel", job)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    res = workdir / "results"
    quarantine = [json.loads(line) for line in (res / "dataset" / "quarantine.jsonl").read_text().splitlines()]
    failed = [q for q in quarantine if q["kind"] == "failed-run" and q["job_id"] == job]
    assert len(failed) == 1 and failed[0]["state"] == "CANCELLED"
    runs = pd.read_parquet(res / "dataset" / "runs")
    assert job not in set(runs["job_id"]) and len(runs) == 5  # round 3's Confidence run still counts
    # Collation appended round 3: the parts of rounds 1-2 are there, byte for byte.
    assert parts and all(p.read_bytes() == b for p, b in parts.items())
    runs_parts = [p for p in parts if p.parent.name == "runs"]
    assert len(list((res / "dataset" / "runs").glob("part-*.parquet"))) == len(runs_parts) + 1
    summary = (res / "summary.txt").read_text()
    assert "Failed runs (not used as data): 1\n  Slurm state not COMPLETED: 1 (CANCELLED: 1)\n" in summary


def test_snakemake_killed_during_a_round_resumes_without_duplicates(cluster, workdir):
    # Long enough to be running when Snakemake is killed; the rerun of the round is a usual one.
    (workdir / "campaign.yaml").write_text(_config(4, 100_000))
    exe = str(Path(sys.executable).with_name("snakemake"))
    proc = subprocess.Popen([exe, COLLATED, "--profile", PROFILE, "--configfile", "campaign.yaml"], cwd=workdir,
                            env=cluster,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _wait_running(cluster, "rfm_")
    os.killpg(proc.pid, signal.SIGKILL)  # Snakemake, ReFrame and everything they started here
    proc.wait()
    # What a user does after killing a campaign: the batch jobs ReFrame had submitted keep running.
    _sh(cluster, "scancel", "--user=root")
    assert not (workdir / "results" / "rounds" / "004" / "reframe-report.json").exists()
    out = _run(workdir, cluster, rounds=4, targets=[COLLATED])
    if "--unlock" in out.stderr:
        snakemake("--unlock", "--configfile", "campaign.yaml", cwd=workdir, env=cluster)
        out = _run(workdir, cluster, rounds=4, targets=[COLLATED])
    assert out.returncode == 0, out.stderr[-4000:]
    runs = pd.read_parquet(workdir / "results" / "dataset" / "runs")
    assert runs["run_id"].is_unique and runs["job_id"].is_unique
    assert len(runs) == 7 and (runs["dataset"] == "confidence-1").sum() == 4


def test_a_timed_out_run_is_recorded_with_its_state(cluster, workdir):
    """Round 5: the collectives run outlives the job's time limit (Slurm ends it: TIMEOUT)."""
    round5 = dict(rounds=5, iterations=500_000_000, extra=("-S", "Collectives.time_limit=1m"))
    out = _run(workdir, cluster, **round5)
    assert out.returncode == 0, out.stderr[-4000:]
    res = workdir / "results"
    quarantine = [json.loads(line) for line in (res / "dataset" / "quarantine.jsonl").read_text().splitlines()]
    timeouts = [q for q in quarantine if q["kind"] == "failed-run" and q["state"] == "TIMEOUT"]
    assert len(timeouts) == 1 and timeouts[0]["dataset"] == "collectives-1"
    runs = pd.read_parquet(res / "dataset" / "runs")
    assert len(runs) == 8 and timeouts[0]["job_id"] not in set(runs["job_id"])
    # The analyses and the report ran on the dataset with both failures (rounds 3 and 5).
    summary = (res / "summary.txt").read_text()
    assert "Failed runs (not used as data): 2\n  Slurm state not COMPLETED: 2 (CANCELLED: 1, TIMEOUT: 1)\n" in summary
    report = (res / "report.html").read_text()
    assert "8 completed runs of 2 datasets" in report and "2 runs failed (" in report
    assert "1 CANCELLED" in report and "1 TIMEOUT" in report
    # The report was rebuilt from this dataset, after collation's summary of it.
    assert (res / "report.html").stat().st_mtime >= (res / "dataset" / "collated.json").stat().st_mtime
    assert (res / "report.html").stat().st_mtime >= (res / "summary.txt").stat().st_mtime
    assert "8 runs" in (res / "summary.txt").read_text().splitlines()[0]
    # Nothing to do again: the whole workflow, analyses and report included.
    again = _run(workdir, cluster, **round5)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_collation_twice_gives_identical_tables(cluster, workdir, tmp_path):
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.data.schema import TABLES

    raw = workdir / "results" / "raw"
    pseudo = Pseudonymiser(b"same-salt")
    collate(raw, tmp_path / "a", pseudo)
    collate(raw, tmp_path / "b", pseudo)
    assert collate(raw, tmp_path / "b", pseudo).new_runs == []  # and a third time adds nothing
    a, b = Dataset(tmp_path / "a"), Dataset(tmp_path / "b")
    for name, table in TABLES.items():
        key = list(table.key)
        left = a.read(name).sort_values(key).reset_index(drop=True)
        right = b.read(name).sort_values(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(left, right, check_like=False)


FAKE_CRONTAB = """#!/bin/sh
# crontab -l / crontab FILE, on a file of the test's own.
if [ "$1" = "-l" ]; then
  [ -f "$TABLE" ] || { echo "no crontab for $(id -un)" >&2; exit 1; }
  cat "$TABLE"
else
  cp "$1" "$TABLE"
fi
"""


def test_a_round_needs_its_reframe_paths_in_the_current_directory(tmp_path):
    """Not slow, no cluster: ReFrame runs where the round is started, so the default configuration
    and a relative check path are looked up there, and a missing one is named before ReFrame runs."""
    proc = subprocess.run([sys.executable, "-m", "hpcvar", "campaign", "round", "--report",
                           str(tmp_path / "r" / "reframe-report.json"), "--system", "local",
                           "--checks", "reframe_tests/microbenchmarks"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 1
    assert (f"--reframe-config config/reframe/settings.py, --checks reframe_tests/microbenchmarks: not found "
            f"(relative paths are taken from the current directory, {tmp_path}, where ReFrame runs)") in proc.stderr
    assert not (tmp_path / "r").exists()


def test_schedule_line_is_installed_once_beside_the_users_entries(tmp_path):
    """Not slow, no cluster: the crontab merge on a stand-in crontab command."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "crontab").write_text(FAKE_CRONTAB)
    (bindir / "crontab").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "TABLE": str(tmp_path / "table")}
    mini = ("--configfile", "config/campaign-mini.yaml")
    first = _hpcvar("campaign", "schedule", "--every", "week", "--install", "crontab", *mini, env=env)
    assert first.returncode == 0, first.stderr
    line = first.stdout.splitlines()[0]
    # The campaign's own configuration and results directory, never the main job's.
    assert line.startswith("0 2 * * 1 cd ") and "hpcvar campaign request --results results/mini && " in line
    assert "--profile slurm --configfile config/campaign-mini.yaml >> results/mini/logs/scheduled-rounds.log" in line
    assert (tmp_path / "table").read_text() == line + "\n" and "installed in your crontab" in first.stdout
    (tmp_path / "table").write_text("# mine\n30 1 * * * /usr/bin/backup\n" + line + "\n")
    again = _hpcvar("campaign", "schedule", "--every", "week", "--install", "crontab", *mini, env=env)
    assert again.returncode == 0 and "already in your crontab" in again.stdout
    assert (tmp_path / "table").read_text() == "# mine\n30 1 * * * /usr/bin/backup\n" + line + "\n"
    # Every day instead: the weekly entry is replaced, not doubled.
    daily = _hpcvar("campaign", "schedule", "--install", "crontab", *mini, env=env)
    assert daily.returncode == 0 and "installed in your crontab" in daily.stdout
    assert (tmp_path / "table").read_text().splitlines() == ["# mine", "30 1 * * * /usr/bin/backup",
                                                            daily.stdout.splitlines()[0]]
    assert daily.stdout.startswith("0 2 * * * cd ")
    missing = _hpcvar("campaign", "schedule", "--install", "scrontab", *mini, env={**env, "PATH": str(bindir)})
    assert missing.returncode == 2 and "scrontab not found" in missing.stderr
    nofile = _hpcvar("campaign", "schedule", "--configfile", "campaign.yaml", env=env)
    assert nofile.returncode == 2 and "campaign.yaml: no such file" in nofile.stderr
