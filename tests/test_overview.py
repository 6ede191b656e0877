"""The campaign overview (hpcvar.analyses.overview): its numbers are the programs' own (mpiP's
times, sacct's run times, the quarantine's failed runs), on a simulated campaign."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hpcvar.analyses import overview
from hpcvar.results.overview import Campaign, OverviewDataset, OverviewResult
from hpcvar.settings import SettingsError


@pytest.fixture(scope="module")
def result(campaign, tmp_path_factory):
    c = campaign("demo", 0, 15)
    out = tmp_path_factory.mktemp("overview")
    return c, overview.run(c.dataset, out, {"slow_factor": 1.2})


def test_spread_and_campaign_are_the_run_times(result):
    c, res = result
    runs = pd.read_parquet(c.dataset / "runs")
    times = runs.groupby("dataset")["total_time_s"]
    for row in res.spread:
        assert row.runs == times.size()[row.dataset]
        assert row.slowest_fastest == pytest.approx(times.max()[row.dataset] / times.min()[row.dataset])
    ratio = times.max() / times.min()
    assert (res.campaign.widest, res.campaign.widest_ratio) == (ratio.idxmax(), pytest.approx(ratio.max()))
    # The setting decides what counts as slow.
    assert res.params.slow_factor == 1.2
    assert res.campaign.share_slow == pytest.approx((runs["total_time_s"] / times.transform("min") > 1.2).mean())
    assert res.campaign.runs == len(runs) and res.campaign.datasets == runs["dataset"].nunique()
    # Round trip: what was written is what was returned.
    assert OverviewResult.read(res.path(".")) == res
    for f in (Campaign.TIMELINE, Campaign.RELATIVE_TIME):
        assert res.path(f).read_text().startswith("<?xml")


def test_failed_runs_and_gaps_come_from_the_quarantine(result):
    c, res = result
    failed = [json.loads(line) for line in (c.dataset / "quarantine.jsonl").read_text().splitlines()]
    failed = [e for e in failed if e["kind"] == "failed-run"]
    assert failed and res.campaign.failed == len(failed)
    assert res.campaign.failed_states == pd.Series([e["state"] for e in failed]).value_counts().to_dict()
    per = pd.Series([e["dataset"] for e in failed]).value_counts()
    assert {c_.dataset: c_.failed for c_ in res.coverage if c_.failed} == per.to_dict()
    runs = pd.read_parquet(c.dataset / "runs")
    widest = max(res.coverage, key=lambda c_: c_.longest_gap_days or 0)
    starts = runs.loc[runs["dataset"] == widest.dataset, "start"].sort_values()
    assert widest.longest_gap_days == pytest.approx(starts.diff().max().total_seconds() / 86400)
    assert (res.campaign.longest_gap, res.campaign.longest_gap_days) == (widest.dataset, widest.longest_gap_days)


def test_mpi_shares_are_mpip_times_and_placement_counts_every_run(result):
    c, res = result
    runs = pd.read_parquet(c.dataset / "runs")
    profile = pd.read_parquet(c.dataset / "mpi_profile")
    per_run = profile.drop_duplicates("run_id").set_index("run_id")
    profiled = 0
    for name, d in res.datasets.items():
        mine = runs[runs["dataset"] == name]
        prof = per_run[per_run.index.isin(mine["run_id"])]
        if len(prof):
            profiled += 1
            shares = prof["mpi_time_s"] / prof["app_time_s"]
            assert d.mpi.profiled_runs == len(prof)
            assert (d.mpi.share_min, d.mpi.share_max) == pytest.approx((shares.min(), shares.max()))
            routine = profile[profile["run_id"].isin(mine["run_id"])].groupby("routine")["time_s"].sum()
            top = d.mpi.routines[0]
            assert top.routine == routine.idxmax() and top.share == pytest.approx(routine.max() / routine.sum())
            assert res.path(OverviewDataset.figure(name, "mpi")).is_file()
        else:
            assert d.mpi is None
        assert sum(v.runs for v in d.placement.locality.values()) == len(mine)
        r = np.corrcoef(mine["num_groups"], mine["total_time_s"])[0, 1] if mine["num_groups"].nunique() > 1 else None
        assert d.placement.r_num_groups == (pytest.approx(r) if r is not None else None)
        if d.steps is not None:
            assert d.steps.steps == int(mine["num_steps"].max())
    assert profiled >= 4  # every application dataset of the demo preset is profiled


def test_it_covers_the_whole_campaign_only(result, tmp_path):
    c, _ = result
    with pytest.raises(SettingsError, match="whole campaign"):
        overview.run(c.dataset, tmp_path, only="amg-128")
