"""Neighbourhood and deviation analyses: exact behaviour on hand-made data, and recovery of the
simulator's planted truth on the paper preset (two seeds)."""

from __future__ import annotations

import json
import math

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from conftest import SALT
from hpcvar.analyses import deviation, neighbourhood
from hpcvar.analyses.common import step_frame
from hpcvar.anonymise import Pseudonymiser
from hpcvar.settings import DeviationSettings



def pseudo(name):
    return Pseudonymiser(SALT)(name)


# --- neighbourhood on hand-made data -------------------------------------------------------

def _toy():
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(6)], "dataset": "x-1",
                         "total_time_s": [100.0, 105.0, 95.0, 200.0, 210.0, 190.0]})
    # "bad" runs alongside the three slow runs; "busy" everywhere; "small" is below the threshold.
    rows = [(f"r{i}", "bad", 512) for i in (3, 4, 5)] + [(f"r{i}", "busy", 256) for i in range(6)]
    rows += [(f"r{i}", "small", 64) for i in (3, 4, 5)] + [("r0", "odd", 300), ("r3", "odd", 300)]
    neigh = pd.DataFrame(rows, columns=["run_id", "user", "num_nodes"])
    return runs, neigh


def test_ranking_on_hand_made_runs():
    runs, neigh = _toy()
    table = neighbourhood.ranking(runs, neigh, threshold_nodes=128, tau=1.0).set_index("user")
    # Jobs of 64 nodes do not qualify for the MI ranking, but the Pearson ranking covers every user.
    assert pd.isna(table.loc["small", "rank_mi"]) and pd.isna(table.loc["small", "mi"])
    assert table.loc["small", "cooccurrence"] == 0 and table.loc["small", "runs_alongside"] == 3
    assert table.loc["small", "nodes_r"] == pytest.approx(np.corrcoef([0, 0, 0, 64, 64, 64], runs["total_time_s"])[0, 1])
    assert sorted(table["rank_mi"].dropna()) == [1, 2, 3] and sorted(table["rank_r"]) == [1, 2, 3, 4]
    # "bad" is present exactly in the 3 non-optimal runs: MI = H(optimality) = ln 2.
    assert table.loc["bad", "mi"] == pytest.approx(math.log(2))
    assert table.loc["bad", "rank_mi"] == 1 and table.loc["bad", "direction"] == "slower"
    assert table.loc["bad", "cooccurrence"] == 3 and table.loc["bad", "share_of_runs"] == 0.5
    assert table.loc["busy", "mi"] == pytest.approx(0.0)  # always there: tells nothing
    assert table.loc["odd", "mi"] == pytest.approx(0.0)   # one slow, one fast run
    # Pearson on concurrently allocated nodes (0 when absent): bad's nodes track the slow runs.
    t = runs["total_time_s"].to_numpy()
    expected = np.corrcoef([0, 0, 0, 512, 512, 512], t)[0, 1]
    assert table.loc["bad", "nodes_r"] == pytest.approx(expected) and table.loc["bad", "rank_r"] == 1
    assert math.isnan(table.loc["busy", "nodes_r"])  # constant: no correlation defined
    # bad and small have the same |r|: the tie goes to the user present in more runs, then by name.
    assert table.loc["bad", "rank_r"] == 1 and table.loc["small", "rank_r"] == 2 and table.loc["busy", "rank_r"] == 4


