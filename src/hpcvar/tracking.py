"""MLflow tracking for the analyses: where the store is, one experiment per analysis, one lock.

Default store: a SQLite database beside the dataset (``results/mlflow.db`` for
``results/dataset``) with artifacts under ``results/mlartifacts/<experiment>``;
``MLFLOW_TRACKING_URI`` overrides it (then the server's own artifact root is used).

Several Snakemake jobs may run analyses at once. SQLite allows one writer at a time and MLflow
creates its schema on first use, so every session that touches the store holds an exclusive
``flock`` on ``<store>.lock``: analyses compute first and log inside :func:`session`.
"""

from __future__ import annotations

import fcntl
import os
import warnings
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.data.pandas_dataset import PandasDataset


def experiment(analysis: str) -> str:
    """The MLflow experiment of an analysis (those of :mod:`hpcvar.analyses.registry` that are
    tracked): ``hpcvar-<analysis>``."""
    return f"hpcvar-{analysis}"


def default_store(dataset_dir: str | Path) -> Path:
    return Path(dataset_dir).resolve().parent / "mlflow.db"


def tracking_uri(dataset_dir: str | Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{default_store(dataset_dir)}"


def artifact_location(dataset_dir: str | Path, analysis: str) -> str | None:
    """Local artifact root for the default store; a user's own tracking server decides its own."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return None
    return (Path(dataset_dir).resolve().parent / "mlartifacts" / experiment(analysis)).as_uri()


@contextmanager
def session(analysis: str, dataset_dir: str | Path):
    """Exclusive access to the store with ``analysis``'s experiment active; yields the experiment id."""
    uri = tracking_uri(dataset_dir)
    lock_path = Path(uri[len("sqlite:///"):] + ".lock") if uri.startswith("sqlite:///") else \
        Path(dataset_dir).resolve().parent / ".mlflow.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    user_uri = os.environ.get("MLFLOW_TRACKING_URI")
    # Before set_tracking_uri, which exports MLFLOW_TRACKING_URI and would hide the default store.
    artifacts = artifact_location(dataset_dir, analysis)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            mlflow.set_tracking_uri(uri)  # note: MLflow also exports this as MLFLOW_TRACKING_URI
            name = experiment(analysis)
            exp = mlflow.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp else mlflow.create_experiment(
                name, artifact_location=artifacts,
                tags={"hpcvar.analysis": analysis})
            mlflow.set_experiment(experiment_id=exp_id)
            yield exp_id
        finally:
            # Undo the export, or the next session in this process would log to this store.
            if user_uri is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = user_uri
            fcntl.flock(lock, fcntl.LOCK_UN)


def delete_runs(run_ids: list[str]) -> None:
    """Delete runs and their nested runs (MLflow's deleted state: hidden, restorable until the
    store is garbage-collected) in the active session's store."""
    client = mlflow.MlflowClient()
    for run_id in run_ids:
        experiment = client.get_run(run_id).info.experiment_id
        for child in client.search_runs([experiment], f"tags.mlflow.parentRunId = '{run_id}'", max_results=50_000):
            client.delete_run(child.info.run_id)
        client.delete_run(run_id)


def log_dataset(df: pd.DataFrame, source: str | Path, name: str, context: str = "training") -> None:
    """Log ``df`` as the active run's input dataset (``mlflow.data``), sourced from a local path.

    Integer columns become float64, as MLflow's schema inference asks, so a missing value at
    inference time cannot break the schema.
    """
    ints = {c: "float64" for c in df.columns if pd.api.types.is_integer_dtype(df[c])}
    with warnings.catch_warnings():
        # MLflow registers its local-file source class twice and warns that the path is ambiguous.
        warnings.filterwarnings("ignore", message="The specified dataset source can be interpreted")
        # MLflow's digest and schema inference (mlflow.data, mlflow.types) use pandas calls that
        # pandas 3 deprecates; the warnings name pandas' own lines, so a filter on mlflow misses them.
        warnings.filterwarnings("ignore", category=pd.errors.Pandas4Warning)
        dataset = mlflow.data.from_pandas(df.astype(ints), source=Path(source).resolve().as_uri(), name=name)
        mlflow.log_input(Table(dataset.df, dataset.source, name=name, digest=dataset.digest), context=context)


class Table(PandasDataset):
    """MLflow's pandas dataset, its schema inferred from the columns' types and missing values.

    MLflow's own inference (``PandasDataset.schema``) reads every value of every column in Python
    to decide whether the column may be missing, and every value of a string column for its type:
    seconds for a latency table of some 10^5 rows, in every analysis that logs one. The same
    schema comes from MLflow's inference on one row (the types) and ``isna`` (``required``);
    tests/test_tracking.py checks that the two agree on the tables the analyses log. A frame with
    Python-object columns, whose values may differ in type from row to row, keeps MLflow's."""

    @cached_property
    def schema(self):
        from mlflow.models import infer_signature
        from mlflow.types import ColSpec, Schema

        df = self.df
        if df.empty or any(df[c].dtype == object for c in df.columns):
            return PandasDataset.schema.func(self)
        try:
            types = infer_signature(df.head(1)).inputs
        except Exception:  # noqa: BLE001  (as MLflow's: no schema rather than no run)
            return None
        missing = df.isna().any()
        return Schema([ColSpec(type=c.type, name=c.name, required=not bool(missing[c.name])) for c in types.inputs])
