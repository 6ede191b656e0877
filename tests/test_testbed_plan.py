"""The testbed's plan without building it (no root needed): the shape's validation, which node is
in which group, the addresses, the topology map and Slurm's topology, the link-counter names.
tests/test_testbed.py builds it for real."""

from __future__ import annotations

import ipaddress

import numpy as np
import pandas as pd
import pytest
import yaml

from hpcvar.dev import probe
from hpcvar.dev import testbed as tb
from hpcvar.dev.linksampler import store_files
from hpcvar.parsers.ldms import StoreCsvWriter
from hpcvar.system import linkcounters
from hpcvar.system.topology import Topology


@pytest.mark.parametrize("kwargs,message", [
    ({"nodes": 6, "groups": 1}, "needs two groups"),
    ({"nodes": 2, "groups": 3}, "every group needs a node"),
    ({"nodes": 6, "groups": 2, "global_rate": "fast"}, "global-rate 'fast'"),
    ({"nodes": 6, "groups": 2, "routing": "valiant"}, "three groups or more"),
    ({"nodes": 6, "groups": 2, "routing": "ugal"}, "routing 'ugal'"),
])
def test_impossible_shapes_are_refused_by_name(kwargs, message):
    with pytest.raises(tb.TestbedError, match=message):
        tb.TestbedSpec(**kwargs)


def test_nodes_fill_the_groups_in_order_the_first_taking_one_more():
    spec = tb.TestbedSpec(nodes=7, groups=3)
    assert [spec.nodes_of(g) for g in range(3)] == [["n01", "n02", "n03"], ["n04", "n05"], ["n06", "n07"]]
    assert spec.global_links == [(0, 1), (0, 2), (1, 2)]


def test_every_address_is_unique_and_in_its_network():
    spec = tb.TestbedSpec(nodes=12, groups=4)
    mgmt = [spec.mgmt_ip(n) for n in spec.node_names]
    data = [spec.data_ip(n) for n in spec.node_names]
    links = [ip for a, b in spec.global_links for ip in spec.link_ips(a, b)]
    assert len(set(mgmt + data + links + [tb.HEAD_IP])) == len(mgmt) + len(data) + len(links) + 1
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("10.78.0.0/24") for ip in mgmt)
    for node in spec.node_names:
        net = ipaddress.ip_network(f"10.77.{spec.group_of(node)}.0/24")
        assert ipaddress.ip_address(spec.data_ip(node)) in net
    # Both ends of a link share its /30; each end's address is the one the other router routes to.
    for a, b in spec.global_links:
        ip_a, ip_b = spec.link_ips(a, b)
        assert ipaddress.ip_interface(f"{ip_a}/30").network == ipaddress.ip_interface(f"{ip_b}/30").network
        assert spec.link_ips(b, a) == (ip_b, ip_a)


def test_the_topology_map_reads_back_as_the_wiring(tmp_path):
    spec = tb.TestbedSpec(nodes=7, groups=3, global_rate="40mbit")
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(tb.topology_map(spec)))
    topo = Topology.from_file(path)
    assert topo.groups == ("g0", "g1", "g2") and topo.routers == ("r0", "r1", "r2")
    assert {n: topo.router_of(n) for n in spec.node_names} == {n: f"r{spec.group_of(n)}" for n in spec.node_names}
    links = yaml.safe_load(path.read_text())["links"]
    assert [(link["name"], link["rate"]) for link in links if link["kind"] == "global"] == [
        ("r0-r1", "40mbit"), ("r0-r2", "40mbit"), ("r1-r2", "40mbit")]
    assert sum(link["kind"] == "node" for link in links) == 7
    # Slurm's tree: a leaf switch per group router, one top switch above them.
    conf = tmp_path / "topology.conf"
    conf.write_text(tb.slurm_topology_conf(spec))
    tree = Topology.from_file(conf)
    assert {n: tree.router_of(n) for n in spec.node_names} == {n: topo.router_of(n) for n in spec.node_names}


def test_nodes_resolve_each_other_and_the_head_on_the_management_network():
    spec = tb.TestbedSpec(nodes=3, groups=2)
    hosts = dict(line.split("\t")[::-1] for line in tb.hosts_file(spec, "vm").splitlines())
    assert hosts == {"localhost": "127.0.0.1", "vm": tb.HEAD_IP, "n01": "10.78.0.11", "n02": "10.78.0.12",
                     "n03": "10.78.0.13"}


