"""Shared fixtures.

Real sample outputs live outside the repository in ``../shared/samples`` (each folder has a
SOURCES.md naming where every file came from). ``HPCVAR_SAMPLES`` overrides the location.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Under pytest-xdist every worker gets its share of the cores for OpenMP, BLAS and torch threads
# (and so do the programs its tests start), instead of each worker using all of them at once.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = max(1, len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(_share))


#: Fixtures that stand for one resource of the machine or of the session: every test that uses
#: one runs on the same pytest-xdist worker (``--dist loadgroup``), one at a time, so the resource
#: is set up once and never used by two tests at once.
#: Both take minutes to set up, so their tests are also ``slow`` (not in the everyday tier).
RESOURCE_GROUPS = {
    "main_job": "main-job",  # one workflow directory: the main job runs once, its tests read and add to it
    "cluster": "slurm",      # the dev Slurm cluster (`hpcvar dev slurm`): one state directory, one slurmctld
    "testbed": "slurm",      # ... the same state directory and ports, as the multi-node cluster
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the marks into the tests' groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, group in RESOURCE_GROUPS.items():
            if fixture in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group(group))
                item.add_marker(pytest.mark.slow)


def per_seed_group(prefix: str, seeds) -> list:
    """Fixture params, one per seed, for a fixture that takes minutes (a simulated campaign and
    what is trained on it): its tests are ``slow`` and share one xdist worker per seed, so each
    seed's fixture is built once and the seeds run side by side."""
    return [pytest.param(s, marks=[pytest.mark.xdist_group(f"{prefix}-seed{s}"), pytest.mark.slow]) for s in seeds]


def _samples_dir() -> Path:
    env = os.environ.get("HPCVAR_SAMPLES")
    return Path(env) if env else REPO.parent / "shared" / "samples"


SAMPLES = _samples_dir()


def pytest_configure(config):
    # Without the samples, every parser test would fail on its own FileNotFoundError.
    if not SAMPLES.is_dir():
        raise pytest.UsageError(f"the real sample outputs the tests read are not at {SAMPLES} (../shared/samples "
                                "beside the checkout): set HPCVAR_SAMPLES to their directory")


#: Upstream data files tests may compare against (../shared/data/README.md); tests skip without them.
SHARED_DATA = Path(os.environ.get("HPCVAR_SHARED_DATA") or REPO.parent / "shared" / "data")

#: Why the tests that build Table I's codes (and mpiP, IMB) are skipped: they need the pinned
#: upstream sources, which are not distributed with the project; a developer fills a mirror.
NO_MIRROR = ("no source mirror: set HPCVAR_SOURCE_MIRROR (fill one with reframe_tests/apps/build/fetch.sh "
             "--mirror DIR where there is internet)")


#: For tests (or parameters) that need the source mirror: skipped, saying why, without one.
NEEDS_MIRROR = pytest.mark.skipif(not os.environ.get("HPCVAR_SOURCE_MIRROR", "").strip(), reason=NO_MIRROR)


def source_mirror() -> Path | None:
    """The source mirror ``HPCVAR_SOURCE_MIRROR`` names, None when it names none. One that does
    not exist is an error (the user asked for it), not a skip."""
    value = os.environ.get("HPCVAR_SOURCE_MIRROR", "").strip()
    if not value:
        return None
    if not Path(value).is_dir():
        pytest.fail(f"HPCVAR_SOURCE_MIRROR={value}: no such directory (unset it to skip the tests that need "
                    "a source mirror)", pytrace=False)
    return Path(value)


def needs_source_mirror() -> Path:
    """The source mirror, or skip the calling test (fixture) with :data:`NO_MIRROR`."""
    mirror = source_mirror()
    if mirror is None:
        pytest.skip(NO_MIRROR)
    return mirror


def with_required_run_columns(row: dict, start) -> dict:
    """A hand-made ``runs`` row with a plain value for every other required column (placement
    figures a test does not use), taken from the schema so fixtures follow it."""
    import pyarrow as pa

    from hpcvar.data import schema

    for col in schema.RUNS.columns:
        if col.name not in row and not col.nullable:
            kind = col.type
            row[col.name] = (start if pa.types.is_timestamp(kind) else [] if pa.types.is_list(kind)
                             else 0 if pa.types.is_integer(kind) else 0.0 if pa.types.is_floating(kind)
                             else "same-group" if col.name == "locality_dfplus" else "n/a")
    return row


def lines_of(path: Path) -> list[str]:
    """A captured output's lines (without line ends), to cut or edit in a test."""
    return path.read_text().splitlines()