def test_pearson_ranking_covers_every_concurrent_allocation():
    """The Perlmutter/Frontier study correlates run time with each user's concurrently allocated
    nodes over all users and job sizes: a user whose small jobs track the slow runs ranks first
    by r although the MI ranking (jobs over the threshold) does not see them at all."""
    times = [100.0, 110.0, 120.0, 130.0, 140.0, 150.0]
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(6)], "dataset": "x-1", "total_time_s": times})
    rows = [(f"r{i}", "grower", 8 * (i + 1)) for i in range(6)]               # small, but r = 1
    rows += [(f"r{i}", "large", 256) for i in (0, 3, 5)]                       # large, weakly related
    rows += [(f"r{i}", "twin-b", 32) for i in (4, 5)] + [(f"r{i}", "twin-a", 32) for i in (4, 5)]  # tied
    neigh = pd.DataFrame(rows, columns=["run_id", "user", "num_nodes"])
    table = neighbourhood.ranking(runs, neigh, threshold_nodes=128, tau=1.0)
    assert list(table["user"]) == ["large", "grower", "twin-a", "twin-b"]  # MI-ranked first, then by rank_r
    by_user = table.set_index("user")
    assert by_user.loc["grower", "nodes_r"] == pytest.approx(1.0) and by_user.loc["grower", "rank_r"] == 1
    for user in ("grower", "large", "twin-a"):
        x = neigh[neigh["user"] == user].set_index("run_id")["num_nodes"].reindex(runs["run_id"], fill_value=0)
        assert by_user.loc[user, "nodes_r"] == pytest.approx(np.corrcoef(x, times)[0, 1], abs=1e-15)
    assert by_user.loc["twin-a", "rank_r"] + 1 == by_user.loc["twin-b", "rank_r"]  # same r: by name
    assert by_user["rank_mi"].notna().sum() == 1 and by_user.loc["large", "rank_mi"] == 1
    # The same tables in another row order give the same ranks.
    again = neighbourhood.ranking(runs.iloc[::-1], neigh.iloc[::-1], threshold_nodes=128, tau=1.0)
    pd.testing.assert_frame_equal(again.set_index("user").sort_index(), by_user.sort_index(), check_exact=False)


def test_log_time_correlation_sees_a_neighbour_that_multiplies_run_time():
    """Slowdowns multiply: a culprit that doubles a run on fast links and makes it ten times slower
    after the links got slower (the testbed campaign's 12 rounds, in round figures). On run time
    the two longest runs decide r and its p misses 0.05; on the log of run time (``log_r``,
    ``log_p``, what explain tests users on) every run counts alike and the culprit stands out."""
    before = [1.0, 1.1, 0.95, 2.2, 2.0, 2.4]   # quiet, quiet, quiet, culprit x3
    after = [3.1, 3.0, 3.3, 30.0, 45.0, 28.0]  # the rate drop: quiet x3, culprit x3
    times = before + after
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(12)], "dataset": "x-4", "total_time_s": times})
    culprit = [i for i in range(12) if i % 6 >= 3]
    neigh = pd.DataFrame([(f"r{i}", "culprit", 2) for i in culprit] + [(f"r{i}", "decoy", 2) for i in (0, 4, 6, 10)],
                         columns=["run_id", "user", "num_nodes"])
    table = neighbourhood.ranking(runs, neigh, threshold_nodes=1, tau=1.0).set_index("user")
    x = np.isin(np.arange(12), culprit).astype(float)
    assert table.loc["culprit", "log_r"] == pytest.approx(np.corrcoef(x, np.log(times))[0, 1])
    assert table.loc["culprit", "nodes_r"] == pytest.approx(np.corrcoef(x, times)[0, 1])
    assert table.loc["culprit", "nodes_p"] > 0.05 > table.loc["culprit", "log_p"]
    assert table.loc["decoy", "log_p"] > 0.5  # one culprit round and one quiet one on each side


def test_cross_dataset_table_lists_users_slowing_several_datasets():
    t1 = pd.DataFrame({"user": ["a", "b", "c"], "rank_mi": [1, 2, 3], "direction": ["slower", "slower", "faster"]})
    t2 = pd.DataFrame({"user": ["b", "a", "c"], "rank_mi": [1, 2, 3], "direction": ["slower", "faster", "faster"]})
    t3 = pd.DataFrame({"user": ["b", "d"], "rank_mi": [1, 2], "direction": ["slower", "slower"]})
    cross = neighbourhood.cross_dataset({"d1": t1, "d2": t2, "d3": t3}, top_k=10).set_index("user")
    assert list(cross.index) == ["b"]  # a slows only d1; c never slows; d appears once
    assert cross.loc["b", "datasets"] == 3 and cross.loc["b", "d1"] == 2


# --- deviation on hand-made data -------------------------------------------------------------

