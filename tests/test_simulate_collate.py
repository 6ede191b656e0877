"""The simulated system and collation, checked against the simulator's planted truth.

The demo campaign is simulated once per session, written to disk, and read back only through
the parsers (as the main job does), so these tests exercise the whole raw-file path.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import SALT
from hpcvar.collate import collate
from hpcvar.data.dataset import Dataset
from hpcvar.data.rawlayout import write_manifest
from hpcvar.data.schema import TABLES
from hpcvar.parsers import apps, detect, inspect, ldms
from hpcvar.simulate import simulate
from hpcvar.simulate.presets import get_preset, upgrade_windows
from hpcvar.system.topology import LOCALITY_CLASSES
from hpcvar.util.anonymise import Pseudonymiser


@pytest.fixture(scope="session")
def demo(campaign):
    """(raw dir, dataset dir, truth, collation result) of the demo preset, collated once."""
    c = campaign("demo", 0, get_preset("demo").days)
    return c.raw, c.dataset, c.truth, c.collated


@pytest.fixture()
def small_raw(campaign, tmp_path):
    """A 2-day demo campaign's raw files, a copy of this test's own to modify."""
    shutil.copytree(campaign("demo", 3, 2).raw, tmp_path / "raw")
    return tmp_path / "raw"


def pseudo(name: str) -> str:
    return Pseudonymiser(SALT)(name)


def tree_hashes(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def centred(df: pd.DataFrame, value: str) -> pd.Series:
    """Deviation from the dataset's mean step profile (the paper's mean-centring)."""
    return df[value] - df.groupby(["dataset", "step"])[value].transform("mean")


# --- the raw files -----------------------------------------------------------------------

def test_every_raw_file_is_read_by_its_parser(demo):
    raw, _, _, _ = demo
    run = sorted((raw / "runs").iterdir())[0]
    kinds = {p.name: inspect(p) for p in run.iterdir() if p.name != "manifest.json"}
    assert all(r["ok"] for r in kinds.values()), kinds
    assert kinds["sacct.txt"]["kind"] == "sacct"
    assert kinds["stdout.txt"]["kind"] == "app_stdout"
    assert kinds["counters.csv"]["kind"] == "step_counters"
    perflogs = list((raw / "perflogs").rglob("*.log"))
    assert {p.name for p in perflogs} == {"AMGTest.log", "MILCTest.log", "MiniViteTest.log", "UMTTest.log"}
    assert all(detect(p).__name__.endswith("reframe") for p in perflogs)
    ldms_files = sorted((raw / "ldms" / "aries_rtr_mmr").iterdir())
    assert len(ldms_files) >= 5  # one rollover file per simulated day with runs
    assert inspect(ldms_files[0])["kind"] == "ldms_store_csv"


def test_same_seed_same_campaign(tmp_path):
    a = simulate("demo", seed=7, out=tmp_path / "a", overrides={"days": 1}, progress=False)
    b = simulate("demo", seed=7, out=tmp_path / "b", overrides={"days": 1}, progress=False)
    c = simulate("demo", seed=8, out=tmp_path / "c", overrides={"days": 1}, progress=False)
    assert a == b and tree_hashes(tmp_path / "a") == tree_hashes(tmp_path / "b")
    assert tree_hashes(tmp_path / "a") != tree_hashes(tmp_path / "c")


def test_files_written_by_worker_processes_are_the_files_one_process_writes(tmp_path):
    """``workers`` processes write our runs' files and the microbenchmark's: the same files, byte
    for byte (mpiP reports, sacct and the manifests' checksums among them), and the same truth."""
    one = simulate("demo", seed=7, out=tmp_path / "one", overrides={"days": 1}, progress=False)
    two = simulate("demo", seed=7, out=tmp_path / "two", overrides={"days": 1}, progress=False, workers=2)
    hashes = tree_hashes(tmp_path / "one")
    assert one == two and hashes == tree_hashes(tmp_path / "two")
    names = [Path(name).name for name in hashes]
    assert any(n.endswith(".mpiP") for n in names) and "hpcvar-collectives.csv" in names
    run_dirs = {Path(name).parts[1] for name in hashes if name.startswith("runs/")}
    assert names.count("manifest.json") == len(run_dirs) > len(one["microbenchmarks"]["runs"])


def _no_space_left(path, **report):
    raise OSError(28, "No space left on device", str(path))


def test_a_write_that_fails_in_a_worker_process_fails_the_simulation(tmp_path, monkeypatch):
    """A run's files that a worker process could not write stop the campaign with that error, and
    no truth file says the campaign is complete."""
    from hpcvar.parsers import mpip

    monkeypatch.setattr(mpip, "write", _no_space_left)
    with pytest.raises(OSError, match="No space left on device") as err:
        simulate("demo", seed=7, out=tmp_path / "raw", overrides={"days": 1}, progress=False, workers=2)
    assert err.value.filename.endswith(".mpiP")
    assert not (tmp_path / "raw" / "truth.json").exists()


def test_a_campaign_of_the_microbenchmark_alone_simulates_and_collates(tmp_path):
    """A preset without application datasets (``datasets=()``): the collectives microbenchmark's
    runs alone, with empty per-run truth, collated into their one dataset."""
    truth = simulate("demo", seed=1, out=tmp_path / "raw", overrides={"days": 3, "datasets": ()}, progress=False)
    planted = truth["microbenchmarks"]
    assert truth["datasets"] == {} and len(planted["runs"]) >= 10
    assert pd.read_parquet(tmp_path / "raw" / "truth_runs.parquet").empty
    collate(tmp_path / "raw", tmp_path / "dataset", Pseudonymiser(SALT))
    runs = Dataset(tmp_path / "dataset").read("runs")
    assert set(runs["dataset"]) == {planted["dataset"]}
    assert sorted(runs["run_id"]) == sorted(r["run_id"] for r in planted["runs"])
    # Collation's b, from sacct alone, is the simulator's own for every run.
    b = pd.DataFrame(planted["runs"]).set_index("run_id")["b"]
    assert runs.set_index("run_id")["bg_traffic"].to_numpy() == pytest.approx(b.loc[runs["run_id"]].to_numpy(), abs=1e-6)


def test_the_simulators_b_counts_the_jobs_sacct_shows_running_at_the_runs_start():
    """sacct prints whole seconds: a job that starts after a run within the run's first second
    is running there for collation, and one that ends within it is not. The simulator's b (its
    truth) counts the jobs collation counts (a demo campaign of seed 4 had one such run)."""
    from hpcvar.simulate.schedule import Background
    from hpcvar.simulate.system import Users
    from hpcvar.system.background import running_at

    starts, ends = [90.0, 99.2, 100.0, 100.4, 101.0], [100.3, 100.9, 200.0, 200.0, 300.0]  # by start
    jobs = pd.DataFrame({"user": "u", "start": starts, "end": ends, "nodes": 4, "node_idx": [np.arange(4)] * 5})
    bg = Background(jobs, Users(pd.DataFrame({"user": ["u"], "comm": [1.0]}), {}, {}))
    t = 100.6  # a run's start; sacct prints 100
    assert bg.running(t).tolist() == [False, True, True, True, False]
    as_sacct = pd.DataFrame({"job_id": [str(i) for i in range(5)],
                             "start": pd.to_datetime(bg.start, unit="s").floor("s"),
                             "end": pd.to_datetime(bg.end, unit="s").floor("s")})
    seen = running_at(as_sacct, pd.Timestamp(t, unit="s").floor("s"))
    assert sorted(seen["job_id"]) == ["2", "3"]
    assert bg.running_in_sacct(t).tolist() == [False, False, True, True, False]


def test_preset_overrides_are_typed_and_checked():
    assert get_preset("paper", {"days": "30"}).days == 30
    with pytest.raises(KeyError, match="unknown preset fields"):
        get_preset("demo", {"dayz": 3})


def test_upgrade_windows_split_the_campaign_at_the_planted_upgrade(demo):
    """The workflow's default ``compare:`` ranges: every microbenchmark run of the planted upgrade's
    campaign started before it falls in the first window, every one after it in the second."""
    from hpcvar.analyses.compare import parse_range

    before, after = upgrade_windows("demo")
    assert (before, after) == ("2018-12-01..2018-12-10", "2018-12-11..2018-12-15")
    _, _, truth, _ = demo
    (b0, b1), (a0, a1) = parse_range(before), parse_range(after)
    runs = truth["microbenchmarks"]["runs"]
    assert {r["upgraded"] for r in runs} == {False, True}
    for r in runs:
        start = pd.Timestamp(r["start"])
        assert (a0 <= start <= a1) if r["upgraded"] else (b0 <= start <= b1), r
    assert upgrade_windows("demo", {"days": 3, "upgrade_day": 1}) == ("2018-12-01..2018-12-01",
                                                                      "2018-12-02..2018-12-03")
    assert upgrade_windows("paper", {"start": "2026-01-01T00:00:00"}) == ("2026-01-01..2026-04-10",
                                                                          "2026-04-11..2026-05-30")
    # No upgrade, one on the first day or after the campaign, or no microbenchmark it could change.
    for overrides in ({"upgrade_day": -1}, {"upgrade_day": 0}, {"upgrade_day": 15}, {"microbenchmark_nodes": 0}):
        assert upgrade_windows("demo", overrides) is None, overrides


# --- the collated dataset against the planted truth ----------------------------------------

def test_all_datasets_collated_and_failed_runs_set_aside(demo):
    _, ds_dir, truth, result = demo
    runs = Dataset(ds_dir).read("runs")
    per = runs.groupby("dataset").size().to_dict()
    expected = {name: d["runs"] - d["failed_runs"] for name, d in truth["datasets"].items()}
    mb = truth["microbenchmarks"]
    expected[mb["dataset"]] = len(mb["runs"])
    assert per == expected
    assert set(per) == {"amg-128", "amg-512", "milc-128", "milc-512", "minivite-128", "umt-128", "collectives-16"}
    failed = [e for e in Dataset(ds_dir).quarantine() if e["kind"] == "failed-run"]
    assert len(failed) == sum(d["failed_runs"] for d in truth["datasets"].values()) == len(result.failed)
    assert {e["run_id"] for e in failed}.isdisjoint(set(runs["run_id"]))
    assert all(e["state"] in {"NODE_FAIL", "TIMEOUT", "FAILED"} for e in failed)
    assert not result.quarantined


def test_steps_match_the_paper_step_counts(demo):
    _, ds_dir, _, _ = demo
    runs = Dataset(ds_dir).read("runs").set_index("run_id")
    steps = Dataset(ds_dir).read("steps")
    counts = steps.groupby("run_id").size()
    expected = {"amg": 20, "milc": 80, "minivite": 6, "umt": 7}
    assert (counts == runs.loc[counts.index, "app"].map(expected)).all()
    # MILC's 20 warm-up trajectories are much faster than the 60 that follow (Figure 3).
    milc = steps[steps["run_id"].isin(runs.index[runs["app"] == "milc"])]
    warm = milc[milc["step"] <= 20]["duration_s"].mean()
    assert warm < 0.5 * milc[milc["step"] > 20]["duration_s"].mean()
    # total_time_s is the sum of the step durations, and steps tile the run.
    assert np.allclose(steps.groupby("run_id")["duration_s"].sum(), runs.loc[counts.index, "total_time_s"])
    # A microbenchmark's is the sum of its timed collectives (each the slowest rank's), well
    # inside its job's wall time.
    latency = Dataset(ds_dir).read("latency")
    timed = latency.groupby("run_id")["value_us"].sum() / 1e6
    mb = runs[runs["num_steps"] == 0]
    assert len(mb) and np.allclose(timed.reindex(mb.index), mb["total_time_s"])
    assert (mb["total_time_s"] < (mb["end"] - mb["start"]).dt.total_seconds()).all()


def test_run_times_spread_like_the_paper(demo):
    _, ds_dir, _, _ = demo
    runs = Dataset(ds_dir).read("runs")
    ratio = runs.groupby("dataset")["total_time_s"].agg(lambda t: t.max() / t.min())
    assert ratio.max() > 2.0, ratio  # slowest runs reach 2-3x the best (Figure 1)
    assert ratio.max() < 4.5, ratio
    assert (ratio > 1.2).all(), ratio


def test_placement_features(demo):
    raw, ds_dir, _, _ = demo
    runs = Dataset(ds_dir).read("runs")
    assert runs["locality"].isin(LOCALITY_CLASSES).all()
    assert (runs["num_routers"] >= np.ceil(runs["num_nodes"] / 4)).all()  # 4 nodes per router
    assert (runs["num_groups"] >= 1).all() and runs["num_groups"].nunique() > 2  # placements vary
    assert (runs["node_list"].map(len) == runs["num_nodes"]).all()


def test_users_are_pseudonymised_everywhere(demo):
    raw, ds_dir, truth, _ = demo
    ds = Dataset(ds_dir)
    names = set(truth["large_users"]) | {truth["campaign_user"]}
    for table in ("runs", "neighbourhood"):
        users = set(ds.read(table)["user"])
        assert users and all(u.startswith("user-") for u in users)
        assert not users & names
    assert set(ds.read("runs")["user"]) == {pseudo(truth["campaign_user"])}
    for path in ds_dir.rglob("*.parquet"):
        assert b"varstudy" not in path.read_bytes()


def test_culprits_are_present_in_a_minority_of_runs_and_slow_them(demo):
    _, ds_dir, truth, _ = demo
    ds = Dataset(ds_dir)
    runs = ds.read("runs").set_index("run_id")
    neigh = ds.read("neighbourhood")
    big = neigh[neigh["num_nodes"] > truth["neighbourhood_threshold_nodes"]]
    slower = []
    for name, d in truth["datasets"].items():
        ids = runs.index[runs["dataset"] == name]
        culprits = {pseudo(u) for u in d["culprits"]}
        present = big[big["run_id"].isin(ids) & big["user"].isin(culprits)]["run_id"].unique()
        assert 0 < len(present) < len(ids), name  # culprits neither always nor never there
        times = runs.loc[ids, "total_time_s"] / runs.loc[ids, "total_time_s"].min()
        slower.append(times[times.index.isin(present)].mean() - times[~times.index.isin(present)].mean())
    # Runs with a culprit around are slower on average (checked over datasets: demo samples are small).
    assert np.mean(slower) > 0.15, slower
    # Most large users are not culprits: big neighbours alone do not explain the slowdowns.
    all_culprits = {u for d in truth["datasets"].values() for u in d["culprits"]}
    assert len(set(truth["large_users"]) - all_culprits) >= 2 * len(all_culprits)


def test_driver_counters_explain_step_deviations(demo):
    _, ds_dir, truth, _ = demo
    ds = Dataset(ds_dir)
    runs = ds.read("runs")[["run_id", "dataset"]]
    steps = ds.read("steps").merge(runs)
    counters = ds.read("step_counters").pivot_table(index=["run_id", "step"], columns="counter", values="value")
    data = steps.set_index(["run_id", "step"]).join(np.log(counters)).reset_index()
    data["dev"] = centred(data, "duration_s")
    for name, d in truth["datasets"].items():
        sub = data[data["dataset"] == name].copy()
        corr = {c: np.corrcoef(centred(sub, c), sub["dev"])[0, 1] for c in counters.columns}
        primary = d["drivers"][0]
        # Counters that are not (and are not built from) a driver.
        unrelated = [c for c in corr if c not in d["drivers"] and not any(
            drv in {"PT_RB_STL_RQ", "PT_RB_STL_RS"} and c == "PT_RB_STL" for drv in d["drivers"])]
        assert corr[primary] > 0.6, (name, corr)
        assert corr[primary] > max(corr[c] for c in unrelated), (name, sorted(corr.items(), key=lambda kv: -kv[1]))


def test_counters_are_correlated_with_each_other(demo):
    _, ds_dir, _, _ = demo
    wide = Dataset(ds_dir).read("step_counters").pivot_table(index=["run_id", "step"], columns="counter",
                                                             values="value")
    c = np.log(wide).corr().to_numpy()
    off = c[~np.eye(len(c), dtype=bool)]
    assert np.median(off) > 0.3  # realistic: counters move together, the analyses must cope


def test_io_router_traffic_leads_milc_slowdowns(demo):
    _, ds_dir, truth, _ = demo
    ds = Dataset(ds_dir)
    runs = ds.read("runs")[["run_id", "dataset"]]
    steps = ds.read("steps").merge(runs)
    io = ds.read("system_counters").query("scope == 'io' and counter == 'PT_FLIT_TOT'")
    data = steps.merge(io[["run_id", "step", "value"]], on=["run_id", "step"])
    data["dev"] = centred(data, "duration_s") / data.groupby(["dataset", "step"])["duration_s"].transform("mean")
    data = data.sort_values(["run_id", "step"])
    data["io_prev"] = np.log(data.groupby("run_id")["value"].shift(2))
    forecastable = [n for n, d in truth["datasets"].items() if d["io_forecastable"]]
    milc = data[data["dataset"].isin(forecastable)].dropna(subset=["io_prev", "dev"])
    others = data[~data["dataset"].isin(forecastable)].dropna(subset=["io_prev", "dev"])
    r_milc = np.corrcoef(centred(milc, "io_prev"), milc["dev"])[0, 1]
    r_other = np.corrcoef(centred(others, "io_prev"), others["dev"])[0, 1]
    assert r_milc > 0.2 and r_milc > r_other + 0.1, (r_milc, r_other)


def test_hidden_io_state_is_what_the_io_routers_carry(demo):
    """truth_steps.parquet's I/O process at each step's start is the traffic the I/O routers'
    LDMS counters record over that step (as a per-second rate), read back through collation."""
    raw, ds_dir, _, _ = demo
    ds = Dataset(ds_dir)
    hidden = pd.read_parquet(raw / "truth_steps.parquet")
    assert {"culprit", "ar1", "io"} <= set(hidden.columns) and hidden["io"].notna().all()
    io = ds.read("system_counters").query("scope == 'io' and counter == 'RT_FLIT_TOT'")
    data = ds.read("steps").merge(io[["run_id", "step", "value"]], on=["run_id", "step"]).merge(
        hidden, on=["run_id", "step"])
    assert len(data) > 1000
    rate = np.log(data["value"] / data["duration_s"])
    assert np.corrcoef(rate, data["io"])[0, 1] > 0.95


def test_system_counters_cover_both_scopes(demo):
    _, ds_dir, _, _ = demo
    ds = Dataset(ds_dir)
    sysc = ds.read("system_counters")
    assert set(sysc["scope"]) == {"io", "sys"}
    assert set(sysc["counter"]) == {"RT_FLIT_TOT", "RT_RB_STL", "PT_FLIT_TOT", "PT_RB_STL_RQ"}
    # Every step of every run lies within the LDMS sampling windows, so every step has both scopes.
    n_steps = len(ds.read("steps"))
    per_scope = sysc.groupby("scope")[["run_id", "step"]].apply(lambda g: len(g.drop_duplicates()))
    assert (per_scope >= 0.95 * n_steps).all(), per_scope
    assert (sysc["value"] > 0).all() and (sysc["num_routers"] >= 1).all()


def test_mpi_profile_matches_the_apps_mpi_share(demo):
    _, ds_dir, _, _ = demo
    ds = Dataset(ds_dir)
    mpi = ds.read("mpi_profile").merge(ds.read("runs")[["run_id", "app", "num_nodes"]])
    share = mpi.groupby("run_id").first()
    frac = (share["mpi_time_s"] / share["app_time_s"]).groupby(share["app"]).mean()
    # The paper: MPI is ~80% of AMG, ~89% of MILC, >95% of miniVite and ~30% of UMT (more when slowed).
    assert frac["minivite"] > 0.9 and frac["milc"] > 0.8 and 0.2 < frac["umt"] < 0.6 and frac["amg"] > 0.7
    top = mpi.sort_values("time_s").groupby("app").last()["routine"]
    assert top["minivite"] == "Waitall" and top["umt"] in {"Allreduce", "Barrier"}
    assert (share["ntasks"] == share["num_nodes"] * 64).all()


def test_truth_records_noise_and_best_error(demo):
    _, _, truth, _ = demo
    for d in truth["datasets"].values():
        assert 0.01 < d["best_achievable_mape"] < 0.05
        assert d["drivers"] and d["culprits"]


# --- collation guarantees ------------------------------------------------------------------

def test_collate_is_idempotent(demo, tmp_path):
    raw, ds_dir, _, _ = demo
    copy = tmp_path / "dataset"
    shutil.copytree(ds_dir, copy)
    before = tree_hashes(copy)
    result = collate(raw, copy, Pseudonymiser(SALT))
    assert result.new_runs == [] and len(result.skipped) > 0
    assert tree_hashes(copy) == before


def test_new_round_appends_without_rewriting(small_raw, tmp_path):
    runs = sorted((small_raw / "runs").iterdir())
    later = tmp_path / "later"
    later.mkdir()
    for r in runs[len(runs) // 2:]:
        shutil.move(str(r), later / r.name)
    ds_dir = tmp_path / "dataset"
    first = collate(small_raw, ds_dir, Pseudonymiser(SALT))
    before = tree_hashes(ds_dir)
    for r in later.iterdir():
        shutil.move(str(r), small_raw / "runs" / r.name)
    second = collate(small_raw, ds_dir, Pseudonymiser(SALT))
    after = tree_hashes(ds_dir)
    assert second.new_runs and set(second.new_runs).isdisjoint(first.new_runs)
    assert all(after.get(k) == v for k, v in before.items() if k != "quarantine.jsonl")
    assert len(Dataset(ds_dir).run_ids()) == len(first.new_runs) + len(second.new_runs)


def test_bad_run_file_is_quarantined_with_line_and_the_rest_collates(small_raw, tmp_path):
    run = next(r for r in sorted((small_raw / "runs").iterdir()) if list(r.glob("*.mpiP")))
    mpip_file = next(run.glob("*.mpiP"))
    lines = mpip_file.read_text().splitlines(keepends=True)
    mpip_file.write_text("".join(lines[: len(lines) // 2]))  # truncated report
    write_manifest(run, {k: v for k, v in json.loads((run / "manifest.json").read_text()).items() if k != "files"})
    ds_dir = tmp_path / "dataset"
    result = collate(small_raw, ds_dir, Pseudonymiser(SALT))
    (entry,) = result.quarantined
    assert entry["run_id"] == run.name and entry["file"] == str(mpip_file) and entry["line"] is not None
    assert "truncated" in entry["error"] or "End of Report" in entry["error"]
    assert run.name not in Dataset(ds_dir).run_ids() and len(result.new_runs) > 0
    assert entry in Dataset(ds_dir).quarantine()


def test_the_same_dataset_from_one_process_or_two(small_raw, tmp_path):
    """Runs read by two processes (collate's default here) make the dataset one process makes,
    in the same order, with a bad file quarantined the same way and an incomplete run left out."""
    runs = sorted((small_raw / "runs").iterdir())
    bad = next(r for r in runs if list(r.glob("*.mpiP")))
    report = next(bad.glob("*.mpiP"))
    report.write_text("".join(report.read_text().splitlines(keepends=True)[:40]))
    write_manifest(bad, {k: v for k, v in json.loads((bad / "manifest.json").read_text()).items() if k != "files"})
    (runs[-1] / "manifest.json").unlink()
    results = {n: collate(small_raw, tmp_path / f"dataset-{n}", Pseudonymiser(SALT), workers=n) for n in (1, 2)}
    one, two = results[1], results[2]
    assert one.as_dict() == two.as_dict()
    assert [q["run_id"] for q in two.quarantined] == [bad.name] and two.incomplete == [runs[-1].name]
    assert len(two.new_runs) == len(runs) - 2 - len(two.failed)
    for table in ("runs", "steps", "step_counters", "mpi_profile", "neighbourhood", "system_counters"):
        pd.testing.assert_frame_equal(Dataset(tmp_path / "dataset-1").read(table),
                                      Dataset(tmp_path / "dataset-2").read(table))


def test_a_round_written_in_batches_is_the_round_written_at_once(campaign, tmp_path, monkeypatch):
    """Collation writes each batch of runs' tables as it goes: batches of 3 runs make the dataset
    one batch makes (the session's collation of the same raw files), row for row, in one part per
    table."""
    import hpcvar.collate as collate_mod

    c = campaign("demo", 3, 2)
    monkeypatch.setattr(collate_mod, "BATCH_RUNS", 3)
    batched = collate(c.raw, tmp_path / "batched", Pseudonymiser(SALT), workers=1)
    assert len(batched.new_runs) > 3 * 3 and batched.as_dict() == c.collated.as_dict()
    for table in TABLES:
        parts = Dataset(tmp_path / "batched").parts(table)
        assert len(parts) == len(Dataset(c.dataset).parts(table)) <= 1, table
        pd.testing.assert_frame_equal(Dataset(c.dataset).read(table), Dataset(tmp_path / "batched").read(table))
    assert pq.ParquetFile(Dataset(tmp_path / "batched").parts("steps")[0]).num_row_groups > 3


def test_collation_that_fails_after_batches_were_written_leaves_the_dataset_as_it_was(small_raw, tmp_path,
                                                                                      monkeypatch):
    """A failure in the LDMS pass, after batches of runs went to the round's files: the dataset
    keeps what it had, no file of the round is left, and collating again adds the round."""
    import hpcvar.collate as collate_mod

    runs = sorted((small_raw / "runs").iterdir())
    moved = tmp_path / "later"
    moved.mkdir()
    for run in runs[len(runs) // 2:]:
        run.rename(moved / run.name)
    ds = Dataset(tmp_path / "dataset")
    first = collate(small_raw, ds.path, Pseudonymiser(SALT))
    before = {p: p.read_bytes() for p in ds.path.rglob("*") if p.is_file()}
    for run in moved.iterdir():
        run.rename(small_raw / "runs" / run.name)
    monkeypatch.setattr(collate_mod, "BATCH_RUNS", 2)
    real = collate_mod.system_counters

    def failing(*args, **kwargs):
        raise OSError("Input/output error")

    monkeypatch.setattr(collate_mod, "system_counters", failing)
    with pytest.raises(OSError, match="Input/output"):
        collate(small_raw, ds.path, Pseudonymiser(SALT))
    assert {p: p.read_bytes() for p in ds.path.rglob("*") if p.is_file()} == before
    monkeypatch.setattr(collate_mod, "system_counters", real)
    second = collate(small_raw, ds.path, Pseudonymiser(SALT))
    assert len(second.new_runs) > 2 * 2 and set(second.skipped) == set(first.new_runs)
    assert ds.run_ids() == set(first.new_runs) | set(second.new_runs)


def test_changed_file_fails_its_checksum(small_raw, tmp_path):
    run = sorted((small_raw / "runs").iterdir())[0]
    with open(run / "counters.csv", "a") as fh:
        fh.write("# edited after the run\n")
    result = collate(small_raw, tmp_path / "dataset", Pseudonymiser(SALT))
    assert [q["file"] for q in result.quarantined] == [str(run / "counters.csv")]
    assert "checksum" in result.quarantined[0]["error"]


def test_run_without_manifest_is_incomplete_until_it_has_one(small_raw, tmp_path):
    run = sorted((small_raw / "runs").iterdir())[0]
    manifest = (run / "manifest.json").read_text()
    (run / "manifest.json").unlink()
    ds_dir = tmp_path / "dataset"
    first = collate(small_raw, ds_dir, Pseudonymiser(SALT))
    assert first.incomplete == [run.name] and run.name not in Dataset(ds_dir).run_ids()
    (run / "manifest.json").write_text(manifest)
    second = collate(small_raw, ds_dir, Pseudonymiser(SALT))
    assert second.new_runs == [run.name] or run.name in [f["run_id"] for f in second.failed]


def test_malformed_ldms_file_is_set_aside_and_the_rest_aggregates(small_raw, tmp_path):
    files = sorted((small_raw / "ldms" / "aries_rtr_mmr").iterdir())
    bad = files[0]
    lines = bad.read_text().splitlines(keepends=True)
    lines.insert(5, "1543622400.000000,0,nid00001,notanumber\n")
    bad.write_text("".join(lines))
    ds_dir = tmp_path / "dataset"
    result = collate(small_raw, ds_dir, Pseudonymiser(SALT))
    (entry,) = [q for q in result.quarantined if q["kind"] == "ldms"]
    assert entry["file"] == str(bad) and entry["line"] == 6
    sysc = Dataset(ds_dir).read("system_counters")
    assert len(sysc) > 0  # the other days still aggregate
    runs = Dataset(ds_dir).read("runs")
    day_of_bad = pd.Timestamp(int(bad.name.rsplit(".", 1)[1]), unit="s", tz="UTC").normalize()
    later = runs[(runs["start"] >= day_of_bad + pd.Timedelta(days=1)) & (runs["num_steps"] > 0)]["run_id"]
    assert set(later) <= set(sysc["run_id"])


def test_per_run_ldms_slices_give_the_same_system_counters_as_the_store(small_raw, tmp_path):
    """What import-reframe --ldms keeps beside each run (its window of the store, 60 s either
    side) collates to the same system_counters as the whole store does."""
    shared = collate(small_raw, tmp_path / "shared", Pseudonymiser(SALT))
    raw = tmp_path / "sliced"
    shutil.copytree(small_raw, raw)
    store = raw / "ldms" / "aries_rtr_mmr"
    files = sorted(store.iterdir())
    sliced = 0
    for run in sorted((raw / "runs").iterdir()):
        meta = json.loads((run / "manifest.json").read_text())
        for name in ldms.slice_window(files, meta["start"] - 60, meta["end"] + 60, run / "ldms"):
            meta["files"][f"ldms/{name.name}"] = hashlib.sha256(name.read_bytes()).hexdigest()
            sliced += 1
        (run / "manifest.json").write_text(json.dumps(meta))
    shutil.rmtree(raw / "ldms")  # the store is gone (rotated, pruned): the runs keep their windows
    system = yaml.safe_load((raw / "system.yaml").read_text())
    del system["ldms"]
    (raw / "system.yaml").write_text(yaml.safe_dump(system))
    own = collate(raw, tmp_path / "own", Pseudonymiser(SALT))
    assert sliced > 10 and not own.quarantined
    assert sorted(own.new_runs) == sorted(shared.new_runs)
    key = ["run_id", "step", "scope", "counter"]
    a = Dataset(tmp_path / "shared").read("system_counters").sort_values(key, ignore_index=True)
    b = Dataset(tmp_path / "own").read("system_counters").sort_values(key, ignore_index=True)
    assert len(a) > 1000
    pd.testing.assert_frame_equal(a, b, rtol=1e-9)
    # Runs without steps (microbenchmarks) get their whole job's counters in run_counters, the
    # same either way (the simulator monitors only around application runs, so few have any).
    rc_a, rc_b = (Dataset(tmp_path / d).read("run_counters") for d in ("shared", "own"))
    runs = Dataset(tmp_path / "own").read("runs")
    assert set(rc_a["run_id"]) <= set(runs.loc[runs["num_steps"] == 0, "run_id"])
    pd.testing.assert_frame_equal(rc_a.sort_values(["run_id", "scope", "counter"], ignore_index=True),
                                  rc_b.sort_values(["run_id", "scope", "counter"], ignore_index=True), rtol=1e-9)


def test_missing_system_yaml_is_a_clear_error(tmp_path):
    (tmp_path / "raw").mkdir()
    from hpcvar.parsers.errors import ParseError

    with pytest.raises(ParseError, match="system.yaml"):
        collate(tmp_path / "raw", tmp_path / "ds", Pseudonymiser(SALT))


def test_ldms_windows_use_the_simulated_interval(demo):
    raw, _, _, _ = demo
    first = sorted((raw / "ldms" / "aries_rtr_mmr").iterdir())[0]
    desc = ldms.describe(first)
    assert desc["figures"]["interval_median_s"] == pytest.approx(get_preset("demo").ldms_interval)


def test_ldms_changes_are_split_over_steps_by_overlap(tmp_path):
    """Hand-computed: constant counter rates, steps shorter and longer than the 10 s interval."""
    from hpcvar.collate import CollateResult, RunData, system_counters
    from hpcvar.system.topology import Topology

    topo = Topology(pd.DataFrame({"node": ["nid00000", "nid00001", "nid00002"],
                                  "router": ["r-io", "r-mine", "r-other"], "group": ["g0", "g0", "g1"],
                                  "role": ["io", "compute", "compute"]}))
    rates = {"nid00000": 100.0, "nid00001": 7.0, "nid00002": 30.0}  # flits per second
    t = np.arange(1000.0, 1101.0, 10.0)
    d = tmp_path / "ldms"
    d.mkdir()
    with ldms.StoreCsvWriter(d / "rtr.1000", ["AR_RTR_INQ_PRF_INCOMING_FLIT_TOTAL"]) as w:
        for producer, rate in rates.items():
            w.write_rows(t, producer, int(producer[3:]), 0, ((t - 1000) * rate).astype(np.int64)[:, None])
    edges = np.array([1012.0, 1013.5, 1015.0, 1031.0, 1067.0])  # steps of 1.5, 1.5, 16 and 36 s
    epoch = lambda v: pd.to_datetime(v, unit="s", utc=True)  # noqa: E731
    steps = pd.DataFrame({"run_id": "r1", "step": [1, 2, 3, 4], "start": epoch(edges[:-1]),
                          "end": epoch(edges[1:]), "duration_s": np.diff(edges)})
    run = RunData({"run_id": "r1"}, steps, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), {"r-mine"})
    out = system_counters(d, topo, [run], CollateResult()).set_index(["scope", "step"])
    dur = dict(zip([1, 2, 3, 4], np.diff(edges)))
    for step, seconds in dur.items():
        assert out.loc[("io", step), "value"] == pytest.approx(100.0 * seconds)
        assert out.loc[("sys", step), "value"] == pytest.approx(30.0 * seconds)  # r-mine excluded
        assert out.loc[("sys", step), "num_routers"] == 1
    assert set(out["counter"]) == {"RT_FLIT_TOT"}


def test_ldms_means_count_each_router_that_reported_in_the_step(tmp_path):
    """Hand-computed: 20 routers outside the job, one of which stops sampling before step 2; the
    mean is over the routers that reported in the step, counted once however many samples each had."""
    from hpcvar.collate import CollateResult, RunData, system_counters
    from hpcvar.system.topology import Topology

    others = [f"nid{i:05d}" for i in range(2, 22)]
    topo = Topology(pd.DataFrame({"node": ["nid00000", "nid00001", *others],
                                  "router": ["r-io", "r-mine", *(f"r-o{i:02d}" for i in range(20))],
                                  "group": "g0", "role": ["io", "compute"] + ["compute"] * 20}))
    rates = {node: 10.0 * (i + 1) for i, node in enumerate(others)}
    t = np.arange(1000.0, 1101.0, 10.0)
    d = tmp_path / "ldms"
    d.mkdir()
    with ldms.StoreCsvWriter(d / "rtr.1000", ["AR_RTR_INQ_PRF_INCOMING_FLIT_TOTAL"]) as w:
        for node in ["nid00000", "nid00001", *others]:
            times = t[t <= 1040] if node == "nid00015" else t  # router r-o13 stops after 1040 s
            w.write_rows(times, node, int(node[3:]), 0, ((times - 1000) * rates.get(node, 1.0)).astype(np.int64)[:, None])
    epoch = lambda v: pd.to_datetime(v, unit="s", utc=True)  # noqa: E731
    steps = pd.DataFrame({"run_id": "r1", "step": [1, 2], "start": epoch([1012.0, 1050.0]),
                          "end": epoch([1030.0, 1080.0]), "duration_s": [18.0, 30.0]})
    run = RunData({"run_id": "r1"}, steps, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), {"r-mine"})
    out = system_counters(d, topo, [run], CollateResult()).set_index(["scope", "step"])
    assert out.loc[("sys", 1), "num_routers"] == 20 and out.loc[("sys", 2), "num_routers"] == 19
    assert out.loc[("sys", 1), "value"] == pytest.approx(np.mean(list(rates.values())) * 18.0)
    still = [r for node, r in rates.items() if node != "nid00015"]
    assert out.loc[("sys", 2), "value"] == pytest.approx(np.mean(still) * 30.0)
    assert out.loc[("io", 1), "num_routers"] == 1 and out.loc[("io", 2), "num_routers"] == 1


def test_sacct_without_needed_fields_is_quarantined_with_the_fields(small_raw, tmp_path):
    from hpcvar.parsers import sacct

    run = sorted((small_raw / "runs").iterdir())[0]
    jobs = sacct.read(run / "sacct.txt")
    sacct.write(run / "sacct.txt", jobs, fields=["JobID", "JobName", "Start", "End", "State", "NNodes"])
    write_manifest(run, {k: v for k, v in json.loads((run / "manifest.json").read_text()).items() if k != "files"})
    result = collate(small_raw, tmp_path / "dataset", Pseudonymiser(SALT))
    (entry,) = result.quarantined
    assert entry["file"] == str(run / "sacct.txt") and "['User', 'Submit', 'NodeList']" in entry["error"]


def test_provenance_missing_from_the_manifest_comes_from_the_perflog(small_raw, tmp_path):
    run = sorted((small_raw / "runs").iterdir())[0]
    meta = json.loads((run / "manifest.json").read_text())
    write_manifest(run, {k: v for k, v in meta.items() if k not in ("files", "software")})
    collate(small_raw, tmp_path / "dataset", Pseudonymiser(SALT))
    runs = Dataset(tmp_path / "dataset").read("runs").set_index("run_id")
    # The application's version from the perflog's `software` field, not ReFrame's own `version`.
    assert runs.loc[run.name, "software"] == meta["software"] != "4.10.4"


def test_a_run_shorter_than_a_second_still_has_neighbours():
    """sacct records whole seconds: a run that started and ended in the same second has every job
    running in that second as neighbour, but not jobs that ended before or started after it."""
    from hpcvar.collate import neighbourhood
    from hpcvar.system.topology import Topology

    t = pd.Timestamp("2026-11-22T14:50:02", tz="UTC")
    topo = Topology(pd.DataFrame({"node": ["n1", "n2"], "router": ["r1", "r2"], "group": ["g1", "g1"]}))
    jobs = pd.DataFrame({
        "job_id": ["265", "266", "100", "300"], "step": [None] * 4, "user": ["other", "me", "early", "late"],
        "start": [t, t, t - pd.Timedelta(60, "s"), t + pd.Timedelta(1, "s")],
        "end": [pd.NaT, t, t - pd.Timedelta(1, "s"), t + pd.Timedelta(9, "s")],
        "node_list": [["n2"], ["n1"], ["n2"], ["n2"]], "node_count": [1, 1, 1, 1]})
    me = jobs.iloc[1]
    got = neighbourhood(jobs, me, topo, {"r1"}, {"g1"}, t + pd.Timedelta(10, "s"))
    assert got["job_id"].tolist() == ["265"] and got["overlap_s"].tolist() == [0.0]
    assert got["shared_groups"].tolist() == [1] and got["shared_routers"].tolist() == [0]
    # The other job's own times are kept (the forecaster's neighbour presence reads them);
    # it had no End yet when sacct was asked.
    assert got["start"].tolist() == [t] and pd.isna(got["end"].iloc[0])


@pytest.mark.parametrize("how", ["killed job", "passed run"])
def test_truncated_application_output_keeps_its_completed_steps(small_raw, tmp_path, how):
    """A run whose application output ends mid-step: a failed run (the job was killed; ReFrame
    failed its sanity) records why and the steps completed before the cut; a run that claims to
    have passed is quarantined with the same. Nothing else is lost."""
    run = next(r for r in sorted((small_raw / "runs").iterdir())
               if json.loads((r / "manifest.json").read_text())["app"] == "milc")
    stdout = run / "stdout.txt"
    full = apps.read(stdout).steps
    lines = stdout.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if line.split(" ", 1)[1].startswith("PLAQ:")
               and float(line.split(" ", 1)[0]) >= full["end"].iloc[2]) + 5  # inside trajectory 4
    stdout.write_text("".join(lines[:cut]))
    meta = {k: v for k, v in json.loads((run / "manifest.json").read_text()).items() if k != "files"}
    if how == "killed job":
        meta.update(result="fail", fail_phase="sanity")
    write_manifest(run, meta)
    ds_dir = tmp_path / "dataset"
    result = collate(small_raw, ds_dir, Pseudonymiser(SALT))
    records = result.failed if how == "killed job" else result.quarantined
    (entry,) = [r for r in records if r["run_id"] == run.name]
    message = entry["output"] if how == "killed job" else entry["error"]
    assert message.startswith("truncated: the trajectory loop started at line")
    assert (entry["output_line"] if how == "killed job" else entry["line"]) == cut
    kept = pd.DataFrame(entry["completed_steps"])
    assert list(kept["step"]) == [1, 2, 3]
    assert list(kept["duration_s"]) == pytest.approx(list(full["duration_s"].iloc[:3]))
    assert run.name not in Dataset(ds_dir).run_ids() and len(result.new_runs) > 0
    assert entry in Dataset(ds_dir).quarantine()
