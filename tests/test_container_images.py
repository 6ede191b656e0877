"""Container images without building one: the definitions and their errors, the digests and the
store's records, which image a run means (and the errors that name the build command), whether
this machine can run one, the run-time package list of a real install prefix, the Charliecloud
launch line ReFrame writes, and the refusals that come before any job is submitted.
tests/test_container_runs.py builds the images and runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpcvar.containers import definition, runtime, store
from hpcvar.containers.store import ImageError

REPO = Path(__file__).resolve().parents[1]
DEFINITIONS = REPO / "containers" / "images.yaml"
REFRAME = str(Path(sys.executable).with_name("reframe"))


# --- the definitions --------------------------------------------------------------------------

def test_every_test_of_the_suite_has_its_image_and_every_image_its_tests():
    defs = definition.load(DEFINITIONS)
    assert defs.image_for_test("Collectives").name == "microbenchmarks"
    assert defs.image_for_test("AMGProxy").name == "amgproxy"
    assert {t: defs.image_for_test(t).name for t in ("AMG2013", "AMG2023", "MILC", "MiniVite", "UMT")} == {
        "AMG2013": "amg2013", "AMG2023": "amg2023", "MILC": "milc", "MiniVite": "minivite", "UMT": "umt"}
    assert defs.image_for_test("IMBCollectives") is None  # the reference benchmark stays bare metal
    # The images' executables are what the sources' pins and the suite's build scripts install.
    pins = yaml.safe_load((REPO / "reframe_tests/apps/sources.yaml").read_text())
    for image in defs.images.values():
        if image.source:
            assert set(image.executables) <= {e.strip() for e in pins[image.source]["executables"].split(",")}
    assert defs.distribution.release == "bookworm"  # the hosts' (Debian 12): their Open MPI and PMIx
    assert {"openmpi-bin", "libpmix2"} <= set(defs.base)


def _definitions(tmp_path: Path, edit) -> Path:
    doc = yaml.safe_load(DEFINITIONS.read_text())
    edit(doc)
    path = tmp_path / "containers" / "images.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["images"]["amgproxy"].pop("build"), "images/amgproxy: 'build' is a required property"),
    (lambda d: d["images"]["amgproxy"].update(executables=["bad name"]), "images/amgproxy/executables/0"),
    (lambda d: d["base"].update(packages=["Open MPI"]), "base/packages/0"),
    (lambda d: d["images"]["amgproxy"]["files"].append("no/such/file"), "image amgproxy: no/such/file does not exist"),
    (lambda d: d["images"]["umt"].update(source="umt3"), "image umt: source 'umt3' is not an entry of"),
    (lambda d: d["images"]["amgproxy"]["tests"].append("Collectives"), "test Collectives is in two images"),
])
def test_a_malformed_definition_is_refused_naming_the_file_and_the_key(tmp_path, edit, message):
    path = _definitions(tmp_path, edit)
    with pytest.raises(definition.DefinitionError) as info:
        definition.load(path, root=REPO)
    assert str(path) in str(info.value) and message in str(info.value), info.value


def test_definitions_that_are_not_yaml_or_absent(tmp_path):
    bad = tmp_path / "images.yaml"
    bad.write_text("images:\n  a: [unclosed\n")
    with pytest.raises(definition.DefinitionError, match=r"images\.yaml, line 3: not YAML"):
        definition.load(bad)
    with pytest.raises(definition.DefinitionError, match="no such file"):
        definition.load(tmp_path / "missing.yaml")
    out = subprocess.run([sys.executable, "-m", "hpcvar", "containers", "list", "--definitions", str(bad)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "not YAML" in out.stderr


# --- digests and the store --------------------------------------------------------------------

def test_a_tree_digest_follows_content_modes_and_links_not_times(tmp_path):
    root = tmp_path / "img"
    (root / "opt" / "bin").mkdir(parents=True)
    exe = root / "opt" / "bin" / "prog"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (root / "opt" / "link").symlink_to("bin/prog")
    first = store.tree_sha256(root)
    os.utime(exe, (1, 1))
    assert store.tree_sha256(root) == first  # times are not content
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, symlinks=True)
    assert store.tree_sha256(copy) == first  # nor where the tree is
    exe.chmod(0o644)
    assert store.tree_sha256(root) != first
    exe.chmod(0o755)
    exe.write_text("#!/bin/sh\nexit 1\n")
    assert store.tree_sha256(root) != first
    exe.write_text("#!/bin/sh\n")
    (root / "opt" / "link").unlink()
    (root / "opt" / "link").symlink_to("bin/other")
    assert store.tree_sha256(root) != first


def fake_store(tmp_path: Path, name="amgproxy", executables=("hpcvar-amgproxy",)) -> Path:
    """A store with one "image": a file standing for the SquashFS image and its record, as a
    build writes them (no image is built: these tests check what happens before a run)."""
    where = tmp_path / "images"
    where.mkdir()
    sqfs = where / f"{name}.sqfs"
    sqfs.write_bytes(b"hsqs" + b"\0" * 60)
    (where / name).mkdir()
    (where / name / "rfm_workdir").mkdir()
    (where / f"{name}.json").write_text(json.dumps({
        "name": name, "squashfs": sqfs.name, "squashfs_sha256": store.file_sha256(sqfs), "directory": name,
        "directory_sha256": store.tree_sha256(where / name), "executables": list(executables),
        "software": f"{name} 1.0 hpcvar:src sha256:00", "squashfs_bytes": 64, "built": "2026-11-28T00:00:00Z"}))
    return where


def test_a_store_image_resolves_to_its_single_file_image_with_the_recorded_digest(tmp_path):
    where = fake_store(tmp_path)
    r = store.resolve("amgproxy", where)
    digest = store.file_sha256(where / "amgproxy.sqfs")
    assert (r.name, r.path, r.runtime, r.digest) == ("amgproxy", where / "amgproxy.sqfs", "charliecloud", digest)
    assert r.container == f"amgproxy@sha256:{digest}" and r.software == "amgproxy 1.0 hpcvar:src sha256:00"
    assert store.resolve("auto", where, default="amgproxy") == r
    assert store.resolve(f"amgproxy@sha256:{digest}", where).digest == digest
    # The image directory, by its path: its tree digest, checked against the same record.
    d = store.resolve(str(where / "amgproxy"), where)
    assert d.digest == store.tree_sha256(where / "amgproxy") and d.container.startswith("amgproxy@sha256:")
    r.require("hpcvar-amgproxy")
    with pytest.raises(ImageError, match="has no hpcvar-collectives: it holds hpcvar-amgproxy"):
        r.require("hpcvar-collectives")


def test_a_missing_or_changed_image_names_the_path_and_the_build_command(tmp_path):
    where = fake_store(tmp_path)
    with pytest.raises(ImageError) as info:
        store.resolve("microbenchmarks", where)
    assert str(where / "microbenchmarks.sqfs") in str(info.value)
    assert f"hpcvar containers build microbenchmarks --store {where}" in str(info.value)
    (where / "amgproxy.sqfs").write_bytes(b"hsqs" + b"\1" * 60)  # changed after the build
    with pytest.raises(ImageError) as info:
        store.resolve("amgproxy", where)
    msg = str(info.value)
    assert "changed since it was built" in msg and str(where / "amgproxy.json") in msg
    assert store.file_sha256(where / "amgproxy.sqfs") in msg and "hpcvar containers build amgproxy" in msg
    with pytest.raises(ImageError, match="not the 0{64} asked for"):
        store.resolve(f"{where / 'amgproxy.sqfs'}@sha256:{'0' * 64}", where)
    (where / "amgproxy" / "extra").write_text("x")
    with pytest.raises(ImageError, match="changed since it was built"):
        store.resolve(str(where / "amgproxy"), where)
    (where / "amgproxy.json").write_text("{not json")
    with pytest.raises(ImageError, match=r"amgproxy\.json: not a readable image record"):
        store.resolve("amgproxy", where)
    with pytest.raises(ImageError, match="image=auto: this test has no image"):
        store.resolve("auto", where)
    with pytest.raises(ImageError, match="no such file or directory"):
        store.resolve(str(tmp_path / "nothing.sqfs"), where)


def test_a_site_sif_runs_with_apptainer_and_its_digest_is_computed(tmp_path):
    sif = tmp_path / "milc.sif"
    sif.write_bytes(b"SIF_MAGIC")
    r = store.resolve(str(sif), tmp_path)
    assert r.runtime == "apptainer" and r.name == "milc" and r.digest == store.file_sha256(sif)
    assert r.checked.startswith("nothing") and r.record is None


def test_the_check_command_resolves_as_the_suite_does(tmp_path):
    where = fake_store(tmp_path)
    env = {**os.environ, "USER": "root"}
    ok = subprocess.run([sys.executable, "-m", "hpcvar", "containers", "check", "amgproxy", "--store", str(where)],
                        capture_output=True, text=True, env=env)
    assert ok.stdout.startswith(f"amgproxy@sha256:{store.file_sha256(where / 'amgproxy.sqfs')}"), ok.stdout + ok.stderr
    missing = subprocess.run([sys.executable, "-m", "hpcvar", "containers", "check", "umt", "--store", str(where)],
                             capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "hpcvar containers build umt" in missing.stderr


# --- can this machine run images? ----------------------------------------------------------------

def test_each_missing_requirement_of_ch_run_is_named_with_its_fix(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    (proc / "sys" / "user").mkdir(parents=True)
    (proc / "sys" / "user" / "max_user_namespaces").write_text("0\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no ch-run on it
    monkeypatch.delenv("USER", raising=False)
    found = runtime.problems("charliecloud", proc=proc)
    assert any(p.startswith("ch-run not found on PATH: install Charliecloud") for p in found)
    assert any(p.startswith("$USER is not set") and "export USER=$(id -un)" in p for p in found)
    assert any("user namespaces are disabled" in p and "user.max_user_namespaces" in p for p in found)
    assert runtime.problems("charliecloud", need_user=False, proc=proc) == [found[0], found[2]]
    assert runtime.problems("apptainer")[0].startswith("apptainer not found on PATH")
    build = runtime.build_problems()
    assert {p.split()[0] for p in build if "not found on PATH" in p} == set(runtime.BUILD_TOOLS)


def test_runtime_packages_are_the_packages_whose_libraries_the_programs_load(tmp_path):
    """containers/runtime-packages.sh on a real prefix: the proxy built against Debian's hypre and
    Open MPI needs their run-time packages; a library nobody can find is an error naming it."""
    src = tmp_path / "src"
    shutil.copytree(REPO / "reframe_tests/apps/amgproxy/src", src)
    built = subprocess.run(["bash", str(REPO / "reframe_tests/apps/build/amgproxy.sh"), str(src), str(tmp_path / "p")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    out = subprocess.run(["sh", str(REPO / "containers/runtime-packages.sh"), str(tmp_path / "p")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    packages = out.stdout.split()
    assert packages == sorted(set(packages))
    assert {"libopenmpi3", "libc6"} <= set(packages) and any(p.startswith("libhypre-") for p in packages)
    assert not any(p.endswith("-dev") for p in packages)
    # A program whose library is gone.
    lib, prog = tmp_path / "lib", tmp_path / "q"
    lib.mkdir()
    (tmp_path / "f.c").write_text("int f(void){return 1;}\n")
    (tmp_path / "m.c").write_text("int f(void); int main(void){return f();}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "libf.so"), str(tmp_path / "f.c")], check=True)
    (prog / "bin").mkdir(parents=True)
    subprocess.run(["gcc", "-o", str(prog / "bin" / "m"), str(tmp_path / "m.c"), f"-L{lib}", "-lf"], check=True)
    out = subprocess.run(["sh", str(REPO / "containers/runtime-packages.sh"), str(prog)], capture_output=True, text=True)
    assert out.returncode == 1 and f"{prog}/bin/m: libf.so => not found" in out.stderr


# --- the launch line and the refusals before anything is submitted ------------------------------

def reframe(prefix: Path, *args, env=None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HPCVAR_RFM_") and k != "HPCVAR_OFFLINE"}
    e.update({"HPCVAR_RFM_PREFIX": str(prefix), "USER": "root", **(env or {})})
    return subprocess.run([REFRAME, "-C", "config/reframe/settings.py", *args], cwd=REPO, capture_output=True,
                          text=True, env=e, timeout=600)


def launch_line(prefix: Path, test: str) -> str:
    script = next(p for p in (prefix / "stage").rglob("rfm_job.sh") if p.parent.name.startswith(test + "_"))
    return next(line for line in script.read_text().splitlines() if "ch-run" in line or "apptainer" in line)


def test_under_srun_every_rank_starts_ch_run_and_the_image_s_mpi_wires_up_through_pmix(tmp_path):
    """The hybrid model, as ReFrame writes it (dry run on the Slurm template with Charliecloud):
    srun --mpi=pmix starts ch-run per rank; the stage directory is bound at /rfm_workdir; the
    program is the image's; the perflog's container field is the image's name and digest."""
    where = fake_store(tmp_path)
    prefix = tmp_path / "rfm"
    out = reframe(prefix, "-c", "reframe_tests/apps/amgproxy", "--system", "generic-slurm", "-n", "AMGProxy",
                  "-S", "image=auto", "-S", f"image_store={where}", "--dry-run",
                  env={"HPCVAR_RFM_CONTAINERS": "charliecloud", "HPCVAR_RFM_NODES": "amgproxy:4"})
    assert out.returncode == 0, out.stdout[-3000:]
    line = launch_line(prefix, "AMGProxy")
    assert re.fullmatch(rf'srun --mpi=pmix ch-run -b "\S+/AMGProxy_\w+:/rfm_workdir" --cd=/rfm_workdir '
                        rf'{where}/amgproxy\.sqfs -- stdbuf -oL -eL /opt/hpcvar/apps/amgproxy/bin/hpcvar-amgproxy '
                        r"-P 8 8 4 -n 32 32 32 -stencil 27 -steps 20 -tol 1e-08", line), line
    script = next((prefix / "stage").rglob("AMGProxy_*/rfm_job.sh")).read_text()
    assert 'export USER="${USER:-$(id -un)}"' in script and "export PMIX_MCA_gds=hash" in script
    # No bare-metal build for a container run: the fixture only says so.
    build = next((prefix / "stage").rglob("build_amgproxy_*/rfm_build.sh")).read_text()
    assert "nothing to do, the runs use the image auto" in build and "amgproxy.sh" not in build
    # A code without an image (the profiler, the IMB reference) is still fetched and built.
    mpip = next((prefix / "stage").rglob("build_mpip_*/rfm_build.sh")).read_text()
    assert "mpip.sh" in mpip and "nothing to do" not in mpip


