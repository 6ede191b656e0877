"""Pinned application sources, the shared build scripts and the Apptainer recipes.

No Apptainer and no network here: the recipes are parsed (spython) and checked for structure and
for agreement with reframe_tests/apps/sources.yaml (the one source of truth), the build scripts
are syntax-checked (and linted when shellcheck is installed), fetch.sh is run for real against
git repositories, tarballs and source mirrors created in the test, and, with a source mirror
(``HPCVAR_SOURCE_MIRROR``; skipped without one), every pin is checked to resolve in it (the
archive exists, has the pinned sha256 and one top-level folder named like it).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from spython.main.parse.parsers import SingularityParser

from conftest import needs_source_mirror
from hpcvar.containers import definition

REPO = Path(__file__).resolve().parents[1]
APPS_DIR = REPO / "reframe_tests" / "apps"
SOURCES = APPS_DIR / "sources.yaml"
BUILD = APPS_DIR / "build"
FETCH = BUILD / "fetch.sh"
CONTAINERS = REPO / "containers"

APPS = ["amg2013", "amg2023", "milc", "minivite", "umt"]
#: Not applications: the profiler the app tests preload and the MPI benchmark of reference.
TOOLS = {"mpip": "lib/libmpiP.so", "imb": "bin/IMB-MPI1"}
EXECUTABLES = {"amg2013": "amg", "amg2023": "amg", "milc": "su3_rmd", "minivite": "miniVite",
               "umt": "SuOlsonTest"}
#: The suite's own codes: built from this repository by scripts of the same contract.
OWN = {"amgproxy": "bin/hpcvar-amgproxy", "microbenchmarks": "bin/hpcvar-collectives"}
HEX40 = re.compile(r"^[0-9a-f]{40}$")
TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
BRANCHES = {"master", "main", "develop", "devel", "trunk", "HEAD"}
#: Lists the packages an install prefix's programs load libraries from (the images' second stage).
RUNTIME_PACKAGES = CONTAINERS / "runtime-packages.sh"


def load_sources() -> dict:
    return yaml.safe_load(SOURCES.read_text())


def entries():
    """(name, entry) for every app and every dependency of an app (``app/dep``)."""
    for app, entry in load_sources().items():
        yield app, entry
        for dep, dep_entry in (entry.get("deps") or {}).items():
            yield f"{app}/{dep}", dep_entry


def raw_sections(path: Path, stage: str) -> dict[str, list[str]]:
    """One stage's %sections of a definition file, raw lines (spython skips `%files from`)."""
    text = path.read_text()
    text = text[text.index(f"Stage: {stage}"):]
    text = text.split("\nBootstrap:", 1)[0]
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        match = re.match(r"^%(\w+)", line)
        if match:
            current = match.group(1).lower()
            sections.setdefault(current, [])
        elif current is not None:
            sections[current].append(line)
    return sections


def labels_of(recipe) -> dict[str, str]:
    out = {}
    for line in recipe.labels:
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


# ----------------------------------------------------------------------------- sources.yaml

def test_sources_has_every_app_and_tool_and_nothing_else():
    assert sorted(load_sources()) == sorted([*APPS, *TOOLS])


@pytest.mark.parametrize("name,entry", list(entries()), ids=[n for n, _ in entries()])
def test_sources_entry_is_pinned(name, entry):
    assert isinstance(entry["version"], str) and entry["version"], "version must be a quoted string"
    assert entry["git"].startswith("https://") and entry["git"].endswith(".git")
    ref = entry["ref"]
    assert isinstance(ref, str)
    assert ref not in BRANCHES, f"{name}: ref {ref!r} is a branch, not a pin"
    assert HEX40.match(ref) or (TAG.match(ref) and not re.fullmatch(r"[0-9a-f]{7,39}", ref)), \
        f"{name}: ref {ref!r} is neither a full commit hash nor a tag"
    if "tag" in entry:
        assert isinstance(entry["tag"], str) and TAG.match(entry["tag"])
        if not HEX40.match(ref):
            assert entry["tag"] == ref
    if "tarball" in entry:
        assert entry["tarball"].startswith("https://")
        assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), f"{name}: tarball without a sha256"
    assert entry.get("fetch", "git") in ("git", "tarball")
    if entry.get("fetch") == "tarball":
        assert "tarball" in entry
    assert entry["spack"]
    assert entry["verified"].strip()
    assert HEX40.match(entry["commit"]), f"{name}: commit must be the full hash `ref` resolves to"
    if HEX40.match(ref):
        assert entry["commit"] == ref
    assert re.fullmatch(r"[A-Za-z0-9._+-]+\.tar\.gz", entry["mirror"])
    assert re.fullmatch(r"[0-9a-f]{64}", entry["mirror_sha256"])
    text = yaml.safe_dump(entry)
    assert "TODO" not in text and "FIXME" not in text and "XXX" not in text


