"""The ReFrame suite (reframe_tests/): the application tests list and dry-run against the Slurm
template with the right node counts, task counts and launch lines; the microbenchmarks run for
real on this machine under the `local` system."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
REFRAME = str(Path(sys.executable).with_name("reframe"))
CONFIG = str(REPO / "config" / "reframe" / "settings.py")


def reframe(*args, prefix: Path, env: dict | None = None, timeout=600) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HPCVAR_RFM_") and k != "HPCVAR_OFFLINE"}
    e.update({"HPCVAR_RFM_PREFIX": str(prefix), **(env or {})})
    return subprocess.run([REFRAME, "-C", CONFIG, *args], cwd=REPO, capture_output=True, text=True, env=e,
                          timeout=timeout)


def job_scripts(prefix: Path) -> dict[str, str]:
    """Generated run scripts by test directory name (``AMG2013_<hash>``)."""
    return {p.parent.name: p.read_text() for p in (prefix / "stage").rglob("rfm_job.sh")}


def sbatch(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", script, re.MULTILINE))


def test_process_grids_follow_table_one():
    from hpcvar.util.grids import factor

    assert factor(128 * 64, 3) == [32, 16, 16]  # AMG, 128 nodes: -P 32 16 16
    assert factor(512 * 64, 3) == [32, 32, 32]  # AMG, 512 nodes: -P 32 32 32
    assert factor(128 * 64, 4) == [16, 8, 8, 8]
    with pytest.raises(ValueError):
        factor(0, 3)


def test_application_tests_list_on_the_slurm_template(tmp_path):
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "generic-slurm", "-l", prefix=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    listed = re.findall(r"^- (\w+) %num_nodes=(\d+)", out.stdout, re.MULTILINE)
    expected = {("AMG2013", "128"), ("AMG2013", "512"), ("AMG2023", "128"), ("AMG2023", "512"),
                ("MILC", "128"), ("MILC", "512"), ("MiniVite", "128"), ("UMT", "128")}
    # hpcvar's own AMG proxy (it builds anywhere from the package registry). Each test runs in a
    # container image too, from the same class (-S image=...: tests/test_container_images.py).
    expected |= {("AMGProxy", "128"), ("AMGProxy", "512")}
    assert set(listed) == expected
    # Bare-metal tests carry the fetch -> build fixture chain, per programming environment.
    assert "^build_amg2013 ~generic-slurm:compute+gnu-openmpi" in out.stdout
    assert "^fetch_milc ~generic-slurm" in out.stdout


def test_the_whole_suite_loads_as_a_package_without_skipping_a_file(tmp_path):
    """The suite is a package (``reframe_tests/__init__.py``): its tests import the shared parts
    relatively, so ReFrame loads every file of it, ``common/`` too, with no ``sys.path`` edits
    and no "skipping test file" warning in a campaign's rounds."""
    out = reframe("-c", "reframe_tests", "-R", "--system", "generic-slurm", "-l", prefix=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "skipping test file" not in out.stdout + out.stderr, out.stdout + out.stderr
    listed = set(re.findall(r"^- (\w+) %num_nodes=\d+", out.stdout, re.MULTILINE))
    # Every file's tests: the applications, the proxy, the microbenchmarks and the IMB reference.
    assert listed == {"AMG2013", "AMG2023", "MILC", "MiniVite", "UMT", "AMGProxy", "Collectives", "Overtime",
                      "Confidence", "Aggressor", "IMBCollectives"}, out.stdout
    suite = REPO / "reframe_tests"
    for path in suite.rglob("*.py"):
        assert "sys.path" not in path.read_text(), path
        if path.name != "__init__.py":
            assert (path.parent / "__init__.py").is_file(), path


def test_applications_do_not_run_on_the_local_system(tmp_path):
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "-l", prefix=tmp_path)
    assert out.returncode == 0 and "Found 0 check(s)" in out.stdout, out.stdout


