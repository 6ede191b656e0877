"""Shared fixtures.

Real sample outputs live outside the repository in ``../shared/samples`` (each folder has a
SOURCES.md naming where every file came from). ``HPCVAR_SAMPLES`` overrides the location.
"""

from __future__ import annotations

import os
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