@pytest.mark.parametrize("app", APPS)
def test_sources_app_fields(app):
    entry = load_sources()[app]
    assert entry["description"].strip() and entry["inputs"].strip()
    assert entry["build"] == f"build/{app}.sh" and (APPS_DIR / entry["build"]).is_file()
    assert EXECUTABLES[app] in [e.strip() for e in entry["executables"].split(",")]
    if entry["spack"] == "none":
        assert entry["spack_note"].strip(), "no Spack package: say why and what to do instead"


def test_table_one_inputs_are_recorded():
    sources = load_sources()
    assert "-P 32 16 16 -n 32 32 32 -problem 2" in sources["amg2013"]["inputs"]
    assert "4x4x4x4" in sources["milc"]["inputs"]
    assert "-t 1E-02 -i 6" in sources["minivite"]["inputs"]
    assert "custom_8k.cmg" in sources["umt"]["inputs"]


def test_only_amg2023_has_a_dependency():
    sources = load_sources()
    assert set(sources["amg2023"]["deps"]) == {"hypre"}
    assert [name for name, entry in sources.items() if entry.get("deps")] == ["amg2023"]


@pytest.mark.parametrize("name,entry", list(entries()), ids=[n for n, _ in entries()])
def test_every_pin_resolves_in_the_source_mirror(name, entry):
    mirror = needs_source_mirror()
    archive = mirror / entry["mirror"]
    assert archive.is_file(), f"{name}: {entry['mirror']} is not in the mirror {mirror}"
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == entry["mirror_sha256"], name
    with tarfile.open(archive) as tar:  # one top-level folder named like the archive
        assert {m.name.split("/")[0] for m in tar.getmembers()} == {entry["mirror"].removesuffix(".tar.gz")}


# ----------------------------------------------------------------------------- build scripts

def build_scripts() -> list[Path]:
    return sorted(BUILD.glob("*.sh"))


def test_one_build_script_per_app_and_tool_plus_fetch():
    assert {p.name for p in build_scripts()} == {f"{app}.sh" for app in [*APPS, *TOOLS, *OWN]} | {"fetch.sh"}