def test_toy_size_runs_every_application_here_on_one_node_and_two_ranks(tmp_path):
    """HPCVAR_RFM_SIZE=toy: every application on `local` (mpirun), 1 node x 2 ranks, toy inputs;
    -S mpip=1 preloads the mpiP library built by the fixture chain (tests/test_real_apps.py runs
    them for real)."""
    env = {"HPCVAR_RFM_SIZE": "toy"}
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "-l", prefix=tmp_path / "l", env=env)
    assert out.returncode == 0, out.stdout
    assert set(re.findall(r"^- (\w+) %num_nodes=(\d+)", out.stdout, re.MULTILINE)) == {
        (t, "1") for t in ("AMG2013", "AMG2023", "MILC", "MiniVite", "UMT", "AMGProxy")}
    assert "^build_mpip ~local:default+gnu-openmpi" in out.stdout
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "-S", "mpip=1", "--dry-run",
                  prefix=tmp_path / "d", env=env)
    assert out.returncode == 0, out.stdout[-3000:]
    scripts = job_scripts(tmp_path / "d")
    amg = _one_local(scripts, "AMG2013")
    launch = [line for line in amg.splitlines() if line.startswith("mpirun ")]
    assert len(launch) == 1
    assert re.fullmatch(r"mpirun -np 2 env LD_PRELOAD=\S+/install/lib/libmpiP\.so stdbuf -oL -eL "
                        r"\S+/install/bin/amg -P 2 1 1 -n \d+ \d+ \d+ -problem 2 -printstats", launch[0]), launch[0]
    umt = _one_local(scripts, "UMT")
    assert "custom_2.cmg 4 2 4 4 4 0.04" in umt
    proxy = _one_local(scripts, "AMGProxy")
    launch = [line for line in proxy.splitlines() if line.startswith("mpirun ")]
    assert re.fullmatch(r"mpirun -np 2 env LD_PRELOAD=\S+/install/lib/libmpiP\.so stdbuf -oL -eL "
                        r"\S+/install/bin/hpcvar-amgproxy -P 2 1 1 -n 32 32 32 -stencil 27 -steps 6 -tol 1e-08",
                        launch[0]), launch
    assert "exec 3>&1 > >(ts '%.s' | tee app.out)" in proxy


def test_small_size_changes_only_the_inputs_it_names_and_an_unknown_size_is_refused(tmp_path):
    """HPCVAR_RFM_SIZE=small: toy's ranks and nodes, with inputs where a step takes about a second
    on 2 testbed nodes: AMG 1.1 at Table I's 32^3 per rank, AMG2023 at 66^3, miniVite's graph of
    160000 vertices; UMT and the proxy keep their toy inputs."""
    launches, decks = {}, {}
    for size in ("toy", "small"):
        out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "--dry-run", prefix=tmp_path / size,
                      env={"HPCVAR_RFM_SIZE": size})
        assert out.returncode == 0, out.stdout[-3000:]
        scripts = job_scripts(tmp_path / size)
        launches[size] = {t: [re.sub(r"\S+/install/bin/", "BIN/", line) for line in _one_local(scripts, t).splitlines()
                              if line.startswith("mpirun -np 2 ")]
                          for t in ("AMG2013", "AMG2023", "MILC", "MiniVite", "UMT", "AMGProxy")}
        milc = _one_local(scripts, "MILC")
        decks[size] = next((p.parent / "su3_rmd.in").read_text() for p in (tmp_path / size / "stage").rglob("rfm_job.sh")
                           if p.read_text() == milc)
    toy, small = launches["toy"], launches["small"]
    assert toy["AMG2013"][0].endswith("-P 2 1 1 -n 24 24 24 -problem 2 -printstats")
    assert small["AMG2013"][0].endswith("-P 2 1 1 -n 32 32 32 -problem 2 -printstats")
    assert toy["AMG2023"][0].endswith("-n 40 40 40 -problem 2 -printstats")
    assert small["AMG2023"][0].endswith("-n 66 66 66 -problem 2 -printstats")
    assert toy["MiniVite"][0].endswith("-n 40000 -t 1E-02") and small["MiniVite"][0].endswith("-n 160000 -t 1E-02")
    assert small["UMT"] == toy["UMT"] and len(toy["UMT"]) == 1
    assert small["MILC"] == toy["MILC"] and len(toy["MILC"]) == 1 and decks["small"] == decks["toy"]
    assert re.search(r"^nx 12$", decks["toy"], re.MULTILINE)  # the toy lattice: 6^4 sites per rank
    assert small["AMGProxy"] == toy["AMGProxy"] and len(toy["AMGProxy"]) == 1
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "-l", prefix=tmp_path / "bad",
                  env={"HPCVAR_RFM_SIZE": "medium"})
    assert "HPCVAR_RFM_SIZE='medium': expected one of full, small, toy" in out.stdout + out.stderr
    assert "Found 0 check(s)" in out.stdout  # nothing runs at a size that does not exist