def test_a_site_sif_runs_through_apptainer_from_the_same_class(tmp_path):
    sif = tmp_path / "amg2013.sif"
    sif.write_bytes(b"SIF")
    prefix = tmp_path / "rfm"
    out = reframe(prefix, "-c", "reframe_tests/apps/amg", "--system", "generic-slurm", "-n", "^AMG2013",
                  "-S", f"image={sif}", "--dry-run", env={"HPCVAR_RFM_NODES": "amg:2"})
    assert out.returncode == 0, out.stdout[-3000:]
    line = launch_line(prefix, "AMG2013")
    assert re.fullmatch(rf'srun --mpi=pmix apptainer exec -B"\S+:/rfm_workdir" --pwd /rfm_workdir {sif} stdbuf -oL '
                        r"-eL /opt/hpcvar/apps/amg2013/bin/amg -P 8 4 4 -n 32 32 32 -problem 2 -printstats", line), line


def test_a_missing_image_fails_the_test_before_its_job_with_the_build_command(tmp_path):
    where = fake_store(tmp_path)
    prefix = tmp_path / "rfm"
    out = reframe(prefix, "-c", "reframe_tests/microbenchmarks", "--system", "local", "-n", "^Collectives", "-S",
                  "image=auto", "-S", f"image_store={where}", "-r")
    assert out.returncode != 0
    assert "setup" in out.stdout and f"hpcvar containers build microbenchmarks --store {where}" in out.stdout
    assert not list((prefix / "stage").rglob("Collectives_*/rfm_job.out"))  # nothing ran
    # The wrong image for the test: refused by its record, before anything runs.
    out = reframe(prefix, "-c", "reframe_tests/microbenchmarks", "--system", "local", "-n", "^Collectives", "-S",
                  "image=amgproxy", "-S", f"image_store={where}", "-r")
    assert out.returncode != 0 and "has no hpcvar-collectives: it holds hpcvar-amgproxy" in out.stdout


