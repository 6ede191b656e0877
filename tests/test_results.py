"""Each analysis's summary.json is written and read through one typed result (hpcvar.results):
what an analysis returns is what it wrote, reads back equal, and a file that does not fit is
refused naming the file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpcvar.analyses import neighbourhood
from hpcvar.results import ResultError
from hpcvar.results.neighbourhood import NeighbourhoodResult


@pytest.fixture(scope="module")
def written(campaign, tmp_path_factory):
    c = campaign("demo", 3, 2)
    out = tmp_path_factory.mktemp("results") / "neighbourhood"
    return c, out, neighbourhood.run(c.dataset, out, {"top_k": 4})


def test_result_round_trips_through_summary_json(written):
    c, out, result = written
    on_disk = json.loads((out / "summary.json").read_text())
    assert result.dump() == on_disk
    again = NeighbourhoodResult.read(out)
    assert again == result and again.params.top_k == 4
    for name, d in again.datasets.items():
        assert len(d.top_users) <= 4
        # the files named by the result are the ones the analysis wrote
        assert (out / d.ranking_table(name)).is_file()
        assert (again.path(d.top_users_figure(name)).is_file()) == (d.qualified_users > 0)
    assert NeighbourhoodResult.read(out / "nowhere") is None  # the analysis did not run


def test_a_renamed_key_is_refused_naming_the_file(written, tmp_path):
    _, out, _ = written
    doc = json.loads((out / "summary.json").read_text())
    name = next(iter(doc["datasets"]))
    doc["datasets"][name]["qualified"] = doc["datasets"][name].pop("qualified_users")
    (tmp_path / "summary.json").write_text(json.dumps(doc))
    with pytest.raises(ResultError) as exc:
        NeighbourhoodResult.read(tmp_path)
    text = str(exc.value)
    assert str(tmp_path / "summary.json") in text and "not a neighbourhood result" in text
    assert f"datasets.{name}" in text and "run `hpcvar neighbourhood` again" in text
    (tmp_path / "summary.json").write_text('{"analysis": "neighbourhood",\n "params": {')
    with pytest.raises(ResultError, match=r"summary.json: line 2: not JSON"):
        NeighbourhoodResult.read(tmp_path)


def test_report_refuses_a_summary_of_another_shape(written, tmp_path):
    c, out, _ = written
    analyses = tmp_path / "analyses"
    (analyses / "neighbourhood").mkdir(parents=True)
    doc = json.loads((out / "summary.json").read_text())
    del doc["params"]
    (analyses / "neighbourhood" / "summary.json").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, "-m", "hpcvar", "report", str(c.dataset), "--analyses", str(analyses),
                           "--out", str(tmp_path / "report.html"), "--no-anonymise"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert f"{analyses / 'neighbourhood' / 'summary.json'}: not a neighbourhood result" in proc.stderr
    assert "params" in proc.stderr and not (tmp_path / "report.html").exists()