def test_offline_without_a_mirror_keeps_what_needs_no_upstream_sources(tmp_path):
    """HPCVAR_OFFLINE=1 and no source mirror (CI): the tests of Table I's codes and IMB are skipped
    when loaded, saying why; the AMG proxy (hypre from the package registry) and the
    microbenchmarks stay, and -S mpip=1 leaves the proxy unprofiled with a warning."""
    env = {"HPCVAR_RFM_SIZE": "toy", "HPCVAR_OFFLINE": "1", "HPCVAR_SOURCE_MIRROR": ""}
    out = reframe("-c", "reframe_tests/apps", "-c", "reframe_tests/reference", "-c", "reframe_tests/microbenchmarks",
                  "-R", "--system", "local", "-l", "-v", prefix=tmp_path / "l", env=env)
    assert out.returncode == 0, out.stdout
    assert set(re.findall(r"^- (\w+) %num_nodes=", out.stdout, re.MULTILINE)) == {
        "AMGProxy", "Collectives", "Overtime", "Confidence", "Aggressor"}
    for test, app in (("AMG2013", "amg2013"), ("AMG2023", "amg2023"), ("MILC", "milc"), ("MiniVite", "minivite"),
                      ("UMT", "umt"), ("IMBCollectives", "imb")):
        assert re.search(rf"skipping test '{test}': {app}: no source mirror: set HPCVAR_SOURCE_MIRROR", out.stdout), test
    assert "fetch_" not in out.stdout and "build_mpip" not in out.stdout
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "-S", "mpip=1", "--dry-run",
                  prefix=tmp_path / "d", env=env)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "AMGProxy %num_nodes=1: not profiled (-S mpip=1.0): mpip: no source mirror" in out.stdout
    launch = [line for line in _one_local(job_scripts(tmp_path / "d"), "AMGProxy").splitlines()
              if line.startswith("mpirun ")]
    assert launch == [launch[0]] and "LD_PRELOAD" not in launch[0] and "hpcvar-amgproxy" in launch[0]


def test_offline_with_a_mirror_missing_an_archive_skips_only_that_code(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    import yaml

    pins = yaml.safe_load((REPO / "reframe_tests" / "apps" / "sources.yaml").read_text())
    for name in ("amg2013", "milc", "mpip"):  # empty stand-ins: only their presence is checked when listing
        (mirror / pins[name]["mirror"]).touch()
    env = {"HPCVAR_RFM_SIZE": "toy", "HPCVAR_OFFLINE": "1", "HPCVAR_SOURCE_MIRROR": str(mirror)}
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "-l", "-v", prefix=tmp_path / "l", env=env)
    assert out.returncode == 0, out.stdout
    assert set(re.findall(r"^- (\w+) %num_nodes=", out.stdout, re.MULTILINE)) == {"AMG2013", "MILC", "AMGProxy"}
    assert f"amg2023: amg2023-6b1514a.tar.gz, hypre-2.32.0.tar.gz not in the source mirror {mirror}" in out.stdout
    assert "^build_mpip ~local:default+gnu-openmpi" in out.stdout
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "local", "-l", prefix=tmp_path / "x",
                  env={**env, "HPCVAR_SOURCE_MIRROR": str(tmp_path / "nowhere")})
    assert f"HPCVAR_SOURCE_MIRROR={tmp_path / 'nowhere'}: no such directory" in out.stdout + out.stderr


def _one_local(scripts: dict[str, str], test: str) -> str:
    found = [s for name, s in scripts.items() if re.fullmatch(rf"{test}_[0-9a-f]{{8}}", name)]
    assert len(found) == 1, (test, sorted(scripts))
    return found[0]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("rfm-dry")
    out = reframe("-c", "reframe_tests/apps", "-R", "--system", "generic-slurm", "-p", "gnu-openmpi", "--dry-run",
                  prefix=prefix, env={"HPCVAR_RFM_ACCESS": "--partition=regular --account=m1234"})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    return prefix, job_scripts(prefix)


def _one(scripts: dict[str, str], test: str, nodes: int) -> str:
    found = [s for name, s in scripts.items() if re.fullmatch(rf"{test}_[0-9a-f]{{8}}", name)
             and sbatch(s).get("nodes") == str(nodes)]
    assert len(found) == 1, (test, nodes, sorted(scripts))
    return found[0]


