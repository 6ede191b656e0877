"""The path a user takes in the MLflow UI: a real ``mlflow server`` on the analyses' store,
queried through the same REST API the UI uses (localhost only, bounded waits)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hpcvar.analyses import deviation, neighbourhood


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


@pytest.fixture(scope="module")
def server(campaign, tmp_path_factory):
    c = campaign("demo", 0, 15)
    out = tmp_path_factory.mktemp("analyses")
    # Deviation on one dataset, as each of the workflow's fanned-out jobs runs it (`--only`): its
    # recursive feature elimination over all six took most of this module's time.
    summaries = {"neighbourhood": neighbourhood.run(c.dataset, out / "neighbourhood"),
                 "deviation": deviation.run(c.dataset, out / "deviation", {"folds": 5}, only="milc-128")}
    store = c.dataset.resolve().parent / "mlflow.db"
    port = free_port()
    mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
    proc = subprocess.Popen([mlflow_bin, "server", "--backend-store-uri", f"sqlite:///{store}",
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            # as docs/getting-started/mlflow.md starts it: no GenAI job runner
                            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=5).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"mlflow server did not start: {proc.stdout.read() if proc.poll() is not None else ''}")
                time.sleep(1)
        yield base, summaries
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_ui_path_experiments_runs_metrics_models_artifacts(server):
    base, summaries = server
    exps = {e["name"]: e for e in call(base, "/api/2.0/mlflow/experiments/search?max_results=100")["experiments"]}
    assert {"hpcvar-neighbourhood", "hpcvar-deviation"} <= set(exps)

    dev_id = exps["hpcvar-deviation"]["experiment_id"]
    runs = call(base, "/api/2.0/mlflow/runs/search",
                {"experiment_ids": [dev_id], "filter": "tags.mlflow.parentRunId IS NULL", "max_results": 100})["runs"]
    by_name = {r["info"]["run_name"]: r for r in runs}
    dev = summaries["deviation"].datasets
    assert set(by_name) == set(dev)
    for name, run in by_name.items():
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert metrics["mape"] == pytest.approx(dev[name].mape)

    # Comparing models: the logged LightGBM deviation models, one per dataset, with signatures.
    models = call(base, "/api/2.0/mlflow/logged-models/search", {"experiment_ids": [dev_id]})["models"]
    sources = {m["info"]["source_run_id"] for m in models}
    assert sources == {r["info"]["run_id"] for r in runs}

    # Artifacts as the UI lists them: relevance table and figure of one dataset.
    run_id = by_name["milc-128"]["info"]["run_id"]
    files = call(base, f"/api/2.0/mlflow/artifacts/list?run_id={run_id}&path=deviation")["files"]
    assert {"deviation/relevance.csv", "deviation/relevance.svg"} <= {f["path"] for f in files}

    nb_id = exps["hpcvar-neighbourhood"]["experiment_id"]
    nb_runs = call(base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [nb_id], "max_results": 100})["runs"]
    assert {r["info"]["run_name"] for r in nb_runs} == set(summaries["neighbourhood"].datasets)


def test_parallel_analyses_share_one_store(campaign, tmp_path):
    """As with `snakemake --cores 2`: analyses started together on a fresh store all succeed."""
    import shutil

    import mlflow
    from mlflow.tracking import MlflowClient

    c = campaign("demo", 0, 15)
    shutil.copytree(c.dataset, tmp_path / "dataset")
    hpcvar = [sys.executable, "-m", "hpcvar"]
    # Deviation on one dataset (`--only`, as the workflow's fanned-out jobs run it): the three
    # processes still open the fresh store together.
    jobs = [("neighbourhood", []), ("deviation", ["--set", "folds=3", "--only", "milc-128"]),
            ("neighbourhood", ["--set", "top_k=5"])]
    procs = [subprocess.Popen([*hpcvar, name, str(tmp_path / "dataset"), "--out", str(tmp_path / f"out{i}"), *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, (name, extra) in enumerate(jobs)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = MlflowClient()
    names = [e.name for e in client.search_experiments()]
    assert names.count("hpcvar-neighbourhood") == 1 and names.count("hpcvar-deviation") == 1
    nb = client.get_experiment_by_name("hpcvar-neighbourhood")
    n_datasets = len(json.loads((tmp_path / "out0" / "summary.json").read_text())["datasets"])
    assert len(client.search_runs([nb.experiment_id])) == 2 * n_datasets