@pytest.mark.parametrize("script", build_scripts(), ids=lambda p: p.name)
def test_build_script_syntax(script):
    text = script.read_text()
    assert text.startswith("#!"), "shebang"
    assert re.search(r"^set -eu$", text, re.M), "set -eu"
    assert os.access(script, os.X_OK), f"{script.name} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True)
    if script.name == "fetch.sh":
        subprocess.run(["sh", "-n", str(script)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_build_scripts_shellcheck():
    subprocess.run(["shellcheck", *map(str, build_scripts()), str(RUNTIME_PACKAGES)], check=True)


@pytest.mark.parametrize("app", [*APPS, *TOOLS, *OWN])
def test_build_script_contract(app):
    """Usage SRC_DIR PREFIX, compilers and jobs from the environment, installs into PREFIX/bin
    (PREFIX/lib for mpiP's library)."""
    text = (BUILD / f"{app}.sh").read_text()
    assert "${MAKE_JOBS:-4}" in text
    assert "${MPICC:-mpicc}" in text or "${MPICXX:-mpicxx}" in text
    installed = TOOLS.get(app) or OWN.get(app) or f"bin/{EXECUTABLES[app]}"
    assert f'"$PREFIX/{installed}"' in text
    usage = subprocess.run(["bash", str(BUILD / f"{app}.sh")], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr and "SRC_DIR PREFIX" in usage.stderr


def test_build_script_rejects_a_wrong_tree(tmp_path):
    res = subprocess.run(["bash", str(BUILD / "milc.sh"), str(tmp_path), str(tmp_path / "p")],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "does not look like" in res.stderr


# ----------------------------------------------------------------------------- recipes

def test_one_generated_recipe_per_image_and_none_stale():
    """containers/<name>.def are generated from containers/images.yaml: one per image, each
    exactly what the definition gives today (`hpcvar containers recipe --check`)."""
    defs = definition.load(CONTAINERS / "images.yaml")
    assert sorted(p.stem for p in CONTAINERS.glob("*.def")) == sorted(defs.images)
    assert set(APPS) <= set(defs.images) and {"microbenchmarks", "amgproxy"} <= set(defs.images)
    for name, image in defs.images.items():
        assert (CONTAINERS / f"{name}.def").read_text() == definition.apptainer_recipe(defs, image), \
            f"containers/{name}.def is stale: hpcvar containers recipe {name} --write"
    check = subprocess.run([sys.executable, "-m", "hpcvar", "containers", "recipe", "--check"], cwd=REPO,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_a_stale_or_missing_recipe_is_found(tmp_path):
    import dataclasses

    defs = definition.load(CONTAINERS / "images.yaml")
    elsewhere = dataclasses.replace(defs, root=tmp_path)
    (tmp_path / "containers").mkdir()
    (tmp_path / "reframe_tests" / "apps").mkdir(parents=True)
    shutil.copy(SOURCES, tmp_path / "reframe_tests" / "apps" / "sources.yaml")  # the Table I recipes' labels
    for name, image in defs.images.items():
        (tmp_path / "containers" / f"{name}.def").write_text(definition.apptainer_recipe(defs, image))
    assert definition.stale_recipes(elsewhere) == []
    edited = tmp_path / "containers" / "amgproxy.def"
    edited.write_text(edited.read_text().replace("libpmix2", "libpmix2 extra"))
    (tmp_path / "containers" / "umt.def").unlink()
    assert definition.stale_recipes(elsewhere) == [edited, tmp_path / "containers" / "umt.def"]
    assert definition.stale_recipes(elsewhere, ["microbenchmarks"]) == []


@pytest.mark.parametrize("image", ["microbenchmarks", "amgproxy", *APPS])
def test_recipe_is_two_stages_with_the_build_script_of_the_definition(image):
    defs = definition.load(CONTAINERS / "images.yaml")
    img = defs.image(image)
    path = CONTAINERS / f"{image}.def"
    stages = SingularityParser(str(path)).recipe
    assert list(stages) == ["build", "final"]
    build, final = stages["build"], stages["final"]
    # Both stages on the hosts' distribution release (never `latest`).
    assert build.fromHeader == final.fromHeader == defs.distribution.docker and not build.fromHeader.endswith("latest")
    # The build stage gets exactly the repository files the definition names, at /opt/hpcvar/build.
    copied = [line.split() for line in build.files]
    assert [src for src, _ in copied] == list(img.copied_files())
    assert all(dst == f"/opt/hpcvar/build/{src}" and (REPO / src).exists() for src, dst in copied)
    # ... and runs the build script both builders share, line for line, after installing the packages.
    post = "\n".join(build.install)
    def code(lines):
        return "\n".join(x for x in (line.strip() for line in lines) if x and not x.startswith("#"))

    assert code(definition.build_script(img).splitlines()) in code(build.install)
    assert post.index("apt-get install") < post.index("set -eu")
    assert all(p in post for p in (*defs.base, *defs.builder))
    # The image: only the install prefix from the build stage, the base packages and what its programs load.
    sections = raw_sections(path, "final")
    assert [line.split() for line in sections["files"] if line.strip()] == [[img.prefix, img.prefix]]
    final_post = "\n".join(final.install)
    assert f"$(cat {img.prefix}/share/hpcvar/runtime-packages.txt)" in final_post
    assert "gfortran" not in final_post and "build-essential" not in final_post
    assert "mkdir -p /rfm_workdir" in final_post  # ReFrame's stage directory mount point
    assert final.cmd == f'exec {img.executable(img.executables[0])} "$@"'
    labels = labels_of(final)
    assert labels["org.hpcvar.image"] == image and labels["org.hpcvar.tests"] == ",".join(img.tests)


@pytest.mark.parametrize("app", APPS)
def test_recipe_labels_match_sources(app):
    entry = load_sources()[app]
    labels = labels_of(SingularityParser(str(CONTAINERS / f"{app}.def")).recipe["final"])
    assert labels["org.hpcvar.source"] == app
    assert labels["org.hpcvar.source.version"] == entry["version"]
    assert labels["org.hpcvar.source.git"] == entry["git"]
    assert labels["org.hpcvar.source.commit"] == entry["commit"]
    assert labels["org.hpcvar.source.mirror"] == f"{entry['mirror']} sha256:{entry['mirror_sha256']}"
    for dep, dep_entry in (entry.get("deps") or {}).items():
        assert labels[f"org.hpcvar.dep.{dep}"].split()[0] == dep_entry["version"]
    assert labels["org.hpcvar.executables"].split(",")[0] == EXECUTABLES[app]


def test_source_images_fetch_from_the_mirror_with_the_suite_s_fetch_script():
    defs = definition.load(CONTAINERS / "images.yaml")
    for app in APPS:
        script = definition.build_script(defs.image(app))
        assert f"HPCVAR_SOURCES=reframe_tests/apps/sources.yaml sh reframe_tests/apps/build/fetch.sh {app} \"$SRC\"" \
            in script
        assert "export HPCVAR_SOURCE_MIRROR=/opt/hpcvar/mirror HPCVAR_OFFLINE=1" in script
        assert f"bash reframe_tests/apps/build/{app}.sh \"$SRC\" \"$PREFIX\"" in script
        assert 'cp "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"' in script
    own = definition.build_script(defs.image("amgproxy"))
    assert "fetch.sh" not in own and "HPCVAR_SOURCE_MIRROR" not in own


# ----------------------------------------------------------------------------- fetch.sh, for real

def git(*args, cwd=None):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path):
    """A fake upstream: v1.0 tagged, then one more commit on the branch (so HEAD != tag)."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "VERSION").write_text("1.0\n")
    git("add", "VERSION", cwd=repo)
    git("commit", "-q", "-m", "release 1.0", cwd=repo)
    git("tag", "v1.0", cwd=repo)
    tagged = git("rev-parse", "HEAD", cwd=repo)
    (repo / "VERSION").write_text("1.1-dev\n")
    git("commit", "-q", "-am", "development", cwd=repo)
    head = git("rev-parse", "HEAD", cwd=repo)
    return repo, tagged, head


def write_sources(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def run_fetch(app, dest, sources, **env):
    # The session's own mirror settings (a developer's HPCVAR_SOURCE_MIRROR) are not the test's.
    inherited = {k: v for k, v in os.environ.items() if k not in ("HPCVAR_SOURCE_MIRROR", "HPCVAR_OFFLINE")}
    full_env = {**inherited, "HPCVAR_SOURCES": str(sources), "GIT_CONFIG_GLOBAL": os.devnull, **env}
    return subprocess.run(["sh", str(FETCH), app, str(dest)], env=full_env, capture_output=True,
                          text=True)


@pytest.mark.parametrize("parser", ["python", "awk"])
@pytest.mark.parametrize("pin", ["tag", "commit"])
def test_fetch_clones_and_records_commit(tmp_path, upstream, parser, pin):
    repo, tagged, _ = upstream
    ref = "v1.0" if pin == "tag" else tagged
    sources = write_sources(tmp_path / "sources.yaml", f"""\
# a comment
fake:
  version: "1.0"   # quoted: a string
  description: >-
    A fake application
    on two lines.
  git: {repo}
  ref: {ref}
  tag: v1.0
  spack: none
""")
    dest = tmp_path / "src"
    res = run_fetch("fake", dest, sources, HPCVAR_YAML_PARSER=parser)
    assert res.returncode == 0, res.stderr
    assert (dest / ".hpcvar-source").read_text() == f"fake 1.0 {repo} {tagged}\n"
    assert (dest / "VERSION").read_text() == "1.0\n"  # the pinned tree, not the branch head
    assert git("rev-parse", "HEAD", cwd=dest) == tagged
    assert "recorded: fake 1.0" in res.stdout
    # Fetching again into the same tree is a no-op.
    again = run_fetch("fake", dest, sources, HPCVAR_YAML_PARSER=parser)
    assert again.returncode == 0 and "already fetched" in again.stdout


def test_fetch_refuses_a_moved_tag(tmp_path, upstream):
    repo, tagged, head = upstream
    sources = write_sources(tmp_path / "sources.yaml", f"""\
fake:
  version: "1.0"
  git: {repo}
  ref: {head}
  tag: v1.0
""")
    res = run_fetch("fake", tmp_path / "src", sources)
    assert res.returncode != 0 and "tag moved" in res.stderr


def test_fetch_fails_on_a_missing_ref_and_a_missing_app(tmp_path, upstream):
    repo, _, _ = upstream
    sources = write_sources(tmp_path / "sources.yaml", f"""\
fake:
  version: "1.0"
  git: {repo}
  ref: v9.9
""")
    res = run_fetch("fake", tmp_path / "a", sources)
    assert res.returncode != 0 and "v9.9" in res.stderr
    res = run_fetch("nosuchapp", tmp_path / "b", sources)
    assert res.returncode != 0 and "no entry 'nosuchapp'" in res.stderr
    assert not (tmp_path / "b" / ".hpcvar-source").exists()


def test_fetch_refuses_a_foreign_nonempty_dest(tmp_path, upstream):
    repo, _, _ = upstream
    sources = write_sources(tmp_path / "sources.yaml", f"""\
fake:
  version: "1.0"
  git: {repo}
  ref: v1.0
""")
    dest = tmp_path / "src"
    dest.mkdir()
    (dest / "something").write_text("x")
    res = run_fetch("fake", dest, sources)
    assert res.returncode != 0 and "not empty" in res.stderr


@pytest.mark.parametrize("parser", ["python", "awk"])
def test_fetch_tarball_dependency_with_sha256(tmp_path, upstream, parser):
    repo, tagged, _ = upstream
    payload = tmp_path / "payload" / "dep-2.0"
    payload.mkdir(parents=True)
    (payload / "README").write_text("dep 2.0\n")
    tarball = tmp_path / "dep-2.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(payload, arcname="dep-2.0")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    url = tarball.as_uri()
    sources = write_sources(tmp_path / "sources.yaml", f"""\
fake:
  version: "1.0"
  git: {repo}
  ref: v1.0
  deps:
    dep:
      version: "2.0"
      git: https://example.org/dep.git
      ref: v2.0
      fetch: tarball
      tarball: {url}
      sha256: {digest}
""")
    dest = tmp_path / "src"
    res = run_fetch("fake", dest, sources, HPCVAR_YAML_PARSER=parser)
    assert res.returncode == 0, res.stderr
    assert (dest / ".hpcvar-source").read_text() == f"fake 1.0 {repo} {tagged}\n"
    dep = dest / "_deps" / "dep"
    assert (dep / "README").read_text() == "dep 2.0\n"  # top-level directory stripped
    assert (dep / ".hpcvar-source").read_text() == f"fake/dep 2.0 {url} sha256:{digest}\n"

    # One dependency alone, and a corrupted pin.
    res = run_fetch("fake/dep", tmp_path / "alone", sources, HPCVAR_YAML_PARSER=parser)
    assert res.returncode == 0, res.stderr
    bad = write_sources(tmp_path / "bad.yaml", sources.read_text().replace(digest, "0" * 64))
    res = run_fetch("fake/dep", tmp_path / "bad", bad, HPCVAR_YAML_PARSER=parser)
    assert res.returncode != 0 and "sha256 mismatch" in res.stderr
    assert not (tmp_path / "bad" / ".hpcvar-source").exists()


def test_fetch_parsers_agree_on_the_real_sources(tmp_path):
    """The awk fallback reads every pin of the real sources.yaml as PyYAML does."""
    flat = {}
    for parser in ("python", "awk"):
        script = tmp_path / f"flat-{parser}.sh"
        script.write_text(FETCH.read_text().replace('fetch_one "$APP" "$DEST"\n', 'cat "$FLAT"; exit 0\n', 1))
        res = subprocess.run(["sh", str(script), "x", "y"], capture_output=True, text=True,
                             env={**os.environ, "HPCVAR_SOURCES": str(SOURCES), "HPCVAR_YAML_PARSER": parser})
        assert res.returncode == 0, res.stderr
        flat[parser] = dict(line.split("\t", 1) for line in res.stdout.splitlines())
    for key, value in flat["awk"].items():
        assert flat["python"][key] == value, key
    for name, entry in entries():
        prefix = name.replace("/", ".deps.")
        for field in ("version", "git", "ref", "tag", "tarball", "sha256", "fetch", "submodules"):
            if field in entry:
                expected = str(entry[field]).lower() if isinstance(entry[field], bool) else str(entry[field])
                assert flat["awk"][f"{prefix}.{field}"] == expected, (name, field)


# ----------------------------------------------------------------------------- the source mirror

def _archive(tree: Path, top: str, out: Path) -> str:
    """tar.gz of ``tree`` under one folder ``top`` (as the mirror's archives are); its sha256."""
    with tarfile.open(out, "w:gz") as tar:
        tar.add(tree, arcname=top, filter=lambda m: None if m.name.endswith("/.git") or "/.git/" in m.name else m)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def _mirror_sources(tmp_path, git_url, commit, digest, name="fake-1.0.tar.gz", exclude=""):
    return write_sources(tmp_path / "sources.yaml", f"""\
fake:
  version: "1.0"
  git: {git_url}
  ref: v1.0
  tag: v1.0
  commit: {commit}
  mirror: {name}
  mirror_sha256: "{digest}"
""" + (f"  mirror_exclude: {exclude}\n" if exclude else ""))


@pytest.mark.parametrize("parser", ["python", "awk"])
def test_fetch_takes_the_mirror_archive_without_network(tmp_path, upstream, parser):
    repo, tagged, _ = upstream
    git("checkout", "-q", "v1.0", cwd=repo)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    digest = _archive(repo, "fake-1.0", mirror / "fake-1.0.tar.gz")
    # The git URL leads nowhere: only the mirror can provide the tree.
    sources = _mirror_sources(tmp_path, "https://example.invalid/fake.git", tagged, digest)
    dest = tmp_path / "src"
    res = run_fetch("fake", dest, sources, HPCVAR_SOURCE_MIRROR=str(mirror), HPCVAR_YAML_PARSER=parser)
    assert res.returncode == 0, res.stderr
    assert (dest / "VERSION").read_text() == "1.0\n"
    assert (dest / ".hpcvar-source").read_text() == (
        f"fake 1.0 https://example.invalid/fake.git {tagged} mirror:fake-1.0.tar.gz sha256:{digest}\n")
    assert "from the source mirror" in res.stdout
    again = run_fetch("fake", dest, sources, HPCVAR_SOURCE_MIRROR=str(mirror), HPCVAR_YAML_PARSER=parser)
    assert again.returncode == 0 and "already fetched" in again.stdout


def test_fetch_refuses_a_mirror_archive_with_another_sum(tmp_path, upstream):
    repo, tagged, _ = upstream
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    actual = _archive(repo, "fake-1.0", mirror / "fake-1.0.tar.gz")
    pinned = "ab" * 32
    sources = _mirror_sources(tmp_path, str(repo), tagged, pinned)
    res = run_fetch("fake", tmp_path / "src", sources, HPCVAR_SOURCE_MIRROR=str(mirror))
    assert res.returncode != 0
    assert str(mirror / "fake-1.0.tar.gz") in res.stderr and actual in res.stderr and pinned in res.stderr
    assert not (tmp_path / "src" / ".hpcvar-source").exists()
    assert not (tmp_path / "src" / "VERSION").exists()


def test_fetch_falls_back_to_upstream_when_the_mirror_lacks_the_archive(tmp_path, upstream):
    repo, tagged, _ = upstream
    (tmp_path / "mirror").mkdir()
    sources = _mirror_sources(tmp_path, str(repo), tagged, "cd" * 32)
    res = run_fetch("fake", tmp_path / "src", sources, HPCVAR_SOURCE_MIRROR=str(tmp_path / "mirror"))
    assert res.returncode == 0, res.stderr
    assert "fake-1.0.tar.gz is not in the source mirror" in res.stdout and "falling back to upstream" in res.stdout
    assert (tmp_path / "src" / ".hpcvar-source").read_text() == f"fake 1.0 {repo} {tagged}\n"


def test_fetch_without_mirror_and_network_fails_clearly(tmp_path, upstream):
    _, tagged, _ = upstream
    (tmp_path / "mirror").mkdir()
    sources = _mirror_sources(tmp_path, str(tmp_path / "no-such-upstream"), tagged, "cd" * 32)
    res = run_fetch("fake", tmp_path / "src", sources, HPCVAR_SOURCE_MIRROR=str(tmp_path / "mirror"))
    assert res.returncode != 0
    assert "git clone" in res.stderr and "failed" in res.stderr and "HPCVAR_SOURCE_MIRROR" in res.stderr


def test_offline_fetch_takes_only_the_mirror(tmp_path, upstream):
    """HPCVAR_OFFLINE=1: an archive missing from the mirror, or no mirror at all, is an error
    naming the archive or the variable; nothing is cloned although the upstream is reachable."""
    repo, tagged, _ = upstream
    (tmp_path / "mirror").mkdir()
    sources = _mirror_sources(tmp_path, str(repo), tagged, "cd" * 32)
    res = run_fetch("fake", tmp_path / "src", sources, HPCVAR_SOURCE_MIRROR=str(tmp_path / "mirror"),
                    HPCVAR_OFFLINE="1")
    assert res.returncode != 0
    assert "fake-1.0.tar.gz is not in the source mirror" in res.stderr and "HPCVAR_OFFLINE=1" in res.stderr
    assert not (tmp_path / "src" / "VERSION").exists()
    res = run_fetch("fake", tmp_path / "src2", sources, HPCVAR_OFFLINE="1")
    assert res.returncode != 0
    assert "no source mirror (set HPCVAR_SOURCE_MIRROR" in res.stderr
    assert not (tmp_path / "src2" / "VERSION").exists()


#: sha256 of the mirror archive of the tree :func:`_fixed_upstream` commits, in fetch.sh's format
#: (GNU tar 1.34, gzip 1.12). The format changing changes every pin of apps/sources.yaml: re-pin
#: them (docs/how-to/source-mirrors.md, "What changes a sum") and then this one.
FIXED_TREE_SHA256 = "4b16d2e6e19db154267e13a1c63bf816fdab7cfc4c68e6d1ba02dbe62f658ac9"


def _fixed_upstream(root: Path) -> tuple[Path, str]:
    """A repository with a fixed tree: a script, a nested file, a .gitignore (left out of the
    archive); its commit."""
    repo = root / "upstream"
    (repo / "src" / "deep").mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "VERSION").write_text("1.0\n")
    (repo / "build.sh").write_text("#!/bin/sh\necho build\n")
    (repo / "build.sh").chmod(0o755)
    (repo / "src" / "deep" / "kernel.c").write_text("int kernel(void) { return 42; }\n")
    (repo / ".gitignore").write_text("*.o\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "release 1.0", cwd=repo)
    return repo, git("rev-parse", "HEAD", cwd=repo)


def test_mirror_archives_do_not_depend_on_who_fills_them_or_when(tmp_path):
    """The same tree gives the pinned archive filled under umask 022 or 077, in UTC or in New
    York, at another time, and (as root) by another user: nothing of the machine or its user
    reaches the bytes. (The pins of 2026-11-26 were set before the modes were normalised, and a
    date alone as mtime was the local time: a site in another timezone got other sums.)"""
    # World-readable, so that another user can clone it and write beside it.
    root = Path(tempfile.mkdtemp(prefix="hpcvar-mirror-"))
    try:
        root.chmod(0o755)
        repo, commit = _fixed_upstream(root)
        sources = _mirror_sources(root, str(repo), commit, FIXED_TREE_SHA256)
        sources.chmod(0o644)
        fills = [("022", "UTC", None), ("077", "America/New_York", None)]
        if os.geteuid() == 0:
            fills.append(("027", "Asia/Tokyo", "nobody"))
        made = {}
        for i, (umask, tz, user) in enumerate(fills):
            if i:
                time.sleep(1.1)  # another second: the checkout's mtimes differ
            out = root / f"fill{i}"
            command = ["sh", "-c", f'umask {umask} && exec sh "$0" --mirror "$1"', str(FETCH), str(out)]
            if user:  # the repository and the mirror are the user's own (git refuses one of another owner)
                out.mkdir()
                subprocess.run(["chown", "-R", user, str(repo), str(out)], check=True)
                command = ["setpriv", "--reuid", user, "--regid", "nogroup", "--clear-groups", *command]
            env = {**os.environ, "HPCVAR_SOURCES": str(sources), "GIT_CONFIG_GLOBAL": os.devnull, "TZ": tz,
                   "HOME": str(root)}
            res = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root)
            assert res.returncode == 0, (umask, tz, user, res.stdout + res.stderr)
            archive = out / "fake-1.0.tar.gz"
            made[(umask, tz, user)] = hashlib.sha256(archive.read_bytes()).hexdigest()
            assert "as pinned" in res.stdout, res.stdout
        assert set(made.values()) == {FIXED_TREE_SHA256}, made
        with tarfile.open(root / "fill0" / "fake-1.0.tar.gz") as tar:
            members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["fake-1.0", "fake-1.0/VERSION", "fake-1.0/build.sh", "fake-1.0/src",
                                   "fake-1.0/src/deep", "fake-1.0/src/deep/kernel.c"]
        assert {m.mtime for m in members.values()} == {1577836800} and {m.uid for m in members.values()} == {0}
        assert members["fake-1.0/build.sh"].mode == 0o755 and members["fake-1.0/VERSION"].mode == 0o644
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_mirror_mode_refuses_an_incomplete_checkout(tmp_path, upstream):
    """A clone that lacks a blob (as a partial snapshot of a big repository may) checks out with
    files missing and git exits 0: the archive would lack them silently."""
    repo, tagged, _ = upstream
    broken = tmp_path / "broken.git"
    git("clone", "-q", "--mirror", str(repo), str(broken), cwd=tmp_path)
    blob = git("rev-parse", f"{tagged}:VERSION", cwd=broken).strip()
    (broken / "objects" / blob[:2] / blob[2:]).unlink()
    sources = _mirror_sources(tmp_path, str(broken), tagged, "0" * 64)
    res = subprocess.run(["sh", str(FETCH), "--mirror", str(tmp_path / "m")], capture_output=True, text=True,
                         env={**os.environ, "HPCVAR_SOURCES": str(sources), "GIT_CONFIG_GLOBAL": os.devnull})
    assert res.returncode != 0 and "incomplete" in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "m" / "fake-1.0.tar.gz").exists()


@pytest.mark.parametrize("parser", ["python", "awk"])
def test_mirror_exclude_leaves_files_out_even_when_the_clone_lacks_them(tmp_path, parser):
    """MILC's pinned tree carries large binary samples that no build reads, and the snapshot of
    a big repository may lack their blobs. Listed in `mirror_exclude`, they are not in the
    archive: its sum is the fixed tree's pin with or without them in the clone, and git's
    complaint about the missing blobs is not shown; not listed, the incomplete clone is refused."""
    repo, _ = _fixed_upstream(tmp_path)
    (repo / "samples").mkdir()
    (repo / "samples" / "lattice.bin").write_bytes(bytes(range(256)) * 64)
    (repo / "samples" / "in.sample").write_text("nx 4\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "binary samples", cwd=repo)
    commit = git("rev-parse", "HEAD", cwd=repo)
    broken = tmp_path / "broken.git"
    git("clone", "-q", "--mirror", str(repo), str(broken), cwd=tmp_path)
    blob = git("rev-parse", f"{commit}:samples/lattice.bin", cwd=broken).strip()
    (broken / "objects" / blob[:2] / blob[2:]).unlink()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "HPCVAR_YAML_PARSER": parser}
    for url, out in ((repo, "whole"), (broken, "lacking")):
        sources = _mirror_sources(tmp_path, str(url), commit, FIXED_TREE_SHA256, exclude="samples/")
        res = subprocess.run(["sh", str(FETCH), "--mirror", str(tmp_path / out)], capture_output=True, text=True,
                             env={**env, "HPCVAR_SOURCES": str(sources)})
        assert res.returncode == 0 and "as pinned" in res.stdout, (out, res.stdout + res.stderr)
        assert "left out of the archive (mirror_exclude): samples/" in res.stdout
        assert "invalid object" not in res.stderr, res.stderr
        with tarfile.open(tmp_path / out / "fake-1.0.tar.gz") as tar:
            assert not any("samples" in name for name in tar.getnames())
    sources = _mirror_sources(tmp_path, str(broken), commit, FIXED_TREE_SHA256)
    res = subprocess.run(["sh", str(FETCH), "--mirror", str(tmp_path / "refused")], capture_output=True, text=True,
                         env={**env, "HPCVAR_SOURCES": str(sources)})
    assert res.returncode != 0 and "incomplete" in res.stderr, res.stdout + res.stderr


def test_mirror_mode_fills_a_mirror_reproducibly(tmp_path, upstream):
    repo, tagged, _ = upstream
    sources = _mirror_sources(tmp_path, str(repo), tagged, "0" * 64)
    made = {}
    for name in ("a", "b"):
        res = subprocess.run(["sh", str(FETCH), "--mirror", str(tmp_path / name)], capture_output=True, text=True,
                             env={**os.environ, "HPCVAR_SOURCES": str(sources), "GIT_CONFIG_GLOBAL": os.devnull})
        assert res.returncode == 0, res.stderr
        archive = tmp_path / name / "fake-1.0.tar.gz"
        made[name] = archive.read_bytes()
        digest = hashlib.sha256(made[name]).hexdigest()
        assert f"sha256 {digest}; sources.yaml pins {'0' * 64}" in res.stdout
    assert made["a"] == made["b"]  # sorted entries, fixed mtime and owner, gzip -n
    with tarfile.open(tmp_path / "a" / "fake-1.0.tar.gz") as tar:
        names = tar.getnames()
    assert "fake-1.0/VERSION" in names and not any("/.git" in n for n in names)
    # Pinned with that sum, the mirror is used as such, and a second fill keeps the archive.
    pinned = _mirror_sources(tmp_path, "https://example.invalid/fake.git", tagged, digest)
    res = run_fetch("fake", tmp_path / "src", pinned, HPCVAR_SOURCE_MIRROR=str(tmp_path / "a"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "src" / "VERSION").read_text() == "1.0\n"
    again = subprocess.run(["sh", str(FETCH), "--mirror", str(tmp_path / "a")], capture_output=True, text=True,
                           env={**os.environ, "HPCVAR_SOURCES": str(pinned)})
    assert again.returncode == 0 and "already in the mirror" in again.stdout