@pytest.mark.parametrize("test,nodes,args", [
    ("AMG2013", 128, "-P 32 16 16 -n 32 32 32 -problem 2 -printstats"),
    ("AMG2013", 512, "-P 32 32 32 -n 32 32 32 -problem 2 -printstats"),
    ("AMG2023", 512, "-P 32 32 32 -n 32 32 32 -problem 2 -printstats"),
    ("MILC", 128, "su3_rmd.in"),
    ("MiniVite", 128, "-f nlpkkt240.bin -t 1E-02"),
    ("UMT", 128, "custom_8k.cmg 4 2 4 4 4 0.04"),
])
def test_dry_run_scripts_have_the_node_and_task_counts_and_launch_lines(dry_run, test, nodes, args):
    _, scripts = dry_run
    script = _one(scripts, test, nodes)
    opts = sbatch(script)
    assert opts["nodes"] == str(nodes) and opts["ntasks"] == str(nodes * 64) and opts["ntasks-per-node"] == "64"
    assert "exclusive" in opts and opts["partition"] == "regular" and opts["account"] == "m1234"
    launch = [line for line in script.splitlines() if line.startswith("srun ") and "hpcvar sample" not in line]
    assert launch and all(line.endswith(args) for line in launch), launch
    # Line-buffered (stdbuf), so `ts` stamps every line when the application prints it.
    assert re.search(rf"^srun stdbuf -oL -eL \S+/install/bin/\w+ {re.escape(args)}$", launch[0], re.MULTILINE)
    # Output timestamped live, one counter sampler per node alongside the step.
    assert "exec 3>&1 > >(ts '%.s' | tee app.out)" in script
    assert re.search(r"^srun --overlap --job-name=hpcvar-sampler --nodes=\$SLURM_JOB_NUM_NODES "
                     r"--ntasks=\$SLURM_JOB_NUM_NODES --ntasks-per-node=1 \S*hpcvar sample ", script,
                     re.MULTILINE)
    if test == "MiniVite":
        # The paper's outer loop: the one launch line ReFrame emits, six times in one allocation.
        assert len(launch) == 1
        lines = script.splitlines()
        at = lines.index(launch[0])
        assert lines[at - 1] == "for hpcvar_rep in $(seq 1 6); do" and lines[at + 1] == "done"


def test_dry_run_milc_deck_has_four_sites_per_rank(dry_run):
    prefix, scripts = dry_run
    for nodes, dims in ((128, (64, 32, 32, 32)), (512, (64, 64, 64, 32))):
        script = _one(scripts, "MILC", nodes)
        stage = next(p.parent for p in (prefix / "stage").rglob("rfm_job.sh") if p.read_text() == script)
        deck = (stage / "su3_rmd.in").read_text()
        lattice = tuple(int(re.search(rf"^n{d} (\d+)$", deck, re.MULTILINE)[1]) for d in "xyzt")
        assert lattice == dims
        sites = lattice[0] * lattice[1] * lattice[2] * lattice[3]
        assert sites / (nodes * 64) == 4 ** 4
        assert re.search(r"^trajecs 80$", deck, re.MULTILINE) and "fresh" in deck


def test_node_counts_and_tasks_per_node_are_configuration(tmp_path):
    out = reframe("-c", "reframe_tests/apps/amg", "--system", "generic-slurm", "-p", "gnu-openmpi", "-n", "AMG2013",
                  "-S", "tasks_per_node=32", "--dry-run", prefix=tmp_path, env={"HPCVAR_RFM_NODES": "amg:2,4"})
    assert out.returncode == 0, out.stdout[-3000:]
    scripts = job_scripts(tmp_path)
    counts = sorted((int(sbatch(s)["nodes"]), int(sbatch(s)["ntasks"])) for n, s in scripts.items()
                    if n.startswith("AMG2013_"))
    assert counts == [(2, 64), (4, 128)]
    assert "-P 4 4 4 " in _one(scripts, "AMG2013", 2)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The campaign's tests run for real here (``--system local``: the microbenchmarks on 2 ranks)."""
    prefix = tmp_path_factory.mktemp("rfm-local")
    return prefix, reframe("-c", "reframe_tests", "-R", "--system", "local", "-t", "campaign", "-r", prefix=prefix)


