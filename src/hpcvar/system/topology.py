"""Where every node sits in a dragonfly network, and the placement features of a node list.

Owns the mapping node -> router -> group -> island (plus the router's position in its group and
whether the router serves I/O nodes), read from one of three sources:

- Cray XC cnames (``c{col}-{row}c{chassis}s{slot}n{node}``): one Aries router per blade
  (cabinet, chassis, slot), one dragonfly group per cabinet pair, chassis = row of the group's
  6x16 router grid and slot = column; the island is the cabinet row (see :func:`cname_location`);
- a Slurm ``topology.conf`` (tree plugin): leaf switches are routers, their parents are groups,
  and the groups' parents are islands;
- a simple CSV or YAML map with columns ``node,router,group`` (optional ``island``, ``role``,
  ``row``, ``col``).

Islands are the level of a Dragonfly+ network above groups (Salimi Beni and Cosenza, CLUSTER
2022). A map without island information makes every group its own island; then a job is either
in one group or on "different islands", and "same-island" cannot occur.

It computes the paper's placement features for a job: ``num_routers``, ``num_groups``, a
locality class, and the Dragonfly+ locality class (same group / same island / different islands).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import hostlist
import pandas as pd
import yaml

from hpcvar.parsers.errors import ParseError

CNAME_RE = re.compile(r"^c(?P<col>\d+)-(?P<row>\d+)c(?P<chassis>\d+)s(?P<slot>\d+)n(?P<node>\d+)$")

#: Locality classes, from most to least compact.
LOCALITY_CLASSES = ("single-router", "single-group", "min-groups", "fragmented")
#: Dragonfly+ locality classes (Salimi Beni and Cosenza 2022), from most to least local.
LOCALITY_DFPLUS_CLASSES = ("same-group", "same-island", "different-islands")


@dataclass(frozen=True)
class NodeLocation:
    router: str
    group: str
    role: str = "compute"  # "compute" or "io"
    island: str | None = None  # None: the group is its own island


def cname_location(name: str) -> NodeLocation:
    """Router, group and island of a Cray XC node from its cname (``c3-1c2s7n1``).

    The XC network has no level above groups (every group links to every other), so the island
    is a physical choice: the cabinet row (``row1``), whose groups sit side by side. "Same
    island" on an XC therefore means "same cabinet row", not a network level of its own.
    """
    m = CNAME_RE.match(name)
    if not m:
        raise ValueError(f"not a Cray XC cname: {name!r} (expected c<col>-<row>c<chassis>s<slot>n<node>)")
    col, row, chassis, slot = (int(m[k]) for k in ("col", "row", "chassis", "slot"))
    # Two adjacent cabinets of a row form one electrical group on XC systems.
    return NodeLocation(router=f"c{col}-{row}c{chassis}s{slot}", group=f"g{row}-{col // 2}", island=f"row{row}")


class Topology:
    """Node -> router/group/island map with the placement features the analyses use.

    The optional ``island`` column must be set for every node and put each group in one island;
    without it every group is its own island (:attr:`has_islands` is False). ``compute_nodes`` are
    the nodes with role ``compute`` (the system's N_t nodes for :mod:`hpcvar.system.background`).
    """

    def __init__(self, table: pd.DataFrame, nodes_per_router: int | None = None, source: str = ""):
        missing = {"node", "router", "group"} - set(table.columns)
        if missing:
            raise ValueError(f"topology {source or 'table'} lacks columns {sorted(missing)}")
        table = table.copy()
        if "role" not in table.columns:
            table["role"] = "compute"
        table["role"] = table["role"].fillna("compute").astype(str).str.strip().replace("", "compute")
        dup = table["node"][table["node"].duplicated()]
        if len(dup):
            raise ValueError(f"topology {source or 'table'} lists node {dup.iloc[0]!r} twice")
        self.has_islands = "island" in table.columns
        if self.has_islands:
            text = table["island"].astype("string").str.strip()
            blank = text.isna() | (text == "")
            if blank.any():
                raise ValueError(f"topology {source or 'table'}: node {table['node'][blank].iloc[0]!r} has no "
                                 "island (give every node an island, or drop the island column)")
            table["island"] = text.astype(str)
            spans = table.groupby("group")["island"].unique()
            split = spans[spans.map(len) > 1]
            if len(split):
                raise ValueError(f"topology {source or 'table'}: group {split.index[0]!r} spans islands "
                                 f"{sorted(split.iloc[0])}; a group lies in one island")
        self.table = table.set_index("node", drop=False)
        self.source = source
        per_router = table.groupby("router").size()
        self.nodes_per_router = nodes_per_router or int(per_router.max())
        self.nodes_per_group = int(table.groupby("group").size().max())
        self.io_routers = frozenset(table.loc[table["role"] == "io", "router"])
        self.routers = tuple(pd.unique(table["router"]))
        self.groups = tuple(pd.unique(table["group"]))
        island = table["island"] if self.has_islands else table["group"]
        self.islands = tuple(pd.unique(island))
        self.compute_nodes = frozenset(table.loc[table["role"] == "compute", "node"])
        self._router = dict(zip(table["node"], table["router"]))
        self._group = dict(zip(table["node"], table["group"]))
        self._island = dict(zip(table["node"], island))

    # --- construction -----------------------------------------------------------------
    @classmethod
    def from_cnames(cls, names: Iterable[str], io_nodes: Iterable[str] = ()) -> "Topology":
        io = set(io_nodes)
        rows = []
        for name in names:
            loc = cname_location(name)
            rows.append({"node": name, "router": loc.router, "group": loc.group, "island": loc.island,
                         "role": "io" if name in io else "compute"})
        return cls(pd.DataFrame(rows), source="cnames")

    @classmethod
    def from_file(cls, path: str | Path) -> "Topology":
        """Read a topology map: ``*.csv``, ``*.yaml``/``*.yml`` or a Slurm ``topology.conf``."""
        path = Path(path)
        if path.suffix == ".csv":
            return cls._from_csv(path)
        if path.suffix in (".yaml", ".yml"):
            return cls._from_yaml(path)
        return cls._from_slurm_conf(path)

    @classmethod
    def _from_csv(cls, path: Path) -> "Topology":
        """CSV map ``node,router,group[,island][,role][,row,col]``; ``#`` lines are comments.

        With an ``island`` column every row needs one, and all rows of a group the same one.
        """
        with open(path, newline="") as fh:
            numbered = [(i, line) for i, line in enumerate(fh, 1) if line.strip() and not line.startswith("#")]
        if not numbered:
            raise ParseError(path, "topology CSV is empty (expected header node,router,group[,role])", 1)
        rows = list(csv.reader(line for _, line in numbered))
        header, header_line = rows[0], numbered[0][0]
        missing = {"node", "router", "group"} - set(header)
        if missing:
            raise ParseError(path, f"topology CSV lacks columns {sorted(missing)}", header_line)
        if len(rows) == 1:
            raise ParseError(path, "topology CSV has no rows after the header", header_line)
        names = ("node", "router", "group", "island") if "island" in header else ("node", "router", "group")
        required = [header.index(c) for c in names]
        island_of_group: dict[str, tuple[str, int]] = {}
        for (lineno, _), fields in zip(numbered[1:], rows[1:]):
            if len(fields) != len(header) or any(not fields[i].strip() for i in required):
                raise ParseError(path, f"expected {len(header)} fields ({','.join(header)}) with "
                                       f"{', '.join(names)} set, got {fields}", lineno)
            if "island" in header:
                group, island = fields[header.index("group")], fields[header.index("island")].strip()
                first, first_line = island_of_group.setdefault(group, (island, lineno))
                if island != first:
                    raise ParseError(path, f"group {group!r} is in island {first!r} (line {first_line}) and "
                                           f"{island!r}; a group lies in one island", lineno)
        return cls(pd.DataFrame(rows[1:], columns=header), source=str(path))

    @classmethod
    def _from_yaml(cls, path: Path) -> "Topology":
        """YAML map: ``groups: {g0: {island: i0, routers: {r0: {nodes: "nid[0-3]", role: io}}}}``.

        ``island`` is optional, but either every group names its island or none does.
        """
        doc = yaml.safe_load(path.read_text())
        if not isinstance(doc, dict) or "groups" not in doc:
            raise ParseError(path, "topology YAML needs a top-level 'groups' mapping", 1)
        rows = []
        with_island = [g for g, gdef in doc["groups"].items()
                       if isinstance(gdef, dict) and gdef.get("island") not in (None, "")]
        if with_island and len(with_island) != len(doc["groups"]):
            lacking = next(g for g in doc["groups"] if g not in with_island)
            raise ParseError(path, f"group {lacking!r} has no 'island' but group {with_island[0]!r} has one: "
                                   "give every group an island, or none")
        for group, gdef in doc["groups"].items():
            island = {"island": str(gdef["island"])} if with_island else {}
            for router, rdef in (gdef or {}).get("routers", {}).items():
                if not isinstance(rdef, dict) or "nodes" not in rdef:
                    raise ParseError(path, f"router {router!r} of group {group!r} needs 'nodes: <hostlist>'")
                try:
                    nodes = hostlist.expand_hostlist(str(rdef["nodes"]))
                except hostlist.BadHostlist as exc:
                    raise ParseError(path, f"router {router!r}: bad hostlist {rdef['nodes']!r}: {exc}") from exc
                for node in nodes:
                    rows.append({"node": node, "router": str(router), "group": str(group), **island,
                                 "role": rdef.get("role", "compute")})
        return cls(pd.DataFrame(rows), source=str(path))

    @classmethod
    def _from_slurm_conf(cls, path: Path) -> "Topology":
        """Slurm tree topology: leaf switches (with ``Nodes=``) are routers, their parent switch is the
        group and the group's parent is the island (leaf -> group -> island [-> root ...]).

        A leaf switch without a parent becomes its own group, and a group without a parent its own
        island; a two-level tree (no switch above the groups) has no island information at all.
        Note that a single root switch right above the groups is read as one island holding every
        group. ``io`` routers are not expressible in topology.conf; pass ``io_routers`` to
        :meth:`with_io_routers` if needed.
        """
        leaves: dict[str, list[str]] = {}
        parent: dict[str, str] = {}
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
            name = fields.get("SwitchName")
            if not name:
                raise ParseError(path, f"expected 'SwitchName=...' in topology.conf line {raw!r}", lineno)
            try:
                if "Nodes" in fields:
                    leaves[name] = hostlist.expand_hostlist(fields["Nodes"])
                if "Switches" in fields:
                    for child in hostlist.expand_hostlist(fields["Switches"]):
                        parent[child] = name
            except hostlist.BadHostlist as exc:
                raise ParseError(path, f"bad hostlist: {exc}", lineno) from exc
        if not leaves:
            raise ParseError(path, "no leaf switch with 'Nodes=' found; not a Slurm topology.conf?")
        rows = [{"node": n, "router": sw, "group": parent.get(sw, sw)} for sw, ns in leaves.items() for n in ns]
        if any(row["group"] in parent for row in rows):
            for row in rows:
                row["island"] = parent.get(row["group"], row["group"])
        return cls(pd.DataFrame(rows), source=str(path))

    def with_io_routers(self, routers: Iterable[str]) -> "Topology":
        table = self.table.reset_index(drop=True)
        table.loc[table["router"].isin(set(routers)), "role"] = "io"
        return Topology(table, self.nodes_per_router, self.source)

    # --- queries --------------------------------------------------------------------------
    def __contains__(self, node: str) -> bool:
        return node in self._router

    def router_of(self, node: str) -> str:
        return self._router[node]

    def group_of(self, node: str) -> str:
        return self._group[node]

    def island_of(self, node: str) -> str:
        """The node's Dragonfly+ island (its group when the map has no islands)."""
        return self._island[node]

    def unknown_nodes(self, nodes: Iterable[str]) -> list[str]:
        return [n for n in nodes if n not in self._router]

    def routers_of(self, nodes: Iterable[str]) -> set[str]:
        return {self._router[n] for n in nodes if n in self._router}

    def groups_of(self, nodes: Iterable[str]) -> set[str]:
        return {self._group[n] for n in nodes if n in self._group}

    def islands_of(self, nodes: Iterable[str]) -> set[str]:
        return {self._island[n] for n in nodes if n in self._island}

    def placement(self, nodes: Iterable[str]) -> dict:
        """The paper's placement features of a job's node list.

        ``num_routers``/``num_groups`` count distinct routers/groups; ``locality`` is one of
        :data:`LOCALITY_CLASSES`: all nodes on one router, within one group, spread over the
        fewest groups that could hold the job, or fragmented over more groups than needed.
        ``locality_dfplus`` is one of :data:`LOCALITY_DFPLUS_CLASSES`: all nodes in one group, in
        one island (several groups), or on different islands (never "same-island" without islands).
        """
        nodes = list(nodes)
        unknown = self.unknown_nodes(nodes)
        if unknown:
            raise KeyError(f"nodes not in topology {self.source}: {hostlist.collect_hostlist(unknown[:20])}")
        routers = self.routers_of(nodes)
        groups = self.groups_of(nodes)
        if len(routers) <= 1:
            locality = "single-router"
        elif len(groups) == 1:
            locality = "single-group"
        elif len(groups) <= math.ceil(len(nodes) / self.nodes_per_group):
            locality = "min-groups"
        else:
            locality = "fragmented"
        if len(groups) <= 1:
            locality_dfplus = "same-group"
        elif len(self.islands_of(nodes)) == 1:
            locality_dfplus = "same-island"
        else:
            locality_dfplus = "different-islands"
        return {"num_routers": len(routers), "num_groups": len(groups), "locality": locality,
                "locality_dfplus": locality_dfplus}

    def to_csv(self, path: str | Path) -> None:
        cols = [c for c in ("node", "router", "group", "island", "role", "row", "col", "cname")
                if c in self.table.columns]
        self.table[cols].to_csv(path, index=False)
