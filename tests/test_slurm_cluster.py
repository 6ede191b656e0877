"""The real single-node Slurm cluster of ``hpcvar dev slurm`` (docs/slurm-dev-cluster.md).

Brings the cluster up once for the module (as root, from Debian's packages; a missing package
fails with the install hint, it is not skipped), then runs real jobs: one per Unix user
(root and the unprivileged extra user), a two-rank MPI program under ``srun --mpi=pmix``, a job
that runs out of its time limit and one that is scancel'ed, and checks what sacct recorded, also
through hpcvar's own sacct parser. The cluster is brought down at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from hpcvar.dev import slurm as dev
from hpcvar.parsers import sacct

EXTRA_USER = dev.DEFAULT_EXTRA_USER
TERMINAL = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}
SACCT_FORMAT = "JobID,User,State,NodeList,Start,End"

pytestmark = pytest.mark.slow


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcvar", "dev", "slurm", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@dataclass
class Cluster:
    layout: dev.Layout
    env: dict
    node: str

    def run(self, *cmd: str, user: str | None = None, timeout: float = 60, cwd=None) -> str:
        full = ["runuser", "-u", user, "--", *cmd] if user else list(cmd)
        proc = subprocess.run(full, env=self.env, capture_output=True, text=True, timeout=timeout,
                              cwd=cwd or self.layout.jobs, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, f"{' '.join(full)} failed ({proc.returncode}): {proc.stderr}{proc.stdout}"
        return proc.stdout

    def sbatch(self, *args: str, user: str | None = None) -> str:
        out = self.run("sbatch", "--parsable", f"--chdir={self.layout.jobs}",
                       f"--output={self.layout.jobs}/%j.out", *args, user=user)
        return out.strip().split(";")[0]

    def states(self, *job_ids: str) -> dict[str, str]:
        out = self.run("sacct", "-n", "-X", "-P", "--allusers", "-j", ",".join(job_ids), "-o", "JobID,State")
        rows = [line.split("|") for line in out.splitlines() if line.strip()]
        return {job: state.split()[0] for job, state in rows}

    def wait(self, *job_ids: str, timeout: float = 60, until=TERMINAL) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            states = self.states(*job_ids)
            if all(states.get(j) in until for j in job_ids):
                return states
            if time.monotonic() > deadline:
                pytest.fail(f"jobs {job_ids} not in {sorted(until)} after {timeout:.0f} s: {states}; "
                            f"squeue: {self.run('squeue', '--all')}")
            time.sleep(1)

    def sacct_dump(self, path: Path, *job_ids: str) -> Path:
        path.write_text(self.run("sacct", "--allusers", "-P", f"--format={SACCT_FORMAT}", "-j", ",".join(job_ids)))
        return path


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("the Slurm dev cluster needs root (it starts munged, mariadbd and Slurm's daemons)")
    t0 = time.monotonic()
    proc = _cli("up", "--extra-user", EXTRA_USER)
    if proc.returncode != 0:
        pytest.fail(f"`hpcvar dev slurm up` failed (exit {proc.returncode}) after {time.monotonic() - t0:.0f} s:\n"
                    f"{proc.stdout}{proc.stderr}", pytrace=False)
    layout = dev.Layout(dev.state_dir())
    yield Cluster(layout, dev.slurm_env(layout), dev.short_hostname())
    proc = _cli("down")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def timeout_job(cluster):
    """A job that outlives its one-minute limit, submitted early so that its wait overlaps the rest."""
    return cluster.sbatch("--time=1", "--job-name=hpcvar-timeout", "--wrap", "sleep 600")


def test_missing_package_is_named_with_apt_get(monkeypatch):
    monkeypatch.setitem(dev.REQUIRED, "hpcvar-no-such-daemon", "hpcvar-no-such-package")
    with pytest.raises(dev.MissingPackages) as err:
        dev.check_prerequisites()
    assert "hpcvar-no-such-daemon (package hpcvar-no-such-package)" in str(err.value)
    assert "apt-get install -y hpcvar-no-such-package" in str(err.value)


def test_up_again_says_running_and_status_shows_node(cluster):
    proc = _cli("up", "--extra-user", EXTRA_USER)
    assert proc.returncode == 0, proc.stderr
    assert "already running" in proc.stdout
    assert f"export SLURM_CONF={cluster.layout.slurm_conf}" in proc.stdout
    proc = _cli("status")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stopped" not in proc.stdout
    assert all(f"{daemon} " in proc.stdout for daemon in dev.DAEMONS)
    assert cluster.node in proc.stdout and "debug*" in proc.stdout
    # slurmdbd.conf holds the database password: SlurmUser-only
    st = cluster.layout.slurmdbd_conf.stat()
    assert oct(st.st_mode & 0o777) == "0o600" and st.st_uid == dev._uid(dev.SLURM_USER)


def test_srun_mpi_pmix_runs_two_ranks(cluster, tmp_path):
    mpicc = shutil.which("mpicc")
    if mpicc is None:
        pytest.fail("mpicc not found: apt-get install -y openmpi-bin libopenmpi-dev")
    assert "pmix" in cluster.run("srun", "--mpi=list").split()
    src = tmp_path / "hello.c"
    src.write_text("""#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("hello from rank %d of %d\\n", rank, size);
    MPI_Finalize();
    return 0;
}
""")
    subprocess.run([mpicc, "-o", str(tmp_path / "hello"), str(src)], check=True, timeout=120)
    out = cluster.run("srun", "--mpi=pmix", "-n", "2", "--time=2", str(tmp_path / "hello"), cwd=tmp_path, timeout=120)
    assert sorted(line for line in out.splitlines() if line.startswith("hello")) == [
        "hello from rank 0 of 2", "hello from rank 1 of 2"]


def test_scancel_ends_cancelled(cluster, timeout_job):
    job = cluster.sbatch("--job-name=hpcvar-cancel", "--wrap", "sleep 600")
    cluster.wait(job, until={"RUNNING"}, timeout=60)
    cluster.run("scancel", job)
    assert cluster.wait(job, timeout=60)[job] == "CANCELLED"


def test_jobs_of_two_users_completed_in_sacct(cluster, timeout_job, tmp_path):
    mine = cluster.sbatch("--job-name=hpcvar-root", "--wrap", "hostname; id -un")
    theirs = cluster.sbatch("--job-name=hpcvar-other", "--wrap", "hostname; id -un", user=EXTRA_USER)
    states = cluster.wait(mine, theirs, timeout=90)
    assert states == {mine: "COMPLETED", theirs: "COMPLETED"}
    assert (cluster.layout.jobs / f"{theirs}.out").read_text().split() == [cluster.node, EXTRA_USER]

    dump = cluster.sacct_dump(tmp_path / "sacct.txt", mine, theirs)
    lines = {line.split("|")[0]: line.split("|") for line in dump.read_text().splitlines()[1:]}
    assert lines[mine][1:4] == ["root", "COMPLETED", cluster.node]
    assert lines[theirs][1:4] == [EXTRA_USER, "COMPLETED", cluster.node]

    # the project's own parser reads what the real sacct printed
    df = sacct.read(dump)
    jobs = sacct.allocations(df).set_index("job_id")
    assert set(jobs.index) == {mine, theirs}
    assert jobs.loc[mine, "user"] == "root" and jobs.loc[theirs, "user"] == EXTRA_USER
    assert set(jobs["state"]) == {"COMPLETED"}
    assert all(list(nodes) == [cluster.node] for nodes in jobs["node_list"])
    assert jobs["start"].notna().all() and (jobs["end"] >= jobs["start"]).all()
    assert set(df.loc[df["step"].notna(), "step"]) >= {"batch"}


def test_reframe_runs_here_and_collate_sees_the_other_users_job(cluster, timeout_job, tmp_path, monkeypatch):
    """The suite on this cluster (`--system local-slurm`: ReFrame submits with sbatch, launches with
    srun --mpi=pmix) while another user's job runs; import-reframe collects sacct of the job's
    window, and collate puts that job, with its user's pseudonym, in the run's neighbourhood."""
    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.util.anonymise import Pseudonymiser

    repo = Path(__file__).resolve().parents[1]
    aggressor = cluster.sbatch("-n", "2", "--job-name=aggressor", "--wrap", "sleep 120", user=EXTRA_USER)
    cluster.wait(aggressor, until={"RUNNING"})
    try:
        env = {**cluster.env, "HPCVAR_RFM_PREFIX": str(tmp_path / "rfm")}
        proc = subprocess.run([str(Path(sys.executable).with_name("reframe")), "-C", "config/reframe/settings.py",
                               "-c", "reframe_tests/microbenchmarks", "--system", "local-slurm", "-n", "Collectives",
                               "-S", "Collectives.iterations=20000", "-r"],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:]
        for key in ("SLURM_CONF", "PATH"):
            monkeypatch.setenv(key, cluster.env[key])
        result = import_reports(sorted((tmp_path / "rfm" / "reports").glob("*.json")), tmp_path / "raw")
        assert len(result.imported) == 1 and not result.errors
        (run_id,) = result.imported
        assert (tmp_path / "raw" / "runs" / run_id / "sacct.txt").exists()
        salt = b"slurm-test"
        assert collate(tmp_path / "raw", tmp_path / "dataset", Pseudonymiser(salt)).new_runs == [run_id]
    finally:
        cluster.run("scancel", aggressor)
    ds = Dataset(tmp_path / "dataset")
    run = ds.read("runs").iloc[0]
    assert run["state"] == "COMPLETED" and run["app"] == "collectives" and run["node_list"] == [cluster.node]
    neigh = ds.read("neighbourhood")
    other = neigh[neigh["job_id"] == aggressor]
    assert len(other) == 1 and other["overlap_s"].iloc[0] > 0
    assert other["user"].iloc[0] == Pseudonymiser(salt)(EXTRA_USER) != run["user"]
    assert len(ds.read("latency")) == 4 * 3 * 20000


def test_time_limit_ends_timeout(cluster, timeout_job, tmp_path):
    # limit 1 min; slurmctld checks limits every 30 s, then KillWait=2 s
    assert cluster.wait(timeout_job, timeout=150)[timeout_job] == "TIMEOUT"
    df = sacct.read(cluster.sacct_dump(tmp_path / "sacct.txt", timeout_job))
    job = sacct.allocations(df).iloc[0]
    assert job["state"] == "TIMEOUT" and job["user"] == "root"
    assert 60 <= (job["end"] - job["start"]).total_seconds() <= 150


def test_down_stops_every_daemon(cluster):
    proc = _cli("down")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(dev.daemon_pid(cluster.layout, d) is None for d in dev.DAEMONS)
    assert cluster.layout.slurm_conf.exists()  # state kept without --purge
    proc = _cli("status")
    assert proc.returncode == 3 and proc.stdout.count("stopped") == len(dev.DAEMONS)