def test_node_exec_enters_a_node_with_its_own_tmp_hosts_and_sysfs(tmp_path):
    script = tb.node_exec_script(tmp_path)
    assert 'nsenter --net="/run/netns/hpcvar-$node" --uts="$state/uts/$node"' in script
    for mount in ('mount --bind "$0/etc/hosts" /etc/hosts', 'mount --rbind "$0/nodes/$1/tmp" /tmp',
                  "mount -t sysfs sysfs /sys", 'mount --rbind "$0/nodes/$1/cgroup" /sys/fs/cgroup'):
        assert mount in script


def test_link_counters_are_summed_per_router_and_named_as_documented():
    wide = pd.DataFrame({"GL_TX_BYTES#r1": [10, 20], "GL_TX_BYTES#r2": [1, 2], "NL_QUEUED_US#n01": [5, 0],
                         "rx_bytes#eth0": [7, 7]})
    totals = linkcounters.router_totals(wide)
    assert list(totals.columns) == ["GL_TX_BYTES", "NL_QUEUED_US"]
    assert totals["GL_TX_BYTES"].tolist() == [11.0, 22.0]
    assert linkcounters.LINK_COUNTERS[:6] == tuple(f"GL_{m}" for m in linkcounters.LINK_METRICS)
    docs = (__import__("pathlib").Path(__file__).parents[1] / "docs" / "counters.md").read_text()
    for name in linkcounters.LINK_COUNTERS:
        assert f"`{name}`" in docs, name



def _link_store(path, rows):
    """A link sampler's store file as LinkSampler writes it: every metric of every link end named
    in ``rows`` (time, router, {device: TX_BYTES}); the other metrics count along (a tenth)."""
    devices = sorted({d for _, _, values in rows for d in values})
    columns = [f"GL_{m}#{d}" for d in devices for m in linkcounters.LINK_METRICS]
    with StoreCsvWriter(path, columns) as w:
        for t, router, values in rows:
            row = [values.get(d, 0) // (1 if m == "TX_BYTES" else 10)
                   for d in devices for m in linkcounters.LINK_METRICS]
            w.write_rows(np.array([t]), np.array([router], dtype=object), np.array([int(router[1:])]), 0,
                         np.array([row], dtype=np.int64))


def test_a_link_window_never_subtracts_counters_of_two_runs_of_the_sampler(tmp_path):
    """`down` then `up` with another shape starts a new store file and new counters: a window is
    measured within one file, and one that starts before the new sampler's first row is refused
    (CI once got r0>r1 = -332 MB and NaN for r0>r2 from the 2-group network's last row)."""
    # The 2-group network's run: r0 links to r1 only, its counters far above the new run's.
    _link_store(tmp_path / "links.1795799756", [(100.0 + i, "r0", {"r1": 332_605_088 + 500 * i}) for i in range(5)])
    # The 3-group network's run, started later: its counters begin again.
    _link_store(tmp_path / "links.1795799993", [(110.0 + i, "r0", {"r1": 1000 * i, "r2": 20 * i}) for i in range(6)])
    (tmp_path / "links.1795799993.HEADER").write_text("#Time\n")
    assert [p.name for p in store_files(tmp_path)] == ["links.1795799756", "links.1795799993"]
    inside = probe.link_window(tmp_path, 111.0, 114.0, "r0", "r1")
    assert inside["tx_bytes"] == 3000 and inside["overlimits"] == 300
    assert inside["queued_share"] == pytest.approx(300 / 1e6 / 3)  # 300 us queued over 3 s
    assert probe.link_window(tmp_path, 111.0, 114.0, "r0", "r2")["tx_bytes"] == 60
    assert probe.link_window(tmp_path, 100.0, 103.0, "r0", "r1")["tx_bytes"] == 1500  # the old run's own window
    with pytest.raises(RuntimeError, match=r"links\.1795799993: no sample of r0 at or before 108.*after it began"):
        probe.link_window(tmp_path, 108.0, 112.0, "r0", "r1")
    with pytest.raises(RuntimeError, match="no sample of r0 at or after 120"):
        probe.link_window(tmp_path, 111.0, 120.0, "r0", "r1")
    with pytest.raises(RuntimeError, match=r"links\.1795799756: router r0 has no link to r2"):
        probe.link_window(tmp_path, 100.0, 103.0, "r0", "r2")
