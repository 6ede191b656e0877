"""A testbed campaign's truth against its runs (hpcvar.campaign.truth), without a cluster: the
rounds' windows and the runs' times as the campaign of 2026-11-30 here wrote them."""

from __future__ import annotations

import pandas as pd

from hpcvar.campaign import truth as campaign_truth


def _stamp(text: str) -> float:
    return pd.Timestamp(text).timestamp()


#: Rounds 009 and 010 of that campaign (truth.json: fractional seconds) ...
TRUTH = {"rounds": [
    {"round": "009", "start": _stamp("2026-11-30 08:40:04.128909+00:00"), "end": _stamp("2026-11-30 08:40:18.250113+00:00"),
     "global_rate": "10mbit", "jobs": [{"user": "hpcvar-dave", "kind": "cpu", "nodes": ["n03"]}]},
    {"round": "010", "start": _stamp("2026-11-30 08:40:25.077002+00:00"), "end": _stamp("2026-11-30 08:41:27.465113+00:00"),
     "global_rate": "10mbit", "jobs": [{"user": "hpcvar-alice", "kind": "global-traffic", "nodes": ["n03", "n04"]},
                                       {"user": "hpcvar-bob", "kind": "group-traffic", "nodes": ["n04", "n05"]}]},
]}
#: ... and runs of them as sacct gave their start (whole seconds): the first of each round started
#: within the round's first second.
RUNS = pd.DataFrame({
    "run_id": ["testbed-108", "testbed-110", "testbed-113", "testbed-115", "before"],
    "start": pd.to_datetime(["2026-11-30 08:40:04+00:00", "2026-11-30 08:40:14+00:00", "2026-11-30 08:40:25+00:00",
                             "2026-11-30 08:41:17+00:00", "2026-11-30 08:40:03+00:00"]),
    "num_groups": [1, 2, 2, 2, 2],
})


def test_a_run_that_started_in_its_rounds_first_second_is_in_that_round():
    out = campaign_truth.runs_with_truth(RUNS, TRUTH).set_index("run_id")
    assert out["round"].drop("before").to_dict() == {"testbed-108": "009", "testbed-110": "009",
                                                     "testbed-113": "010", "testbed-115": "010"}
    assert pd.isna(out.loc["before", "round"])  # a second before the round: outside every window
    assert out.loc["testbed-113", "culprit"] and out.loc["testbed-113", "decoys"] == 1
    assert out.loc["testbed-113", "global_rate"] == "10mbit"
    assert not out.loc["testbed-108", "culprit"] and out.loc["testbed-108", "hog"]
    assert not out.loc["before", "culprit"] and not out.loc["before", "hog"]