def test_deviation_finds_the_counter_that_drives_the_time():
    rng = np.random.default_rng(0)
    rows = []
    for r in range(24):
        z = rng.gamma(2, 0.2, 10)
        for s in range(10):
            profile = 5 + s
            rows.append({"run_id": f"r{r}", "step": s + 1,
                         "duration_s": profile * (1 + 0.8 * z[s]) * np.exp(rng.normal(0, 0.01)),
                         "RT_RB_STL": 1e6 * (1 + z[s]) * np.exp(rng.normal(0, 0.02)),
                         "PT_FLIT_TOT": 1e6 * np.exp(rng.normal(0, 0.3)),
                         "RT_FLIT_TOT": 1e6 * np.exp(rng.normal(0, 0.3))})
    frame = pd.DataFrame(rows)
    settings = DeviationSettings(folds=4, n_select=1)
    res = deviation.cross_validate(frame, ["RT_RB_STL", "PT_FLIT_TOT", "RT_FLIT_TOT"], settings)
    rel = res["relevance"].set_index("counter")["relevance"]
    assert rel["RT_RB_STL"] == 1.0 and rel["PT_FLIT_TOT"] == 0.0
    assert res["mape"] < 0.05
    # Grouped folds: every run's steps are predicted in exactly one fold, never split.
    assert sum(f["test_runs"] for f in res["folds"]) == 24


def test_deviation_centres_with_training_means_only():
    frame = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "step": [1, 2, 1, 2],
                          "duration_s": [1.0, 2.0, 3.0, 4.0], "X": [1.0, 1.0, 1.0, 1.0]})
    means = frame[frame["run_id"] == "a"].groupby("step")[["duration_s", "X"]].mean()
    out = deviation.centre(frame[frame["run_id"] == "b"], ["duration_s"], means)
    assert out["duration_s"].tolist() == [2.0, 1.0]  # (3-1)/1 and (4-2)/2: run b never enters the means


# --- recovery of planted truth (paper preset, two seeds) ---------------------------------------

def test_neighbourhood_ranks_planted_culprits_on_top(paper):
    c, nb, _, _ = paper
    found = total = 0
    for name, d in nb.datasets.items():
        if name not in c.truth["datasets"]:
            continue  # the microbenchmark dataset: placement and load are its planted causes, not users
        culprits = {pseudo(u) for u in c.truth["datasets"][name]["culprits"]}
        top = [u.user for u in d.top_users]
        hits = len(culprits & set(top))
        assert hits >= len(culprits) / 2, (name, top, culprits)
        found, total = found + hits, total + len(culprits)
        for u in d.top_users:
            if u.user in culprits:
                assert u.direction == "slower"
    assert found / total >= 0.8, (found, total)
    # The Pearson ranking, over every user and job size, has every planted culprit in its top 10
    # (measured on both seeds: 16 of 16; unchanged from when it was computed over large jobs only).
    for name, d in nb.datasets.items():
        if name in c.truth["datasets"]:
            by_r = [u.user for u in d.top_users_by_nodes_r]
            assert {pseudo(u) for u in c.truth["datasets"][name]["culprits"]} <= set(by_r), (name, by_r)
            assert d.users_alongside >= d.qualified_users
    # Table III: every user in it slows at least two datasets, and planted culprits are among them.
    cross = nb.cross_dataset
    all_culprits = {pseudo(u) for d in c.truth["datasets"].values() for u in d["culprits"]}
    assert cross and all(r["datasets"] >= 2 for r in cross)
    assert all_culprits & {r["user"] for r in cross}


def test_deviation_ranks_the_planted_driver_first(paper):
    c, _, dv, _ = paper
    for name, d in dv.datasets.items():
        planted = c.truth["datasets"][name]
        assert d.top_counter == planted["drivers"][0], (name, d.relevance[:3])
        assert d.relevance[0].relevance == 1.0
        # Error: above the simulator's noise floor, and not far from the paper's < 5%.
        assert planted["best_achievable_mape"] < d.mape < 0.15, (name, d.mape)


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