def test_aggressor_runs_for_its_duration_and_imports_into_latency(tmp_path):
    """The interference experiments' traffic generator: not a campaign test (-t campaign leaves it
    out), run here for 2 s; every iteration lands in `latency` with its start time."""
    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.parsers import microbenchmarks
    from hpcvar.util.anonymise import Pseudonymiser

    listed = reframe("-c", "reframe_tests/microbenchmarks", "--system", "local", "-t", "campaign", "-l",
                     prefix=tmp_path)
    assert "Collectives" in listed.stdout and "Aggressor" not in listed.stdout
    out = reframe("-c", "reframe_tests/microbenchmarks", "--system", "local", "-n", "Aggressor", "-S",
                  "Aggressor.duration_s=2", "-S", "Aggressor.pattern=periodic-allreduce", "-S",
                  "Aggressor.message_bytes=262144", "-S", "Aggressor.compute_s=0.01", "-r", prefix=tmp_path)
    assert out.returncode == 0, out.stdout[-4000:]
    (csv,) = (tmp_path / "output").rglob("Aggressor_*/aggressor.csv")
    table = microbenchmarks.read_aggressor(csv)
    assert table.attrs["meta"]["pattern"] == "periodic-allreduce" and table.attrs["meta"]["size_bytes"] == 262144
    span = table["start_epoch_s"].iloc[-1] - table["start_epoch_s"].iloc[0]
    assert 1.5 < span < 2.5 and len(table) > 20  # 2 s of 10 ms compute phases plus the allreduces
    imported = import_reports(sorted((tmp_path / "reports").glob("*.json")), tmp_path / "raw").imported
    assert len(imported) == 1
    collate(tmp_path / "raw", tmp_path / "dataset", Pseudonymiser(b"salt"))
    ds = Dataset(tmp_path / "dataset")
    assert list(ds.read("runs")["dataset"]) == ["aggressor-1"]
    latency = ds.read("latency")
    assert set(latency["benchmark"]) == {"aggressor"} and set(latency["operation"]) == {"periodic-allreduce"}
    assert len(latency) == len(table)
    assert latency.sort_values("iteration")["start_epoch_s"].tolist() == pytest.approx(table["start_epoch_s"].tolist())


def test_microbenchmarks_run_for_real_on_the_local_system(local_run):
    """Build with ReFrame, run on 2 local ranks, and read back perflogs, data files and counters."""
    from hpcvar.parsers import microbenchmarks, node_counters
    from hpcvar.parsers import reframe as rfm_parser

    tmp_path, out = local_run
    assert out.returncode == 0, out.stdout[-4000:]
    assert "Ran 4/4 test case(s)" in out.stdout and "0 failure(s)" in out.stdout
    perf = pd.concat([rfm_parser.read_perflog(p) for p in (tmp_path / "perflogs" / "local" / "default").glob("*.log")
                      if not p.name.startswith("build_")])
    assert set(perf["dataset"]) == {"collectives-1", "overtime-1", "confidence-1"}
    assert (perf["result"] == "pass").all() and (perf["num_tasks"] == "2").all()
    allreduce = perf[perf["variable"] == "allreduce_8B_median"]["value"].iloc[0]
    assert 0 < allreduce < 10_000  # microseconds: two ranks on one machine
    outdir = tmp_path / "output" / "local" / "default" / "gnu-openmpi"
    coll = microbenchmarks.read_collectives(next(outdir.glob("Collectives_*/collectives.csv")))
    assert len(coll) == 4 * 3 * 200  # every iteration of every collective and size
    minima = microbenchmarks.read_confidence_minima(next(outdir.glob("Confidence_*/confidence-minima.csv")))
    assert minima["cycle"].nunique() == 10 and (minima["min_pairwise_us"] > 0).all()
    # One sampler ran beside each job and recorded this node's network interfaces.
    samples = node_counters.read(next(outdir.glob("Overtime_*/node-counters-*.csv")))
    assert (samples["source"] == "net").any()
    # The session went to ReFrame's results database, so --performance-compare can use it.
    sessions = reframe("--list-stored-sessions", prefix=tmp_path)
    assert sessions.returncode == 0 and re.search(r"[0-9a-f-]{36}", sessions.stdout)


