"""Topology: node -> router -> group -> island from Cray XC cnames, Slurm topology.conf, CSV and
YAML maps, and the placement features (num_routers, num_groups, locality, the Dragonfly+
locality_dfplus) of hand-made node lists."""

from __future__ import annotations

from pathlib import Path

import hostlist
import pandas as pd
import pytest

from hpcvar.parsers.errors import ParseError
from hpcvar.system.topology import LOCALITY_CLASSES, LOCALITY_DFPLUS_CLASSES, Topology, cname_location

# --- Cray XC cnames ---------------------------------------------------------------------------
# cname c<col>-<row>c<chassis>s<slot>n<node>: the router is the blade (cname without the node),
# the group is a pair of adjacent cabinets in a row (cabinets c0-0 and c1-0 form group g0-0).


@pytest.mark.parametrize("cname, router, group", [
    ("c0-0c0s0n1", "c0-0c0s0", "g0-0"),
    ("c1-0c2s15n3", "c1-0c2s15", "g0-0"),
    ("c2-0c0s0n0", "c2-0c0s0", "g0-1"),
    ("c3-0c1s7n2", "c3-0c1s7", "g0-1"),
    ("c0-1c0s0n0", "c0-1c0s0", "g1-0"),
    ("c11-2c2s9n0", "c11-2c2s9", "g2-5"),
])
def test_cname_location(cname, router, group):
    loc = cname_location(cname)
    assert (loc.router, loc.group, loc.role) == (router, group, "compute")


@pytest.mark.parametrize("bad", ["nid00012", "c0-0c0s0", "c0-0c0s0n1x", "C0-0c0s0n1", ""])
def test_cname_location_rejects_non_cnames(bad):
    with pytest.raises(ValueError, match="not a Cray XC cname"):
        cname_location(bad)


XC_NODES = ["c0-0c0s0n0", "c0-0c0s0n1", "c0-0c0s0n2", "c0-0c0s0n3",
            "c0-0c0s1n0", "c1-0c2s15n3", "c2-0c0s0n0", "c2-0c0s0n1"]


def test_from_cnames_routers_and_groups():
    topo = Topology.from_cnames(XC_NODES)
    assert topo.router_of("c0-0c0s0n1") == "c0-0c0s0"
    assert topo.group_of("c0-0c0s0n1") == topo.group_of("c1-0c2s15n3") == "g0-0"
    assert topo.router_of("c1-0c2s15n3") == "c1-0c2s15"
    assert topo.group_of("c2-0c0s0n0") == "g0-1"
    assert topo.routers == ("c0-0c0s0", "c0-0c0s1", "c1-0c2s15", "c2-0c0s0")
    assert topo.groups == ("g0-0", "g0-1")
    assert topo.nodes_per_router == 4  # the four nodes of blade c0-0c0s0
    assert topo.nodes_per_group == 6
    assert topo.io_routers == frozenset()
    assert "c0-0c0s0n3" in topo and "c0-0c0s2n0" not in topo
    assert topo.source == "cnames"


def test_from_cnames_io_nodes_mark_their_router():
    topo = Topology.from_cnames(XC_NODES, io_nodes=["c2-0c0s0n1"])
    assert topo.io_routers == {"c2-0c0s0"}
    assert topo.table.loc["c2-0c0s0n1", "role"] == "io"
    assert topo.table.loc["c2-0c0s0n0", "role"] == "compute"


def test_from_cnames_placement():
    topo = Topology.from_cnames(XC_NODES)
    assert topo.placement(["c0-0c0s0n0", "c0-0c0s0n1"]) == {
        "num_routers": 1, "num_groups": 1, "locality": "single-router", "locality_dfplus": "same-group"}
    assert topo.placement(["c0-0c0s0n1", "c1-0c2s15n3"]) == {
        "num_routers": 2, "num_groups": 1, "locality": "single-group", "locality_dfplus": "same-group"}
    # Two nodes fit in one group (6 nodes), so two groups are more than needed; both groups are
    # in cabinet row 0, the island of an XC.
    assert topo.placement(["c0-0c0s0n1", "c2-0c0s0n0"]) == {
        "num_routers": 2, "num_groups": 2, "locality": "fragmented", "locality_dfplus": "same-island"}


