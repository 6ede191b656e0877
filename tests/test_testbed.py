"""The multi-node cluster on this machine (`hpcvar dev slurm up --nodes 6 --groups 2`,
docs/testbed.md): nodes with their own hostname, /tmp and network; jobs on several nodes through
srun and mpirun; MPI across groups; the link counters collated with the topology map's component
ids; another user's traffic on the shared global link slowing a victim more than the same traffic
inside one group, and more than CPU load alone; faults; routing; a teardown that leaves nothing.

Everything a job reads or writes lives under /var/tmp (each node has a /tmp of its own)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import hostlist
import pytest

from conftest import NEEDS_MIRROR, REPO, TESTBED_USERS, machine, source_mirror, testbed  # noqa: F401  (testbed: the multi-node cluster fixture)
from hpcvar.dev import probe, slurm as dev
from hpcvar.dev import testbed as tb
from test_campaign import _hpcvar as hpcvar  # hpcvar's command line, as a user runs it

pytestmark = pytest.mark.slow
OTHER = TESTBED_USERS[0]
REFRAME = str(Path(sys.executable).with_name("reframe"))


@pytest.fixture(scope="module")
def work():
    """A directory every node sees (not /tmp), writable by the other user's jobs."""
    path = Path("/var/tmp") / f"hpcvar-testbed-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sh(env, *cmd, user=None, cwd=None, timeout=120) -> str:
    full = ["runuser", "-u", user, "--", *cmd] if user else list(cmd)
    out = subprocess.run(full, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_up_builds_the_cluster_in_seconds_and_a_second_up_is_harmless(testbed):
    assert testbed["up_s"] < 60, testbed["up"]
    assert "n[01-06] in 2 groups" in testbed["up"]
    again = hpcvar("dev", "slurm", "up", "--nodes", "6", "--groups", "2")
    assert again.returncode == 0 and "already running" in again.stdout
    other = hpcvar("dev", "slurm", "up", "--nodes", "4", "--groups", "2")
    assert other.returncode == 1 and "a cluster of another shape is running" in other.stderr
    single = hpcvar("dev", "slurm", "up")
    assert single.returncode == 1 and "down` first" in single.stderr
    status = hpcvar("dev", "slurm", "status")
    assert status.returncode == 0 and all(f"slurmd-n0{i}" in status.stdout for i in range(1, 7))


def test_nodes_have_their_own_hostname_tmp_and_network(testbed, work):
    env, spec = testbed["env"], testbed["spec"]
    names = sh(env, "srun", "-N6", "hostname", cwd=work).split()
    assert sorted(names) == spec.node_names
    # Each node writes a file named after itself into its /tmp: only its own is there.
    seen = sh(env, "srun", "-N6", "sh", "-c", "touch /tmp/mark-$(hostname); echo $(hostname) $(ls /tmp | grep mark-)",
              cwd=work).splitlines()
    assert sorted(seen) == sorted(f"{n} mark-{n}" for n in spec.node_names)
    # Its own interfaces and addresses: the management and the data network.
    addrs = sh(env, "srun", "-N1", "-w", "n05", "ip", "-br", "-4", "addr", cwd=work)
    assert spec.mgmt_ip("n05") in addrs and spec.data_ip("n05") in addrs
    assert spec.data_ip("n05").startswith("10.77.1.")  # n05 is in group 1
    sysfs = sh(env, "srun", "-N1", "-w", "n02", "ls", "/sys/class/net", cwd=work).split()
    assert sorted(sysfs) == ["data0", "lo", "mgmt0"]


def test_topology_map_and_slurm_topology_describe_the_same_wiring(testbed):
    from hpcvar.system.topology import Topology

    layout, spec = testbed["layout"], testbed["spec"]
    topo = Topology.from_file(layout.topology_map)
    assert topo.groups == ("g0", "g1") and topo.routers == ("r0", "r1")
    assert [topo.group_of(n) for n in spec.node_names] == ["g0"] * 3 + ["g1"] * 3
    links = {link["name"]: link for link in __import__("yaml").safe_load(layout.topology_map.read_text())["links"]}
    assert links["r0-r1"]["kind"] == "global" and links["r0-r1"]["rate"] == "50mbit"
    assert links["r1-n05"]["ends"] == ["r1", "n05"]
    assert "SwitchName=r0 Nodes=n[01-03]" in layout.topology_conf.read_text()
    # Slurm keeps a --switches=1 job inside one group.
    env = testbed["env"]
    nodes = sh(env, "srun", "-N3", "--switches=1", "hostname", cwd="/var/tmp").split()
    assert len({topo.group_of(n) for n in nodes}) == 1


def test_jobs_on_several_nodes_with_srun_and_mpirun_across_groups(testbed, work):
    env = {**testbed["env"], **probe.MPI_ENV}
    bindir = probe.build(work)
    out = sh(env, "srun", "-N2", "-n2", "-w", "n01,n04", "--mpi=pmix", str(bindir / "hpcvar-collectives"),
             "-s", "65536", "-c", "allreduce", "-i", "10", "-w", "2", "-o", str(work / "srun.csv"), cwd=work)
    assert "hpcvar-collectives: done rows=10" in out
    # mpirun inside an allocation of another user launches through Slurm.
    script = work / "job.sh"
    script.write_text(f"#!/bin/sh\nmpirun {bindir}/hpcvar-collectives -s 8 -c bcast -i 10 -w 2 -o {work}/mpirun.csv\n")
    script.chmod(0o755)
    job = sh(env, "sbatch", "--parsable", "-N2", "-n4", "-w", "n02,n06", "--wait", "-o", str(work / "mpirun.out"),
             str(script), user=OTHER, cwd=work, timeout=300)
    assert "done rows=10" in (work / "mpirun.out").read_text()
    # Accounting is asynchronous (slurmctld's agent queue to slurmdbd): once CI read the record
    # with one node of the two; wait for the final record, and say all of it if it never comes.
    deadline = time.monotonic() + 30
    while True:
        acct = sh(env, "sacct", "-X", "-n", "-P", "-j", job, "--format=User,State,NodeList", cwd=work)
        if acct.splitlines()[:1] == [f"{OTHER}|COMPLETED|n[02,06]"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    steps = sh(env, "sacct", "-n", "-P", "-j", job, "--format=JobID,User,State,NodeList,NNodes,Start,End", cwd=work)
    assert acct.splitlines()[0] == f"{OTHER}|COMPLETED|n[02,06]", steps


def test_a_pmix_fence_without_data_is_a_barrier_across_the_nodes(testbed, work):
    """Open MPI 4.1's MPI_Init ends in a PMIx fence without data, after which a rank may send to
    any other. Slurm completes such a fence over a tree of the step's nodes, and on fewer nodes than
    TreeWidth that tree has no edges: each node completes it alone, and a rank that left MPI_Init
    sent to one still in its modex fence, which crashed (src/hpcvar/dev/slurm.py: MPI_CONF). The
    testbed's mpi.conf takes the ring. The probe holds rank 3 back between the two fences and each
    rank counts, after the second, the ranks that have entered it."""
    env = testbed["env"]
    assert "PMIxCollFence=ring" in testbed["layout"].mpi_conf.read_text()
    flags = sh(env, "pkg-config", "--cflags", "--libs", "pmix").split()
    binary = work / "pmix_fence"
    sh(env, "gcc", "-O1", "-o", str(binary), str(REPO / "tests" / "probes" / "pmix_fence.c"), *flags)
    marks = work / "fence-marks"
    marks.mkdir()

    def launch(**extra):
        return subprocess.run(["srun", "-N4", "--ntasks-per-node=2", "-w", "n01,n02,n04,n05", "--mpi=pmix",
                               "--kill-on-bad-exit=0", "env", f"DIR={marks}", "SLOW_RANK=3", "DELAY_US=300000",
                               str(binary)], env={**env, **extra}, capture_output=True, text=True, timeout=120,
                              cwd=work)

    held = launch()
    assert held.returncode == 0, held.stdout + held.stderr
    assert sorted(held.stdout.splitlines()) == [f"rank {r}: barrier held" for r in range(8)]
    # Slurm's own choice for a fence without data (the tree, which SLURM_PMIX_FENCE names for one
    # step): the ranks of the other nodes leave it while rank 3 sleeps.
    tree = launch(SLURM_PMIX_FENCE="tree")
    assert tree.returncode != 0
    early = [line for line in tree.stdout.splitlines() if "left the fence with" in line]
    assert {line.split(":")[0] for line in early} >= {"rank 0", "rank 1", "rank 4", "rank 5", "rank 6", "rank 7"}, \
        tree.stdout + tree.stderr


@pytest.mark.whole_machine
def test_another_users_traffic_on_the_global_link_slows_the_victim_most(testbed, work):
    """Medians over three repetitions, the backgrounds interleaved: the aggressor across the
    groups (four TCP connections each way, ``probe.STREAMS``) shares the victim's global link;
    inside one group it shares only the CPUs, as the CPU-only control does. Its traffic shows on
    the global link's queue. Measured with the machine to itself: another test's load on the two
    CPUs is a CPU hog the controls do not know. (With one connection each way the aggressor
    across came out at 1.22x and 1.04x the CPU control in two full suites: the victim's share of
    the link followed that connection's congestion window.)"""
    with machine(exclusive=True):
        table = probe.measure(testbed["spec"], testbed["layout"].root, work / "probe", testbed["env"], OTHER,
                              repetitions=3, iterations=30)
    med = table.groupby("background")["median_ms"].median()
    sent = table.groupby("background")["gl_tx_bytes"].median()
    held = table.groupby("background")["gl_overlimits"].median()
    print(table.to_string())
    assert med["aggressor-across"] > 1.25 * max(med["aggressor-inside"], med["cpu"]), med.to_dict()
    assert med["aggressor-across"] > 1.6 * med["alone"], med.to_dict()
    # The link's counters show the other job's traffic when it crosses, and only then.
    assert sent["aggressor-across"] > 1.6 * sent["alone"], sent.to_dict()
    assert abs(sent["aggressor-inside"] - sent["alone"]) < 0.1 * sent["alone"], sent.to_dict()
    assert held["aggressor-across"] > 1.5 * max(held["alone"], held["aggressor-inside"], held["cpu"]), held.to_dict()


def _reframe(env, prefix: Path, *args, nodes="2", timeout=900) -> subprocess.CompletedProcess:
    full = {**env, "HPCVAR_RFM_PREFIX": str(prefix), "HPCVAR_RFM_SIZE": "toy", "HPCVAR_OFFLINE": "1",
            "HPCVAR_RFM_NODES": nodes}
    return subprocess.run([REFRAME, "-C", "config/reframe/settings.py", "--system", "testbed", *args],
                          cwd=REPO, env=full, capture_output=True, text=True, timeout=timeout)


def test_a_round_imports_and_collates_with_the_link_counters_of_the_map(testbed, work):
    """The suite's AMG proxy and collectives on 2 nodes placed across the groups; imported with the
    map and the link store, collated: the routers' link counters become the runs' job counters
    (with the global link's traffic) and the other routers' their system counters."""
    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.util.anonymise import Pseudonymiser

    layout, env = testbed["layout"], testbed["env"]
    prefix = work / "rfm"
    out = _reframe(env, prefix, "-c", "reframe_tests/apps/amgproxy", "-c", "reframe_tests/microbenchmarks", "-R",
                   "-n", "AMGProxy", "-n", "Collectives", "-S", "Collectives.iterations=30",
                   "-J", "nodelist=n01,n04", "-r")
    assert out.returncode == 0, out.stdout[-4000:]
    result = import_reports(sorted((prefix / "reports").glob("*.json")), work / "raw", topology=layout.topology_map,
                            ldms_store=layout.ldms)
    assert len(result.imported) == 2 and not result.errors, result
    collate(work / "raw", work / "dataset", Pseudonymiser(b"salt"))
    ds = Dataset(work / "dataset")
    runs = ds.read("runs").set_index("dataset")
    assert set(runs.index) == {"amgproxy-2", "collectives-2"}
    # Two nodes that one group could hold, spread over two: "fragmented" (hpcvar.system.topology).
    assert (runs["num_groups"] == 2).all() and (runs["locality"] == "fragmented").all()
    steps = ds.read("step_counters")
    proxy = steps[steps["run_id"] == runs.loc["amgproxy-2", "run_id"]].pivot_table(index="step", columns="counter",
                                                                                    values="value")
    assert len(proxy) == 6 and (proxy["GL_TX_BYTES"] > 0).all() and (proxy["NL_TX_BYTES"] > 0).all()
    assert {"net.tx_bytes", "net.rx_bytes"} <= set(proxy.columns)  # the node samplers' counters beside them
    # Job counters of the two routers: at least what the node samplers say the nodes sent.
    assert proxy["NL_TX_BYTES"].sum() >= 0.9 * proxy["net.rx_bytes"].sum()
    run_counters = ds.read("run_counters")
    coll = run_counters[run_counters["run_id"] == runs.loc["collectives-2", "run_id"]]
    assert coll.loc[(coll["scope"] == "job") & (coll["counter"] == "GL_TX_BYTES"), "value"].iloc[0] > 30 * 8


def _stop_slurmd(layout, node: str) -> None:
    pid = int((layout.run / f"slurmd-{node}.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)


@NEEDS_MIRROR
def test_table_i_codes_from_the_mirror_pass_every_repetition_at_2_and_4_nodes(testbed, work):
    """Table I's codes built from the source mirror, toy-sized, at 2 and 4 nodes (the 4 across the
    groups), one job at a time and no retries: every run passes and holds every time step its test
    expects; none crashed at start-up (test_a_pmix_fence_without_data_is_a_barrier_across_the_nodes).
    A code whose archive the mirror lacks is named and left out."""
    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.util.anonymise import Pseudonymiser
    from test_real_apps import APP_TESTS, SOURCES  # Table I's tests -> (sources.yaml entry, dataset prefix)

    mirror = source_mirror()
    have = [t for t, (e, _) in APP_TESTS.items()
            if all((mirror / a).is_file()
                   for a in [SOURCES[e]["mirror"], *(d["mirror"] for d in (SOURCES[e].get("deps") or {}).values())])]
    assert have, f"no Table I code in the mirror {mirror}"
    prefix = work / "rfm-table1"
    env = {**testbed["env"], "HPCVAR_SOURCE_MIRROR": str(mirror), "HPCVAR_BUILD_CACHE": str(work / "build-cache")}
    out = _reframe(env, prefix, "-c", "reframe_tests/apps", "-R", "-n", f"^({'|'.join(have)})([ _%]|$)",
                   "--exec-policy=serial", "-S", "mpip=1", "-r", nodes="2,4", timeout=3600)
    cases = [c for r in json.loads(max((prefix / "reports").glob("*.json")).read_text())["runs"]
             for c in r["testcases"] if not c.get("fixture")]
    assert sorted(c["display_name"].split(" /")[0] for c in cases) == sorted(
        f"{t} %num_nodes={n}" for t in have for n in (2, 4)), out.stdout[-4000:]
    assert all(c["result"] == "pass" for c in cases), out.stdout[-6000:]
    result = import_reports(sorted((prefix / "reports").glob("*.json")), work / "raw-table1",
                            topology=testbed["layout"].topology_map, ldms_store=testbed["layout"].ldms)
    assert len(result.imported) == len(cases) and not result.errors, result
    collate(work / "raw-table1", work / "dataset-table1", Pseudonymiser(b"salt"))
    runs = Dataset(work / "dataset-table1").read("runs")
    expected = {c["display_name"].split(" /")[0]: c["expected_steps"] for c in cases}
    assert len(runs) == len(cases) and (runs["state"] == "COMPLETED").all()
    assert sorted(runs["num_steps"]) == sorted(expected.values())
    assert set(runs.loc[runs["num_nodes"] == 4, "num_groups"]) == {2}  # 4 of the 6 nodes span both groups


def test_faults_end_jobs_as_slurm_ends_them_and_are_collated_as_failed_runs(testbed, work):
    """A node's slurmd killed mid-job: NODE_FAIL. A node link down mid-job: no MPI traffic, so the
    job runs into its time limit: TIMEOUT. Both are failed runs with their state; the run that
    completed beside them is collated; `up` brings the node and the link back."""
    from hpcvar.campaign.reframe_import import import_reports
    from hpcvar.collate import collate
    from hpcvar.data.dataset import Dataset
    from hpcvar.util.anonymise import Pseudonymiser

    layout, env, spec = testbed["layout"], testbed["env"], testbed["spec"]
    prefix = work / "faults"
    long_proxy = ["-S", "AMGProxy.expected_steps=400", "-S", "AMGProxy.time_limit=1m"]

    def start(name, nodes, *extra):
        return subprocess.Popen([REFRAME, "-C", "config/reframe/settings.py", "--system", "testbed", "-c",
                                 "reframe_tests/apps/amgproxy", "-R", "-n", "AMGProxy", *long_proxy, *extra,
                                 "-J", f"nodelist={nodes}", "--report-file", str(prefix / f"{name}.json"), "-r"],
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                env={**env, "HPCVAR_RFM_PREFIX": str(prefix / name), "HPCVAR_RFM_SIZE": "toy",
                                     "HPCVAR_OFFLINE": "1", "HPCVAR_RFM_NODES": "2"})

    def running_on(node, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lists = sh(env, "squeue", "-h", "-t", "R", "-o", "%N", cwd=work).split()
            if any(node in hostlist.expand_hostlist(nodes) for nodes in lists):
                return
            time.sleep(0.5)
        pytest.fail(f"no job running on {node}")

    node_fail = start("nodefail", "n01,n04")
    running_on("n04")
    time.sleep(4)
    _stop_slurmd(layout, "n04")
    link = start("linkdown", "n02,n05")
    running_on("n05")
    time.sleep(4)
    subprocess.run(["ip", "-n", spec.router_ns(1), "link", "set", "n05", "down"], check=True)
    node_fail.wait(timeout=300)
    link.wait(timeout=300)
    # The cluster comes back with `up`: the node's slurmd, the link.
    up = hpcvar("dev", "slurm", "up", "--nodes", "6", "--groups", "2")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "links set up again: r1:n05" in up.stdout or "slurmd-n04: started" in up.stdout
    assert not tb.links_down(spec)
    deadline = time.monotonic() + 60
    while dev.node_state(layout, "n04") not in dev.USABLE and time.monotonic() < deadline:
        time.sleep(1)
    assert dev.node_state(layout, "n04") in dev.USABLE
    # A good run beside them, then everything into one raw directory and dataset.
    good = _reframe(env, prefix / "good", "-c", "reframe_tests/apps/amgproxy", "-R", "-n", "AMGProxy",
                    "-J", "nodelist=n03,n06", "--report-file", str(prefix / "good.json"), "-r")
    assert good.returncode == 0, good.stdout[-3000:]
    reports = [prefix / f"{n}.json" for n in ("nodefail", "linkdown", "good")]
    result = import_reports(reports, work / "fault-raw", topology=layout.topology_map, ldms_store=layout.ldms)
    assert len(result.imported) == 3, result
    collated = collate(work / "fault-raw", work / "fault-dataset", Pseudonymiser(b"salt"))
    states = {f["job_id"]: f["state"] for f in collated.failed}
    assert sorted(states.values()) == ["NODE_FAIL", "TIMEOUT"], collated.failed
    assert all(f.get("output") for f in collated.failed)  # the reason the output gives (truncated run)
    ds = Dataset(work / "fault-dataset")
    assert list(ds.read("runs")["node_list"].map(tuple)) == [("n03", "n06")]
    assert {q["state"] for q in ds.quarantine() if q["kind"] == "failed-run"} == {"NODE_FAIL", "TIMEOUT"}


def test_valiant_routing_takes_an_intermediate_group(testbed, work):
    """Three groups (a testbed of its own, then the module's comes back): minimal routing sends
    g0 -> g2 traffic over the link r0-r2; Valiant over r0-r1 and r1-r2, per flow."""
    down = hpcvar("dev", "slurm", "down")
    assert down.returncode == 0, down.stderr
    try:
        up = hpcvar("dev", "slurm", "up", "--nodes", "3", "--groups", "3", "--routing", "valiant")
        assert up.returncode == 0, up.stdout + up.stderr
        spec = tb.load_spec(testbed["layout"].root)
        env = {**testbed["env"], **probe.MPI_ENV}
        bindir = probe.build(work / "valiant")
        store = testbed["layout"].ldms

        def traffic() -> dict[str, float]:
            t0 = time.time()
            sh(env, "srun", "-N2", "-n2", "-w", "n01,n03", "--mpi=pmix", str(bindir / "hpcvar-collectives"),
               "-s", "262144", "-c", "allreduce", "-i", "10", "-w", "2", "-o", str(work / "v.csv"), cwd=work)
            time.sleep(1.5)
            t1 = time.time() - 1.0
            return {f"{r}>{d}": probe.link_window(store, t0, t1, r, d)["tx_bytes"]
                    for r, d in (("r0", "r1"), ("r0", "r2"), ("r1", "r2"))}

        valiant = traffic()
        assert valiant["r0>r1"] > 1e6 and valiant["r1>r2"] > 1e6 and valiant["r0>r2"] < 1e5, valiant
        route = hpcvar("dev", "slurm", "routing", "--routing", "minimal")
        assert route.returncode == 0, route.stderr
        minimal = traffic()
        assert minimal["r0>r2"] > 1e6 and minimal["r0>r1"] < 1e5, minimal
        assert tb.load_spec(testbed["layout"].root).routing == "valiant"  # up's shape; routing is switched live
        assert json.loads(testbed["layout"].info.read_text())["testbed"]["routing"] == "minimal"
    finally:
        hpcvar("dev", "slurm", "down")
        up = hpcvar("dev", "slurm", "up", "--nodes", "6", "--groups", "2", "--link-etc",
                    *(a for u in TESTBED_USERS for a in ("--extra-user", u)))
        assert up.returncode == 0, up.stdout + up.stderr


def test_down_leaves_nothing_and_up_repairs_a_half_built_network(testbed):
    layout = testbed["layout"]
    # A crash: a node namespace and the sampler gone behind the cluster's back.
    subprocess.run(["ip", "netns", "del", "hpcvar-n03"], check=True)
    repaired = hpcvar("dev", "slurm", "up", "--nodes", "6", "--groups", "2")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "network: 6 nodes in 2 groups" in repaired.stdout
    env = testbed["env"]
    assert sorted(sh(env, "srun", "-N6", "hostname", cwd="/var/tmp").split()) == testbed["spec"].node_names
    down = hpcvar("dev", "slurm", "down")
    assert down.returncode == 0, down.stderr
    assert tb.namespaces() == []
    assert not Path(f"/sys/class/net/{tb.HOST_IF}").exists()
    assert not [m for m in Path("/proc/mounts").read_text().splitlines() if str(layout.root / "uts") in m]
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith("slurmd")]
    # The module's fixture takes it down again: up for it.
    up = hpcvar("dev", "slurm", "up", "--nodes", "6", "--groups", "2", "--link-etc",
                *(a for u in TESTBED_USERS for a in ("--extra-user", u)))
    assert up.returncode == 0


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().rsplit("/", 1)[-1]
    except OSError:
        return ""


def test_without_root_up_says_what_it_needs(tmp_path):
    """As a user without root: the message says so. (The project's Python runs from a virtual
    environment that may live under /root; the check is the function `up` calls first.)"""
    code = ("import os, shutil, subprocess\nfrom hpcvar.dev import testbed\n"  # imported while /root is readable
            "os.setgid(%d); os.setuid(%d)\n"
            "try:\n    testbed.check_privileges()\nexcept testbed.TestbedError as exc:\n    print(exc)\n")
    import pwd

    pw = pwd.getpwnam(OTHER)
    out = subprocess.run([sys.executable, "-c", code % (pw.pw_gid, pw.pw_uid)], capture_output=True, text=True,
                         timeout=60)
    assert "needs root" in out.stdout and "CAP_NET_ADMIN" in out.stdout, out.stdout + out.stderr
