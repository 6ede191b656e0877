"""The forecast's datasets spread over processes (``workers``): the numbers of one process; and
benchmarks/bench_forecast_floor.py's forecasts with parts of the work left out.

Not in tests/test_forecast.py: that module's own ``campaign`` fixture (the forecasting campaign
per seed) shadows conftest's, the small demo campaign this test wants."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from hpcvar.analyses import forecast


@pytest.mark.slow
def test_datasets_spread_over_processes_forecast_as_in_one(campaign, tmp_path):
    """workers=2 forecasts each dataset in a process of its own: the same numbers as one process."""
    c = campaign("demo", 3, 2)
    cfg = {"ensemble": 2, "max_epochs": 8, "patience": 3, "feature_sets": ["job", "job+placement"],
           "grid": {"amg": {"m": [3], "k": [5]}, "milc": {"m": [10], "k": [20]}, "umt": {"m": [2], "k": [2]},
                    "minivite": {"m": [2], "k": [1]}}, "importance_repeats": 1}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(tmp_path)
        one = forecast.run(c.dataset, tmp_path / "one", {**cfg, "workers": 1})
        two = forecast.run(c.dataset, tmp_path / "two", {**cfg, "workers": 2})
    assert len(one.datasets) >= 4 and list(one.datasets) == list(two.datasets)
    for name in one.datasets:
        a, b = (pd.read_csv(d / name / "grid.csv").drop(columns="train_seconds") for d in (tmp_path / "one",
                                                                                           tmp_path / "two"))
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert one.datasets[name].best == two.datasets[name].best
        assert one.datasets[name].importance == two.datasets[name].importance


@pytest.mark.slow
def test_each_dataset_is_logged_as_it_is_done_and_a_failure_leaves_no_run(campaign, tmp_path):
    """The parent logs each dataset to MLflow while the other process still computes; when one
    dataset fails, the job fails and the runs it had logged (and their nested runs) are deleted, so
    the store holds only what finished jobs logged and a re-run does not log a dataset twice."""
    import mlflow
    from mlflow.entities import ViewType

    c = campaign("demo", 3, 2)
    dataset = tmp_path / "dataset"  # a store of this test's own beside it
    shutil.copytree(c.dataset, dataset)
    cfg = {"ensemble": 1, "max_epochs": 4, "patience": 2, "feature_sets": ["job"], "workers": 2,
           "grid": {"amg": {"m": [3], "k": [5]}, "milc": {"m": [10], "k": [20]}, "umt": {"m": [2], "k": [2]},
                    "minivite": {"m": [2], "k": [1]}}, "importance_repeats": 1}
    real = forecast.analyse

    def failing(data, name, *args, **kwargs):
        if name.startswith("umt"):  # the smallest dataset: it starts after others are done
            raise RuntimeError(f"planted failure in {name}")
        return real(data, name, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(tmp_path)
        mp.setattr(forecast, "analyse", failing)
        with pytest.raises(RuntimeError, match="planted failure in umt"):
            forecast.run(dataset, tmp_path / "out", cfg)
        client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        exp = client.get_experiment_by_name("hpcvar-forecast")
        deleted = client.search_runs([exp.experiment_id], run_view_type=ViewType.DELETED_ONLY, max_results=50_000)
        active = client.search_runs([exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=50_000)
        parents = [r for r in deleted if "mlflow.parentRunId" not in r.data.tags]
        # Datasets were logged before the failure, parents and nested runs, and none is left.
        assert parents and len(deleted) > len(parents) and active == []
        mp.setattr(forecast, "analyse", real)
        result = forecast.run(dataset, tmp_path / "out", cfg)
    active = client.search_runs([exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=50_000)
    parents = [r for r in active if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.data.tags["hpcvar.dataset"] for r in parents) == sorted(result.datasets)


@pytest.mark.slow
def test_the_floor_benchmark_leaves_out_what_it_says_and_nothing_else(campaign, tmp_path):
    """benchmarks/bench_forecast_floor.py times the forecaster with parts of its work left out: it
    runs the main job's settings (the results' config.yaml), and its variants leave out the grid's
    LightGBM fits and the MLflow logging, each alone, and keep the attention networks."""
    import json
    import sys

    import mlflow
    import yaml

    from hpcvar.analyses.forecast.models import TRAINERS

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_forecast_floor import run

    c = campaign("demo", 3, 2)
    results = tmp_path / "results"
    (results / "raw").mkdir(parents=True)
    (results / "dataset").symlink_to(c.dataset)
    (results / "raw" / "truth.json").symlink_to(c.raw / "truth.json")
    (results / "config.yaml").write_text(yaml.safe_dump({"analyses": {"forecast": {
        "ensemble": 1, "max_epochs": 2, "patience": 1, "feature_sets": ["job"], "datasets": ["amg-128"],
        "grid": {"amg": {"m": [3], "k": [5]}}, "importance_repeats": 1}}}))
    for leave_out in ("lightgbm", "mlflow"):  # each alone: its own part goes, the other stays
        where = tmp_path / leave_out
        where.mkdir()
        assert run(results, leave_out, 1, where) > 0
        summary = json.loads((where / "forecast" / "summary.json").read_text())
        assert list(summary["datasets"]) == ["amg-128"]  # the results' config.yaml, not the defaults
        models = {row["model"] for row in summary["datasets"]["amg-128"]["grid"]}
        assert "attention" in models
        assert (set(TRAINERS) <= models) == (leave_out != "lightgbm"), (leave_out, models)
        client = mlflow.MlflowClient(f"sqlite:///{where / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("hpcvar-forecast")
        logged = client.search_runs([experiment.experiment_id]) if experiment else []
        assert bool(logged) == (leave_out != "mlflow"), leave_out  # in the benchmark's own store