def test_from_cnames_islands_are_cabinet_rows():
    assert cname_location("c11-2c2s9n0").island == "row2"
    topo = Topology.from_cnames(XC_NODES + ["c0-1c0s0n0", "c3-1c1s1n1"])
    assert topo.has_islands and topo.islands == ("row0", "row1")
    assert topo.island_of("c2-0c0s0n1") == "row0" and topo.island_of("c3-1c1s1n1") == "row1"
    assert topo.placement(["c0-1c0s0n0", "c3-1c1s1n1"])["locality_dfplus"] == "same-island"
    assert topo.placement(["c0-0c0s0n0", "c0-1c0s0n0"])["locality_dfplus"] == "different-islands"


def test_from_cnames_rejects_a_bad_name():
    with pytest.raises(ValueError, match="nid00001"):
        Topology.from_cnames(["c0-0c0s0n0", "nid00001"])


# --- a small hand-made dragonfly: 3 groups x 2 routers x 4 nodes -----------------------------
# g0: r0 = nid[00-03], r1 = nid[04-07]; g1: r2 = nid[08-11], r3 = nid[12-15]; g2: r4, r5.

def _nid(i: int) -> str:
    return f"nid{i:05d}"


SLURM_CONF = """\
# Dragonfly described as a Slurm tree: routers are leaves, groups their parents.
SwitchName=r0 Nodes=nid[00000-00003]
SwitchName=r1 Nodes=nid[00004-00007]
SwitchName=r2 Nodes=nid[00008-00011]   # trailing comment
SwitchName=r3 Nodes=nid[00012-00015] LinkSpeed=100

SwitchName=r4 Nodes=nid[00016-00019]
SwitchName=r5 Nodes=nid[00020-00023]
SwitchName=g0 Switches=r[0-1]
SwitchName=g1 Switches=r[2-3]
SwitchName=g2 Switches=r[4-5]
SwitchName=top Switches=g[0-2]
"""


@pytest.fixture
def topo(tmp_path: Path) -> Topology:
    conf = tmp_path / "topology.conf"
    conf.write_text(SLURM_CONF)
    return Topology.from_file(conf)


def test_slurm_conf_leaves_are_routers_parents_are_groups(topo: Topology):
    assert len(topo.table) == 24
    assert topo.routers == ("r0", "r1", "r2", "r3", "r4", "r5")
    assert topo.groups == ("g0", "g1", "g2")
    for i in range(24):
        assert topo.router_of(_nid(i)) == f"r{i // 4}"
        assert topo.group_of(_nid(i)) == f"g{i // 8}"
    assert topo.nodes_per_router == 4
    assert topo.nodes_per_group == 8
    assert set(topo.table["role"]) == {"compute"}


def test_slurm_conf_leaf_without_parent_is_its_own_group(tmp_path: Path):
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=s0 Nodes=node[1-2]\nSwitchName=s1 Nodes=node[3-4]\nSwitchName=up Switches=s0\n")
    topo = Topology.from_file(conf)
    assert [topo.group_of(f"node{i}") for i in range(1, 5)] == ["up", "up", "s1", "s1"]