def test_reframe_runs_import_into_the_dataset_and_the_report(local_run, tmp_path):
    """import-reframe -> collate: every timed operation lands in `latency`, the timer calibration
    in `latency_histograms`; importing and collating again adds nothing; the report shows them."""
    import json

    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.report import build
    from hpcvar.util.anonymise import Pseudonymiser

    prefix, out = local_run
    assert out.returncode == 0, out.stdout[-4000:]
    reports = sorted((prefix / "reports").glob("*.json"))
    first = import_reports(reports, tmp_path / "raw")
    assert len(first.imported) == 3 and first.ignored  # the build fixture has no dataset
    manifest = json.loads((tmp_path / "raw" / "runs" / first.imported[0] / "manifest.json").read_text())
    assert manifest["job"]["scheduler"] == "local" and manifest["job"]["state"] == "COMPLETED"
    assert manifest["kind"] == "microbenchmark" and "stdout.txt" in manifest["files"]
    result = collate(tmp_path / "raw", tmp_path / "dataset", Pseudonymiser(b"salt"))
    assert len(result.new_runs) == 3 and not result.quarantined and not result.failed
    ds = Dataset(tmp_path / "dataset")
    runs = ds.read("runs")
    assert set(runs["app"]) == {"collectives", "overtime", "confidence"}
    assert (runs["num_steps"] == 0).all() and (runs["total_time_s"] > 0).all()
    assert runs["user"].str.fullmatch(r"user-[0-9a-f]{10}").all()
    latency = ds.read("latency")
    outdir = prefix / "output" / "local" / "default" / "gnu-openmpi"
    coll = next(outdir.glob("Collectives_*/collectives.csv"))
    from hpcvar.parsers import microbenchmarks

    expected = microbenchmarks.read_collectives(coll)
    got = latency[latency["benchmark"] == "collectives"].sort_values(["operation", "size_bytes", "iteration"])
    assert len(got) == len(expected) == 2400
    assert got["value_us"].sum() == pytest.approx(expected["max_us"].sum())
    # The run's time is what the program timed (its slowest rank's, iteration by iteration), not
    # the job's wall time with MPI's start-up in it; Confidence times no operations back to back.
    by_app = runs.set_index("app")
    assert by_app.loc["collectives", "total_time_s"] == pytest.approx(expected["max_us"].sum() / 1e6)
    assert by_app.loc["collectives", "total_time_s"] < by_app.loc["collectives", "elapsed_s"]
    assert by_app.loc["confidence", "total_time_s"] == pytest.approx(
        (by_app.loc["confidence", "end"] - by_app.loc["confidence", "start"]).total_seconds())
    hist = ds.read("latency_histograms")
    timer = hist[hist["kind"] == "timer"]
    assert set(timer["pair"]) == {"0", "1"} and timer["count"].sum() > 0
    # Idempotent: nothing new to import or collate.
    again = import_reports(reports, tmp_path / "raw")
    assert again.imported == [] and len(again.skipped) == 3
    assert collate(tmp_path / "raw", tmp_path / "dataset", Pseudonymiser(b"salt")).new_runs == []
    # The report's distribution section now has data.
    from hpcvar.analyses import distributions

    summary = distributions.run(tmp_path / "dataset", tmp_path / "analyses" / "distributions")
    assert {d.kind for d in summary.datasets.values()} == {"microbenchmark"}
    report = build(tmp_path / "dataset", tmp_path / "report.html", analyses_dir=tmp_path / "analyses",
                   figures_dir=tmp_path / "figures")
    assert not report["sections"]["distributions"]["empty"]
    names = {Path(f).name for f in report["sections"]["distributions"]["figures"]}
    assert "timer_histogram.svg" in names and any(n.startswith("latency_collectives_") for n in names)
    # ReFrame's local scheduler leaves no sacct: no background-traffic estimate, and the report says so.
    assert report["sections"]["background"]["empty"].startswith("No data: no run has a sacct snapshot")