def test_step_frame_normalises_counters_per_router(paper):
    c, _, _, _ = paper
    from hpcvar.dataset import Dataset

    data = {t: Dataset(c.dataset).read(t) for t in ("runs", "steps", "step_counters", "system_counters")}
    frame = step_frame(data, "milc-128")
    run = frame["run_id"].iloc[0]
    raw = data["step_counters"].query("run_id == @run and step == 1 and counter == 'RT_RB_STL'")["value"].iloc[0]
    routers = data["runs"].set_index("run_id").loc[run, "num_routers"]
    assert frame.query("run_id == @run and step == 1")["RT_RB_STL"].iloc[0] == pytest.approx(raw / routers)
    assert {"io_PT_FLIT_TOT", "sys_RT_RB_STL"} <= set(frame.columns)


def test_neighbour_presence_recovers_the_planted_culprit_intensity(paper):
    """Per step, the culprits' running jobs (from sacct, through collation) weighted by their
    planted strengths are the culprit congestion the simulator applied at that step."""
    from hpcvar.analyses.common import frequent_neighbours, neighbour_presence
    from hpcvar.dataset import Dataset

    c = paper[0]
    data = {t: Dataset(c.dataset).read(t) for t in ("runs", "steps", "step_counters", "neighbourhood")}
    truth = pd.read_parquet(c.raw / "truth_steps.parquet")
    for name in ("milc-128", "amg-512"):
        users = frequent_neighbours(data, name, min_nodes=128, max_users=32)
        culprits = {pseudo(u): c.truth["culprit_strength"][u] for u in c.truth["datasets"][name]["culprits"]}
        assert set(culprits) <= set(users)
        frame = neighbour_presence(step_frame(data, name), data, users, min_nodes=128)
        got = sum(w * frame[f"nbr_{u}"] for u, w in culprits.items())
        want = frame[["run_id", "step"]].merge(truth, on=["run_id", "step"], how="left")["culprit"]
        assert want.notna().all() and (want > 0).mean() > 0.05  # culprits were there in some steps
        # sacct rounds job times to whole seconds: a step starting within a second of a culprit
        # job's start or end may fall on the other side.
        assert np.isclose(got, want).mean() > 0.995, name
        counts = frame[[f"nbr_{u}" for u in users]].to_numpy()
        assert (counts >= 0).all() and (counts == np.round(counts)).all()


def test_neighbour_presence_on_hand_made_steps():
    from hpcvar.analyses.common import frequent_neighbours, neighbour_presence

    t0 = pd.Timestamp("2026-11-01T00:00:00", tz="UTC")
    sec = lambda s: t0 + pd.Timedelta(s, "s")  # noqa: E731
    runs = pd.DataFrame({"run_id": ["a", "b"], "dataset": "x-1", "start": [sec(0), sec(100)]})
    # Run a has step starts; run b has none (placed at its start plus the durations before).
    steps = pd.DataFrame({"run_id": ["a"] * 3 + ["b"] * 3, "step": [1, 2, 3] * 2,
                          "start": [sec(5), sec(15), sec(25), pd.NaT, pd.NaT, pd.NaT],
                          "duration_s": [10.0] * 6})
    neigh = pd.DataFrame({
        "run_id": ["a", "a", "a", "b", "b"], "user": ["big", "big", "tiny", "big", "other"],
        "num_nodes": [256, 512, 16, 256, 1024],
        "start": [sec(0), sec(14), sec(0), sec(105), sec(50)],
        "end": [sec(20), pd.NaT, sec(30), sec(115), sec(100)]})
    data = {"runs": runs, "steps": steps, "neighbourhood": neigh}
    # "other" ran beside one run only, "tiny" is too small.
    assert frequent_neighbours(data, "x-1", min_nodes=128, max_users=8) == ["big"]
    frame = steps[["run_id", "step", "duration_s"]]
    got = neighbour_presence(frame, data, ["big", "other"], min_nodes=128)
    # a: t=5 one job, t=15 both (the second still running when sacct was asked), t=25 the second.
    # b: t=100 (other's job ended at 100: gone), t=110 big, t=120 (big's ended at 115).
    assert got["nbr_big"].tolist() == [1, 2, 1, 0, 1, 0]
    assert got["nbr_other"].tolist() == [0] * 6


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
