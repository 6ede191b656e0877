"""The package's layers (README, "Where things live"): the real-data path (parsers, collation,
campaign, analyses, report) never loads the simulator, and the simulator never loads the
analyses; what they share lives in modules of its own (rawlayout, experiments, defaults)."""

from __future__ import annotations

import subprocess
import sys

import pytest

REAL_DATA_PATH = ["hpcvar.parsers", "hpcvar.collate", "hpcvar.dataset", "hpcvar.campaign.reframe_import",
                  "hpcvar.campaign.rounds", "hpcvar.campaign.interference", "hpcvar.analyses.neighbourhood",
                  "hpcvar.analyses.deviation", "hpcvar.analyses.forecast", "hpcvar.analyses.distributions",
                  "hpcvar.analyses.compare", "hpcvar.analyses.interference", "hpcvar.report.build",
                  "hpcvar.rawlayout", "hpcvar.experiments.spec", "hpcvar.experiments.placement"]


def loaded_after_importing(modules: list[str]) -> set[str]:
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('hpcvar'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", REAL_DATA_PATH)
def test_the_real_data_path_does_not_load_the_simulator(module):
    loaded = loaded_after_importing([module])
    assert module in loaded
    assert not {m for m in loaded if m == "hpcvar.simulate" or m.startswith("hpcvar.simulate.")}


def test_the_simulator_does_not_load_the_analyses():
    loaded = loaded_after_importing(["hpcvar.simulate", "hpcvar.simulate.interference"])
    assert "hpcvar.simulate.interference" in loaded
    assert not {m for m in loaded if m.startswith(("hpcvar.analyses", "hpcvar.report", "hpcvar.campaign"))}