def test_import_keeps_each_runs_ldms_window_and_counters_over_the_run(local_run, tmp_path):
    """import-reframe --ldms slices a (synthetic) LDMS store to each job's window; collate turns
    the slice and the node samplers into run_counters of the microbenchmark runs."""
    import json

    import numpy as np

    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.parsers import ldms, node_counters
    from hpcvar.simulate.model import LDMS_COUNTERS
    from hpcvar.util.anonymise import Pseudonymiser

    prefix, out = local_run
    assert out.returncode == 0, out.stdout[-4000:]
    reports = sorted((prefix / "reports").glob("*.json"))
    cases = [c for r in reports for run in json.loads(r.read_text())["runs"][-1:] for c in run["testcases"]
             if c.get("dataset") and c.get("jobid")]
    host = cases[0]["job_nodelist"][0]
    topology = tmp_path / "topology.csv"
    topology.write_text(f"node,router,group,role\n{host},r0,g0,compute\nionode,r1,g0,io\nother,r2,g1,compute\n")
    # Every router's counters grow at a known rate per second: ours 5, the I/O router 1000, the other 10.
    t0 = min(c["job_submit_time"] for c in cases) - 600
    times = np.arange(t0, max(c["job_completion_time_unix"] for c in cases) + 600, 2.0)
    rates = np.array([5.0, 1000.0, 10.0])
    (tmp_path / "ldms").mkdir()
    with ldms.StoreCsvWriter(tmp_path / "ldms" / "aries_rtr_mmr.0", list(LDMS_COUNTERS)) as writer:
        writer.write_rows(np.repeat(times, 3), np.tile([host, "ionode", "other"], len(times)), np.tile([0, 1, 2], len(times)),
                          0, np.repeat(np.outer(times - t0, rates).reshape(-1, 1), len(LDMS_COUNTERS), axis=1).astype(np.int64))
    imported = import_reports(reports, tmp_path / "raw", topology=topology, ldms_store=tmp_path / "ldms",
                              ldms_margin=30).imported
    assert len(imported) == 3
    for run_id, case in zip(sorted(imported), sorted(cases, key=lambda c: f"local-{c['jobid']}")):
        run_dir = tmp_path / "raw" / "runs" / run_id
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert "ldms/aries_rtr_mmr.0" in manifest["files"]
        kept = ldms.read(run_dir / "ldms" / "aries_rtr_mmr.0")
        window = next(c for c in cases if run_id.endswith(f"-{c['jobid']}"))
        assert kept["time"].min() >= window["job_submit_time"] - 30 and kept["time"].max() <= (
            window["job_completion_time_unix"] + 30)
        assert kept["time"].min() <= window["job_submit_time"] - 28  # the margin: a sample before the job
    result = collate(tmp_path / "raw", tmp_path / "dataset", Pseudonymiser(b"salt"))
    assert len(result.new_runs) == 3 and not result.quarantined
    ds = Dataset(tmp_path / "dataset")
    runs = ds.read("runs").set_index("run_id")
    rc = ds.read("run_counters")
    assert set(rc["run_id"]) == set(runs.index) and set(rc["scope"]) == {"job", "io", "sys"}
    seconds = (runs["end"] - runs["start"]).dt.total_seconds()
    for scope, rate in (("io", 1000.0), ("sys", 10.0)):
        part = rc[rc["scope"] == scope]
        assert set(part["counter"]) == {"RT_FLIT_TOT", "RT_RB_STL", "PT_FLIT_TOT", "PT_RB_STL_RQ"}
        assert (part["sources"] == 1).all()
        np.testing.assert_allclose(part["value"], rate * part["run_id"].map(seconds), rtol=1e-6, atol=1.0)
        np.testing.assert_allclose(part["seconds"], part["run_id"].map(seconds))
    # The node sampler's counters over the span its samples cover, loopback left out.
    job = rc[rc["scope"] == "job"]
    for run_id in runs.index:
        samples = node_counters.read(next((tmp_path / "raw" / "runs" / run_id).glob("node-counters-*.csv")))
        samples = samples[samples["device"] != "lo"]
        tx = samples[samples["counter"] == "tx_bytes"].sort_values("epoch")
        span = tx.groupby("device")["epoch"].agg(["min", "max"])
        mine = job[job["run_id"] == run_id].set_index("counter")
        assert mine.loc["net.tx_bytes", "sources"] == 1
        expected = sum(float(g["value"].iloc[-1]) - float(g["value"].iloc[0]) for _, g in tx.groupby("device"))
        assert mine.loc["net.tx_bytes", "value"] == pytest.approx(expected, rel=0.05, abs=1e4)
        assert 0 < mine.loc["net.tx_bytes", "seconds"] <= (span["max"] - span["min"]).max() + 1e-6


def test_slurm_runs_need_their_sacct(local_run, tmp_path):
    """Only runs of ReFrame's local scheduler may come without sacct output."""
    import json

    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.util.anonymise import Pseudonymiser

    prefix, _ = local_run
    imported = import_reports(sorted((prefix / "reports").glob("*.json")), tmp_path / "raw").imported
    run_dir = tmp_path / "raw" / "runs" / imported[0]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["job"]["scheduler"] = "slurm"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    result = collate(tmp_path / "raw", tmp_path / "dataset", Pseudonymiser(b"salt"))
    assert len(result.new_runs) == 2
    (bad,) = result.quarantined
    assert bad["file"].endswith(f"{imported[0]}/sacct.txt") and "sacct output of its window" in bad["error"]


# --- a raw directory belongs to one system ------------------------------------------------------