def write_lines(tmp_path: Path, lines: list[str], name: str = "app.out") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def parse_error(path: Path):
    """The ParseError hpcvar's application-output reader raises for ``path``."""
    from hpcvar.parsers import apps
    from hpcvar.parsers.errors import ParseError

    with pytest.raises(ParseError) as info:
        apps.read(path)
    return info.value


@pytest.fixture(scope="session")
def samples() -> Path:
    if not SAMPLES.is_dir():
        pytest.fail(f"sample outputs not found at {SAMPLES}; set HPCVAR_SAMPLES")
    return SAMPLES


@dataclass(frozen=True)
class Campaign:
    raw: Path
    dataset: Path
    truth: dict
    collated: object  # the CollateResult of the first collation (new runs, failed, quarantined)


SALT = b"test-salt"


def shared_dir(tmp_path_factory) -> Path:
    """A directory every pytest-xdist worker of this session sees (without xdist: the base temp).

    Under xdist each worker has its own base temp (``pytest-N/popen-gwK``); their parent is the
    session's, so what one worker builds there the others find.
    """
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"


def build_once(tmp_path_factory, name: str, build) -> Path:
    """``build(directory)`` run once per test session, whichever worker asks first; the others
    wait on a file lock and reuse the directory. Only for outputs the tests then only read."""
    from filelock import FileLock

    root = shared_dir(tmp_path_factory)
    root.mkdir(parents=True, exist_ok=True)
    target, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if target.exists():  # a build interrupted in an earlier attempt of this session
                shutil.rmtree(target)
            target.mkdir()
            build(target)
            done.touch()
    return target


def _session_owner_pid() -> int:
    """The pid of the pytest process that runs the session (the xdist controller, when there is one)."""
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


def session_scratch(name: str) -> Path:
    """A directory of this test session that every node of the testbed sees too (under /var/tmp,
    not /tmp: each testbed node has its own /tmp), shared by the xdist workers; removed when the
    session ends (:func:`pytest_sessionfinish`)."""
    path = Path("/var/tmp") / f"hpcvar-pytest-{_session_owner_pid()}-{name}"
    path.mkdir(exist_ok=True)
    return path


