"""The suite's images for real: built once per test session from the package registry
(``hpcvar containers build``), run by ReFrame from the same test classes as bare metal, on
``local`` (mpirun inside the image) and across the groups of the multi-node testbed (srun
--mpi=pmix starting ch-run per rank: the hybrid model), imported and collated with the image's
name and digest in the runs table, compared with bare metal through ``hpcvar compare``; a second
build changes nothing; an image whose MPI cannot wire up with Slurm fails its run with the MPI
error in the run's record, and the other runs are data as usual."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, SESSION_IMAGES, testbed  # noqa: F401  (the multi-node cluster fixture)
from hpcvar.containers import store
from hpcvar.data.dataset import Dataset

pytestmark = pytest.mark.slow
REFRAME = str(Path(sys.executable).with_name("reframe"))
IMAGES = SESSION_IMAGES
#: Per-step agreement of the stamped step times with the application's own timer (as on bare metal).
STEP_TOLERANCE = 0.05
STAMP_JITTER_S = 0.020


def hpcvar(*args, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcvar", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "USER": "root", **(env or {})}, timeout=timeout)


def test_the_images_are_built_from_the_registry_with_their_digests_and_a_rebuild_changes_nothing(session_images):
    where, records = session_images
    for name, rec in records.items():
        sqfs, directory = where / rec["squashfs"], where / rec["directory"]
        assert store.file_sha256(sqfs) == rec["squashfs_sha256"]
        assert store.tree_sha256(directory) == rec["directory_sha256"]
        # The hosts' MPI and PMIx family, the same package versions as the hosts' own.
        for package in ("openmpi-bin", "libpmix2"):
            host = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
            assert rec["packages"][package] == host.stdout
        # A run-time image: no compiler, and what the programs load.
        assert "gcc" not in rec["packages"] and "libopenmpi-dev" not in rec["packages"]
        assert "libopenmpi3" in rec["runtime_packages"]
        assert (directory / "rfm_workdir").is_dir()
        assert json.loads((directory / "opt/hpcvar/image.json").read_text())["software"] == rec["software"]
        assert rec["squashfs_bytes"] < rec["directory_bytes"] < 400e6
    assert any(p.startswith("libhypre-") for p in records["amgproxy"]["runtime_packages"])
    assert records["microbenchmarks"]["software"].startswith("microbenchmarks ")
    assert records["amgproxy"]["software"].startswith("amgproxy 1.0 hpcvar:reframe_tests/apps/amgproxy/src/amgproxy.c")
    again = hpcvar("containers", "build", *IMAGES, "--store", str(where))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "builder up to date" in again.stderr and all(f"{n} up to date" in again.stderr for n in IMAGES)
    assert {n: json.loads((where / f"{n}.json").read_text())["key"] for n in IMAGES} == {
        n: r["key"] for n, r in records.items()}


def run_round(prefix: Path, system: str, image: str | None, env: dict, *options) -> dict:
    """One ReFrame session of the collectives and the AMG proxy; its report."""
    report = prefix / "report.json"
    cmd = [REFRAME, "-C", "config/reframe/settings.py", "--system", system, "-c", "reframe_tests", "-R",
           "-n", "^Collectives", "-n", "^AMGProxy", "-S", "Collectives.iterations=40",
           "-S", "Collectives.sizes=65536", "--report-file", str(report), *options, "-r"]
    if image:
        cmd[-1:-1] = ["-S", f"image={image}"]
    full = {k: v for k, v in os.environ.items() if not k.startswith("HPCVAR_RFM_")}
    full.update({"HPCVAR_RFM_PREFIX": str(prefix), "HPCVAR_RFM_SIZE": "toy", "HPCVAR_OFFLINE": "1", "USER": "root",
                 **env})
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=full, timeout=900)
    assert report.exists(), out.stdout[-4000:] + out.stderr[-2000:]
    return {"out": out, "cases": [c for r in json.loads(report.read_text())["runs"] for c in r["testcases"]
                                  if c.get("dataset")], "report": report}


@pytest.fixture(scope="module")
def local_rounds(session_images, tmp_path_factory):
    """Bare metal and in the images on `local` (2 ranks), imported into one raw directory."""
    where, records = session_images
    work = tmp_path_factory.mktemp("containers-local")
    env = {"HPCVAR_IMAGES": str(where)}
    bare = run_round(work / "bare", "local", None, env)
    image = run_round(work / "image", "local", "auto", env)
    imported = hpcvar("import-reframe", str(bare["report"]), str(image["report"]), "--raw", str(work / "raw"))
    assert imported.returncode == 0, imported.stderr
    collated = hpcvar("collate", str(work / "raw"), "--out", str(work / "dataset"))
    assert collated.returncode == 0, collated.stderr
    return {"bare": bare, "image": image, "dataset": work / "dataset", "raw": work / "raw", "records": records,
            "work": work}


def test_on_local_mpirun_runs_inside_the_image_and_every_test_passes(local_rounds):
    for side in ("bare", "image"):
        cases = local_rounds[side]["cases"]
        assert sorted(c["display_name"].split()[0] for c in cases) == ["AMGProxy", "Collectives"]
        assert all(c["result"] == "pass" for c in cases), [(c["display_name"], c.get("fail_reason")) for c in cases]
    for case in local_rounds["image"]["cases"]:
        script = (Path(case["stagedir"]) / "rfm_job.sh").read_text()
        name = "microbenchmarks" if case["display_name"].startswith("Collectives") else "amgproxy"
        assert f"/{name}.sqfs -- mpirun -np 2 " in script
        rec = local_rounds["records"][name]
        assert case["container"] == f"{name}@sha256:{rec['squashfs_sha256']}"
        assert case["software"] == rec["software"]


def test_the_runs_table_holds_each_image_s_name_and_digest_and_bare_metal_none(local_rounds):
    runs = Dataset(local_rounds["dataset"]).read("runs")
    assert len(runs) == 4 and set(runs["state"]) == {"COMPLETED"}
    records = local_rounds["records"]
    in_image = runs[runs["container"].notna()].set_index("dataset")
    assert in_image.loc["collectives-1", "container"] == f"microbenchmarks@sha256:{records['microbenchmarks']['squashfs_sha256']}"
    assert in_image.loc["amgproxy-1", "container"] == f"amgproxy@sha256:{records['amgproxy']['squashfs_sha256']}"
    # The same code as bare metal: the same build script, the same provenance line.
    bare = runs[runs["container"].isna()].set_index("dataset")
    assert bare.loc["amgproxy-1", "software"] == in_image.loc["amgproxy-1", "software"]
    assert bare.loc["collectives-1", "software"] == in_image.loc["collectives-1", "software"]


def test_step_times_in_the_image_match_the_proxy_s_own_timer(local_rounds):
    from hpcvar.parsers import apps

    ds = Dataset(local_rounds["dataset"])
    runs, steps = ds.read("runs"), ds.read("steps")
    run = runs[(runs["dataset"] == "amgproxy-1") & runs["container"].notna()].iloc[0]
    mine = steps[steps["run_id"] == run["run_id"]].sort_values("step")
    assert len(mine) == 6 and mine["reported_s"].notna().all()
    diff = (mine["duration_s"] - mine["reported_s"]).abs()
    assert ((diff / mine["reported_s"] <= STEP_TOLERANCE) | (diff <= STAMP_JITTER_S)).all(), mine
    own = apps.read(local_rounds["raw"] / run["raw_dir"] / "stdout.txt")
    assert list(own.steps["reported_s"]) == pytest.approx(list(mine["reported_s"]))


def test_bare_metal_against_the_image_through_hpcvar_compare(local_rounds, tmp_path):
    out = hpcvar("compare", str(local_rounds["dataset"]), "--before", "bare-metal", "--after", "image:microbenchmarks",
                 "--out", str(tmp_path / "cmp"), "--no-figures")
    assert out.returncode in (0, 1), out.stderr
    table = pd.read_csv(tmp_path / "cmp" / "compare.csv")
    pair = table[(table["test"] == "collectives-1") & (table["variable"] == "allreduce_65536B_us")].iloc[0]
    assert pair["n_before"] == pair["n_after"] == 40  # every timed iteration of the one run each side
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["before"]["range"].endswith(", bare-metal")
    assert summary["after"]["range"].endswith(", image microbenchmarks")
    # The proxy, in the image against bare metal: its run time and steps.
    assert set(table.loc[table["test"] == "amgproxy-1", "variable"]) >= {"run_time_s", "step_time_rel"}
    none = hpcvar("compare", str(local_rounds["dataset"]), "--before", "bare-metal", "--after", "image:umt")
    assert none.returncode == 2 and "their images: amgproxy@sha256:" in none.stderr


# --- across the testbed's groups ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def testbed_work(testbed):
    path = Path("/var/tmp") / f"hpcvar-containers-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    subprocess.run(["rm", "-rf", str(path)])


#: One rank on each of two nodes, one in each group (-J: ReFrame splits -S list values at commas).
ACROSS = ["-S", "tasks_per_node=1", "-S", "exclusive_access=false", "-J", "nodelist=n01,n04"]


def test_on_the_testbed_srun_starts_ch_run_per_rank_across_the_groups(session_images, testbed, testbed_work):
    """A campaign round in the images (campaign.container: auto, as the workflow's rule runs it):
    the images checked before the round, the hybrid model across the groups, the runs collated
    with the topology and the image's digest."""
    where, records = session_images
    env = {**testbed["env"], "HPCVAR_IMAGES": str(where)}
    report = testbed_work / "rounds" / "001" / "reframe-report.json"
    options = [f"--option={o}" for o in ["-S", "Collectives.iterations=40", "-S", "Collectives.sizes=65536", *ACROSS]]
    rnd = hpcvar("campaign", "round", "--report", str(report), "--prefix", str(testbed_work / "reframe"),
                 "--system", "testbed", "--checks", "reframe_tests", "--tests", "Collectives", "--tests", "AMGProxy",
                 "--image", "auto", *options, "--env=HPCVAR_RFM_SIZE=toy", "--env=HPCVAR_OFFLINE=1",
                 "--env=HPCVAR_RFM_NODES=amgproxy:2;microbenchmarks:2", env=env)
    assert rnd.returncode == 0 and report.exists(), rnd.stdout[-3000:] + rnd.stderr[-3000:]
    assert f"campaign round: image microbenchmarks@sha256:{records['microbenchmarks']['squashfs_sha256']}" in rnd.stdout
    got = {"report": report, "cases": [c for r in json.loads(report.read_text())["runs"] for c in r["testcases"]
                                       if c.get("dataset")]}
    cases = got["cases"]
    assert sorted(c["display_name"].split()[0] for c in cases) == ["AMGProxy", "Collectives"]
    assert all(c["result"] == "pass" for c in cases), [(c["display_name"], c.get("fail_reason")) for c in cases]
    for case in cases:
        assert sorted(case["job_nodelist"]) == ["n01", "n04"]  # one node in each group
        script = (Path(case["stagedir"]) / "rfm_job.sh").read_text()
        assert "srun --mpi=pmix ch-run -b " in script and "export PMIX_MCA_gds=hash" in script
    topology = testbed["layout"].root / "etc" / "testbed-topology.yaml"
    imported = hpcvar("import-reframe", str(got["report"]), "--raw", str(testbed_work / "raw"), "--topology",
                      str(topology), env=testbed["env"])
    assert imported.returncode == 0, imported.stderr
    collated = hpcvar("collate", str(testbed_work / "raw"), "--out", str(testbed_work / "dataset"))
    assert collated.returncode == 0, collated.stderr
    runs = Dataset(testbed_work / "dataset").read("runs").set_index("dataset")
    assert set(runs.index) == {"collectives-2", "amgproxy-2"}
    assert (runs["num_groups"] == 2).all()
    assert runs.loc["amgproxy-2", "container"] == f"amgproxy@sha256:{records['amgproxy']['squashfs_sha256']}"
    # The image's Open MPI used the testbed's data network: the collectives ran over its links.
    latency = Dataset(testbed_work / "dataset").read("latency")
    assert len(latency[latency["operation"] == "allreduce"]) == 40


def test_an_image_whose_mpi_cannot_wire_up_fails_its_run_with_the_mpi_error_and_nothing_else_is_lost(
        session_images, testbed, testbed_work):
    """Slurm without PMIx for the ranks (a site whose srun defaults to --mpi=none): the image's
    Open MPI cannot wire up. The run fails, its record quotes MPI's error, the other test's run
    is data."""
    where, _ = session_images
    env = {**testbed["env"], "HPCVAR_IMAGES": str(where), "HPCVAR_RFM_NODES": "amgproxy:2;microbenchmarks:2"}
    got = run_round(testbed_work / "rfm-nopmix", "testbed", "auto", env, *ACROSS,
                    "-S", "Collectives.container_launcher_options=--mpi=none")
    results = {c["display_name"].split()[0]: c["result"] for c in got["cases"]}
    assert results == {"Collectives": "fail", "AMGProxy": "pass"}
    raw, dataset = testbed_work / "raw-nopmix", testbed_work / "dataset-nopmix"
    assert hpcvar("import-reframe", str(got["report"]), "--raw", str(raw), env=testbed["env"]).returncode == 0
    assert hpcvar("collate", str(raw), "--out", str(dataset)).returncode == 0
    runs = Dataset(dataset).read("runs")
    assert list(runs["dataset"]) == ["amgproxy-2"]
    failed = [json.loads(line) for line in (dataset / "quarantine.jsonl").read_text().splitlines()]
    (record,) = [r for r in failed if r.get("kind") == "failed-run"]
    assert record["dataset"] == "collectives-2" and record["reframe"].endswith("failed")
    # Open MPI's own explanation, once although every rank printed it.
    assert 'direct launched using "srun"' in record["stderr"], record["stderr"]
    assert record["stderr"].count("direct launched") == 1
