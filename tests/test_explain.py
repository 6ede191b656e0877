"""`hpcvar explain`: one run's slowdown split into causes, each with its evidence, checked against
the causes the simulator planted per run (``truth_runs.parquet``) on the paper preset's campaigns
(their neighbourhood and deviation analyses are the session's ``paper`` fixture)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import SALT
from hpcvar.analyses import explain, neighbourhood
from hpcvar.data.dataset import Dataset
from hpcvar.settings import ExplainSettings, SettingsError
from hpcvar.simulate.truth import TRUTH_RUNS, score_explanations
from hpcvar.util.anonymise import Pseudonymiser


def hpcvar(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcvar", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def explained(paper):
    c, _, _, out = paper
    result = explain.run(c.dataset, out / "explain", analyses_dir=out)
    tables = {name: pd.read_csv(out / "explain" / d.runs_table(name), dtype={"top_user": str})
              for name, d in result.datasets.items()}
    return c, out, result, tables


def test_the_top_cause_is_the_planted_one_for_most_slow_runs(explained):
    """The issue's bar: among runs at least 20% slower than their dataset's median, the top cause
    is the dominant planted one (category, and for neighbours the user) in at least 80% of them."""
    c, _, _, tables = explained
    truth = pd.read_parquet(c.raw / TRUTH_RUNS)
    table, confusion = score_explanations(truth, tables, Pseudonymiser(SALT))
    print(table.to_string(), confusion.to_string(), sep="\n")
    slow = table[table["slow_runs"] > 0]
    assert slow["slow_runs"].sum() >= 30, table  # enough slow runs for the share to mean something
    assert slow["hits"].sum() / slow["slow_runs"].sum() >= 0.8, table
    # The runs the neighbours dominate are most of the slow ones; each is a hit only with the
    # right user, so the share above is not reached by naming "neighbours" throughout.
    assert confusion.loc["neighbours"].get("neighbours", 0) >= 0.8 * confusion.loc["neighbours"].sum(), confusion


def test_a_run_explained_adds_up_and_names_its_evidence(explained):
    c, out, result, tables = explained
    name = "milc-128"
    runs = tables[name]
    worst = runs.sort_values("total_s").iloc[-1]
    ctx = explain.Context(c.dataset, out)
    e = explain.explain_run(ctx, worst["run_id"])
    assert e.run_id == worst["run_id"] and e.total_s == pytest.approx(worst["total_s"])
    assert e.slowdown == pytest.approx(e.total_s / e.typical_s) and e.slowdown > 1.2
    # The seconds add up: the causes and the unexplained remainder make the excess (or the causes
    # alone, when the model gives them more than the excess; their shares then sum to one).
    assert e.explained_s == pytest.approx(sum(k.seconds for k in e.causes))
    assert e.explained_s + e.unexplained_s == pytest.approx(max(e.excess_s, e.explained_s), rel=1e-6)
    assert sum(k.share for k in e.causes) <= 1 + 1e-9
    assert e.basis == "per-step model" and e.steps == len(e.step_times) > 0
    assert e.slow_steps and 0.8 <= e.slow_steps_share <= 1.0
    top = e.causes[0]
    assert top.category == e.top_category and top.share >= 0.25
    if top.category == "neighbours":
        # The neighbour's evidence: its jobs alongside and the dataset's statistics of that user.
        ev = next(u for u in top.users if u.user == top.user)
        assert ev.implicated and ev.nodes_p < 0.05 and ev.mean_time_with_s > ev.mean_time_without_s
        assert top.user.startswith("user-") and top.counters  # the network counters that carried it
    # The report's one-liners come from the same explanation.
    d = result.datasets[name]
    assert [r.run_id for r in d.slowest][:1] == [worst["run_id"]]
    assert (out / "explain" / d.step_figure(name, worst["run_id"])).read_text().lstrip().startswith("<?xml")


def test_no_cause_is_given_more_seconds_than_the_runs_steps_lost(explained):
    """The attribution model predicts each step out of fold, and on a few dozen runs it can
    predict far beyond what a step took (before the split was brought within each step's excess,
    17 of amg-512's 47 runs in benchmarks/bench_explain.py's campaign had a cause larger than all
    the time their steps lost over typical, and a step faster than typical still gave seconds).
    Every cause of every run of the dataset: at most the time the run's steps took beyond their
    typical (out-of-fold) times."""
    c, out, _, _ = explained
    ctx = explain.Context(c.dataset, out)
    name = "amg-512"
    attribution = ctx.attribution(name)
    checked = 0
    for rid in ctx.dataset_runs(name).index:
        e = explain.explain_run(ctx, rid, with_steps=False)
        if e.basis != "per-step model":
            continue
        steps = attribution.loc[[rid]]
        lost = float((steps["duration_s"] - steps["typical_s"]).clip(lower=0).sum())
        assert all(k.seconds <= lost * (1 + 1e-9) for k in e.causes), (rid, lost, [(k.category, k.seconds)
                                                                                 for k in e.causes])
        checked += 1
    assert checked >= 20, checked


def test_command_line_text_and_json(explained):
    c, out, _, tables = explained
    rid = tables["amg-128"].sort_values("total_s").iloc[-1]["run_id"]
    text = hpcvar("explain", str(c.dataset), rid, "--analyses", str(out))
    assert text.returncode == 0, text.stderr
    assert rid in text.stdout and "its dataset's typical run" in text.stdout and "Verdict: " in text.stdout
    js = hpcvar("explain", str(c.dataset), rid, "--analyses", str(out), "--json")
    doc = json.loads(js.stdout)
    assert doc["run_id"] == rid and doc["causes"][0]["category"] == doc["top_category"]
    assert not any(u["user"].startswith("sim") for u in doc["alongside"])  # pseudonyms only


def test_an_unknown_run_is_refused_with_the_nearest_ids(explained):
    c, out, _, tables = explained
    ids = sorted(tables["amg-128"]["run_id"])
    prefix, number = ids[0].rsplit("-", 1)
    wrong = f"{prefix}-{int(number) + 100000}"
    proc = hpcvar("explain", str(c.dataset), wrong, "--analyses", str(out))
    assert proc.returncode == 2
    assert f"no run {wrong!r}" in proc.stderr and "close: " in proc.stderr
    close = proc.stderr.split("close: ")[1].strip().split(", ")
    assert close and all(i.startswith(prefix + "-") for i in close), proc.stderr


def test_without_analyses_it_says_which_to_run(explained, tmp_path):
    c, _, _, tables = explained
    rid = tables["amg-128"]["run_id"].iloc[0]
    proc = hpcvar("explain", str(c.dataset), rid, "--analyses", str(tmp_path / "none"))
    assert proc.returncode == 2
    assert "no analyses to build on" in proc.stderr
    assert "hpcvar neighbourhood" in proc.stderr and "hpcvar deviation" in proc.stderr


def test_a_job_overlaps_the_steps_it_ran_beside_and_one_still_running_every_step_after_its_start():
    """explain's per-step overlap of the neighbours' jobs (``_during``, all jobs of a run at once),
    on hand-made times: a job overlaps a step when it started before the step ended and ended after
    it started (touching counts); one with no end (still running when sacct was asked) overlaps
    every step from its start on; one with no start, none. The jobs' times in microseconds and the
    steps' in nanoseconds, as the dataset and the steps placed from the run's start come."""
    def t(s):
        return pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(s, "s")
    steps = pd.DataFrame({"step": [1, 2, 3], "t0": [t(0), t(10), t(20)], "t1": [t(10), t(20), t(30)]})
    steps[["t0", "t1"]] = steps[["t0", "t1"]].astype("datetime64[ns, UTC]")
    jobs = pd.DataFrame({"start": [t(12), t(-50), t(15), pd.NaT, t(-9), t(25)],
                         "end": [t(14), t(0), pd.NaT, t(40), t(-1), t(99)]}).astype("datetime64[us, UTC]")
    assert explain._during(jobs, steps).tolist() == [
        [False, True, False],   # inside step 2
        [True, False, False],   # ended as step 1 began
        [False, True, True],    # no end: from its start on
        [False, False, False],  # no start
        [False, False, False],  # before the run
        [False, False, True]]   # from step 3 past the run's end


def test_runs_without_steps_are_explained_from_the_dataset_statistics(explained):
    c, out, _, _ = explained
    ctx = explain.Context(c.dataset, out)
    steps = ctx.data["steps"]
    stepless = ctx.runs[~ctx.runs["run_id"].isin(steps["run_id"])]
    assert len(stepless), "the paper preset has microbenchmark runs without time steps"
    slowest = stepless.sort_values("total_time_s").iloc[-1]
    e = explain.explain_run(ctx, slowest["run_id"])
    assert e.steps == 0 and e.step_times == [] and e.basis in ("dataset statistics", "none")
    assert any("no per-step times" in m for m in e.missing)
    assert sum(k.seconds for k in e.causes) <= max(e.excess_s, 0) + 1e-9


def test_a_user_implicated_only_elsewhere_is_named_only_where_they_shared_a_global_link(explained):
    """The cross-dataset suspects: implicated (Pearson r > 0, p < alpha, on the log of run time) in
    another dataset of the
    system and not in the run's own; named as a cause of a run only when their jobs shared two of
    its groups. Every neighbour cause of every dataset's slowest runs obeys it."""
    c, out, result, _ = explained
    ctx = explain.Context(c.dataset, out)
    alpha = ctx.settings.alpha
    checked = named_elsewhere = 0
    for name in result.datasets:
        here = ctx.implicated(name)
        elsewhere = ctx.implicated_elsewhere(name)
        for user, others in elsewhere.items():
            assert user not in here and others and name not in others
            for other in others:
                row = ctx.ranking(other).loc[user]
                assert row["log_r"] > 0 and row["log_p"] < alpha, (other, user)
        runs = ctx.dataset_runs(name).sort_values("total_time_s").index[-5:]
        for rid in runs:
            e = explain.explain_run(ctx, rid, with_steps=False)
            for cause in e.causes:
                if cause.category != "neighbours":
                    continue
                checked += 1
                evidence = next(u for u in cause.users if u.user == cause.user)
                assert evidence.implicated == (cause.user in here)
                if not evidence.implicated:
                    named_elsewhere += 1
                    assert evidence.implicated_elsewhere == elsewhere[cause.user]
                    assert evidence.shared_groups >= explain.LINK_GROUPS, (rid, evidence)
    # Both kinds occur (seeds 0 and 1: 63 and 81 causes, 12 and 11 of them implicated elsewhere).
    print(checked, named_elsewhere)
    assert checked >= 10 and named_elsewhere >= 1, (checked, named_elsewhere)


