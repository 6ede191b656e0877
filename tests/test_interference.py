"""Interference what-if experiments: the experiment file (hpcvar.experiments.spec), placement
policies on any Topology (hpcvar.experiments.placement), the dragonfly's routes and loads
(hpcvar.simulate.interference), and the Union/CODES hybrid-workload study's qualitative findings
reproduced by the flow-level model at two seeds each:

(a) random-group placement confines the aggressors' traffic: lower victim latency slowdown than
    random-node placement;
(b) adaptive routing beats minimal routing under an adversarial (neighbouring-group) load;
(c) a communication-heavy victim suffers less *relative* latency slowdown than a light one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import with_required_run_columns
from hpcvar.cli import main
from hpcvar.experiments.placement import Placement, PlacementError, place, place_jobs
from hpcvar.experiments.spec import (
    ExperimentError, JobSpec, SystemSpec, load_experiment, parse_bytes, parse_experiment,
)
from hpcvar.results.interference import InterferenceResult
from hpcvar.simulate.interference import (
    GLOBAL, LOCAL, DragonflyNetwork, JobTraffic, run_experiment, simulate_workload,
)
from hpcvar.system.topology import Topology

REPO = Path(__file__).resolve().parents[1]

# 8 groups of 8 routers (1d), 4 nodes each: 256 nodes; 16 global ports per group, 2 links per group pair.
SYSTEM_1D = {"groups": 8, "group_shape": "1d", "routers_per_group": 8, "nodes_per_router": 4,
             "global_links_per_router": 2, "groups_per_island": 2}
# 4 groups of 3 x 4 routers (2d, Cray XC-like), 2 nodes each; 12 global ports per group, 4 links per pair.
SYSTEM_2D = SystemSpec(groups=4, group_shape="2d", rows=3, cols=4, nodes_per_router=2, global_links_per_router=1)

# Union's hybrid workload, scaled down: an ML job's periodic allreduce bursts (Cosmoflow: 28.15 MiB
# every 129 ms) and uniform-random traffic.
AGGRESSORS = [
    {"name": "cosmoflow", "pattern": "periodic-allreduce", "nodes": 96, "message_bytes": "28.15MiB",
     "compute_s": 0.129},
    {"name": "background", "pattern": "uniform-random", "nodes": 64, "messages": 4, "message_bytes": "64KiB",
     "compute_s": 1e-4, "fluctuation": 0.3},
]
# Communication-light victim (small allreduces, like LAMMPS/Nekbone) and heavy one (MILC's 486 KiB halo).
LIGHT = {"test": "collectives-allreduce", "pattern": "allreduce", "nodes": 32, "message_bytes": 8, "compute_s": 1e-4}
HEAVY = {"test": "milc", "pattern": "halo", "dims": 4, "nodes": 32, "message_bytes": "486KiB", "compute_s": 1e-3}
SEEDS = (0, 1)


def experiment_doc(victim: dict, seed: int = 0, **over) -> dict:
    doc = {"victim": victim, "aggressors": AGGRESSORS, "policies": ["random-nodes", "random-groups"],
           "routing": ["minimal", "adaptive"], "repetitions": 1, "seed": seed, "samples": 16, "system": SYSTEM_1D}
    return {**doc, **over}


@pytest.fixture(scope="module")
def net1d() -> DragonflyNetwork:
    return DragonflyNetwork(parse_experiment(experiment_doc(LIGHT)).system)


@pytest.fixture(scope="module")
def net2d() -> DragonflyNetwork:
    return DragonflyNetwork(SYSTEM_2D)


@pytest.fixture(scope="module")
def hybrid():
    """``hybrid(victim, seed)``: the victim rows of a random-nodes/random-groups x minimal/adaptive run."""
    cache = {}

    def get(victim: str, seed: int) -> pd.DataFrame:
        if (victim, seed) not in cache:
            doc = experiment_doc({"light": LIGHT, "heavy": HEAVY}[victim], seed)
            jobs = run_experiment(parse_experiment(doc), progress=False).jobs
            cache[victim, seed] = jobs[jobs["role"] == "victim"].set_index(["policy", "routing"])
        return cache[victim, seed]
    return get


# --- (a), (b), (c): the Union study's findings -------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("routing", ["minimal", "adaptive"])
def test_random_groups_confine_traffic_and_lower_victim_latency_slowdown(hybrid, seed, routing):
    v = hybrid("light", seed)
    rn, rg = v.loc[("random-nodes", routing)], v.loc[("random-groups", routing)]
    assert rg["slowdown_latency"] < rn["slowdown_latency"]
    assert rn["slowdown_latency"] > 1.3  # sharing groups with the aggressors hurts a light victim
    # Confinement: other jobs' load on the victim's channels.
    assert rg["others_utilisation"] < rn["others_utilisation"]
    if routing == "minimal":  # minimal routes of jobs in other groups never enter the victim's group
        assert rg["others_utilisation"] == 0.0 and rg["slowdown_latency"] == pytest.approx(1.0)


def _neighbour_workload(net: DragonflyNetwork, seed: int, routing: str):
    """Groups 0-3 each hold 8 victim nodes (routers 0-1) and 24 aggressor nodes (routers 2-7); both
    jobs send everything to the same position in the next group: minimal routing pushes a group's
    whole traffic through the 2 global links to its neighbour."""
    names = list(net.topology.table["node"])
    victim_nodes = [n for i, n in enumerate(names) if i < 128 and i % 32 < 8]
    aggressor_nodes = [n for i, n in enumerate(names) if i < 128 and i % 32 >= 8]
    victim = JobSpec("victim", "victim", "shift", 32, 64 * 1024, compute_s=1e-4, offset=8)
    aggressor = JobSpec("aggressor", "aggressor", "shift", 96, 256 * 1024, compute_s=2e-4, offset=24)
    jobs = [JobTraffic(net, victim, Placement.of(net.topology, "victim", victim_nodes), np.random.default_rng([seed, 0])),
            JobTraffic(net, aggressor, Placement.of(net.topology, "aggressor", aggressor_nodes),
                       np.random.default_rng([seed, 1]))]
    draws = np.random.default_rng([seed, 2])
    phase, fluct = draws.random((16, 2)), draws.standard_normal((16, 2))
    return simulate_workload(jobs, routing, 8, 16, phase, fluct)


@pytest.mark.parametrize("seed", SEEDS)
def test_adaptive_routing_beats_minimal_under_adversarial_load(net1d, seed):
    minimal, adaptive = (_neighbour_workload(net1d, seed, r) for r in ("minimal", "adaptive"))
    for j in (0, 1):  # the victim and the aggressor
        for col in ("comm_time_s", "mean_latency_us", "max_latency_us"):
            assert adaptive.samples[j][col].mean() < 0.8 * minimal.samples[j][col].mean(), (j, col)
    assert minimal.valiant_share(1) == 0.0 and adaptive.valiant_share(1) > 0.3
    hot = {w.routing: w.network_figures()["global_utilisation_max"] for w in (minimal, adaptive)}
    assert hot["adaptive"] < 0.8 * hot["minimal"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("routing", ["minimal", "adaptive"])
def test_heavy_victim_suffers_less_relative_latency_slowdown_than_light(hybrid, seed, routing):
    light, heavy = hybrid("light", seed).loc[("random-nodes", routing)], hybrid("heavy", seed).loc[("random-nodes", routing)]
    assert list(light["node_list"]) == list(heavy["node_list"])  # same placement: a paired comparison
    assert 1.0 < heavy["slowdown_latency"] < light["slowdown_latency"]
    # ... although in absolute terms the heavy victim's latency grows more.
    assert (heavy["latency_mixed_us"] - heavy["latency_alone_us"]) > (light["latency_mixed_us"] - light["latency_alone_us"])


def test_victim_gets_a_distribution_of_iterations():
    doc = experiment_doc(LIGHT, policies=["random-nodes"], routing=["minimal"])
    r = run_experiment(parse_experiment(doc), progress=False)
    s = r.samples[r.samples["role"] == "victim"]
    mixed, alone = s[s["workload"] == "mixed"], s[s["workload"] == "alone"]
    assert len(mixed) == len(alone) == 16
    assert mixed["comm_time_s"].nunique() > 3  # burst phases and fluctuations of the aggressors
    assert alone["comm_time_s"].nunique() == 1  # alone, the model has no other source of noise
    assert mixed["comm_time_s"].min() >= alone["comm_time_s"].iloc[0] * (1 - 1e-9)


# --- placement policies on a synthetic topology -----------------------------------------------

@pytest.fixture(scope="module")
def topo() -> Topology:
    """3 islands x 2 groups x 3 routers x 2 nodes; router g0r0 serves I/O (never placed on)."""
    rows = []
    for i in range(3):
        for g in (2 * i, 2 * i + 1):
            for r in range(3):
                for n in range(2):
                    rows.append({"node": f"n{len(rows):03d}", "router": f"g{g}r{r}", "group": f"g{g}",
                                 "island": f"i{i}", "role": "io" if (g, r) == (0, 0) else "compute"})
    return Topology(pd.DataFrame(rows), source="synthetic")


@pytest.mark.parametrize("policy", ["random-nodes", "random-routers", "random-groups"])
def test_job_wide_policies_place_without_overlap(topo, policy):
    for seed in range(5):
        placed = place_jobs(topo, [("a", 6, policy), ("b", 5, policy), ("c", 4, policy)], np.random.default_rng(seed))
        nodes = [n for p in placed for n in p.nodes]
        assert [len(p.nodes) for p in placed] == [6, 5, 4]
        assert len(set(nodes)) == len(nodes)
        assert all(topo.table.loc[n, "role"] == "compute" for n in nodes)
        for p in placed:
            assert p.routers == tuple(dict.fromkeys(topo.router_of(n) for n in p.nodes))
            assert p.groups == tuple(dict.fromkeys(topo.group_of(n) for n in p.nodes))


@pytest.mark.parametrize("policy, unit", [("random-routers", "router"), ("random-groups", "group")])
def test_whole_routers_and_groups(topo, policy, unit):
    compute = topo.table[topo.table["role"] == "compute"]
    size = compute.groupby(unit).size()
    for seed in range(5):
        placed = place_jobs(topo, [("a", 5, policy), ("b", 5, policy)], np.random.default_rng(seed))
        owner = {n: p.job for p in placed for n in p.nodes}
        for p in placed:
            units = compute[compute["node"].isin(p.nodes)].groupby(unit).size()
            partial = [u for u in units.index if units[u] < size[u]]
            assert len(partial) <= 1  # filled consecutively: only the last unit may be partly used
            for u in units.index:  # and no unit is shared with the other job
                assert {owner.get(n) for n in compute.loc[compute[unit] == u, "node"]} <= {p.job, None}


@pytest.mark.parametrize("policy", ["same-group", "same-island", "different-islands"])
def test_locality_policies_give_their_dragonfly_plus_class(topo, policy):
    for seed in range(10):
        p = place(topo, policy, 4, np.random.default_rng(seed), job="victim")
        assert topo.placement(p.nodes)["locality_dfplus"] == policy
        assert len(p.nodes) == 4 and p.policy == policy


def test_placement_is_deterministic_and_gives_a_nodelist(topo):
    a = place(topo, "random-nodes", 7, np.random.default_rng(3))
    b = place(topo, "random-nodes", 7, np.random.default_rng(3))
    assert a == b and list(a.nodes) == sorted(a.nodes)  # topology (= rank) order
    assert Placement.of(topo, "x", ["n004", "n005", "n006", "n009"]).nodelist == "n[004-006,009]"


def test_impossible_placements_say_why(topo):
    rng = np.random.default_rng(0)
    with pytest.raises(PlacementError, match=r"job 'big' \(40 nodes\): random-nodes: needs 40 nodes but 34 are free"):
        place(topo, "random-nodes", 40, rng, job="big")
    with pytest.raises(PlacementError, match="same-group: needs 7 nodes in one group"):
        place(topo, "same-group", 7, rng)
    with pytest.raises(PlacementError, match="random-groups: needs 6 nodes but the 0 wholly free groups hold 0"):
        place_jobs(topo, [("a", 30, "random-groups"), ("b", 6, "random-groups")], rng)
    with pytest.raises(PlacementError, match="random-routers: needs 4 nodes"):
        place_jobs(topo, [("a", 31, "random-nodes"), ("b", 4, "random-routers")], rng)
    flat = Topology(topo.table.drop(columns="island").reset_index(drop=True))
    with pytest.raises(PlacementError, match="same-island: the topology has no islands"):
        place(flat, "same-island", 4, rng)
    with pytest.raises(PlacementError, match="unknown placement policy 'nearby'"):
        place(topo, "nearby", 4, rng)


# --- the network: routes, hop counts, loads ----------------------------------------------------

def router_at(net: DragonflyNetwork, group: int, row: int, col: int) -> str:
    t = net.topology.table
    return t.loc[(t["group"] == f"g{group}") & (t["row"] == row) & (t["col"] == col), "router"].iloc[0]


def test_local_hops_1d_and_2d_hand_checked(net1d, net2d):
    # 1d: routers of a group are all-to-all, one hop whatever the pair.
    assert net1d.route(router_at(net1d, 0, 0, 0), router_at(net1d, 0, 0, 7)) == [
        ("local", router_at(net1d, 0, 0, 0), router_at(net1d, 0, 0, 7))]
    # 2d: one hop along a row or a column; otherwise along the row first, then the column.
    r = lambda row, col: router_at(net2d, 1, row, col)  # noqa: E731
    assert net2d.route(r(0, 0), r(0, 3)) == [("local", r(0, 0), r(0, 3))]
    assert net2d.route(r(0, 0), r(2, 0)) == [("local", r(0, 0), r(2, 0))]
    assert net2d.route(r(0, 0), r(2, 3)) == [("local", r(0, 0), r(0, 3)), ("local", r(0, 3), r(2, 3))]
    assert net2d.route(r(2, 1), r(1, 2)) == [("local", r(2, 1), r(2, 2)), ("local", r(2, 2), r(1, 2))]
    assert net2d.route(r(1, 1), r(1, 1)) == []
    # 3 x 4 groups: each router has 3 row and 2 column neighbours.
    assert net2d.locals_per_group == 12 * 5 and net1d.locals_per_group == 8 * 7


def _check_paths(net, src, dst, paths, max_hops, global_hops):
    for s, d, p, g in zip(src, dst, paths, global_hops):
        chan = p[p >= 0]
        assert len(chan) <= max_hops
        assert (net.kind[chan] == GLOBAL).sum() == g
        if len(chan):  # a connected walk from s to d
            assert net.channel_src[chan[0]] == s and net.channel_dst[chan[-1]] == d
            assert (net.channel_dst[chan[:-1]] == net.channel_src[chan[1:]]).all()
        else:
            assert s == d


@pytest.mark.parametrize("shape, max_hops", [("1d", 3), ("2d", 5)])
def test_minimal_and_valiant_paths(net1d, net2d, shape, max_hops):
    net = {"1d": net1d, "2d": net2d}[shape]
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(net.num_routers), np.arange(net.num_routers)))
    inter = net.group_of_router(src) != net.group_of_router(dst)
    minimal = net.minimal_paths(src, dst)
    _check_paths(net, src, dst, minimal, max_hops, inter.astype(int))
    assert (minimal >= 0).sum(1).max() == max_hops  # the diameter is reached
    # Valiant: minimal to an intermediate group, minimal on: two global hops, at most 2 x local + 2.
    s, d = src[inter], dst[inter]
    gs, gd = net.group_of_router(s), net.group_of_router(d)
    mid = np.array([next(g for g in range(net.system.groups) if g not in (a, b)) for a, b in zip(gs, gd)])
    _check_paths(net, s, d, net.valiant_paths(s, d, mid), 3 * (max_hops - 1) // 2 + 2, np.full(len(s), 2))


def test_channel_loads_conserve_traffic_times_hops(net1d):
    rng = np.random.default_rng(5)
    spec = JobSpec("a2a", "victim", "alltoall", 16, 12345)
    t = JobTraffic(net1d, spec, place(net1d.topology, "random-nodes", 16, rng), rng)
    per_message = t.bytes * t.repeat[t.round]
    assert t.router_matrix().sum() == pytest.approx(t.bytes_per_iteration) == pytest.approx(16 * 15 * 12345)
    split = np.where(t.can_detour, rng.random(len(t.bytes)), 0.0)
    for weights in (np.column_stack([np.ones_like(split), 0 * split]), np.column_stack([1 - split, split])):
        load = t.channel_bytes(weights)
        network = (net1d.kind == LOCAL) | (net1d.kind == GLOBAL)
        assert load[network].sum() == pytest.approx((weights * t.hops * per_message[:, None]).sum())
        assert load[net1d.kind == 0].sum() == pytest.approx(2 * per_message.sum())  # injection + ejection
    # The same in a solved workload: bytes/s on the network = sum over jobs of rate x hops.
    w = simulate_workload([t], "adaptive", solver_rounds=4)
    expected = (w.weights[0] * t.hops * per_message[:, None]).sum() / w.iteration_s[0]
    assert w.channel_load()[network[:-1]].sum() == pytest.approx(expected)


# --- the experiment file -----------------------------------------------------------------------

GOOD = """\
name: tiny
victim:
  test: milc
  pattern: halo
  nodes: 8
  message_bytes: 64KiB
  compute_s: 0.001
