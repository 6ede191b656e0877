"""Interference experiments for real (hpcvar.campaign.interference, hpcvar.analyses.interference).

Without a cluster: sinfo's free nodes, the policies' node lists on a synthetic dragonfly, and the
ReFrame command lines each job gets. On the local Slurm cluster (`hpcvar dev slurm up`): a toy
experiment (one node, so every policy degenerates to it) whose victim and aggressor really run
alone and together, checked through their sacct records and the experiment's tables.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import hostlist
import yaml

from hpcvar.campaign import interference as real
from hpcvar.experiments.spec import ExperimentError, SlurmSpec, parse_experiment
from hpcvar.results.interference import InterferenceResult
from hpcvar.system.topology import Topology

REPO = Path(__file__).resolve().parents[1]


def test_sinfo_free_nodes_skip_busy_and_flagged_states():
    text = "n1|idle\nn2|mixed\nn3|idle*\nn4|allocated\nn1|idle\nn5|idle~\nn6|drained\nn7|IDLE\n"
    nodes, free = real.parse_sinfo(text, ("idle",))
    assert nodes == ["n1", "n2", "n3", "n4", "n5", "n6", "n7"]
    assert free == ["n1", "n7"]  # not responding (*) and powered down (~) nodes are not free
    assert real.parse_sinfo(text, ("idle", "mixed"))[1] == ["n1", "n2", "n7"]
    with pytest.raises(real.ExperimentRunError, match="expected NODE|STATE"):
        real.parse_sinfo("n1 idle\n", ("idle",))


@pytest.fixture()
def topo(tmp_path) -> Topology:
    """Two islands of two groups, each group two routers of two nodes (16 nodes)."""
    rows = ["node,router,group,island"]
    for g in range(4):
        for r in range(2):
            for n in range(2):
                rows.append(f"n{g}{r}{n},r{g}{r},g{g},i{g // 2}")
    path = tmp_path / "topology.csv"
    path.write_text("\n".join(rows) + "\n")
    return Topology.from_file(path)


def experiment(policies, victim_nodes=2, aggressor_nodes=4, **slurm):
    return parse_experiment({
        "name": "unit", "seed": 3, "repetitions": 1, "routing": ["minimal"], "policies": policies,
        "victim": {"test": "collectives", "pattern": "allreduce", "nodes": victim_nodes, "message_bytes": 8,
                   "options": ["-S", "Collectives.iterations=50"]},
        "aggressors": [{"name": "ml", "pattern": "periodic-allreduce", "nodes": aggressor_nodes,
                        "message_bytes": "1MiB", "compute_s": 0.05}],
        "slurm": {"system": "local-slurm", **slurm}})


def test_placements_follow_the_policy_among_the_free_nodes(topo):
    busy = {"n000", "n310"}  # group g0 and g3 are not wholly free
    free = [n for n in topo.compute_nodes if n not in busy]
    exp = experiment(["random-groups", "same-island", "random-routers"])
    groups = real.choose_placements(exp, 0, 0, topo, free, share=False)
    assert [p.job for p in groups] == ["collectives", "ml"]
    for p in groups:  # whole free groups only: g1 and g2, one job each
        assert set(p.groups) <= {"g1", "g2"} and len(p.groups) == 1
        assert not set(p.nodes) & busy
    assert set(groups[0].nodes).isdisjoint(groups[1].nodes)
    island = real.choose_placements(exp, 1, 0, topo, free, share=False)[0]
    assert len(island.groups) == 2 and len(island.islands) == 1  # the victim: two groups of one island
    routers = real.choose_placements(exp, 2, 0, topo, free, share=False)
    assert all(len(p.routers) == p.nodes.__len__() // 2 for p in routers)  # whole routers
    # The same seed, policy and repetition give the same node lists (a resumed experiment keeps them).
    assert real.choose_placements(exp, 0, 0, topo, free, share=False) == groups
    assert hostlist.expand_hostlist(groups[0].nodelist) == list(groups[0].nodes)  # what --nodelist gets


def test_too_few_free_nodes_say_so_and_sharing_lets_jobs_overlap(topo):
    exp = experiment(["random-nodes"], victim_nodes=2, aggressor_nodes=2)
    with pytest.raises(real.ExperimentRunError, match=r"random-nodes.*2 free nodes.*share_nodes: true"):
        real.choose_placements(exp, 0, 0, topo, ["n000", "n001"], share=False)
    shared = real.choose_placements(exp, 0, 0, topo, ["n000", "n001"], share=True)
    assert [set(p.nodes) for p in shared] == [{"n000", "n001"}, {"n000", "n001"}]


def test_reframe_command_pins_the_nodes_and_passes_the_aggressor_spec(topo, tmp_path):
    exp = experiment(["random-nodes"], **{"options": ["--max-retries=0"]})
    placements = real.choose_placements(exp, 0, 0, topo, topo.compute_nodes, share=False)
    victim = real.Step(exp.victim, placements[0], "alone", tmp_path / "alone-collectives.json", "hpcvar-unit-v")
    cmd = real.reframe_command(victim, exp.slurm)
    assert cmd[cmd.index("--system") + 1] == "local-slurm" and cmd[cmd.index("-n") + 1] == r"^Collectives\b"
    assert f"nodelist={placements[0].nodelist}" in cmd and "job-name=hpcvar-unit-v" in cmd
    assert cmd[-3:] == ["--report-file", str(tmp_path / "alone-collectives.json"), "-r"]
    assert "--max-retries=0" in cmd and "Collectives.iterations=50" in cmd
    env = real.reframe_env(victim, tmp_path)
    assert env["HPCVAR_RFM_NODES"] == "microbenchmarks:2" and env["HPCVAR_RFM_DB"].startswith(str(tmp_path))
    ml = real.Step(exp.aggressors[0], placements[1], "mixed", tmp_path / "mixed-ml.json", "hpcvar-unit-a", 90.0)
    cmd = real.reframe_command(ml, exp.slurm)
    assert cmd[cmd.index("-n") + 1] == r"^Aggressor\b"
    sets = {cmd[i + 1] for i, c in enumerate(cmd) if c == "-S"}
    assert {"Aggressor.pattern=periodic-allreduce", "Aggressor.message_bytes=1048576", "Aggressor.compute_s=0.05",
            "Aggressor.duration_s=90.0", "Aggressor.time_limit=12m"} <= sets
    with pytest.raises(real.ExperimentRunError, match="test 'lammps' is not a test of the suite"):
        real.test_of(parse_experiment({**exp.document, "victim": {**exp.document["victim"], "test": "lammps"}}).victim)


def test_relative_paths_of_the_file_are_taken_from_the_current_directory(tmp_path, monkeypatch):
    """ReFrame runs in the current directory: the file's relative paths are looked up there (the
    project directory has the default configuration and checks), and a missing one is named with
    its key before anything is submitted."""
    exp = experiment(["random-nodes"])
    monkeypatch.chdir(REPO)
    real.check_paths(exp.slurm)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(real.ExperimentRunError, match=r"slurm.reframe_config: config/reframe/settings.py not found "
                                                      rf"\(relative to the current directory {tmp_path}\)"):
        real.run(exp, tmp_path / "out")
    assert not (tmp_path / "out" / "placements").exists()
    spec = SlurmSpec(reframe_config=str(REPO / "config" / "reframe" / "settings.py"),
                     checks=(str(REPO / "reframe_tests"),), topology="site/topology.csv")
    real.check_paths(spec)  # absolute paths work from anywhere
    with pytest.raises(real.ExperimentRunError, match=r"slurm.topology: site/topology.csv not found \(relative to"):
        real.topology_for(spec, ["n1"], tmp_path)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "topology.csv").write_text("node,router,group\nn1,r1,g1\n")
    assert real.topology_for(spec, ["n1"], tmp_path) == Path("site/topology.csv")


def test_slurm_section_is_validated():
    with pytest.raises(ExperimentError, match="slurm.share_nodes: expected true or false"):
        experiment(["random-nodes"], share_nodes="yes")
    with pytest.raises(ExperimentError, match="slurm.colour: unknown key"):
        experiment(["random-nodes"], colour="blue")
    exp = experiment(["random-nodes"], victim_nodes=1, free_states=["idle", "mixed"])
    assert exp.slurm == SlurmSpec(system="local-slurm", free_states=("idle", "mixed"))
    assert exp.victim.nodes == 1  # a 1-node job is fine on a cluster (the simulator refuses it: test_interference)


# --- on the local Slurm cluster ------------------------------------------------------------------

# The victim's mixed run must end inside the aggressor's (checked below): on a loaded CI machine,
# 2,000 iterations beside the aggressor took 20 s, starting 8 s into a 25 s aggressor; 1,000
# iterations and a 30 s aggressor leave it room.
TOY = {
    "name": "toy",
    "victim": {"test": "collectives", "pattern": "allreduce", "nodes": 1, "message_bytes": 65536,
               "options": ["-S", "Collectives.iterations=1000", "-S", "Collectives.collectives=allreduce,alltoall",
                           "-S", "Collectives.sizes=8,65536"]},
    "aggressors": [{"name": "noise", "pattern": "uniform-random", "nodes": 1, "message_bytes": "256KiB",
                    "messages": 4, "compute_s": 0.0}],
    "policies": ["random-nodes"], "routing": ["minimal"], "repetitions": 1,
    "slurm": {"system": "local-slurm", "share_nodes": True, "free_states": ["idle", "mixed"],
              "aggressor_duration_s": 30, "settle_s": 2},
}


@pytest.fixture(scope="module")
def cluster():
    from hpcvar.dev import slurm as dev

    if os.geteuid() != 0:
        pytest.fail("the Slurm dev cluster needs root")
    up = subprocess.run([sys.executable, "-m", "hpcvar", "dev", "slurm", "up"], capture_output=True, text=True,
                        timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    yield dev.slurm_env(dev.Layout(dev.state_dir()))
    subprocess.run([sys.executable, "-m", "hpcvar", "dev", "slurm", "down"], capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def toy_run(cluster, tmp_path_factory):
    base = tmp_path_factory.mktemp("interference-slurm")
    # Run from outside the project: its ReFrame configuration and checks by absolute paths.
    suite = {"reframe_config": str(REPO / "config" / "reframe" / "settings.py"), "checks": [str(REPO / "reframe_tests")]}
    (base / "toy.yaml").write_text(yaml.safe_dump({**TOY, "slurm": {**TOY["slurm"], **suite}}, sort_keys=False))
    env = {**cluster, "HPCVAR_SALT": "toy-salt"}
    out = subprocess.run([sys.executable, "-m", "hpcvar", "interference", "run", str(base / "toy.yaml"), "--out",
                          str(base / "out")], capture_output=True, text=True, env=env, timeout=1200, cwd=base)
    return base / "out", out, env


@pytest.mark.slow
def test_a_real_experiment_runs_alone_and_mixed_and_keeps_its_books(toy_run):
    out, proc, env = toy_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    book = pd.read_csv(out / "experiment.csv")
    assert sorted(zip(book["workload"], book["job"])) == [("alone", "collectives"), ("alone", "noise"),
                                                          ("mixed", "collectives"), ("mixed", "noise")]
    assert (book["node_list"] == book["node_list"].iloc[0]).all() and book["run_id"].is_unique
    from hpcvar.data.dataset import Dataset

    ds = Dataset(out / "dataset")
    runs = ds.read("runs").set_index("run_id")
    assert set(book["run_id"]) == set(runs.index) and (runs["state"] == "COMPLETED").all()
    by = book.set_index(["workload", "job"])["run_id"]
    # Slurm's own records: the victim's mixed run ran while the aggressor's mixed job did (its
    # neighbourhood holds that job), and its alone run while no aggressor of the experiment did.
    neigh = ds.read("neighbourhood")
    aggr_jobs = set(runs.loc[[by["mixed", "noise"], by["alone", "noise"]], "job_id"])
    mixed_neigh = set(neigh.loc[neigh["run_id"] == by["mixed", "collectives"], "job_id"])
    alone_neigh = set(neigh.loc[neigh["run_id"] == by["alone", "collectives"], "job_id"])
    assert runs.loc[by["mixed", "noise"], "job_id"] in mixed_neigh and not aggr_jobs & alone_neigh
    v, a = runs.loc[by["mixed", "collectives"]], runs.loc[by["mixed", "noise"]]
    assert a["start"] <= v["start"] and v["end"] <= a["end"]
    # The tables agree with the dataset they come from.
    jobs = pd.read_csv(out / "jobs.csv").set_index("job")
    lat = ds.read("latency")
    alone_lat = lat[lat["run_id"] == by["alone", "collectives"]]
    assert len(alone_lat) == 2 * 2 * 1000
    assert jobs.loc["collectives", "latency_alone_us"] == pytest.approx(alone_lat["value_us"].mean())
    medians = lambda r: lat[lat["run_id"] == r].groupby(["operation", "size_bytes"])["value_us"].median()  # noqa: E731
    ratio = medians(by["mixed", "collectives"]) / medians(by["alone", "collectives"])
    assert jobs.loc["collectives", "slowdown_latency"] == pytest.approx(np.exp(np.log(ratio).mean()))
    assert jobs.loc["collectives", "slowdown_total"] == pytest.approx(v["total_time_s"] /
                                                                      runs.loc[by["alone", "collectives"], "total_time_s"])
    samples = pd.read_parquet(out / "samples.parquet")
    mixed_aggr = lat[lat["run_id"] == by["mixed", "noise"]]
    # sacct's whole seconds: the victim ran between its start and the end of its end's second (a
    # victim of under a second often has start = end).
    assert v["end"] == v["end"].floor("s")
    inside = mixed_aggr[(mixed_aggr["start_epoch_s"] >= v["start"].timestamp())
                        & (mixed_aggr["start_epoch_s"] < v["end"].timestamp() + 1)]
    got = samples[(samples["job"] == "noise") & (samples["workload"] == "mixed")]
    assert 0 < len(got) == len(inside) < len(mixed_aggr)  # only the iterations that met the victim
    assert all(np.isfinite(jobs.loc[j, s]) and jobs.loc[j, s] > 0 for j in ("collectives", "noise")
               for s in ("slowdown_total", "slowdown_comm", "slowdown_latency"))
    summary = InterferenceResult.read(out)
    assert summary.mode == "slurm" and summary.runs.collated == 4 and not summary.runs.failed
    assert summary.slowdowns["collectives"]["random-nodes"]["site"].slowdown_latency == pytest.approx(
        jobs.loc["collectives", "slowdown_latency"])


@pytest.mark.slow
def test_running_the_experiment_again_submits_nothing(toy_run):
    out, proc, env = toy_run
    assert proc.returncode == 0
    before = (out / "experiment.csv").read_text()
    # One fixed start for both listings: a window relative to now drops the jobs that age out of
    # it while the experiment runs again (on a cluster up for hours, as in a full local run).
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 7200))
    jobs = lambda: subprocess.run(["sacct", "--allusers", "-X", "-n", "-P", "-o", "JobID", "-S", since],  # noqa: E731
                                  capture_output=True, text=True, env=env).stdout.split()
    submitted = jobs()
    again = subprocess.run([sys.executable, "-m", "hpcvar", "interference", "run", str(out.parent / "toy.yaml"),
                            "--out", str(out)], capture_output=True, text=True, env=env, timeout=600,
                           cwd=out.parent)
    assert again.returncode == 0, again.stderr[-3000:]
    assert jobs() == submitted and (out / "experiment.csv").read_text() == before
    assert "collated 0 new runs" in again.stdout


@pytest.mark.slow
def test_the_workflow_runs_the_experiment_on_slurm_with_the_profile(cluster, tmp_path):
    """`snakemake --profile profiles/local-slurm` with interference.mode: slurm: the rule runs the
    experiment where Snakemake runs (ReFrame submits the jobs) and the tables land where the report
    reads them."""
    import shutil

    from conftest import snakemake

    for item in ("Snakefile", "workflow", "config"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    (tmp_path / "reframe_tests").symlink_to(REPO / "reframe_tests")  # the project's suite: ReFrame runs here
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump({**TOY, "slurm": {**TOY["slurm"], "aggressor_duration_s": 15}},
                                                      sort_keys=False))
    (tmp_path / "run.yaml").write_text("interference:\n  experiment: toy.yaml\n  mode: slurm\n")
    target = "results/analyses/interference/summary.json"
    out = snakemake(target, "--profile", str(REPO / "profiles" / "local-slurm"), "--configfile", "run.yaml",
                    cwd=tmp_path, env={**cluster, "HPCVAR_SALT": "wf-salt"}, timeout=1200)
    assert out.returncode == 0, out.stderr[-4000:]
    summary = InterferenceResult.read((tmp_path / target).parent)  # where the report reads it
    assert summary.mode == "slurm" and summary.runs.collated == 4
    book = pd.read_csv(tmp_path / "results" / "interference" / "experiment.csv")
    jobs = pd.read_csv(tmp_path / "results" / "analyses" / "interference" / "jobs.csv")
    assert len(book) == 4 and sorted(jobs["job"]) == ["collectives", "noise"]
    assert set(jobs["run_id_alone"]) | set(jobs["run_id_mixed"]) == set(book["run_id"])
    assert "slowdown (median over repetitions)" in (tmp_path / "results" / "logs" / "interference.log").read_text()