def test_the_neighbours_share_split_by_user_names_the_planted_culprits(explained):
    """What the report's first screen draws per dataset: the neighbours' share of the slow runs'
    excess split by user, largest first, adding up to the neighbours' share; the largest is one of
    the users the simulator planted as that dataset's culprits."""
    c, _, result, _ = explained
    truth = json.loads((c.raw / "truth.json").read_text())["datasets"]
    pseudo = Pseudonymiser(SALT)
    checked = 0
    for name, d in result.datasets.items():
        shares = {s.category: s.share for s in d.categories}
        split = d.neighbours_by_user
        assert sum(u.share for u in split) == pytest.approx(shares.get("neighbours", 0.0), abs=1e-9), name
        named = [u for u in split if u.user is not None]
        assert len(named) <= 5 and [u.share for u in named] == sorted((u.share for u in named), reverse=True)
        assert all(u.user is not None for u in split[:-1]), name  # the rest, if any, comes last
        if shares.get("neighbours", 0) >= 0.5 and name in truth:
            culprits = {pseudo.ensure(u) for u in truth[name]["culprits"]}
            assert named[0].user in culprits, (name, named[0], culprits)
            checked += 1
    assert checked >= 3


def test_a_dataset_explained_alone_is_explained_as_among_all(explained, tmp_path):
    """The fixture's explain spread the datasets over processes (workers: one per usable core);
    one dataset explained alone, in one process, gives the same findings and the same runs table."""
    c, out, result, tables = explained
    name = "milc-128"
    alone = explain.run(c.dataset, tmp_path, {"workers": 1}, analyses_dir=out, only=name)
    assert alone.datasets[name] == result.datasets[name]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / alone.datasets[name].runs_table(name), dtype={"top_user": str}),
                                  tables[name])


