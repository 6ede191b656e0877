"""Neighbourhood analysis: which users' concurrent jobs go with slow runs (paper Section IV-A).

Per dataset: the users with a job larger than ``threshold_nodes`` running during each run form a
binary co-occurrence matrix M (runs x users); a run is *optimal* when ``t_r < tau * mean(t)``;
users are ranked by the mutual information between their column of M and optimality
(scikit-learn), with the co-occurrence count and the direction of the effect (mean run time with
the user around vs without). The same group's later Perlmutter/Frontier study ranks instead by
the Pearson correlation between run time and the user's concurrently allocated node count (0
when absent); both rankings are reported. Users in several datasets' top lists form the
cross-dataset table (the paper's Table III).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import pearsonr
from sklearn.feature_selection import mutual_info_classif

from hpcvar import tracking
from hpcvar.analyses.common import datasets, load, records, savefig, subplots
from hpcvar.results._common import MLflowRuns
from hpcvar.results.neighbourhood import NeighbourhoodDataset, NeighbourhoodResult, PearsonRankedUser, RankedUser
from hpcvar.settings import NeighbourhoodSettings


def ranking(runs: pd.DataFrame, neigh: pd.DataFrame, threshold_nodes: int, tau: float) -> pd.DataFrame:
    """Both rankings for one dataset's runs: one row per user with a job running alongside any run.

    Mutual information (Bhatele et al. 2020) ranks the users with a job larger than
    ``threshold_nodes``: ``mi``, ``rank_mi``, ``cooccurrence``, ``share_of_runs``, the mean run time
    with and without them and ``direction`` are about those large jobs (``rank_mi`` is NA for a
    user who never had one). The Pearson ranking (the Perlmutter/Frontier study) correlates run
    time with every user's concurrently allocated nodes, all job sizes, 0 when absent: ``nodes_r``,
    ``nodes_p``, ``rank_r`` (by |r|), over every user, with ``runs_alongside`` (runs with any job of
    theirs). ``log_r``, ``log_p``: the same correlation with the log of run time, the scale on which
    slowdowns multiply (what :mod:`hpcvar.analyses.explain` tests a user on): a neighbour that
    doubles a run's time in a quiet week and triples it after a link got slower adds alike on it,
    where on raw time the few longest runs decide r. Ties are broken by how often the user was
    there (``cooccurrence`` for MI, ``runs_alongside`` for Pearson), then by user name, so the
    order is reproducible.
    Rows: MI-ranked users first (by ``rank_mi``), then the others by ``rank_r``.
    """
    cols = ["user", "mi", "rank_mi", "cooccurrence", "share_of_runs", "mean_time_with_s", "mean_time_without_s",
            "direction", "nodes_r", "nodes_p", "rank_r", "runs_alongside", "log_r", "log_p"]
    ours = neigh[neigh["run_id"].isin(runs["run_id"])]
    if ours.empty:
        return pd.DataFrame(columns=cols)
    times = runs.set_index("run_id")["total_time_s"]
    t = times.to_numpy()
    log_t = np.log(np.where(t > 0, t, np.nan))
    nodes = ours.groupby(["run_id", "user"])["num_nodes"].sum().unstack(fill_value=0).reindex(times.index, fill_value=0)
    big = ours[ours["num_nodes"] > threshold_nodes]
    presence = pd.crosstab(big["run_id"], big["user"]).reindex(times.index, fill_value=0).clip(upper=1)
    optimal = (times < tau * times.mean()).astype(int).to_numpy()
    mi = dict(zip(presence.columns, mutual_info_classif(presence.to_numpy(), optimal, discrete_features=True,
                                                         random_state=0))) if len(presence.columns) else {}
    rows = []
    for user in nodes.columns:
        x = nodes[user].to_numpy()
        r, p = pearsonr(x, t) if np.ptp(x) > 0 and np.ptp(t) > 0 else (np.nan, np.nan)
        ok = np.isfinite(log_t)
        log_r, log_p = (pearsonr(x[ok], log_t[ok]) if ok.sum() > 2 and np.ptp(x[ok]) > 0 and np.ptp(log_t[ok]) > 0
                        else (np.nan, np.nan))
        row = {"user": user, "mi": np.nan, "cooccurrence": 0, "share_of_runs": 0.0, "mean_time_with_s": np.nan,
               "mean_time_without_s": np.nan, "direction": None, "nodes_r": float(r), "nodes_p": float(p),
               "runs_alongside": int((x > 0).sum()), "log_r": float(log_r), "log_p": float(log_p)}
        if user in mi:
            mask = presence[user].to_numpy() == 1
            with_t = times[mask].mean()
            without_t = times[~mask].mean() if (~mask).any() else np.nan
            row.update(mi=mi[user], cooccurrence=int(mask.sum()), share_of_runs=mask.mean(), mean_time_with_s=with_t,
                       mean_time_without_s=without_t,
                       direction="slower" if with_t > without_t else "faster" if with_t < without_t else "none")
        rows.append(row)
    table = pd.DataFrame(rows)
    # Pearson: strongest |r| first; equal |r| (or none) by co-occurrence, then by name.
    by_r = table.assign(abs_r=table["nodes_r"].abs().fillna(-1.0)).sort_values(
        ["abs_r", "runs_alongside", "user"], ascending=[False, False, True], kind="stable")
    table["rank_r"] = pd.Series(np.arange(1, len(table) + 1), index=by_r.index)
    # MI: ties (users present in the same runs) by how often the user is there, then by name.
    by_mi = table[table["mi"].notna()].sort_values(["mi", "cooccurrence", "user"], ascending=[False, False, True],
                                                   kind="stable")
    table["rank_mi"] = pd.Series(np.arange(1, len(by_mi) + 1), index=by_mi.index).astype("Int64")
    table = table.sort_values(["rank_mi", "rank_r"], na_position="last", kind="stable").reset_index(drop=True)
    return table[cols]


def mi_ranked(table: pd.DataFrame) -> pd.DataFrame:
    """The users the MI ranking covers (jobs over the threshold), in rank order."""
    return table[table["rank_mi"].notna()]


def cross_dataset(tables: dict[str, pd.DataFrame], top_k: int) -> pd.DataFrame:
    """Users among the top ``top_k`` by MI (and slowing runs) in more than one dataset (Table III)."""
    tops = {ds: t[(t["rank_mi"] <= top_k).fillna(False) & (t["direction"] == "slower")] for ds, t in tables.items()}
    users = pd.Series([u for t in tops.values() for u in t["user"]]).value_counts()
    shared = users[users > 1].index
    rows = [{"user": u, "datasets": int(users[u]),
             **{ds: (int(t.loc[t["user"] == u, "rank_mi"].iloc[0]) if (t["user"] == u).any() else None)
                for ds, t in tops.items()}} for u in shared]
    cols = ["user", "datasets", *tables]
    return pd.DataFrame(rows, columns=cols).sort_values(["datasets", "user"], ascending=[False, True])


def plot_top_users(table: pd.DataFrame, dataset: str, top_k: int, path: Path) -> Path:
    top = table.head(top_k).iloc[::-1]
    fig, ax = subplots(figsize=(6, 0.35 * len(top) + 1.2))
    colours = ["#c0392b" if d == "slower" else "#2980b9" for d in top["direction"]]
    ax.barh(top["user"], top["mi"], color=colours)
    ax.set_xlabel("mutual information with run optimality (nats)")
    ax.set_title(f"{dataset}: users running alongside (red: runs slower with them)")
    return savefig(fig, path)


def run(dataset_dir: str | Path, out_dir: str | Path, config: NeighbourhoodSettings | dict | None = None,
        only: str | None = None) -> NeighbourhoodResult:
    """Both rankings per dataset (:class:`~hpcvar.settings.NeighbourhoodSettings`, or a mapping of
    them); writes ``out_dir/summary.json`` and the tables and figures, logs to MLflow, returns the
    result."""
    s = NeighbourhoodSettings.from_mapping(config)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = load(dataset_dir, tables=("runs", "neighbourhood"))
    runs, neigh = data["runs"], data["neighbourhood"]
    tables: dict[str, pd.DataFrame] = {}
    found: dict[str, NeighbourhoodDataset] = {}
    for name in datasets(runs, s.min_runs, only):
        ds_runs = runs[runs["dataset"] == name]
        table = ranking(ds_runs, neigh, s.threshold_nodes, s.tau)
        tables[name] = table
        (out_dir / name).mkdir(parents=True, exist_ok=True)
        table.to_csv(out_dir / NeighbourhoodDataset.ranking_table(name), index=False)
        qualified = mi_ranked(table)
        if len(qualified):
            plot_top_users(qualified, name, s.top_k, out_dir / NeighbourhoodDataset.top_users_figure(name))
        times = ds_runs["total_time_s"]
        found[name] = NeighbourhoodDataset(
            runs=len(ds_runs), qualified_users=len(qualified), users_alongside=len(table),
            optimal_runs=int((times < s.tau * times.mean()).sum()),
            top_users=[RankedUser(**r) for r in records(qualified.head(s.top_k))],
            top_users_by_nodes_r=[PearsonRankedUser(**r) for r in records(
                table.sort_values("rank_r").head(s.top_k)[list(PearsonRankedUser.model_fields)])])
        print(f"neighbourhood: {name}: {len(ds_runs)} runs, {len(qualified)} users with jobs > "
              f"{s.threshold_nodes} nodes, {len(table)} users alongside", file=sys.stderr, flush=True)
    # Table III compares the datasets: one dataset's part leaves it to the assembly (:func:`assemble`).
    cross = []
    if only is None:
        table = cross_dataset(tables, s.top_k)
        table.to_csv(out_dir / NeighbourhoodResult.CROSS_DATASET_TABLE, index=False)
        cross = records(table)
    result = NeighbourhoodResult(params=s, datasets=found, cross_dataset=cross)
    result.mlflow = MLflowRuns.model_validate(_log(dataset_dir, out_dir, s, runs, neigh, tables, result))
    result.write(out_dir, only)
    return result


def assemble(result: NeighbourhoodResult, out_dir: Path) -> NeighbourhoodResult:
    """The parts merged (:mod:`hpcvar.analyses.assemble`): Table III over every dataset's ranking."""
    tables = {name: pd.read_csv(out_dir / NeighbourhoodDataset.ranking_table(name), dtype={"user": str})
              for name in result.datasets}
    cross = cross_dataset(tables, result.params.top_k)
    cross.to_csv(out_dir / NeighbourhoodResult.CROSS_DATASET_TABLE, index=False)
    return NeighbourhoodResult.build({**result.dump(), "cross_dataset": records(cross)})


def _log(dataset_dir, out_dir: Path, s: NeighbourhoodSettings, runs, neigh, tables,
         result: NeighbourhoodResult) -> dict:
    import mlflow

    ids = {}
    with tracking.session("neighbourhood", dataset_dir) as exp_id:
        for name, table in tables.items():
            with mlflow.start_run(run_name=name, tags={"hpcvar.dataset": name}) as r:
                ds_runs = runs[runs["dataset"] == name]
                tracking.log_dataset(neigh[neigh["run_id"].isin(ds_runs["run_id"])],
                                     Path(dataset_dir) / "neighbourhood", f"{name}-neighbourhood", "analysis")
                mlflow.log_params(s.as_dict())
                d = result.datasets[name]
                mlflow.log_metrics({"runs": d.runs, "qualified_users": d.qualified_users,
                                    "optimal_runs": d.optimal_runs,
                                    "top_mi": float(mi_ranked(table)["mi"].iloc[0]) if len(mi_ranked(table)) else 0.0})
                mlflow.log_artifacts(str(out_dir / name), artifact_path="neighbourhood")
                ids[name] = r.info.run_id
        return {"tracking_uri": mlflow.get_tracking_uri(), "experiment_id": exp_id, "runs": ids}