@pytest.mark.parametrize("nodes, expected", [
    # all on r0
    ([0, 1, 2], (1, 1, "single-router")),
    ([3], (1, 1, "single-router")),
    # r0 + r1, both in g0
    ([0, 4], (2, 1, "single-group")),
    (list(range(8)), (2, 1, "single-group")),
    # 10 nodes need ceil(10/8) = 2 groups: g0 full + two nodes of r2 in g1
    (list(range(10)), (3, 2, "min-groups")),
    # 17 nodes need 3 groups: r0,r1 (g0), r2,r3 (g1), r4 (g2)
    (list(range(17)), (5, 3, "min-groups")),
    # 2 nodes fit one group but sit in two
    ([0, 8], (2, 2, "fragmented")),
    # 8 nodes fit one group (ceil(8/8) = 1) but are spread over r0, r2 and r4 in three groups
    ([0, 1, 2, 8, 9, 16, 17, 18], (3, 3, "fragmented")),
    # 9 nodes need 2 groups, they sit in 3
    ([0, 1, 2, 3, 4, 5, 6, 8, 16], (4, 3, "fragmented")),
])
def test_placement_by_hand(topo: Topology, nodes, expected):
    got = topo.placement(_nid(i) for i in nodes)
    assert (got["num_routers"], got["num_groups"], got["locality"]) == expected
    assert got["locality"] in LOCALITY_CLASSES


def test_placement_accepts_any_order(topo: Topology):
    forward = topo.placement([_nid(i) for i in range(10)])
    assert topo.placement([_nid(i) for i in reversed(range(10))]) == forward


def test_placement_unknown_nodes_raise_key_error_naming_them(topo: Topology):
    with pytest.raises(KeyError) as err:
        topo.placement([_nid(0), "nid00099", "login1", _nid(3)])
    msg = str(err.value)
    listed = hostlist.expand_hostlist(msg.rsplit(": ", 1)[1].rstrip("'\""))
    assert sorted(listed) == ["login1", "nid00099"]
    assert "nid00000" not in msg


def test_unknown_nodes_and_sets(topo: Topology):
    assert topo.unknown_nodes([_nid(1), "x1", _nid(30)]) == ["x1", _nid(30)]
    assert topo.routers_of([_nid(0), _nid(5), _nid(6), "x1"]) == {"r0", "r1"}
    assert topo.groups_of([_nid(0), _nid(9), "x1"]) == {"g0", "g1"}


def test_with_io_routers_marks_roles(topo: Topology):
    io = topo.with_io_routers(["r5", "nonexistent"])
    assert io.io_routers == {"r5"}
    roles = io.table.set_index("node")["role"]
    assert set(roles[[_nid(i) for i in range(20, 24)]]) == {"io"}
    assert set(roles[[_nid(i) for i in range(20)]]) == {"compute"}
    # A new topology: the original is unchanged and the placement features are the same.
    assert topo.io_routers == frozenset() and set(topo.table["role"]) == {"compute"}
    assert io.nodes_per_router == topo.nodes_per_router
    assert io.placement([_nid(0), _nid(20)]) == topo.placement([_nid(0), _nid(20)])


# --- Slurm topology.conf errors ---------------------------------------------------------------

@pytest.mark.parametrize("text, line, message", [
    ("SwitchName=r0 Nodes=n[1-2]\n\n# comment\nNodes=n[3-4]\n", 4, "SwitchName"),
    ("# header\nSwitchName=r0 Nodes=n[1-2]\nSwitchName=r1 Nodes=n[3-\n", 3, "bad hostlist"),
    ("SwitchName=g0 Switches=r[0-1\n", 1, "bad hostlist"),
    ("NodeName=n1 CPUs=4\n", 1, "SwitchName"),
])
def test_slurm_conf_malformed_line(tmp_path: Path, text, line, message):
    conf = tmp_path / "topology.conf"
    conf.write_text(text)
    with pytest.raises(ParseError, match=message) as err:
        Topology.from_file(conf)
    assert err.value.line == line
    assert err.value.path == str(conf)


def test_slurm_conf_without_leaves(tmp_path: Path):
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=top Switches=g[0-1]\n")
    with pytest.raises(ParseError, match="Nodes="):
        Topology.from_file(conf)


def test_slurm_conf_node_under_two_switches_is_a_duplicate(tmp_path: Path):
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=r0 Nodes=n[1-3]\nSwitchName=r1 Nodes=n[3-4]\n")
    with pytest.raises(ValueError, match="'n3' twice"):
        Topology.from_file(conf)