def test_with_reach_groups_a_neighbour_is_named_only_in_the_groups_its_jobs_shared(explained):
    """``reach``: on the study's machines (adaptive routing) a large job slows runs anywhere, so the
    default names neighbours that shared none of a run's groups (the paper preset has them); with
    ``reach: groups`` (minimal routing, as on the testbed) every neighbour named shared a group with
    the run, and the rest of the explanation holds: the seconds still add up."""
    c, out, result, _ = explained
    counted = {}
    for reach in ("system", "groups"):
        ctx = explain.Context(c.dataset, out, {"reach": reach})
        shared = []
        for name in result.datasets:
            for rid in ctx.dataset_runs(name).sort_values("total_time_s").index[-5:]:
                e = explain.explain_run(ctx, rid, with_steps=False)
                assert sum(k.seconds for k in e.causes) == pytest.approx(e.explained_s)
                shared += [next(u for u in k.users if u.user == k.user).shared_groups
                           for k in e.causes if k.category == "neighbours"]
        counted[reach] = shared
    assert any(g == 0 for g in counted["system"]), counted["system"]
    assert counted["groups"] and all(g >= 1 for g in counted["groups"]), counted["groups"]
    with pytest.raises(SettingsError, match="reach"):
        ExplainSettings.from_mapping({"reach": "anywhere"})


