"""Background traffic estimate b (Salimi Beni and Cosenza 2022) and the Dragonfly+ locality class.

A hand-made sacct snapshot with shared nodes, single-node jobs, job steps, a requeued job, jobs
that ended just before or start just after the run, and nodes outside the topology gives exact
N_a, N'_c, N_c and b, through the parser and through collation. A small simulated campaign is
collated and its b checked against the simulator's own schedule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from hpcvar.collate import collate
from hpcvar.data.dataset import Dataset
from hpcvar.data.rawlayout import write_manifest
from hpcvar.parsers import apps, sacct
from hpcvar.simulate import _Campaign
from hpcvar.simulate.presets import get_preset
from hpcvar.simulate.schedule import build_schedule
from hpcvar.system import background
from hpcvar.system.topology import LOCALITY_DFPLUS_CLASSES, Topology
from hpcvar.util.anonymise import Pseudonymiser

# --- a hand-made system: 4 groups x 2 routers x 2 nodes, two islands -------------------------
# i0 = g0 (nid00-03), g1 (nid04-07); i1 = g2 (nid08-11), g3 (nid12-15). nid00015 is an I/O
# node, so N_t = 15 compute nodes.

TOPOLOGY_CSV = "node,router,group,island,role\n" + "".join(
    f"nid{i:05d},r{i // 2},g{i // 4},i{i // 8},{'io' if i == 15 else 'compute'}\n" for i in range(16))

T = "2024-03-01T12:00:00"  # the run's start, local time of the cluster (Europe/Rome)
HEADER = "JobID|JobIDRaw|JobName|User|UID|Account|Partition|Submit|Start|End|Elapsed|State|ExitCode|NNodes|NodeList"


def _line(job, user, start, end, state, nodes, count, name="job"):
    return f"{job}|{job}|{name}|{user}|2000|acct|regular|2024-03-01T08:00:00|{start}|{end}||{state}|0:0|{count}|{nodes}"


SACCT = "\n".join([
    HEADER,
    # Our own job (excluded) and its steps.
    _line("5001", "varstudy", T, "2024-03-01T13:00:00", "COMPLETED", "nid[00000,00004]", 2, "UMTTest_2"),
    _line("5001.batch", "", T, "2024-03-01T13:00:00", "COMPLETED", "nid00000", 1, "batch"),
    _line("5001.0", "", T, "2024-03-01T13:00:00", "COMPLETED", "nid[00000,00004]", 2, "umt"),
    # Running, communicating; its steps must not count again.
    _line("6001", "alice", "2024-03-01T10:00:00", "2024-03-01T14:00:00", "COMPLETED", "nid[00008-00011]", 4),
    _line("6001.batch", "", "2024-03-01T10:00:00", "2024-03-01T14:00:00", "COMPLETED", "nid00008", 1, "batch"),
    _line("6001.extern", "", "2024-03-01T10:00:00", "2024-03-01T14:00:00", "COMPLETED", "nid[00008-00011]", 4,
          "extern"),
    _line("6001.0", "", "2024-03-01T10:00:00", "2024-03-01T14:00:00", "COMPLETED", "nid[00008-00011]", 4, "a.out"),
    # Shares nid00010-11 with 6001 and is still running at query time (End Unknown).
    _line("6002", "bob", "2024-03-01T11:00:00", "Unknown", "RUNNING", "nid[00010-00011]", 2),
    # Single-node jobs: allocated but not communicating (6004 shares nid00008 with 6001).
    _line("6003", "carol", "2024-03-01T11:30:00", "2024-03-01T12:30:00", "COMPLETED", "nid00012", 1),
    _line("6004", "carol", "2024-03-01T11:45:00", "2024-03-01T12:45:00", "FAILED", "nid00008", 1),
    # Three nodes, one of them (login1) outside the topology: communicates, counts two nodes.
    _line("6005", "dave", "2024-03-01T09:00:00", "2024-03-01T15:00:00", "COMPLETED", "login1,nid[00013-00014]", 3),
    # Ended one second before / exactly at the run's start, started one second after: not running.
    _line("6006", "erin", "2024-03-01T09:00:00", "2024-03-01T11:59:59", "COMPLETED", "nid[00001-00003]", 3),
    _line("6007", "erin", "2024-03-01T09:00:00", T, "COMPLETED", "nid[00001-00003]", 3),
    _line("6008", "frank", "2024-03-01T12:00:01", "2024-03-01T13:00:00", "COMPLETED", "nid[00001-00002]", 2),
    # Started exactly at the run's start: running.
    _line("6009", "frank", T, "2024-03-01T13:00:00", "COMPLETED", "nid[00005-00006]", 2),
    # Pending and cancelled before it started: never ran.
    _line("6010", "gina", "Unknown", "Unknown", "PENDING", "None assigned", 4),
    _line("6011", "gina", "Unknown", "2024-03-01T11:00:00", "CANCELLED by 2000", "None assigned", 2),
    # One compute node and the I/O node nid00015: communicates, counts one node.
    _line("6012", "henry", "2024-03-01T11:00:00", "2024-03-01T16:00:00", "TIMEOUT", "nid[00007,00015]", 2),
    # Requeued: its first allocation ended before the run, the second runs across it.
    _line("6013", "ivan", "2024-03-01T07:00:00", "2024-03-01T08:00:00", "REQUEUED", "nid[00001-00002]", 2),
    _line("6013", "ivan", "2024-03-01T11:50:00", "2024-03-01T13:00:00", "COMPLETED", "nid[00002-00003]", 2),
]) + "\n"

RUNNING = {"6001", "6002", "6003", "6004", "6005", "6009", "6012", "6013"}
# N_a: 4 + 2 + 1 + 1 + 2 (login1 left out) + 2 + 1 (nid00015 left out) + 2 = 15
# N'_c: the jobs on >= 2 nodes: 6001, 6002, 6005, 6009, 6012, 6013 -> 4 + 2 + 2 + 2 + 1 + 2 = 13
# N_c: nid00002-03, 05-11, 13-14 = 11 distinct nodes
N_A, N_C_PRIME, N_C, N_T = 15, 13, 11, 15
B = N_C / N_T * N_C_PRIME / N_A * 100


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[pd.DataFrame, Topology]:
    (tmp_path / "sacct.txt").write_text(SACCT)
    (tmp_path / "topology.csv").write_text(TOPOLOGY_CSV)
    return sacct.read(tmp_path / "sacct.txt"), Topology.from_file(tmp_path / "topology.csv")


def test_running_at_the_run_start(snapshot):
    jobs, _ = snapshot
    running = background.running_at(jobs, pd.Timestamp(T), exclude_job="5001")
    assert set(running["job_id"]) == RUNNING
    assert running["step"].isna().all() and running["job_id"].is_unique
    assert running.loc[running["job_id"] == "6013", "node_list"].iloc[0] == ["nid00002", "nid00003"]
    # Without the exclusion our own job counts too. A second earlier 6009 has not started and 6007
    # still runs (6006 ends at that very second).
    assert set(background.running_at(jobs, pd.Timestamp(T))["job_id"]) == RUNNING | {"5001"}
    earlier = background.running_at(jobs, pd.Timestamp(T) - pd.Timedelta(seconds=1), exclude_job="5001")
    assert set(earlier["job_id"]) == RUNNING - {"6009"} | {"6007"}


def test_background_traffic_terms(snapshot):
    jobs, topo = snapshot
    running = background.running_at(jobs, pd.Timestamp(T), exclude_job="5001")
    got = background.background_traffic(running, len(topo.compute_nodes), system_nodes=topo.compute_nodes)
    assert got == {"b": pytest.approx(B), "n_c": N_C, "n_c_prime": N_C_PRIME, "n_a": N_A, "n_t": N_T,
                   "jobs": 8, "communicating_jobs": 6, "outside_nodes": 2}
    assert got["b"] == pytest.approx(11 / 15 * 13 / 15 * 100)


def test_background_traffic_threshold_and_unfiltered_nodes(snapshot):
    jobs, topo = snapshot
    running = background.running_at(jobs, pd.Timestamp(T), exclude_job="5001")
    # Every job communicates with min_nodes=1: the single-node jobs join N'_c, nid00012 joins N_c.
    one = background.background_traffic(running, 15, min_nodes=1, system_nodes=topo.compute_nodes)
    assert (one["n_a"], one["n_c_prime"], one["n_c"], one["communicating_jobs"]) == (15, 15, 12, 8)
    # Only 6001 (4 nodes) communicates with min_nodes=4.
    four = background.background_traffic(running, 15, min_nodes=4, system_nodes=topo.compute_nodes)
    assert (four["n_c_prime"], four["n_c"], four["communicating_jobs"]) == (4, 4, 1)
    # Without system_nodes login1 and nid00015 count as well.
    every = background.background_traffic(running, 15)
    assert (every["n_a"], every["n_c_prime"], every["n_c"], every["outside_nodes"]) == (17, 15, 13, 0)


def test_background_traffic_edge_cases():
    empty = pd.DataFrame({"job_id": [], "node_list": [], "node_count": []})
    assert background.background_traffic(empty, 10) == {
        "b": 0.0, "n_c": 0, "n_c_prime": 0, "n_a": 0, "n_t": 10, "jobs": 0, "communicating_jobs": 0,
        "outside_nodes": 0}
    # Only single-node jobs: nodes allocated, no communication.
    singles = pd.DataFrame({"job_id": ["1", "2"], "node_list": [["n1"], ["n1"]], "node_count": [1, 1]})
    assert background.background_traffic(singles, 10)["b"] == 0.0
    assert background.background_traffic(singles, 10)["n_a"] == 2
    # A truncated node list (None) counts with NNodes, its nodes taken as distinct, N_c capped at N_t.
    cut = pd.DataFrame({"job_id": ["1", "2"], "node_list": [None, ["n1", "n2"]], "node_count": [9, 2]})
    got = background.background_traffic(cut, 10)
    assert (got["n_a"], got["n_c_prime"], got["n_c"]) == (11, 11, 10)
    assert got["b"] == pytest.approx(100.0)
    # The whole machine busy with communicating jobs: b = 100.
    full = pd.DataFrame({"job_id": ["1"], "node_list": [["n1", "n2"]], "node_count": [2]})
    assert background.background_traffic(full, 2)["b"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="N_t"):
        background.background_traffic(full, 0)


# --- collation of a tiny raw directory -------------------------------------------------------

def _run_dir(raw: Path, run_id: str, job_id: str, start: float, meta_extra: dict, sacct_text: str | None) -> None:
    d = raw / "runs" / run_id
    d.mkdir(parents=True)
    steps = [(start + 30 + 10 * i, start + 40 + 10 * i) for i in range(3)]
    apps.write_timestamped(d / "stdout.txt", "umt", steps, nranks=4)
    if sacct_text is not None:
        (d / "sacct.txt").write_text(sacct_text)
    write_manifest(d, {"run_id": run_id, "app": "umt", "dataset": "umt-2", "input": "x", "num_nodes": 2,
                       "job_id": job_id, **meta_extra})


def test_collated_run_columns(tmp_path: Path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "topology.csv").write_text(TOPOLOGY_CSV)
    (raw / "system.yaml").write_text(yaml.safe_dump({"system": "tiny", "timezone": "Europe/Rome",
                                                     "topology": "topology.csv"}))
    start = pd.Timestamp(T, tz="Europe/Rome").timestamp()
    _run_dir(raw, "tiny-5001", "5001", start, {}, SACCT)
    # A run of ReFrame's local scheduler: no sacct, so no b.
    job = {"scheduler": "local", "node_list": ["nid00001", "nid00012"], "start": "2024-03-01T11:00:00+00:00",
           "end": "2024-03-01T11:05:00+00:00", "state": "COMPLETED", "user": "varstudy"}
    _run_dir(raw, "tiny-local-1", "local-1", pd.Timestamp(job["start"]).timestamp(), {"job": job}, None)
    result = collate(raw, tmp_path / "ds", Pseudonymiser(b"salt"))
    assert result.quarantined == [] and sorted(result.new_runs) == ["tiny-5001", "tiny-local-1"]
    runs = Dataset(tmp_path / "ds").read("runs").set_index("run_id")
    ours = runs.loc["tiny-5001"]
    assert ours["bg_traffic"] == pytest.approx(B)
    assert (ours["bg_nodes_alloc"], ours["bg_nodes_comm"], ours["bg_nodes_comm_unique"], ours["system_nodes"]) == \
        (N_A, N_C_PRIME, N_C, N_T)
    assert ours["locality_dfplus"] == "same-island"  # nid00000 (g0) and nid00004 (g1), both in i0
    local = runs.loc["tiny-local-1"]
    assert local[["bg_traffic", "bg_nodes_alloc", "bg_nodes_comm", "bg_nodes_comm_unique"]].isna().all()
    assert local["system_nodes"] == N_T
    assert local["locality_dfplus"] == "different-islands"  # nid00001 in i0, nid00012 in i1


# --- a simulated campaign --------------------------------------------------------------------

SEED, DAYS = 3, 2


def _schedule_b(runs: pd.DataFrame) -> pd.Series:
    """b at every run's start, recomputed from the simulator's schedule (not from its sacct files).

    The simulator's sacct lists the background jobs (not the campaign's other runs) with times
    cut to whole seconds, so the schedule is read the same way.
    """
    p = get_preset("demo", {"days": DAYS})
    campaign = _Campaign(p, SEED, Path("unused"))  # the same random stream as simulate(): same schedule
    jobs = build_schedule(p, campaign.topo, campaign.users, campaign.t0, campaign.t1, campaign.rng)
    bg = jobs[jobs["dataset"].isna()]
    start = pd.to_datetime(bg["start"], unit="s").dt.floor("s").to_numpy()
    end = pd.to_datetime(bg["end"], unit="s").dt.floor("s").to_numpy()
    nodes = bg["node_idx"].to_list()
    n_t = int((campaign.topo.table["role"] == "compute").sum())
    out = {}
    for run_id, t0 in zip(runs["run_id"], runs["start"].dt.tz_convert(None).to_numpy()):
        on = [nodes[i] for i in np.flatnonzero((start <= t0) & (end > t0))]
        comm = [n for n in on if len(n) >= 2]
        n_a, n_c_prime = sum(map(len, on)), sum(map(len, comm))
        n_c = len(set(np.concatenate(comm).tolist())) if comm else 0
        out[run_id] = n_c / n_t * n_c_prime / n_a * 100 if n_a else 0.0
    return pd.Series(out)


def test_simulated_campaign_b_and_dfplus_locality(campaign):
    c = campaign("demo", SEED, DAYS)
    runs = Dataset(c.dataset).read("runs")
    assert len(runs) >= 10
    assert runs["bg_traffic"].between(0, 100).all()
    assert (runs["bg_nodes_comm_unique"] <= runs["system_nodes"]).all()
    assert (runs["bg_nodes_comm"] <= runs["bg_nodes_alloc"]).all()
    expected = _schedule_b(runs)
    assert runs.set_index("run_id")["bg_traffic"].to_numpy() == pytest.approx(expected[runs["run_id"]].to_numpy())
    topo = Topology.from_file(c.raw / "topology.csv")
    assert topo.has_islands and len(topo.islands) == 4
    assert set(runs["locality_dfplus"]) == set(LOCALITY_DFPLUS_CLASSES)
    for run in runs.itertuples():
        assert run.locality_dfplus == topo.placement(run.node_list)["locality_dfplus"]