def test_on_the_testbed_a_checkout_under_tmp_is_refused_before_any_job(tmp_path):
    """Every testbed node has its own /tmp: a stage directory (or image) there would not be the
    job's. Refused at set-up, naming the path and why (a dry run needs no cluster)."""
    from hpcvar.dev.testbed import node_local_reason

    assert "every testbed node has a /tmp of its own" in node_local_reason(tmp_path)
    assert node_local_reason("/var/tmp/x") is None and node_local_reason("/tmp") is not None
    out = reframe(tmp_path / "rfm", "-c", "reframe_tests/microbenchmarks", "--system", "testbed", "-n",
                  "^Collectives", "--dry-run")
    assert out.returncode != 0
    assert "every testbed node has a /tmp of its own" in out.stdout and str(tmp_path / "rfm") in out.stdout


def test_a_campaign_round_checks_its_images_and_paths_before_starting_reframe(tmp_path, monkeypatch):
    from hpcvar.campaign import rounds

    where = fake_store(tmp_path)
    monkeypatch.chdir(REPO)
    started = []
    monkeypatch.setattr(rounds.subprocess, "run", lambda *a, **k: started.append(a))
    kw = dict(config="config/reframe/settings.py", checks=["reframe_tests"], options=[],
              environment={"HPCVAR_IMAGES": str(where)})
    with pytest.raises(SystemExit) as info:
        rounds.run_round(tmp_path / "r" / "reframe-report.json", system="local", tests=["Collectives", "AMGProxy"],
                         prefix=tmp_path / "p", image="auto", **kw)
    assert "microbenchmarks" in str(info.value) and "hpcvar containers build microbenchmarks" in str(info.value)
    with pytest.raises(SystemExit) as info:
        rounds.run_round(tmp_path / "r" / "reframe-report.json", system="testbed", tests=["AMGProxy"],
                         prefix=tmp_path / "p", image=None, **kw)
    assert "refused on the testbed" in str(info.value) and "/tmp of its own" in str(info.value)
    assert started == []  # neither round started ReFrame
    assert [r.name for r in store.resolve_for_tests("auto", ["AMGProxy"], definition.load(DEFINITIONS), where)] == [
        "amgproxy"]


