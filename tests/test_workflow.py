"""The Snakemake workflow: lint-clean, config validated, and the main job end to end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args, cwd=REPO, **kw):
    # As a user runs it: the analyses log to the default store beside the dataset.
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, env=env, **kw)


def test_lint_is_clean():
    out = snakemake("--lint")
    assert out.returncode == 0 and "Congratulations" in out.stdout + out.stderr, out.stdout + out.stderr


def test_invalid_config_is_rejected_with_the_key():
    out = snakemake("-n", "--config", "simulate={preset: huge, seed: 0, overrides: {}}")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "huge" in text and "preset" in text and "is not one of" in text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A copy of the workflow files, so the test run does not touch the checkout's results/."""
    wd = tmp_path_factory.mktemp("wf")
    for item in ("Snakefile", "workflow", "config"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / item)
    return wd


def test_main_job_end_to_end(workdir):
    out = snakemake("--cores", "2", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = (workdir / "results" / "summary.txt").read_text()
    for ds in ("amg-128", "amg-512", "milc-128", "milc-512", "minivite-128", "umt-128"):
        assert ds in summary
    runs = pd.read_parquet(workdir / "results" / "dataset" / "runs")
    assert len(runs) > 30 and runs["user"].str.startswith("user-").all()
    assert (workdir / "results" / "logs" / "collate.log").read_text().strip()
    # The three analyses ran on every dataset and logged to the store beside the dataset.
    import json

    for analysis in ("neighbourhood", "deviation", "forecast"):
        summary = json.loads((workdir / "results" / "analyses" / analysis / "summary.json").read_text())
        assert len(summary["datasets"]) == 6, analysis
        assert summary["mlflow"]["tracking_uri"] == f"sqlite:///{workdir / 'results' / 'mlflow.db'}"
    assert list((workdir / "results" / "mlartifacts").rglob("relevance.svg"))
    assert not (workdir / "mlruns").exists()
    # The salt stays local, outside results/.
    assert (workdir / ".hpcvar-salt").exists()
    salt = (workdir / ".hpcvar-salt").read_text().strip()
    for f in (workdir / "results").rglob("*"):
        if f.is_file() and f.stat().st_size < 50_000_000:
            assert salt.encode() not in f.read_bytes(), f
    # Nothing to do on a second invocation.
    again = snakemake("--cores", "2", cwd=workdir)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_snakemake_report(workdir):
    out = snakemake("--cores", "2", "--report", "report.html", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    html = (workdir / "report.html").read_text()
    assert "summary.txt" in html and "Campaign overview" in html
