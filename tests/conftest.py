"""Shared fixtures.

Real sample outputs live outside the repository in ``../shared/samples`` (each folder has a
SOURCES.md naming where every file came from). ``HPCVAR_SAMPLES`` overrides the location.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _samples_dir() -> Path:
    env = os.environ.get("HPCVAR_SAMPLES")
    return Path(env) if env else REPO.parent / "shared" / "samples"


SAMPLES = _samples_dir()


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


SALT = b"test-salt"


@pytest.fixture(scope="session")
def campaign(tmp_path_factory):
    """``campaign(preset, seed, days)``: a simulated campaign, collated; built once per session."""
    from hpcvar.anonymise import Pseudonymiser
    from hpcvar.collate import collate
    from hpcvar.simulate import simulate

    cache: dict[tuple, Campaign] = {}

    def get(preset: str = "demo", seed: int = 0, days: int = 30) -> Campaign:
        key = (preset, seed, days)
        if key not in cache:
            base = tmp_path_factory.mktemp(f"{preset}-s{seed}-d{days}")
            truth = simulate(preset, seed=seed, out=base / "raw", overrides={"days": days}, progress=False)
            collate(base / "raw", base / "dataset", Pseudonymiser(SALT))
            cache[key] = Campaign(base / "raw", base / "dataset", truth)
        return cache[key]

    return get


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
