"""What the analyses record (hpcvar.tracking, the results): summary.json and the MLflow store
beside the dataset, its runs, metrics and models."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient


def test_summaries_hold_the_figures(paper):
    c, nb, dv, out = paper
    for analysis, summary in (("neighbourhood", nb), ("deviation", dv)):
        on_disk = json.loads((out / analysis / "summary.json").read_text())
        assert on_disk["analysis"] == analysis
        # what the analysis returned is what it wrote, and reads back through the same class
        assert summary.dump() == on_disk and type(summary).read(out / analysis) == summary
        assert set(on_disk["datasets"]) >= {"amg-128", "amg-512", "milc-128", "milc-512", "minivite-128", "umt-128"}
    assert dv.paper_mape == 0.05
    for d in json.loads((out / "deviation" / "summary.json").read_text())["datasets"].values():
        assert 0 < d["mape"] < 1 and len(d["mape_per_fold"]) == d["folds"] == 10
    assert (out / "neighbourhood" / "milc-128" / "ranking.csv").exists()
    ranking = pd.read_csv(out / "neighbourhood" / "milc-128" / "ranking.csv")
    assert ranking["user"].str.startswith("user-").all()
    # Every user alongside, with both ranks: the MI-ranked (large jobs) first, in MI order.
    ranked = ranking[ranking["rank_mi"].notna()]
    assert list(ranked.index) == list(range(len(ranked))) and ranked["mi"].is_monotonic_decreasing
    assert list(ranked["rank_mi"]) == list(range(1, len(ranked) + 1)) and ranking.loc[len(ranked):, "mi"].isna().all()
    assert sorted(ranking["rank_r"]) == list(range(1, len(ranking) + 1)) and len(ranking) > len(ranked)
    svg = (out / "deviation" / "milc-128" / "relevance.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "RT_RB_STL" in svg


def test_mlflow_store_holds_runs_metrics_and_models(paper):
    c, nb, dv, _ = paper
    mlflow.set_tracking_uri(dv.mlflow.tracking_uri)
    assert dv.mlflow.tracking_uri == f"sqlite:///{c.dataset.resolve().parent / 'mlflow.db'}"
    client = MlflowClient()
    exp = client.get_experiment_by_name("hpcvar-deviation")
    parents = {r.info.run_name: r for r in client.search_runs([exp.experiment_id],
                                                              "tags.mlflow.parentRunId IS NULL")}
    for name, run_id in dv.mlflow.runs.items():
        run = client.get_run(run_id)
        assert run.data.metrics["mape"] == pytest.approx(dv.datasets[name].mape)
        assert run.data.tags["hpcvar.top_counter"] == dv.datasets[name].top_counter
        assert name in parents
        folds = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{run_id}'")
        assert len(folds) == 10 and all("mape" in f.data.metrics for f in folds)
        assert run.inputs.dataset_inputs and run.inputs.dataset_inputs[0].dataset.name == f"{name}-steps"
        arts = {a.path for a in client.list_artifacts(run_id, "deviation")}
        assert "deviation/relevance.csv" in arts and "deviation/relevance.svg" in arts
    models = mlflow.search_logged_models(experiment_ids=[exp.experiment_id], output_format="list")
    assert {m.source_run_id for m in models} >= set(dv.mlflow.runs.values())
    # A logged model loads and predicts on the counters it was trained with.
    model = next(m for m in models if m.source_run_id == dv.mlflow.runs["milc-128"])
    loaded = mlflow.pyfunc.load_model(model.model_uri)
    cols = [c.name for c in loaded.metadata.get_input_schema().inputs]
    assert dv.datasets["milc-128"].final_selected == cols
    assert np.isfinite(loaded.predict(pd.DataFrame(np.zeros((2, len(cols))), columns=cols))).all()
    nexp = client.get_experiment_by_name("hpcvar-neighbourhood")
    assert len(client.search_runs([nexp.experiment_id])) >= len(nb.datasets)


def test_sessions_in_one_process_use_their_own_store(tmp_path, monkeypatch):
    from hpcvar import tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for name in ("a", "b"):
        with tracking.session("deviation", tmp_path / name / "dataset"):
            assert mlflow.get_tracking_uri() == f"sqlite:///{tmp_path / name / 'mlflow.db'}"
    assert (tmp_path / "a" / "mlflow.db").exists() and (tmp_path / "b" / "mlflow.db").exists()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mine.db'}")
    with tracking.session("deviation", tmp_path / "c" / "dataset"):
        assert mlflow.get_tracking_uri() == f"sqlite:///{tmp_path / 'mine.db'}"


def test_artifacts_go_beside_the_store_not_to_the_working_directory(tmp_path, monkeypatch):
    from hpcvar import tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    with tracking.session("neighbourhood", tmp_path / "results" / "dataset") as exp_id:
        with mlflow.start_run():
            mlflow.log_text("x", "a.txt")
        location = mlflow.get_experiment(exp_id).artifact_location
    assert location == (tmp_path / "results" / "mlartifacts" / "hpcvar-neighbourhood").as_uri()
    assert list((tmp_path / "results" / "mlartifacts").rglob("a.txt"))
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("preset, expected", [(None, True), ("false", False)])
def test_mlflow_telemetry_is_off_unless_the_user_allows_it(preset, expected):
    """Nothing leaves the machine by default: importing hpcvar switches MLflow's own usage
    telemetry off (as MLflow reads its setting), unless the user set MLFLOW_DISABLE_TELEMETRY."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_DISABLE_TELEMETRY"}
    if preset is not None:
        env["MLFLOW_DISABLE_TELEMETRY"] = preset
    code = ("import hpcvar.tracking\nfrom mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY\n"
            "print(MLFLOW_DISABLE_TELEMETRY.get())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expected)


# The two warnings tracking.log_dataset silences around the same MLflow call (see there): MLflow's
# local-file source registered twice, and pandas 3 deprecations inside MLflow's digest and schema code.
@pytest.mark.filterwarnings("ignore:The specified dataset source can be interpreted:UserWarning",
                            "ignore::pandas.errors.Pandas4Warning")
def test_a_logged_tables_schema_is_mlflows_own_inference(campaign):
    """tracking.Table (what log_dataset logs) describes the dataset's tables as MLflow's pandas
    dataset does: types, missing values (the steps' reported times), digest and profile; a frame
    with Python-object columns keeps MLflow's inference."""
    from hpcvar.data.dataset import Dataset
    from hpcvar.tracking import Table

    ds = Dataset(campaign("demo", 3, 2).dataset)
    frames = {t: ds.read(t) for t in ("runs", "steps", "latency", "neighbourhood", "step_counters")}
    frames["object"] = pd.DataFrame({"a": ["x", 1, None], "b": [1.0, np.nan, 2.0]})
    assert frames["steps"].isna().any().any() and not frames["latency"].empty
    for name, frame in frames.items():
        frame = frame.astype({c: "float64" for c in frame.columns if pd.api.types.is_integer_dtype(frame[c])})
        theirs = mlflow.data.from_pandas(frame, source="file:///data", name=name)
        ours = Table(theirs.df, theirs.source, name=name, digest=theirs.digest)
        assert ours.to_dict() == theirs.to_dict(), name
        if name != "object":  # MLflow infers no schema for a column of strings and numbers
            assert ours.schema is not None and ours.schema.to_dict() == theirs.schema.to_dict(), name