def pytest_sessionfinish(session, exitstatus):
    """The session's scratch directories go once the whole session is over (the controller's
    end, after every worker's); an image build still running in the background is stopped first."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _stop_image_build(Path("/var/tmp") / f"hpcvar-pytest-{os.getpid()}-images.pid")
        for path in Path("/var/tmp").glob(f"hpcvar-pytest-{os.getpid()}-*"):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


# --- the suite's images, built once per session in the background ----------------------------------

#: The images tests/test_container_runs.py runs (``hpcvar containers build``): our own codes, no mirror.
SESSION_IMAGES = ("microbenchmarks", "amgproxy")

#: Builds the session's images unless done (``python -c SCRIPT STORE MACHINE_LOCK NAME...``): takes
#: the build lock, shares the machine like a test, and leaves the command's outcome beside the
#: store. Run in the background from the session's start, and by the fixture (which then finds
#: the outcome, or builds if no background build was started).
_BUILD_SCRIPT = """
import fcntl, json, os, subprocess, sys
from filelock import FileLock
store, machine_lock, *names = sys.argv[1:]
result = store + ".result.json"
with FileLock(store + ".lock"), open(machine_lock, "a") as machine:
    fcntl.flock(machine, fcntl.LOCK_SH)
    if not os.path.exists(result):
        out = subprocess.run([sys.executable, "-m", "hpcvar", "containers", "build", *names, "--store", store],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        with open(result + ".part", "w") as fh:
            json.dump({"returncode": out.returncode, "stdout": out.stdout, "stderr": out.stderr}, fh)
        os.replace(result + ".part", result)
"""


def _image_build_command(where: Path) -> list[str]:
    return [sys.executable, "-c", _BUILD_SCRIPT, str(where), str(_machine_lock()), *SESSION_IMAGES]


def _image_build_env() -> dict:
    return {**os.environ, "USER": os.environ.get("USER") or "root"}


def pytest_collection_finish(session):
    """When a selected test needs the session's images, start building them now, in the
    background (whichever xdist worker gets here first): the build (minutes, mostly waiting on
    the package registry and dpkg) overlaps the tests that run before the first one that needs it."""
    if session.config.option.collectonly or not any("session_images" in getattr(item, "fixturenames", ())
                                                    for item in session.items):
        return
    where = session_scratch("images")
    try:
        os.close(os.open(f"{where}.pid", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    proc = subprocess.Popen(_image_build_command(where), cwd=REPO, env=_image_build_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    Path(f"{where}.pid").write_text(str(proc.pid))


def _stop_image_build(pidfile: Path) -> None:
    import signal

    try:
        os.killpg(int(pidfile.read_text()), signal.SIGTERM)
    except (OSError, ValueError):
        pass  # no build started, or it is over


@pytest.fixture(scope="session")
def session_images():
    """The :data:`SESSION_IMAGES`, built once per session in a store every testbed node sees (not
    under /tmp): by the background build :func:`pytest_collection_finish` started, or here if none
    did. ``(store, {name: record})``; a failed build fails its tests with the build's output."""
    import json

    where = session_scratch("images")
    result = Path(f"{where}.result.json")
    # Waits for the background build (its lock), or builds now if none was started.
    subprocess.run(_image_build_command(where), cwd=REPO, env=_image_build_env(), check=True)
    built = json.loads(result.read_text())
    assert built["returncode"] == 0, built["stdout"][-3000:] + built["stderr"][-5000:]
    return where, {name: json.loads((where / f"{name}.json").read_text()) for name in SESSION_IMAGES}


def build_cache(tmp_path_factory) -> Path:
    """The ReFrame suite's build cache (``HPCVAR_BUILD_CACHE``) of this test session, shared by
    every worker: each application is built once (under a lock), whichever ReFrame run asks first."""
    path = shared_dir(tmp_path_factory) / "build-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def campaign(tmp_path_factory):
    """``campaign(preset, seed, days, **overrides)``: a simulated campaign, collated; simulated
    once per test session (shared by the xdist workers), with a dataset copy of each worker's own.
    ``overrides`` are further preset fields (e.g. ``datasets=()``: the microbenchmark alone).

    The raw files are shared, to be read only (``raw`` is the path they were collated from, so the
    quarantine's file names match); the dataset is copied, so what an analysis writes beside it
    (``mlflow.db``, ``mlartifacts/``) stays with the worker that ran it.
    """
    import pickle

    from hpcvar.collate import collate
    from hpcvar.simulate import simulate
    from hpcvar.util.anonymise import Pseudonymiser

    cache: dict[tuple, Campaign] = {}

    def build(preset: str, seed: int, overrides: dict, out: Path) -> None:
        truth = simulate(preset, seed=seed, out=out / "raw", overrides=overrides, progress=False)
        collated = collate(out / "raw", out / "dataset", Pseudonymiser(SALT))
        (out / "objects.pickle").write_bytes(pickle.dumps((truth, collated)))

    def get(preset: str = "demo", seed: int = 0, days: int = 30, **overrides) -> Campaign:
        key = (preset, seed, days, repr(sorted(overrides.items())))
        if key not in cache:
            name = f"{preset}-s{seed}-d{days}" + (f"-{hashlib.sha1(key[-1].encode()).hexdigest()[:8]}" if overrides else "")
            built = build_once(tmp_path_factory, name,
                               lambda out: build(preset, seed, {"days": days, **overrides}, out))
            base = tmp_path_factory.mktemp(name)
            shutil.copytree(built / "dataset", base / "dataset")
            truth, collated = pickle.loads((built / "objects.pickle").read_bytes())
            cache[key] = Campaign(built / "raw", base / "dataset", truth, collated)
        return cache[key]

    return get


#: Seeds of the simulated paper campaigns the analyses' recovery tests run on.
PAPER_SEEDS = (0, 1)


@pytest.fixture(scope="session", params=per_seed_group("paper", PAPER_SEEDS))
def paper(request, campaign, tmp_path_factory):
    """The paper preset's campaign (30 days) at a seed, with its neighbourhood and deviation
    analyses: once per session for every module that reads them (their tests share the seed's
    xdist group, so one worker computes it)."""
    from hpcvar.analyses import deviation, neighbourhood

    c = campaign("paper", request.param, 30)
    out = tmp_path_factory.mktemp(f"analyses-{request.param}")
    nb = neighbourhood.run(c.dataset, out / "neighbourhood")
    dv = deviation.run(c.dataset, out / "deviation")
    return c, nb, dv, out


SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args, cwd=REPO, env=None, **kw) -> subprocess.CompletedProcess:
    # As a user runs it: the analyses log to the default store beside the dataset.
    env = {k: v for k, v in (env or os.environ).items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, env=env, **kw)


@dataclass(frozen=True)
class MainJob:
    workdir: Path
    result: subprocess.CompletedProcess

    @property
    def results(self) -> Path:
        return self.workdir / "results"


