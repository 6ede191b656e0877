"""The planted workload of a testbed campaign (hpcvar.campaign.background) without a cluster:
which rounds each other user's job is in, and where. tests/test_testbed_campaign.py runs it.

A short campaign is where the design matters: drawn round by round, seed 7's twelve rounds put a
decoy beside the culprit in six of the culprit's seven rounds (r = 0.85), and then no analysis can
tell the two apart. The balanced design keeps each job's share exactly and its presence as little
correlated with the others' and with the upgrade as can be: not at all, at twelve rounds."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from hpcvar.campaign import background as bgmod
from hpcvar.dev import testbed as tb

JOBS = [
    {"user": "alice", "kind": "global-traffic", "nodes": 2, "share": 0.5},
    {"user": "bob", "kind": "group-traffic", "nodes": 2, "share": 0.5},
    {"user": "carol", "kind": "group-traffic", "nodes": 2, "share": 0.5},
    {"user": "dave", "kind": "cpu", "nodes": 1, "share": 0.3, "load": 0.5},
]


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    path = tmp_path_factory.mktemp("testbed") / "map.yaml"
    path.write_text(yaml.safe_dump(tb.topology_map(tb.TestbedSpec(nodes=6, groups=2))))
    return str(path)


def presence(bg: bgmod.Background, rounds: int) -> np.ndarray:
    """rounds x jobs, as plan() puts them in the rounds."""
    users = [j.user for j in bg.jobs]
    plans = [bgmod.plan(bg, f"{i:03d}", i) for i in range(1, rounds + 1)]
    return np.array([[u in {j["user"] for j in p.jobs} for u in users] for p in plans])


def test_drawn_round_by_round_twelve_rounds_can_confound_a_decoy_with_the_culprit(topology):
    """Why the balanced design is the default: the independent draw of seed 7 (the testbed
    campaign's) puts carol beside alice in six of alice's seven rounds."""
    bg = bgmod.Background.from_config({"seed": 7, "jobs": JOBS, "design": "independent"}, topology, rounds=12)
    p = presence(bg, 12).astype(float)
    assert p[:, 0].sum() == 7
    assert np.corrcoef(p[:, 0], p[:, 2])[0, 1] > 0.8


@pytest.mark.parametrize("rounds,upgrade", [(12, 7), (40, 31)])
def test_the_balanced_design_keeps_each_share_and_decorrelates_the_jobs_and_the_upgrade(topology, rounds, upgrade):
    doc = {"seed": 7, "jobs": JOBS, "upgrade": {"round": upgrade, "global_rate": "20mbit"}}
    bg = bgmod.Background.from_config(doc, topology, rounds=rounds)
    p = presence(bg, rounds)
    assert p.sum(axis=0).tolist() == [round(j["share"] * rounds) for j in JOBS]
    after = np.arange(1, rounds + 1) >= upgrade
    r = np.corrcoef(np.column_stack([p, after]).astype(float).T)
    # Every job present as often before the upgrade as after it, and no job's presence telling
    # anything of another's: exactly, at these sizes (coordinate exchange reaches it).
    assert np.abs(r[~np.eye(len(r), dtype=bool)]).max() < 1e-9, np.round(r, 2)
    # ... and each planted job has the place its kind asks for.
    for i in range(1, rounds + 1):
        for job in bgmod.plan(bg, f"{i:03d}", i).jobs:
            groups = {int(n[1:]) > 3 for n in job["nodes"]}  # n01-n03: one group, n04-n06: the other
            if job["kind"] != "cpu":
                assert len(groups) == (2 if job["kind"] == "global-traffic" else 1), job


def test_a_round_plants_the_same_again_and_another_seed_plants_otherwise(topology):
    doc = {"seed": 7, "jobs": JOBS}
    bg = bgmod.Background.from_config(doc, topology, rounds=12)
    again = bgmod.Background.from_config(dict(doc), topology, rounds=12)
    assert [bgmod.plan(bg, "005", 5).jobs] == [bgmod.plan(again, "005", 5).jobs]
    other = bgmod.Background.from_config({**doc, "seed": 8}, topology, rounds=12)
    assert not np.array_equal(presence(bg, 12), presence(other, 12))


def test_placements_do_not_depend_on_the_design(topology):
    """The same seed places a job on the same nodes whichever design decides its presence."""
    balanced = bgmod.Background.from_config({"seed": 3, "jobs": JOBS}, topology, rounds=10)
    always = bgmod.Background.from_config({"seed": 3, "jobs": [{**j, "share": 1.0} for j in JOBS]}, topology,
                                          rounds=10)
    for i in range(1, 11):
        where = {j["user"]: j["nodes"] for j in bgmod.plan(always, f"{i:03d}", i).jobs}
        for job in bgmod.plan(balanced, f"{i:03d}", i).jobs:
            assert job["nodes"] == where[job["user"]]


def test_rounds_beyond_the_campaigns_are_drawn_one_by_one(topology):
    """A round requested after the campaign's fixed ones (`hpcvar campaign request`) is outside the
    design: its presence is the independent draw of its number."""
    balanced = bgmod.Background.from_config({"seed": 7, "jobs": JOBS}, topology, rounds=12)
    independent = bgmod.Background.from_config({"seed": 7, "jobs": JOBS, "design": "independent"}, topology,
                                               rounds=12)
    assert bgmod.plan(balanced, "013", 13).jobs == bgmod.plan(independent, "013", 13).jobs


def test_an_unknown_design_is_refused_by_name(topology):
    with pytest.raises(bgmod.BackgroundError, match="design 'latin'"):
        bgmod.Background.from_config({"jobs": JOBS, "design": "latin"}, topology, rounds=12)


def test_the_design_is_drawn_once_per_campaign_and_kept_in_its_results(topology, tmp_path, monkeypatch):
    """Each round is a process of its own: the first draws the balanced design (about a second)
    and keeps it in the campaign's results (background/design.json), the others read it and plant
    exactly what they would have drawn. A file drawn for other inputs, or unreadable, is drawn
    again and replaced."""
    doc = {"seed": 7, "jobs": JOBS, "upgrade": {"round": 7, "global_rate": "15mbit"}}
    bg = bgmod.Background.from_config(doc, topology, rounds=12)
    drawn = [bgmod.plan(bg, f"{i:03d}", i) for i in range(1, 13)]
    first = bgmod.plan(bg, "001", 1, results=tmp_path)
    stored = tmp_path / bgmod.DESIGN_FILE
    assert first == drawn[0] and stored.exists()

    def no_draw(_bg):
        raise AssertionError("drawn again")

    monkeypatch.setattr(bgmod, "schedule", no_draw)
    assert [bgmod.plan(bg, f"{i:03d}", i, results=tmp_path) for i in range(1, 13)] == drawn
    monkeypatch.undo()

    # Another seed: its own design, replacing the file.
    other = bgmod.Background.from_config({**doc, "seed": 8}, topology, rounds=12)
    assert bgmod.plan(other, "004", 4, results=tmp_path) == bgmod.plan(other, "004", 4)
    assert yaml.safe_load(stored.read_text())["inputs"]["seed"] == 8
    stored.write_text('{"inputs": ')  # cut short
    assert bgmod.plan(bg, "009", 9, results=tmp_path) == drawn[8]
    assert yaml.safe_load(stored.read_text())["inputs"]["seed"] == 7