aggressors:
  - name: ml
    pattern: periodic-allreduce
    nodes: 16
    message_bytes: 4MiB
    compute_s: 0.05
policies: [random-groups]
routing: [minimal]
repetitions: 1
samples: 4
system:
  groups: 4
  group_shape: 1d
  routers_per_group: 4
  nodes_per_router: 2
  global_links_per_router: 1
"""


# (text replaced, text put instead, key named, message, text of the line named: the key's own line
# or, for a missing key, its section's)
@pytest.mark.parametrize("old, new, key, message, line_text", [
    ("  nodes: 8\n", "  nodes: -3\n", "victim.nodes", "expected an integer >= 1, got -3", "  nodes: -3"),
    ("[random-groups]", "[random-groups, nearby]", "policies.1", "unknown placement policy 'nearby'",
     "policies: [random-groups, nearby]"),
    ("group_shape: 1d", "group_shape: 3d", "system.group_shape", "expected one of 1d, 2d, got '3d'",
     "  group_shape: 3d"),
    ("  nodes_per_router: 2\n", "  nodes_per_router: 2\n  routerz: 3\n", "system.routerz", "unknown key",
     "  routerz: 3"),
    ("    compute_s: 0.05\n", "", "aggressors.0.compute_s", "periodic-allreduce needs compute_s > 0", "  - name: ml"),
    ("64KiB", "12 parsecs", "victim.message_bytes", "expected a size such as 8, 486KiB",
     "  message_bytes: 12 parsecs"),
    ("[minimal]", "[minimal, fastest]", "routing.1", "expected one of minimal, adaptive, got 'fastest'",
     "routing: [minimal, fastest]"),
    ("name: ml", "name: milc", "aggressors.0.name", "job name 'milc' is used twice", "  - name: milc"),
    ("  routers_per_group: 4\n", "  rows: 2\n  routers_per_group: 4\n", "system.rows", "a 1d group has no rows/cols",
     "  rows: 2"),
    ("groups: 4", "groups: 9", "system.global_links_per_router",
     "4 routers x 1 global links = 4 global ports per group, but every group needs a link to each of the 8 others",
     "  global_links_per_router: 1"),
])
def test_experiment_errors_name_file_key_and_line(tmp_path, old, new, key, message, line_text):
    text = GOOD.replace(old, new)
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ExperimentError) as err:
        load_experiment(path)
    assert err.value.key == key
    assert str(err.value).startswith(f"{path}:{err.value.line}: {key}: ") and message in str(err.value)
    assert text.splitlines()[err.value.line - 1] == line_text


def test_overrides_and_their_errors(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(GOOD)
    exp = load_experiment(path, {"system.groups": 5, "aggressors.0.nodes": 12, "routing": ["minimal", "adaptive"]})
    assert (exp.system.groups, exp.aggressors[0].nodes, exp.routing) == (5, 12, ("minimal", "adaptive"))
    assert exp.aggressors[0].message_bytes == 4 * 2 ** 20 and exp.victim.name == "milc"
    with pytest.raises(ExperimentError, match=r"victim.nodes: expected an integer >= 1, got 0 \(set with --set\)"):
        load_experiment(path, {"victim.nodes": 0})
    # One node is a job Slurm can run, not one the simulated network (a rank per node) can.
    one = load_experiment(path, {"victim.nodes": 1})
    with pytest.raises(ExperimentError, match="victim.nodes: the simulated network runs one rank per node"):
        run_experiment(one, progress=False)
    with pytest.raises(ExperimentError, match="'aggressors.3' is not an item of a 1-item list"):
        load_experiment(path, {"aggressors.3.nodes": 4})
    assert parse_bytes("28.15MiB") == round(28.15 * 2 ** 20) and parse_bytes("10KB") == 10_000


def test_policy_mappings_and_the_example_experiment():
    exp = load_experiment(REPO / "config" / "experiments" / "interference.yaml")
    assert [p.label for p in exp.policies] == ["random-nodes", "random-routers", "random-groups", "same-group",
                                               "same-island", "different-islands"]
    assert {p.aggressors for p in exp.policies[3:]} == {"random-nodes"}  # locality classes are the victim's
    net = DragonflyNetwork(exp.system)
    for i, p in enumerate(exp.policies):  # every policy can place the example's jobs
        placed = place_jobs(net.topology, [(j.name, j.nodes, p.victim if j.role == "victim" else p.aggressors)
                                           for j in exp.jobs], np.random.default_rng(i))
        assert [len(x.nodes) for x in placed] == [j.nodes for j in exp.jobs]
        if p.victim in ("same-group", "same-island", "different-islands"):
            assert net.topology.placement(placed[0].nodes)["locality_dfplus"] == p.victim
    doc = yaml.safe_load(GOOD)
    doc["policies"] = [{"victim": "same-group", "aggressors": "random-routers"}]
    assert parse_experiment(doc).policies[0].label == "same-group/random-routers"


# --- the command line and determinism ----------------------------------------------------------

def test_cli_writes_tables_and_is_deterministic(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(GOOD)
    args = ["interference", "simulate", str(path), "--set", "routing=[minimal, adaptive]", "--set", "repetitions=2"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr()
    assert "victim slowdown" in out.out and "random-groups" in out.out and "interference tiny" in out.err
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    for name in ("jobs", "samples", "network"):
        a = pd.read_parquet(tmp_path / "a" / f"{name}.parquet")
        pd.testing.assert_frame_equal(a, pd.read_parquet(tmp_path / "b" / f"{name}.parquet"))
        pd.testing.assert_frame_equal(a, pd.read_csv(tmp_path / "a" / f"{name}.csv"), check_dtype=False)
    jobs = pd.read_parquet(tmp_path / "a" / "jobs.parquet")
    assert len(jobs) == 2 * 2 * 2  # routing x repetition x job
    assert {"slowdown_total", "slowdown_comm", "slowdown_latency", "node_list", "locality_dfplus"} <= set(jobs.columns)
    summary = InterferenceResult.read(tmp_path / "a")
    assert summary.simulated and summary.experiment == "tiny" and summary.repetitions == 2
    assert set(summary.slowdowns) == {"milc", "ml"} and summary.system.nodes == 32
    victim = jobs[jobs["job"] == "milc"].groupby(["policy", "routing"])["slowdown_latency"].median()
    assert {r: f.slowdown_latency for r, f in summary.slowdowns["milc"]["random-groups"].items()} == pytest.approx(
        victim["random-groups"].to_dict())
    # The file is the result's JSON: nothing the simulation does not write (no mode, runs, notes).
    written = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert written == summary.dump() and not {"mode", "runs", "notes"} & set(written)
    assert yaml.safe_load((tmp_path / "a" / "experiment.yaml").read_text())["repetitions"] == 2

    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("nodes: 16", "nodes: 40"))
    assert main(["interference", "simulate", str(bad), "--out", str(tmp_path / "c")]) == 2
    assert "policy 'random-groups': job 'ml' (40 nodes): random-groups" in capsys.readouterr().err


# --- a real experiment's slowdowns (hpcvar interference analyse), from a hand-made experiment ---

def _real_experiment(path: Path) -> None:
    """The books and the collated runs of a two-repetition experiment on Slurm, as `hpcvar
    interference run` leaves them: a microbenchmark victim whose medians double (8 B) and grow
    1.5x (64 KiB) next to the aggressor, and an aggressor whose mixed run of repetition 1 never
    reached the dataset."""
    from hpcvar.data.dataset import Dataset

    t0 = pd.Timestamp("2026-01-05 10:00", tz="UTC")
    book, runs, lat = [], [], []
    for rep in (0, 1):
        for w, workload in enumerate(("alone", "mixed")):
            for job, role, test, pattern in (("coll", "victim", "Collectives", "allreduce"),
                                              ("noise", "aggressor", "Aggressor", "uniform-random")):
                rid = f"site-{rep}{w}{int(role == 'aggressor')}"
                book.append({"experiment": "hand", "policy": "random-nodes", "victim_policy": "random-nodes",
                             "aggressor_policy": "random-nodes", "repetition": rep, "workload": workload,
                             "job": job, "role": role, "test": test, "pattern": pattern, "nodes": 2,
                             "node_list": "n[1-2]", "num_routers": 1, "num_groups": 1, "run_id": rid})
                if (rep, workload, job) == (1, "mixed", "noise"):
                    continue
                start = t0 + pd.Timedelta(hours=4 * rep + 2 * w)
                total = 30.0 if role == "aggressor" else (12.0 if workload == "mixed" else 10.0)
                row = {"run_id": rid, "system": "site", "app": job, "dataset": f"{job}-2", "num_nodes": 2,
                       "job_id": rid.split("-")[1], "start": start, "end": start + pd.Timedelta(seconds=total),
                       "total_time_s": total, "num_steps": 0, "state": "COMPLETED", "node_list": ["n1", "n2"],
                       "num_routers": 1, "num_groups": 1, "locality": "single-router"}
                runs.append(with_required_run_columns(row, start))
                if role == "victim":
                    for size, base in ((8, 10.0), (65536, 100.0)):
                        factor = (2.0 if size == 8 else 1.5) if workload == "mixed" else 1.0
                        lat += [{"run_id": rid, "benchmark": "collectives", "operation": "allreduce",
                                 "size_bytes": size, "pair": "", "cycle": 0, "iteration": i,
                                 "value_us": base * factor * (1 + 0.01 * (i % 3))} for i in range(9)]
                else:  # one iteration every 3 s over its 30 s; the victim's mixed run is its 2nd..14th s
                    lat += [{"run_id": rid, "benchmark": "aggressor", "operation": "uniform-random",
                             "size_bytes": 262144, "pair": "", "cycle": 0, "iteration": i,
                             "value_us": 500.0 * (1.2 if workload == "mixed" and 2 <= 3 * i <= 14 else 1.0),
                             "start_epoch_s": start.timestamp() + 3 * i} for i in range(10)]
    # The aggressor's mixed job starts with the victim's: shift the victims' mixed runs by 2 s.
    for row in runs:
        if row["app"] == "coll" and row["run_id"][-2] == "1":
            row["start"] += pd.Timedelta(seconds=2)
            row["end"] += pd.Timedelta(seconds=2)
    path.mkdir(parents=True)
    pd.DataFrame(book).to_csv(path / "experiment.csv", index=False)
    Dataset(path / "dataset").append({"runs": pd.DataFrame(runs), "latency": pd.DataFrame(lat)})


def test_a_real_experiments_slowdowns_are_written_and_read_through_the_same_result(tmp_path, capsys):
    from hpcvar.analyses.interference import analyse

    _real_experiment(tmp_path / "exp")
    result = analyse(tmp_path / "exp", tmp_path / "out")
    assert isinstance(result, InterferenceResult) and result.mode == "slurm" and not result.simulated
    assert InterferenceResult.read(tmp_path / "out") == result
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written == result.dump() and not {"seed", "samples", "system", "elapsed_s"} & set(written)
    assert result.experiment == "hand" and result.repetitions == 2
    assert result.runs.collated == 7 and result.runs.failed == []
    assert result.notes == ["random-nodes repetition 1 noise: no slowdown, mixed run site-111 (not collated)"]
    assert result.jobs["coll"].role == "victim" and result.jobs["coll"].message_bytes is None
    coll = result.slowdowns["coll"]["random-nodes"]["site"]
    assert coll.slowdown_latency == pytest.approx(np.sqrt(2.0 * 1.5))  # geometric mean over the two sizes
    assert coll.slowdown_total == pytest.approx(1.2) and coll.slowdown_max_latency is None
    noise = result.slowdowns["noise"]["random-nodes"]["site"]  # repetition 0 only
    jobs = pd.read_csv(tmp_path / "out" / InterferenceResult.table("jobs"))
    assert noise.slowdown_latency == pytest.approx(jobs.query("job == 'noise' and repetition == 0")
                                                   ["slowdown_latency"].iloc[0]) and noise.slowdown_latency > 1
    assert jobs.query("job == 'noise' and repetition == 1")["slowdown_latency"].isna().all()
    # The command prints the same result.
    assert main(["interference", "analyse", str(tmp_path / "exp"), "--analysis-out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr()
    assert f"  coll           random-nodes           1.200 {coll.slowdown_comm:7.3f}   1.732\n" in out.out
    assert "note: random-nodes repetition 1 noise: no slowdown" in out.err
    assert InterferenceResult.read(tmp_path / "cli").slowdowns == result.slowdowns


def test_a_victim_that_ran_within_one_second_met_the_aggressor_that_second():
    """sacct shows a victim of 0.1 s from 02:47:49 to 02:47:49 (as in a run of the Slurm
    experiment): the aggressor's iterations that started in that second met it, the next did not."""
    from hpcvar.analyses.interference import _latency_rows, victim_window

    t = pd.Timestamp("2026-12-01 02:47:49", tz="UTC")
    assert victim_window(pd.Series({"start": t, "end": t})) == (t.timestamp(), t.timestamp() + 1)
    # Times that are not sacct's (a manifest's, to the microsecond) are taken as they are.
    end = t + pd.Timedelta(seconds=0.25)
    assert victim_window(pd.Series({"start": t, "end": end})) == (t.timestamp(), end.timestamp())
    lat = pd.DataFrame({"run_id": "noise", "value_us": 1.0,
                        "start_epoch_s": t.timestamp() + np.array([-0.5, 0.0, 0.4, 0.999, 1.0, 1.5])})
    rows = _latency_rows(lat, "noise", victim_window(pd.Series({"start": t, "end": t})))
    assert (rows["start_epoch_s"] - t.timestamp()).tolist() == pytest.approx([0.0, 0.4, 0.999])
