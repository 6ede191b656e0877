"""A campaign with a known cause, for real (config/campaign-testbed.yaml, shortened): rounds of the
AMG proxy and the collectives microbenchmark on the multi-node cluster, placed by Slurm, with other
users' jobs planted around them: a culprit whose traffic crosses the global link in some rounds,
decoys as often and as large whose traffic stays inside one group, a user who only loads the CPUs,
and a drop of the global links' rate from a given round on. Run end to end as a facility would
(`snakemake --profile profiles/local-slurm --configfile ...`), the analyses must find what was
planted, and nothing that was not: the checks read the campaign's truth file, the analyses never do.

The thresholds are what a real effect passes and a broken analysis fails: the culprit first (not
merely present), the global-link counters among the few most relevant, the placement effect and
the regression in the direction planted, and no verdict where nothing was planted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, machine, snakemake, testbed  # noqa: F401  (the multi-node cluster fixture)
from hpcvar.campaign import truth as campaign_truth
from hpcvar.data.dataset import Dataset
from hpcvar.util.anonymise import Pseudonymiser, load_salt
from test_campaign import PROFILE

pytestmark = [pytest.mark.slow, pytest.mark.whole_machine]
#: Sixteen rounds, the global links' rate dropped from round 9: eight runs of each dataset a side.
#: Compare's test for samples grouped by run exchanges whole runs, and at six runs a side (twelve
#: rounds) it reached significance after Holm only if every run after the drop was slower than
#: every run before it. The placement alone moves a quiet allreduce by up to 1.8x (two nodes in
#: each group against three and one), so a quiet run after the drop (39 ms) fell within the 25-44 ms
#: of a run beside the culprit before it (2026-11-30), and one CI run of two called the drop
#: "unchanged". Explain takes the culprit from the neighbourhood's correlation (p < 0.05), which
#: twelve runs gave at p = 0.027 (0.055 with a drop to 10 Mbit/s: no culprit named at all). The
#: culprit at 20 Mbit/s each way (50 left 30 Mbit/s) and the drop to 15 Mbit/s (3.3x on a quiet
#: link). (With the full campaign's 30 Mbit/s culprit and a drop to 20, both leave 20 Mbit/s: the
#: windows overlapped; the full campaign's 40 rounds keep the 30 Mbit/s culprit and drop to 15:
#: docs/tutorials/known-cause.md.) The balanced design puts the culprit in four rounds a side.
ROUNDS, UPGRADE, DROPPED, CULPRIT_RATE = 16, 9, "15mbit", "20M"
#: The background's seed. The balanced design keeps the jobs' presences uncorrelated with each other
#: and with the upgrade, not with the rounds of the culprit after it, the slowest by far: at 16
#: rounds the configuration's seed 7 put the CPU hog in three of those four (r = 0.54 with them),
#: and the hog's Pearson r with the 4-node proxy's run time came within 0.005 of the culprit's
#: (log-time p 0.053 against explain's 0.05) in a campaign here. Seed 5 puts it in one of the four
#: (r = 0.08; the decoys 0.08 too); seed 7's 40 rounds have r = 0.08.
SEED = 5
WINDOW = UPGRADE - 1
#: Datasets whose runs always span both groups (4 of the 6 nodes): the culprit's traffic on the
#: global link reaches them whenever it runs.
CROSSING = ("amgproxy-4", "collectives-4")
#: ... and the one of them with time steps, which the deviation model explains.
STEPPED = "amgproxy-4"


@pytest.fixture(scope="module")
def campaign(testbed):  # noqa: F811
    """The campaign in a workflow directory every node sees (not /tmp)."""
    wd = Path("/var/tmp") / f"hpcvar-campaign-{uuid.uuid4().hex[:8]}"
    wd.mkdir()
    for item in ("Snakefile", "workflow", "config", "profiles"):
        subprocess.run(["cp", "-r", str(REPO / item), str(wd / item)], check=True)
    (wd / "reframe_tests").symlink_to(REPO / "reframe_tests")
    config = yaml.safe_load((REPO / "config" / "campaign-testbed.yaml").read_text())
    config["results"] = "results"
    c = config["campaign"]
    c["rounds"] = ROUNDS
    # Short: the proxy at 2 and 4 nodes, the collectives at 4, few iterations, one task per node.
    c["environment"] = {**c["environment"], "HPCVAR_BUILD_CACHE": str(wd / "build-cache")}
    c["background"]["upgrade"] = {"round": UPGRADE, "global_rate": DROPPED}
    c["background"]["seed"] = SEED
    c["background"]["jobs"] = [{**j, "bitrate": CULPRIT_RATE} if j["kind"] == "global-traffic" else j
                               for j in c["background"]["jobs"]]
    config["compare"] = {"before": f"round:001..{UPGRADE - 1:03d}", "after": f"round:{UPGRADE:03d}..{ROUNDS:03d}"}
    (wd / "campaign.yaml").write_text(yaml.safe_dump(config))
    # The rounds alone on the machine: another test's CPU load would slow the runs as an unplanned
    # CPU hog (in the full suite it cost explain two of nine culprit runs, named "load" and
    # "network"). Each round's import (about a second) runs before the next round, so up to the
    # last round's import the campaign holds the machine alone; collation, the analyses and the
    # report compute on what the rounds measured and share the machine like any test.
    with machine(exclusive=True):
        out = snakemake(f"results/rounds/{ROUNDS:03d}/imported.json", "--profile", PROFILE, "--configfile",
                        "campaign.yaml", cwd=wd, env=testbed["env"], timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    out = snakemake("--profile", PROFILE, "--configfile", "campaign.yaml", cwd=wd, env=testbed["env"], timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    res = wd / "results"
    truth = campaign_truth.load(res)
    pseudo = Pseudonymiser(load_salt(wd / ".hpcvar-salt"))
    roles = {pseudo(user): role for user, role in truth["users"].items()}
    yield {"results": res, "truth": truth, "roles": roles, "dataset": Dataset(res / "dataset"), "pseudonym": pseudo,
           "culprit": next(p for p, r in roles.items() if r == "culprit"), "workdir": wd}
    if os.environ.get("HPCVAR_KEEP_CAMPAIGN"):
        print(f"campaign kept (HPCVAR_KEEP_CAMPAIGN): {wd}")
    else:
        shutil.rmtree(wd, ignore_errors=True)


def summary(campaign, analysis: str) -> dict:
    return json.loads((campaign["results"] / "analyses" / analysis / "summary.json").read_text())


def test_what_was_planted_is_in_the_truth_file_round_by_round(campaign):
    truth = campaign["truth"]
    rounds = truth["rounds"]
    assert [r["round"] for r in rounds] == [f"{i:03d}" for i in range(1, ROUNDS + 1)]
    present = [any(j["user"] == "hpcvar-alice" for j in r["jobs"]) for r in rounds]
    assert any(present) and not all(present)  # the culprit comes and goes
    for r in rounds:
        assert r["global_rate"] == (DROPPED if r["index"] >= UPGRADE else "50mbit")
        for job in r["jobs"]:
            groups = {int(n[1:]) > 3 for n in job["nodes"]}  # n01-n03: group 0, n04-n06: group 1
            assert len(groups) == (2 if job["kind"] == "global-traffic" else 1 if job["kind"] == "group-traffic"
                                   else len(groups))
    runs = campaign["dataset"].read("runs")
    assert set(runs["dataset"]) == {"amgproxy-2", "amgproxy-4", "collectives-4"}
    assert (runs.groupby("dataset").size() == ROUNDS).all()


@pytest.mark.parametrize("name", [
    STEPPED,
    pytest.param("collectives-4", marks=pytest.mark.xfail(
        reason="not at 16 rounds: the drop to 15 Mbit/s in half the rounds slows every allreduce after it 2-3x, "
               "which decides whether a run is 'optimal' for the MI ranking more than the culprit does: its "
               "mutual information tied the decoys' (0.014 at 12 rounds, 0 at 16) in three runs here, and its Pearson r led theirs by "
               "0.38 to 0.32 (the 40-round campaign, where the drop comes in the last quarter of the rounds, ranks it first in both)",
        strict=False)),
])
def test_neighbourhood_puts_the_culprit_first_in_both_rankings(campaign, name):
    """The culprit first among the users alongside, in the MI ranking (the study's) and the Pearson
    ranking (its sequel's), slowing runs, with the decoys as often and as large below it: the
    balanced design leaves their presence uncorrelated with the culprit's, so only its traffic
    tells them apart."""
    d = summary(campaign, "neighbourhood")["datasets"][name]
    roles = campaign["roles"]
    mi = [u["user"] for u in d["top_users"]]
    pearson = [u["user"] for u in d["top_users_by_nodes_r"]]
    assert mi[0] == campaign["culprit"], [(roles.get(u["user"]), u["mi"]) for u in d["top_users"]]
    assert pearson[0] == campaign["culprit"], [(roles.get(u["user"]), u["nodes_r"]) for u in d["top_users_by_nodes_r"]]
    assert d["top_users"][0]["direction"] == "slower"
    # Above every decoy, not merely ordered before a tie.
    assert d["top_users"][0]["mi"] > d["top_users"][1]["mi"], d["top_users"]


def test_deviation_finds_the_global_link_counters(campaign):
    """A global-link counter among the three most relevant to the cross-group proxy's step
    deviations, and the report saying which link in words. The emulated nodes share the
    machine's two CPUs, so the culprit's own processes raise the pressure counters too: with the
    balanced design, GL_TX_BYTES or GL_QUEUED_US came second after the CPU pressure in four runs
    here; with 5 folds (two or three runs held out each) the pressure counters once took the
    first three places (GL_OVERLIMITS fourth), the campaign's 10 folds put GL_QUEUED_US second on
    those runs. Explain's evidence for the culprit's slowed runs names the global link's counters
    too (below)."""
    relevance = summary(campaign, "deviation")["datasets"][STEPPED]["relevance"]
    top = [r["counter"] for r in relevance[:3]]
    assert any(c.startswith("GL_") for c in top), [(r["counter"], r["relevance"]) for r in relevance[:6]]
    assert "global links" in (campaign["results"] / "report.html").read_text()


def test_with_the_culprit_runs_spanning_two_groups_are_slowed_more(campaign):
    """Run time over its dataset's median, in the rounds with the culprit: the runs across the
    groups (the 4-node ones, and 2-node ones Slurm spread) are slowed more than those inside one."""
    runs = campaign_truth.runs_with_truth(campaign["dataset"].read("runs"), campaign["truth"])
    runs["rel"] = runs["total_time_s"] / runs.groupby("dataset")["total_time_s"].transform("median")
    app = runs[runs["culprit"] & (runs["num_steps"] > 0)]
    across, inside = app.loc[app["across"], "rel"], app.loc[~app["across"], "rel"]
    assert len(across) and len(inside)
    assert across.median() > 1.2 * inside.median(), (across.tolist(), inside.tolist())


def _explained(campaign) -> tuple[pd.DataFrame, dict]:
    res = campaign["results"]
    explained = pd.concat([pd.read_csv(p, dtype={"top_user": str})
                           for p in sorted((res / "analyses" / "explain").glob("*/runs.csv"))], ignore_index=True)
    return explained, campaign_truth.score_explanations(explained, campaign["dataset"].read("runs"),
                                                        campaign["truth"], campaign["pseudonym"])


def test_explain_names_the_culprit_for_the_runs_it_slowed(campaign):
    """`hpcvar explain` (the workflow's explain step): the culprit is the top cause of at least
    80% of the runs that shared a global link with its traffic and were slowed (20% or more over
    their dataset's median). The 2-node proxy's runs cross the groups only now and then, so its
    own statistics do not implicate the culprit: explain takes the other datasets' word for it
    where the culprit's job shared the run's global link."""
    explained, score = _explained(campaign)
    print(score)
    assert score["culprit"]["runs"] >= 5, score
    assert score["culprit"]["share"] >= 0.8, score
    # The counters that carried the culprit's time in those runs (the slowed ones the score counts):
    # the global link's among them (the node links' too, where its job shared the run's nodes). A
    # run it slowed by a few percent has hundredths of a second to split among the counters, too
    # little for them to say which link carried it. (The contributions are measured from a typical
    # step: from the average prediction, inflated by the runs 7-8x slower after the drop, a run the
    # culprit slowed 1.2x before it got none from the global link's counters in a CI run.)
    from hpcvar.analyses import explain

    ctx = explain.Context(campaign["results"] / "dataset", campaign["results"] / "analyses")
    stepped = explained[explained["run_id"].isin(ctx.dataset_runs(STEPPED).index)
                        & explained["run_id"].isin(score["culprit"]["run_ids"])
                        & (explained["top_user"] == campaign["culprit"])]
    assert len(stepped), score
    for rid in stepped["run_id"]:
        cause = explain.explain_run(ctx, rid, with_steps=False).causes[0]
        assert any(k.counter.startswith("GL_") for k in cause.counters), (rid, cause.counters)


def test_explain_never_blames_the_cpu_hog_or_the_network_for_its_rounds(campaign):
    """The CPU-only user is never named the top cause of any run (its one-node job has no
    traffic between nodes), and no slowed run inside one group of a round with it but without the
    culprit, before the rate drop (after it the slower links are a network cause), is put on the
    network. A 2-node run Slurm spread across the groups is left out of the second: its own traffic
    crosses the 50 Mbit/s global link instead of the 200 Mbit/s node links (2.8x its dataset's
    median in one such run, 2026-11-30), and explain put that on the network, the counters that
    carried it. Half a core of load seldom slows a run 20%: none inside one group did in the six
    campaigns here that day, and then the second check has nothing to judge (score["hog"]["runs"]
    says so). In a CI run one did (round 5, packed into the group without the decoy), and explain
    named the decoy, implicated in the 2-node proxy because Slurm spread every run it was beside:
    the configuration's `explain: reach: groups` (the testbed routes minimally) now counts a job
    only in the runs whose groups it shared."""
    explained, score = _explained(campaign)
    hog = next(p for p, r in campaign["roles"].items() if r == "decoy (CPU only)")
    assert hog not in set(explained["top_user"].dropna()), explained["top_user"].value_counts()
    assert score["hog"]["blamed_on_network"] == 0, score


def test_the_regression_check_finds_the_rate_drop(campaign):
    """The campaign's own compare, the rounds before the drop against those after it, calls the
    cross-group allreduce slower: the drop shows through the culprit's comings and goings. (That
    two windows before the drop compare as unchanged needs windows of six runs or more each:
    the 40-round campaign's benchmark, benchmarks/bench_testbed_campaign.py, checks it.)"""
    s = summary(campaign, "compare")
    pair = next(p for p in s["pairs"] if (p["test"], p["variable"]) == ("collectives-4", "allreduce_65536B_us"))
    # Every completed run of each side's rounds, as the truth file's windows place them (a round's
    # first job often starts within its first second, which sacct's whole seconds put before it).
    runs = campaign_truth.runs_with_truth(campaign["dataset"].read("runs"), campaign["truth"])
    done = runs[(runs["dataset"] == "collectives-4") & (runs["state"] == "COMPLETED")]
    assert done["round"].notna().all(), done[["run_id", "start", "round"]]
    after = done["round"].astype(int) >= UPGRADE
    assert (pair["n_before"], pair["n_after"]) == (20 * int((~after).sum()), 20 * int(after.sum())), pair
    assert min((~after).sum(), after.sum()) >= WINDOW - 1, done[["run_id", "round", "state"]]
    assert pair["verdict"] == "slower", pair
    assert pair["median_after"] > 1.5 * pair["median_before"], pair  # 50 -> 15 Mbit/s: 3.3x on a quiet link


def test_the_cpu_hog_is_not_blamed_for_the_network(campaign):
    roles = campaign["roles"]
    hog = next(p for p, r in roles.items() if r == "decoy (CPU only)")
    s = summary(campaign, "neighbourhood")
    for name in CROSSING:
        ranked = [u["user"] for u in s["datasets"][name]["top_users"]]
        assert ranked.index(campaign["culprit"]) < (ranked.index(hog) if hog in ranked else len(ranked))
    # The CPU pressure the node samplers recorded is there to say how much of the spread it explains.
    assert summary(campaign, "deviation")["datasets"][STEPPED].get("cpu_pressure_r2") is not None


def test_the_report_names_the_culprit_and_the_cpu_share(campaign):
    """(The link in words: with the global-link counters, above.)"""
    html = (campaign["results"] / "report.html").read_text()
    assert campaign["culprit"] in html
    assert "alone explains" in html  # the CPU load's share of the spread
    for user in campaign["truth"]["users"]:
        assert user not in html  # pseudonyms only


def test_without_the_culprit_no_traffic_user_is_blamed_with_confidence(campaign, tmp_path):
    """The control: the runs of the rounds without the culprit, analysed alone. Its decoys'
    traffic never crossed a global link: none may come out as a confident cause (Pearson
    p < 0.05 with runs slower beside them), with Holm's correction over the decoys and datasets
    tested together: each of them at 0.05 alone, two decoys in three datasets would blame one by
    chance about once in four campaigns (a full-suite run here found p = 0.049 for one decoy in
    amgproxy-2, from 6 runs of which 3 were beside it)."""
    from hpcvar.analyses import neighbourhood
    from hpcvar.analyses.compare.stats import holm

    ds = campaign["dataset"]
    runs = campaign_truth.runs_with_truth(ds.read("runs"), campaign["truth"])
    keep = runs["round"].notna() & ~runs["culprit"]
    if keep.sum() < 4:
        pytest.skip("too few rounds without the culprit")
    ids = set(runs.loc[keep, "run_id"])
    out = tmp_path / "control"
    Dataset(out).append({t: (frame[frame["run_id"].isin(ids)] if "run_id" in frame.columns else frame)
                         for t in ("runs", "steps", "neighbourhood") if not (frame := ds.read(t)).empty})
    result = neighbourhood.run(out, tmp_path / "nb", {"threshold_nodes": 1, "min_runs": 2})
    roles = campaign["roles"]
    tested = [(name, u) for name, d in result.datasets.items() for u in d.top_users_by_nodes_r
              if roles.get(u.user, "").startswith("decoy (traffic") and u.nodes_p is not None]
    assert tested, "no decoy was tested"
    for (name, u), p in zip(tested, holm([u.nodes_p for _, u in tested])):
        assert not (p < 0.05 and u.nodes_r > 0), (name, u, f"Holm-adjusted p {p:.3g} of {len(tested)} tests")