def test_with_reach_groups_a_job_in_other_groups_is_given_none_of_a_runs_time(tmp_path):
    """Hand-made: 24 runs inside one group; a user beside every third, 2x slower (implicated),
    whose jobs shared the run's group in half of those runs and none of its groups in the other
    half. The effect is the dataset's either way; with ``reach: groups`` the runs its jobs could
    not reach (minimal routing) are not put on it, the others are."""
    t0 = pd.Timestamp("2026-11-01", tz="UTC")
    runs, neigh = [], []
    for i in range(24):
        there = i % 3 == 0
        start = t0 + pd.Timedelta(minutes=10 * i)
        total = round(10.0 * (2.0 if there else 1.0) * (1 + 0.03 * np.sin(i)), 3)
        runs.append({"run_id": f"sys-{i}", "system": "sys", "app": "proxy", "dataset": "proxy-2", "num_nodes": 2,
                     "job_id": str(i), "user": "me", "start": start, "end": start + pd.Timedelta(total, "s"),
                     "total_time_s": total, "num_steps": 0, "state": "COMPLETED", "num_groups": 1})
        if there:
            shared = 1 if i % 2 == 0 else 0
            neigh.append({"run_id": f"sys-{i}", "job_id": f"bob-{i}", "user": "bob", "num_nodes": 2,
                          "overlap_s": total, "shared_groups": shared, "shared_routers": shared,
                          "start": start - pd.Timedelta(5, "s"), "end": start + pd.Timedelta(round(total) + 5, "s")})
    ds = tmp_path / "dataset"
    Dataset(ds).append({"runs": pd.DataFrame(runs), "neighbourhood": pd.DataFrame(neigh)})
    neighbourhood.run(ds, tmp_path / "analyses" / "neighbourhood", {"threshold_nodes": 1, "min_runs": 2})
    named = {}
    for reach in ("system", "groups"):
        ctx = explain.Context(ds, tmp_path / "analyses", {"reach": reach})
        assert set(ctx.implicated("proxy-2")) == {"bob"}
        named[reach] = {rid: explain.explain_run(ctx, rid, with_steps=False).causes for rid in ("sys-0", "sys-3")}
    # sys-0: bob's job shared its group; sys-3: it did not.
    assert [(k.category, k.user) for k in named["system"]["sys-0"]] == [("neighbours", "bob")]
    assert [(k.category, k.user) for k in named["system"]["sys-3"]] == [("neighbours", "bob")]
    assert named["groups"]["sys-0"] == named["system"]["sys-0"]
    assert named["groups"]["sys-3"] == []