def _snapshot(directory: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def simulated_raw(tmp_path_factory) -> Path:
    """A small simulated campaign's raw directory (system dragonfly-sim, 8-column topology)."""
    from hpcvar.simulate import simulate

    raw = tmp_path_factory.mktemp("sim") / "raw"
    simulate("demo", seed=0, out=raw, overrides={"days": 1}, progress=False)
    return raw


def test_import_refuses_the_raw_directory_of_another_system_and_writes_nothing(local_run, simulated_raw):
    """What following README in one checkout once did: a real round imported into the simulated
    campaign's raw directory, runs added beside the simulated ones and a 3-column row appended to
    its 8-column topology."""
    from hpcvar.campaign.reframe_import import RefusedRawDir, import_reports

    prefix, out = local_run
    assert out.returncode == 0, out.stdout[-4000:]
    reports = sorted((prefix / "reports").glob("*.json"))
    before = _snapshot(simulated_raw)
    with pytest.raises(RefusedRawDir) as info:
        import_reports(reports, simulated_raw)
    message = str(info.value)
    assert f"{simulated_raw} is the raw directory of system 'dragonfly-sim'" in message
    assert "these runs are of system 'local'" in message
    assert _snapshot(simulated_raw) == before
    # The command says so and exits 2.
    cli = subprocess.run([sys.executable, "-m", "hpcvar", "import-reframe", *map(str, reports), "--raw",
                          str(simulated_raw)], capture_output=True, text=True)
    assert cli.returncode == 2 and "system 'dragonfly-sim'" in cli.stderr and "'local'" in cli.stderr
    assert _snapshot(simulated_raw) == before


def test_import_never_appends_to_a_topology_it_did_not_write(local_run, simulated_raw, tmp_path):
    """Same system, but a site's 8-column topology: new nodes cannot be added in its columns."""
    import shutil

    import yaml

    from hpcvar.campaign.reframe_import import RefusedRawDir, import_reports

    prefix, _ = local_run
    raw = tmp_path / "raw"
    raw.mkdir()
    shutil.copy(simulated_raw / "topology.csv", raw / "topology.csv")
    (raw / "system.yaml").write_text(yaml.safe_dump({"system": "local", "timezone": "UTC",
                                                     "topology": "topology.csv"}))
    before = _snapshot(raw)
    with pytest.raises(RefusedRawDir, match="topology with columns 'node,router,group,island,role,row,col,cname'"):
        import_reports(sorted((prefix / "reports").glob("*.json")), raw)
    assert _snapshot(raw) == before


def test_collation_refuses_runs_of_two_systems_and_a_dataset_of_another(local_run, simulated_raw, tmp_path):
    import shutil

    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import RefusedCollation, collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.util.anonymise import Pseudonymiser

    prefix, _ = local_run
    raw = tmp_path / "raw"
    assert len(import_reports(sorted((prefix / "reports").glob("*.json")), raw).imported) == 3
    # A simulated run copied in beside the real ones: two systems in one raw directory.
    mixed = tmp_path / "mixed"
    shutil.copytree(raw, mixed)
    stray = next((simulated_raw / "runs").iterdir())
    shutil.copytree(stray, mixed / "runs" / stray.name)
    with pytest.raises(RefusedCollation) as info:
        collate(mixed, tmp_path / "d1", Pseudonymiser(b"salt"))
    assert "system 'local' but holds runs of another system: 1 of system 'dragonfly-sim'" in str(info.value)
    assert f"runs/{stray.name}" in str(info.value)
    assert not (tmp_path / "d1").exists()
    cli = subprocess.run([sys.executable, "-m", "hpcvar", "collate", str(mixed), "--out", str(tmp_path / "d1")],
                         capture_output=True, text=True)
    assert cli.returncode == 2 and "dragonfly-sim" in cli.stderr and not (tmp_path / "d1").exists()
    # The simulated campaign's dataset does not take the local runs.
    sim_ds = tmp_path / "sim-dataset"
    collate(simulated_raw, sim_ds, Pseudonymiser(b"salt"))
    before = _snapshot(sim_ds)
    with pytest.raises(RefusedCollation, match="the dataset holds runs of system 'dragonfly-sim'"):
        collate(raw, sim_ds, Pseudonymiser(b"salt"))
    assert _snapshot(sim_ds) == before and Dataset(sim_ds).systems() == {"dragonfly-sim"}
    # ... nor after --rebuild's emptying, which the check comes before when the raw dir is mixed.
    cli = subprocess.run([sys.executable, "-m", "hpcvar", "collate", str(mixed), "--out", str(sim_ds), "--rebuild"],
                         capture_output=True, text=True)
    assert cli.returncode == 2 and _snapshot(sim_ds) == before


def test_the_simulator_never_replaces_a_real_campaigns_raw_directory(local_run, tmp_path):
    from hpcvar.campaign.reframe_import import import_reports

    prefix, _ = local_run
    raw = tmp_path / "raw"
    import_reports(sorted((prefix / "reports").glob("*.json")), raw)
    before = _snapshot(raw)
    cli = subprocess.run([sys.executable, "-m", "hpcvar", "simulate", "--preset", "demo", "--set", "days=1",
                          "--out", str(raw)], capture_output=True, text=True)
    assert cli.returncode == 2
    assert f"{raw} is the raw directory of system 'local', not a simulated 'dragonfly-sim' campaign" in cli.stderr
    assert _snapshot(raw) == before