@pytest.fixture(scope="session")
def main_job(tmp_path_factory) -> MainJob:
    """The main job (`snakemake --cores 2` on the default config) in a copy of the workflow files,
    so the tests do not touch the checkout's results/. Run once per session."""
    wd = tmp_path_factory.mktemp("wf")
    for item in ("Snakefile", "workflow", "config"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / item)
    return MainJob(wd, snakemake("--cores", "2", cwd=wd))


@pytest.fixture(autouse=True)
def _restore_mlflow_tracking_uri():
    """mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; undo it so no later test (or the
    subprocesses it starts) logs to another test's store."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


#: The other users of the multi-node cluster: the interference tests' aggressor, then the planted
#: workload of config/campaign-testbed.yaml (culprit, two decoys, a CPU hog).
TESTBED_USERS = ("hpcvar-aggressor", "hpcvar-alice", "hpcvar-bob", "hpcvar-carol", "hpcvar-dave")


@pytest.fixture(scope="module")
def testbed():
    """The multi-node cluster (`hpcvar dev slurm up --nodes 6 --groups 2 --link-etc`, docs/testbed.md)
    for a module: its layout, shape and environment; taken down after the module. SLURM_CONF is set
    in this process too (imports run sacct)."""
    import time

    from hpcvar.dev import slurm as dev
    from hpcvar.dev import testbed as tb

    if os.geteuid() != 0:
        pytest.fail("the testbed needs root")
    # Every node has a /tmp of its own: jobs started from a checkout (or its .venv) under /tmp find
    # nothing there, and the tests would fail deep in a Slurm log ("python: not found").
    for what, path in (("this checkout", REPO), ("its Python environment", sys.prefix)):
        reason = tb.node_local_reason(path)
        if reason:
            pytest.fail(f"the testbed's tests run {what} on the nodes: {reason}")
    t0 = time.monotonic()
    up = subprocess.run([sys.executable, "-m", "hpcvar", "dev", "slurm", "up", "--nodes", "6", "--groups", "2",
                         "--link-etc", *(a for u in TESTBED_USERS for a in ("--extra-user", u))],
                        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert up.returncode == 0, up.stdout + up.stderr
    layout = dev.Layout(dev.state_dir())
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(layout.slurm_conf)
    yield {"layout": layout, "spec": tb.load_spec(layout.root), "env": dev.slurm_env(layout),
           "up_s": time.monotonic() - t0, "up": up.stdout}
    if before is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = before
    down = subprocess.run([sys.executable, "-m", "hpcvar", "dev", "slurm", "down"], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert down.returncode == 0, down.stdout + down.stderr


# --- tests that need the whole machine ----------------------------------------------------------

def _machine_lock() -> Path:
    """One lock file per test session, shared by its xdist workers."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"hpcvar-pytest-machine-{run}.lock"


class machine:
    """``with machine(exclusive=True)``: no other test of the session runs meanwhile (the other
    xdist worker waits); every other test holds the lock shared (:func:`_share_the_machine`).
    For measurements a second test's CPU load would distort: the testbed campaign's planted
    causes are read from run times on two CPUs, and a busy neighbouring test is a CPU hog the
    campaign's truth does not know."""

    def __init__(self, exclusive: bool):
        import fcntl

        self.mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH

    def __enter__(self):
        import fcntl

        self.fh = open(_machine_lock(), "a")  # noqa: SIM115 (held across the with block)
        fcntl.flock(self.fh, self.mode)
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def _whole_machine(request) -> bool:
    module = getattr(request.node, "module", None)
    marks = getattr(module, "pytestmark", [])
    return bool(request.node.get_closest_marker("whole_machine")) or any(
        m.name == "whole_machine" for m in (marks if isinstance(marks, list) else [marks]))


@pytest.fixture(autouse=True)
def _share_the_machine(request):
    """Every test shares the machine, except those marked ``whole_machine`` (their module holds
    it exclusively: ``with machine(exclusive=True)``)."""
    if _whole_machine(request):
        yield
        return
    with machine(exclusive=False):
        yield


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Session- and module-scoped fixtures share the machine too while they are set up: pytest
    sets them up before a test's function-scoped ones (:func:`_share_the_machine`), and the
    longest work of the suite is theirs (the main job, the simulated campaigns, the forecasters):
    without this, one could start on the other worker while the testbed campaign runs alone."""
    if fixturedef.scope == "function" or _whole_machine(request):
        return (yield)
    with machine(exclusive=False):
        return (yield)