def test_on_the_testbed_a_round_from_an_environment_under_tmp_is_refused(monkeypatch):
    """The nodes run the environment's own `hpcvar` (the counter sampler; the workflow's jobs under
    the Slurm profile): from a virtual environment under /tmp, a node finds its own empty /tmp and
    the job fails with "not found" in a Slurm log. Refused before the round, naming it."""
    from hpcvar.campaign import rounds

    monkeypatch.setattr(rounds.sys, "prefix", "/tmp/hpcvar-clone/.venv")
    with pytest.raises(SystemExit) as info:
        rounds.preflight("testbed", [Path("/var/tmp/hpcvar-prefix")], None, [], {})
    message = str(info.value)
    assert "refused on the testbed" in message and "Python environment of hpcvar" in message
    assert "/tmp/hpcvar-clone/.venv is under /tmp" in message
    rounds.preflight("local", [], None, [], {})  # this machine's own jobs see its /tmp: no check
    monkeypatch.setattr(rounds.sys, "prefix", "/var/tmp/hpcvar-clone/.venv")
    rounds.preflight("testbed", [Path("/var/tmp/hpcvar-prefix")], None, [], {})


# --- comparing images ------------------------------------------------------------------------------

def test_a_comparison_side_can_be_an_image_bare_metal_or_a_range_with_an_image(tmp_path):
    import pandas as pd

    from hpcvar.analyses.compare import BARE_METAL, BadInput, Selection, parse_selection

    assert parse_selection("bare-metal", tmp_path) == Selection(image=BARE_METAL)
    assert parse_selection("image:amgproxy@sha256:3f1c", tmp_path) == Selection(image="amgproxy@sha256:3f1c")
    both = parse_selection("2026-01-01..2026-01-15,image:amgproxy", tmp_path)
    assert both.image == "amgproxy" and both.start == pd.Timestamp("2026-01-01", tz="UTC")
    for bad, why in (("image:", "needs a name"), ("bare-metal,image:x", "two images"),
                     ("2026-01-01,2026-02-01", "two ranges")):
        with pytest.raises(BadInput, match=why):
            parse_selection(bad, tmp_path)
    ran = pd.Series([None, "amgproxy@sha256:3f1c00", "amgproxy@sha256:9ab000", "microbenchmarks@sha256:3f1c00"])
    assert Selection(image=BARE_METAL).matches_container(ran).tolist() == [True, False, False, False]
    assert Selection(image="amgproxy").matches_container(ran).tolist() == [False, True, True, False]
    assert Selection(image="amgproxy@sha256:3f1c").matches_container(ran).tolist() == [False, True, False, False]
    assert Selection(image="@sha256:3f1c").matches_container(ran).tolist() == [False, True, False, True]
    assert Selection().matches_container(ran).all()