# --- CSV and YAML maps ----------------------------------------------------------------------

def test_csv_map(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("# exported from the system map\nnode,router,group,role\n"
                    "nid00000,r0,g0,compute\nnid00001,r0,g0,compute\nnid00002,r1,g0,io\nnid00003,r2,g1,compute\n")
    topo = Topology.from_file(path)
    assert topo.routers == ("r0", "r1", "r2") and topo.groups == ("g0", "g1")
    assert topo.io_routers == {"r1"}
    assert topo.router_of("nid00002") == "r1" and topo.group_of("nid00003") == "g1"
    assert topo.nodes_per_router == 2 and topo.nodes_per_group == 3
    assert topo.placement(["nid00000", "nid00002"]) == {"num_routers": 2, "num_groups": 1,
                                                         "locality": "single-group", "locality_dfplus": "same-group"}


def test_csv_map_without_role_is_all_compute(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router,group\nn1,r0,g0\nn2,r1,g0\n")
    topo = Topology.from_file(path)
    assert list(topo.table["role"]) == ["compute", "compute"]


def test_to_csv_round_trip(topo: Topology, tmp_path: Path):
    out = tmp_path / "map.csv"
    topo.with_io_routers(["r2"]).to_csv(out)
    back = Topology.from_file(out)
    assert back.table[["node", "router", "group", "role"]].values.tolist() == \
        topo.with_io_routers(["r2"]).table[["node", "router", "group", "role"]].values.tolist()
    assert back.io_routers == {"r2"}


def test_csv_without_group_column(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router\nn1,r0\n")
    with pytest.raises(ParseError, match="group") as err:
        Topology.from_file(path)
    assert err.value.line == 1


def test_csv_without_rows(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router,group\n")
    with pytest.raises(ParseError, match="no rows"):
        Topology.from_file(path)


def test_csv_duplicate_node(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router,group\nn1,r0,g0\nn2,r0,g0\nn1,r1,g0\n")
    with pytest.raises(ValueError, match="'n1' twice"):
        Topology.from_file(path)


def test_csv_short_row_is_a_parse_error(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router,group\nn1,r0,g0\nn2,r1\n")
    with pytest.raises(ParseError) as err:
        Topology.from_file(path)
    assert err.value.line == 3


def test_csv_empty_role_defaults_to_compute(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router,group,role\nn1,r0,g0,io\nn2,r1,g0,\n")
    topo = Topology.from_file(path)
    assert topo.table.loc["n2", "role"] == "compute"


YAML_MAP = """\
groups:
  g0:
    routers:
      r0: {nodes: "nid[00000-00003]"}
      r1: {nodes: "nid[00004-00005]", role: io}
  g1:
    routers:
      r2: {nodes: "nid[00006-00009]"}
"""


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_yaml_map(tmp_path: Path, suffix):
    path = tmp_path / f"topo{suffix}"
    path.write_text(YAML_MAP)
    topo = Topology.from_file(path)
    assert len(topo.table) == 10
    assert [topo.router_of(_nid(i)) for i in range(10)] == ["r0"] * 4 + ["r1"] * 2 + ["r2"] * 4
    assert [topo.group_of(_nid(i)) for i in (0, 5, 6, 9)] == ["g0", "g0", "g1", "g1"]
    assert topo.io_routers == {"r1"}
    assert topo.nodes_per_router == 4 and topo.nodes_per_group == 6
    # 7 nodes need ceil(7/6) = 2 groups; without islands each group is its own island
    assert topo.placement([_nid(i) for i in range(7)]) == {"num_routers": 3, "num_groups": 2,
                                                           "locality": "min-groups",
                                                           "locality_dfplus": "different-islands"}
    assert not topo.has_islands and topo.islands == topo.groups


def test_yaml_without_groups(tmp_path: Path):
    path = tmp_path / "topo.yaml"
    path.write_text("routers:\n  r0: {nodes: n1}\n")
    with pytest.raises(ParseError, match="groups") as err:
        Topology.from_file(path)
    assert err.value.line == 1


def test_yaml_duplicate_node(tmp_path: Path):
    path = tmp_path / "topo.yaml"
    path.write_text("groups:\n  g0:\n    routers:\n      r0: {nodes: 'n[1-2]'}\n      r1: {nodes: 'n[2-3]'}\n")
    with pytest.raises(ValueError, match="'n2' twice"):
        Topology.from_file(path)


def test_yaml_router_without_nodes_is_a_parse_error(tmp_path: Path):
    path = tmp_path / "topo.yaml"
    path.write_text("groups:\n  g0:\n    routers:\n      r0: {role: io}\n")
    with pytest.raises(ParseError, match="nodes"):
        Topology.from_file(path)


def test_table_without_required_columns():
    with pytest.raises(ValueError, match=r"lacks columns \['group'\]"):
        Topology(pd.DataFrame({"node": ["n1"], "router": ["r0"]}))


# --- Dragonfly+ islands ------------------------------------------------------------------------
# The same 24 nodes as above (g0: nid00-07, g1: nid08-15, g2: nid16-23), with g0 and g1 in island
# i0 and g2 alone in i1. Node lists: same group, two groups of one island, two islands.

DFPLUS_CASES = [
    ([0, 1], "same-group"),
    ([0, 4, 7], "same-group"),
    ([0, 8], "same-island"),
    (list(range(16)), "same-island"),
    ([0, 16], "different-islands"),
    ([8, 9, 20], "different-islands"),
    (list(range(24)), "different-islands"),
]

DFPLUS_CONF = SLURM_CONF.replace("SwitchName=top Switches=g[0-2]\n",
                                 "SwitchName=i0 Switches=g[0-1]\nSwitchName=i1 Switches=g2\n"
                                 "SwitchName=spine Switches=i[0-1]\n")

DFPLUS_CSV = "node,router,group,island\n" + "".join(
    f"{_nid(i)},r{i // 4},g{i // 8},{'i0' if i < 16 else 'i1'}\n" for i in range(24))

DFPLUS_YAML = """\
groups:
  g0:
    island: i0
    routers: {r0: {nodes: "nid[00000-00003]"}, r1: {nodes: "nid[00004-00007]"}}
  g1:
    island: i0
    routers: {r2: {nodes: "nid[00008-00011]"}, r3: {nodes: "nid[00012-00015]"}}
  g2:
    island: i1
    routers: {r4: {nodes: "nid[00016-00019]"}, r5: {nodes: "nid[00020-00023]"}}
"""


@pytest.fixture(params=["topology.conf", "topo.csv", "topo.yaml"])
def dfplus(request, tmp_path: Path) -> Topology:
    path = tmp_path / request.param
    path.write_text({"topology.conf": DFPLUS_CONF, "topo.csv": DFPLUS_CSV, "topo.yaml": DFPLUS_YAML}[request.param])
    return Topology.from_file(path)


def test_islands_from_every_map_format(dfplus: Topology):
    assert dfplus.has_islands
    assert dfplus.islands == ("i0", "i1")
    assert dfplus.groups == ("g0", "g1", "g2")
    assert [dfplus.island_of(_nid(i)) for i in (0, 8, 15, 16, 23)] == ["i0", "i0", "i0", "i1", "i1"]
    assert dfplus.islands_of([_nid(0), _nid(9), "x1"]) == {"i0"}


@pytest.mark.parametrize("nodes, expected", DFPLUS_CASES)
def test_placement_dfplus_locality(dfplus: Topology, nodes, expected):
    got = dfplus.placement(_nid(i) for i in nodes)
    assert got["locality_dfplus"] == expected
    assert got["locality_dfplus"] in LOCALITY_DFPLUS_CLASSES


def test_placement_dfplus_keeps_the_other_features(dfplus: Topology, topo: Topology):
    for nodes, _ in DFPLUS_CASES:
        with_islands = dfplus.placement(_nid(i) for i in nodes)
        assert {k: v for k, v in with_islands.items() if k != "locality_dfplus"} == \
            {k: v for k, v in topo.placement(_nid(i) for i in nodes).items() if k != "locality_dfplus"}


def test_slurm_conf_root_above_groups_is_one_island(topo: Topology):
    # SLURM_CONF puts one switch 'top' right above the groups: read as one island of them all.
    assert topo.islands == ("top",)
    assert topo.placement([_nid(0), _nid(16)])["locality_dfplus"] == "same-island"


def test_two_level_slurm_conf_has_no_islands(tmp_path: Path):
    conf = tmp_path / "topology.conf"
    conf.write_text(SLURM_CONF.replace("SwitchName=top Switches=g[0-2]\n", ""))
    topo = Topology.from_file(conf)
    assert not topo.has_islands and "island" not in topo.table.columns
    assert topo.islands == topo.groups == ("g0", "g1", "g2")
    assert topo.island_of(_nid(9)) == "g1"
    seen = {topo.placement([_nid(a), _nid(b)])["locality_dfplus"] for a in range(24) for b in range(24)}
    assert seen == {"same-group", "different-islands"}  # never same-island without islands


def test_slurm_conf_group_without_parent_is_its_own_island(tmp_path: Path):
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=r0 Nodes=n[1-2]\nSwitchName=r1 Nodes=n[3-4]\nSwitchName=r2 Nodes=n[5-6]\n"
                    "SwitchName=g0 Switches=r0\nSwitchName=g1 Switches=r1\nSwitchName=i0 Switches=g0\n")
    topo = Topology.from_file(conf)
    assert [topo.island_of(f"n{i}") for i in (1, 3, 5)] == ["i0", "g1", "r2"]


def test_to_csv_writes_islands(dfplus: Topology, tmp_path: Path):
    out = tmp_path / "map.csv"
    dfplus.to_csv(out)
    assert out.read_text().splitlines()[0] == "node,router,group,island,role"
    back = Topology.from_file(out)
    assert back.islands == ("i0", "i1")
    assert back.table["island"].tolist() == dfplus.table["island"].tolist()


def test_to_csv_without_islands_writes_no_island_column(topo: Topology, tmp_path: Path):
    flat = Topology(topo.table.drop(columns=["island"]).reset_index(drop=True))
    out = tmp_path / "map.csv"
    flat.to_csv(out)
    assert out.read_text().splitlines()[0] == "node,router,group,role"


def test_csv_row_without_island_is_a_parse_error(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router,group,island\nn1,r0,g0,i0\nn2,r1,g1,\n")
    with pytest.raises(ParseError, match="island") as err:
        Topology.from_file(path)
    assert err.value.line == 3


def test_csv_group_in_two_islands_is_a_parse_error(tmp_path: Path):
    path = tmp_path / "topo.csv"
    path.write_text("node,router,group,island\nn1,r0,g0,i0\nn2,r1,g1,i0\n# moved\nn3,r2,g0,i1\n")
    with pytest.raises(ParseError, match=r"group 'g0' is in island 'i0' \(line 2\) and 'i1'") as err:
        Topology.from_file(path)
    assert err.value.line == 5


def test_yaml_islands_on_some_groups_only(tmp_path: Path):
    path = tmp_path / "topo.yaml"
    path.write_text(DFPLUS_YAML.replace("    island: i1\n", ""))
    with pytest.raises(ParseError, match="group 'g2' has no 'island'"):
        Topology.from_file(path)


def test_table_islands_checked():
    table = pd.DataFrame({"node": ["n1", "n2", "n3"], "router": ["r0", "r1", "r2"], "group": ["g0", "g0", "g1"],
                          "island": ["i0", "i1", "i1"]})
    with pytest.raises(ValueError, match=r"group 'g0' spans islands \['i0', 'i1'\]"):
        Topology(table)
    with pytest.raises(ValueError, match="node 'n2' has no island"):
        Topology(table.assign(island=["i0", None, "i1"]))
