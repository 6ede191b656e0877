"""The analyses' per-dataset fan-out (hpcvar.analyses.assemble): an analysis run one dataset at a
time (``--only``) and its parts assembled writes the summary one run over every dataset writes;
parts that do not belong together are refused, naming the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpcvar.analyses.assemble import merge
from hpcvar.results import ResultError

#: What differs between two runs by nature (the MLflow ids), as benchmarks/compare_main_job.py.
VOLATILE = ("run_id", "runs", "experiment_id")


def _stable(doc):
    if isinstance(doc, dict):
        return {k: _stable(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [_stable(v) for v in doc]
    return doc


def hpcvar(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcvar", *map(str, args)], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("analysis", ["neighbourhood", "deviation", "distributions"])
def test_parts_assemble_into_the_summary_of_one_run(campaign, tmp_path, monkeypatch, analysis):
    from hpcvar.analyses.assemble import assemble
    from hpcvar.analyses.registry import ANALYSES
    from hpcvar.data.dataset import Dataset

    c = campaign("demo", 3, 2)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = ANALYSES[analysis].module.run
    names = sorted(run(c.dataset, tmp_path / "one").datasets)
    assert len(names) >= 2
    every = sorted(Dataset(c.dataset).read("runs")["dataset"].unique())
    for name in every:  # datasets an analysis skips (too few runs, no counters) give an empty part
        assert set(run(c.dataset, tmp_path / "fan", only=name).datasets) <= {name}
    assert not (tmp_path / "fan" / "summary.json").exists()
    parts = sorted((tmp_path / "fan" / "parts").glob("*.json"))
    assert [p.stem for p in parts] == every
    assert sorted(assemble(analysis, tmp_path / "fan", parts).datasets) == names
    a = json.loads((tmp_path / "one" / "summary.json").read_text())
    b = json.loads((tmp_path / "fan" / "summary.json").read_text())
    assert _stable(a) == _stable(b)
    assert list(b["datasets"]) == names and set(b["mlflow"]["runs"]) == set(names)
    # The tables beside the summary: the same files, the same contents (deviation's folds.csv
    # holds each fold's seconds, which differ from run to run).
    for table in sorted((tmp_path / "one").rglob("*.csv")):
        rel = table.relative_to(tmp_path / "one")
        if rel.name != "folds.csv":
            assert (tmp_path / "fan" / rel).read_text() == table.read_text(), rel


def test_the_command_line_writes_a_part_and_assembles_it(campaign, tmp_path):
    c = campaign("demo", 3, 2)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    part = hpcvar("distributions", c.dataset, "--out", tmp_path / "d", "--only", "amg-128", env=env)
    assert part.returncode == 0 and "-> " + str(tmp_path / "d" / "parts" / "amg-128.json") in part.stdout, part.stderr
    out = hpcvar("assemble", "distributions", "--out", tmp_path / "d", tmp_path / "d" / "parts" / "amg-128.json")
    assert out.returncode == 0 and "1 parts, 1 datasets" in out.stdout, out.stderr
    assert list(json.loads((tmp_path / "d" / "summary.json").read_text())["datasets"]) == ["amg-128"]


def test_merge_takes_every_dataset_once_and_refuses_parts_of_another_run():
    a = {"analysis": "x", "params": {"k": 1}, "datasets": {"b": {"n": 2}}, "notes": ["all", "b"],
         "mlflow": {"tracking_uri": "u", "experiment_id": "1", "runs": {"b": "r2"}}}
    b = {"analysis": "x", "params": {"k": 1}, "datasets": {"a": {"n": 1}}, "notes": ["all", "a"],
         "mlflow": {"tracking_uri": "u", "experiment_id": "1", "runs": {"a": "r1"}}}
    m = merge([a, b], ["parts/b.json", "parts/a.json"])
    assert list(m["datasets"]) == ["a", "b"] and m["mlflow"]["runs"] == {"a": "r1", "b": "r2"}
    assert m["notes"] == ["all", "b", "a"] and m["params"] == {"k": 1}
    with pytest.raises(ResultError, match=r"parts/a\.json: 'params' differs from parts/b\.json's"):
        merge([a, {**b, "params": {"k": 2}}], ["parts/b.json", "parts/a.json"])
    with pytest.raises(ResultError, match=r"parts/a\.json: logged to another MLflow store"):
        merge([a, {**b, "mlflow": {**b["mlflow"], "tracking_uri": "v"}}], ["parts/b.json", "parts/a.json"])
    with pytest.raises(ResultError, match="no parts"):
        merge([], [])
    # What the result draws over every dataset (ACROSS_DATASETS) is left for the analysis's
    # assemble(), whatever the parts hold; other lists keep each item once.
    from hpcvar.results.neighbourhood import NeighbourhoodResult

    a2, b2 = {**a, "cross_dataset": [{"user": "u1"}]}, {**b, "cross_dataset": [{"user": "u2"}]}
    assert merge([a2, b2], ["parts/b.json", "parts/a.json"], NeighbourhoodResult.ACROSS_DATASETS)["cross_dataset"] == []
    assert merge([a2, b2], ["parts/b.json", "parts/a.json"])["cross_dataset"] == [{"user": "u1"}, {"user": "u2"}]


def test_an_analysis_of_the_whole_campaign_has_no_parts(tmp_path):
    """The overview compares the datasets: no --only, and nothing for assemble to merge."""
    out = hpcvar("overview", tmp_path, "--out", tmp_path / "o", "--only", "amg-128")
    assert out.returncode == 2 and "unrecognized arguments: --only" in out.stderr
    out = hpcvar("assemble", "overview", "--out", tmp_path / "o", tmp_path / "parts" / "amg-128.json")
    assert out.returncode == 2 and "overview covers the whole campaign and has no parts to assemble" in out.stderr


def test_assemble_refuses_a_file_that_is_not_a_part(tmp_path):
    bad = tmp_path / "parts" / "x.json"
    bad.parent.mkdir()
    bad.write_text('{"analysis": "deviation", "datasets": {}')  # truncated
    out = hpcvar("assemble", "deviation", "--out", tmp_path, bad)
    assert out.returncode == 2 and f"{bad}: not a result part" in out.stderr
    assert not (tmp_path / "summary.json").exists()
