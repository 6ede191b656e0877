"""What the analyses share: loading the dataset, per-step feature tables, summaries, figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.data.dataset import Dataset
from hpcvar.defaults import FEATURE_GROUPS

#: Feature groups of the paper's ablations (Section V-C): job counters, then placement, io, sys.
FEATURE_SETS = FEATURE_GROUPS
#: Prefix of the neighbour-presence feature columns (:func:`neighbour_presence`).
NEIGHBOUR_PREFIX = "nbr_"
#: Prefix of the node samplers' pressure stall counters (``psi.cpu_some_us``, ...): per node, not
#: per router; ``psi.cpu_`` is how much the CPUs held the job back.
PSI_PREFIX = "psi."
CPU_PRESSURE = "psi.cpu_some_us"


def load(dataset_dir: str | Path, tables=("runs", "steps", "step_counters", "system_counters")) -> dict:
    ds = Dataset(dataset_dir)
    data = {t: ds.read(t) for t in tables}
    if data["runs"].empty:
        raise SystemExit(f"{dataset_dir}: the dataset has no runs; run `hpcvar collate` first")
    return data


def datasets(runs: pd.DataFrame, min_runs: int = 2, only: str | None = None) -> list[str]:
    """The datasets with ``min_runs`` runs or more, by name; with ``only``, that one alone (if it has)."""
    counts = runs.groupby("dataset").size()
    return sorted(d for d in counts.index[counts >= min_runs] if only is None or d == only)


def step_frame(data: dict, dataset: str) -> pd.DataFrame:
    """One row per (run, step) of ``dataset``: step time, job counters per router, placement,
    and system counters (``io_<C>``, ``sys_<C>``). Counters are divided by the run's router
    count so runs with more fragmented placements are comparable; the node samplers' pressure
    stall counters (``psi.*``) by its node count (they are per node)."""
    runs = data["runs"][data["runs"]["dataset"] == dataset][["run_id", "num_routers", "num_groups", "num_nodes",
                                                            "start"]]
    steps = data["steps"].merge(runs[["run_id"]], on="run_id")[["run_id", "step", "duration_s"]]
    frame = steps.merge(runs[["run_id", "num_routers", "num_groups", "num_nodes"]], on="run_id")
    sc = data["step_counters"]
    sc = sc[sc["run_id"].isin(runs["run_id"])]
    if not sc.empty:
        wide = sc.pivot_table(index=["run_id", "step"], columns="counter", values="value").reset_index()
        frame = frame.merge(wide, on=["run_id", "step"], how="left")
        counters = [c for c in wide.columns if c not in ("run_id", "step")]
        per_node = [c for c in counters if c.startswith(PSI_PREFIX)]
        per_router = [c for c in counters if c not in per_node]
        frame[per_router] = frame[per_router].div(frame["num_routers"], axis=0)
        frame[per_node] = frame[per_node].div(frame["num_nodes"], axis=0)
    sysc = data.get("system_counters")
    if sysc is not None and not sysc.empty:
        sysc = sysc[sysc["run_id"].isin(runs["run_id"])]
        if not sysc.empty:
            wide = sysc.assign(name=sysc["scope"] + "_" + sysc["counter"]).pivot_table(
                index=["run_id", "step"], columns="name", values="value").reset_index()
            frame = frame.merge(wide, on=["run_id", "step"], how="left")
    order = runs.sort_values("start")["run_id"]
    frame["run_order"] = frame["run_id"].map({r: i for i, r in enumerate(order)})
    return frame.drop(columns="num_nodes").sort_values(["run_order", "step"]).reset_index(drop=True)


def feature_columns(frame: pd.DataFrame, feature_set: str) -> list[str]:
    """Columns of one feature set (``job`` counters, ``placement``, ``io`` or ``sys`` counters,
    ``neighbours``: the presence columns :func:`neighbour_presence` added)."""
    from hpcvar.system.aries import TABLE2
    from hpcvar.system.linkcounters import LINK_COUNTERS

    if feature_set == "job":
        return [c for c in (*TABLE2, *LINK_COUNTERS) if c in frame.columns] + sorted(
            c for c in frame.columns if c.startswith(PSI_PREFIX))
    if feature_set == "placement":
        return ["num_routers", "num_groups"]
    if feature_set in ("io", "sys"):
        return sorted(c for c in frame.columns if c.startswith(f"{feature_set}_"))
    if feature_set == "neighbours":
        return sorted(c for c in frame.columns if c.startswith(NEIGHBOUR_PREFIX))
    raise KeyError(f"unknown feature set {feature_set!r}; choose from {FEATURE_SETS}")


def subset(data: dict, datasets) -> dict:
    """The tables of ``data`` (:func:`load`) restricted to the runs of ``datasets``: every table is
    keyed by run, so an analysis of those datasets reads the same rows from it as from the whole."""
    ids = data["runs"].loc[data["runs"]["dataset"].isin(list(datasets)), "run_id"]
    return {name: table[table["run_id"].isin(ids)] if table is not None and "run_id" in table.columns else table
            for name, table in data.items()}


def frequent_neighbours(data: dict, dataset: str, min_nodes: int, max_users: int) -> list[str]:
    """Users whose jobs on more than ``min_nodes`` nodes ran beside the most runs of ``dataset``
    (at least two runs), at most ``max_users``, most frequent first. Chosen by presence alone,
    never by run time, so selecting them on every run leaks nothing into held-out runs."""
    neigh = data.get("neighbourhood")
    if neigh is None or neigh.empty:
        return []
    ids = data["runs"].loc[data["runs"]["dataset"] == dataset, "run_id"]
    big = neigh[(neigh["num_nodes"] > min_nodes) & neigh["run_id"].isin(ids) & neigh["start"].notna()]
    counts = big.groupby("user")["run_id"].nunique()
    counts = counts[counts >= 2].reset_index().sort_values(["run_id", "user"], ascending=[False, True])
    return counts["user"].head(max_users).tolist()


def neighbour_presence(frame: pd.DataFrame, data: dict, users: list[str], min_nodes: int) -> pd.DataFrame:
    """``frame`` (a :func:`step_frame`) with one column ``nbr_<user>`` per user: how many of that
    user's jobs on more than ``min_nodes`` nodes were running when the step started.

    What was running at a step's start was known at that moment (squeue shows it), so these
    columns carry no future. Steps without a recorded start are placed at the run's start plus
    the durations of the steps before them. A job still running when sacct was asked (no End)
    counts until the end of time."""
    if not users:
        return frame
    steps = data["steps"][["run_id", "step", "start"]]
    f = frame[["run_id", "step", "duration_s"]].merge(steps, on=["run_id", "step"], how="left")
    f = f.merge(data["runs"][["run_id", "start"]].rename(columns={"start": "run_start"}), on="run_id")
    before = f.groupby("run_id")["duration_s"].cumsum() - f["duration_s"]
    f["t"] = f["start"].fillna(f["run_start"] + pd.to_timedelta(before, unit="s"))
    neigh = data["neighbourhood"]
    neigh = neigh[(neigh["num_nodes"] > min_nodes) & neigh["user"].isin(users) & neigh["start"].notna()
                  & neigh["run_id"].isin(f["run_id"])][["run_id", "user", "start", "end"]]
    pairs = f[["run_id", "step", "t"]].merge(neigh.rename(columns={"start": "job_start", "end": "job_end"}),
                                             on="run_id")
    running = (pairs["job_start"] <= pairs["t"]) & (pairs["job_end"].isna() | (pairs["job_end"] > pairs["t"]))
    counts = pd.crosstab([pairs.loc[running, "run_id"], pairs.loc[running, "step"]], pairs.loc[running, "user"])
    counts = counts.reindex(columns=users, fill_value=0).astype(float)
    counts.columns = [NEIGHBOUR_PREFIX + u for u in users]
    counts.index.names = ["run_id", "step"]
    out = frame.merge(counts.reset_index(), on=["run_id", "step"], how="left")
    out[list(counts.columns)] = out[list(counts.columns)].fillna(0.0)
    return out


def relative_deviation(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The paper's mean-centring, relative to the mean: (x - mean over runs at that step) / mean."""
    mean = frame.groupby("step")[columns].transform("mean")
    return (frame[columns] - mean) / mean.replace(0, np.nan)


def mape(actual, predicted) -> float:
    actual, predicted = np.asarray(actual, float), np.asarray(predicted, float)
    return float(np.mean(np.abs(predicted - actual) / np.abs(actual)))


#: Colours of a figure's series (matplotlib's tab10), per dataset or per routine.
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as dicts, missing values (NaN, NA) as None: what a result's records are built from."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def subplots(*args, **kwargs):
    """``plt.subplots`` drawn off-screen (no display on compute or CI machines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def savefig(fig, path: Path) -> Path:
    """Save as SVG (crisp, small, opens offline in any browser)."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", bbox_inches="tight")
    plt.close(fig)
    return path
