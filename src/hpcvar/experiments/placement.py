"""Placement policies: which nodes each job of an experiment gets.

A policy (:data:`PLACEMENT_POLICIES`) chooses a job's node list on any
:class:`hpcvar.system.topology.Topology` - random nodes, random (whole) routers, random (whole) groups as
in the Union study, and same group / same island / different islands as in the Dragonfly+
locality study (Salimi Beni and Cosenza, CLUSTER 2022). :func:`place_jobs` places a workload's jobs
one after another without overlap; :class:`Placement` records a job's nodes with the routers,
groups and islands they span; :class:`PlacementError` says why a policy cannot place a job.

The functions are deterministic for a numpy Generator: the simulated what-if
(:mod:`hpcvar.simulate.interference`, on the simulated dragonfly's topology) and the real Slurm
experiment (:mod:`hpcvar.campaign.interference`, on the site's topology map and ``sinfo``'s free
nodes) draw a policy's placements from :func:`seeded_rng` with the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import hostlist
import numpy as np
import pandas as pd

from hpcvar.system.topology import Topology


def seeded_rng(seed: int, *keys: int) -> np.random.Generator:
    """An independent random stream for ``seed`` and integer ``keys`` (numpy's ``SeedSequence``).

    The same seed and keys give the same draws whatever else was drawn before, so every step of an
    experiment has its own stream: the simulator and the real experiment both place the jobs of
    policy ``i``, repetition ``r`` with ``seeded_rng(seed, i, r, 0)`` and so draw the same node lists
    on the same topology and free nodes."""
    return np.random.default_rng([seed, *keys])


class PlacementError(ValueError):
    """A policy cannot place a job: not enough free nodes, routers, groups or islands."""


@dataclass(frozen=True)
class Placement:
    """A job's nodes (topology order = rank order) and the routers/groups/islands they span."""

    job: str
    policy: str
    nodes: tuple[str, ...]
    routers: tuple[str, ...]
    groups: tuple[str, ...]
    islands: tuple[str, ...]

    @classmethod
    def of(cls, topo: Topology, job: str, nodes, policy: str = "given") -> "Placement":
        """The placement of a given node list (put in topology order)."""
        chosen = set(nodes)
        unknown = topo.unknown_nodes(chosen)
        if unknown:
            raise PlacementError(f"job {job!r}: nodes not in the topology: {sorted(unknown)[:5]}")
        ordered = [n for n in topo.table["node"] if n in chosen]
        return cls(job=job, policy=policy, nodes=tuple(ordered),
                   routers=tuple(dict.fromkeys(topo.router_of(n) for n in ordered)),
                   groups=tuple(dict.fromkeys(topo.group_of(n) for n in ordered)),
                   islands=tuple(dict.fromkeys(topo.island_of(n) for n in ordered)))

    @property
    def nodelist(self) -> str:
        """The nodes as a Slurm hostlist, for ``--nodelist``."""
        return hostlist.collect_hostlist(list(self.nodes))


def _free_nodes(topo: Topology, free: set[str] | None) -> pd.DataFrame:
    """Free compute nodes in topology order, with their island."""
    t = topo.table[topo.table["role"] == "compute"]
    if free is not None:
        t = t[t["node"].isin(free)]
    t = t[["node", "router", "group"]].reset_index(drop=True)
    t["island"] = [topo.island_of(n) for n in t["node"]]
    return t


def _whole_units(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None, unit: str) -> list[str]:
    """Random whole routers/groups (every compute node free), filled consecutively until n nodes."""
    cand = _free_nodes(topo, free)
    allc = _free_nodes(topo, None)
    size_all = allc.groupby(unit, sort=False).size()
    size_free = cand.groupby(unit, sort=False).size()
    whole = [u for u in size_all.index if size_free.get(u, 0) == size_all[u]]
    capacity = int(sum(size_all[u] for u in whole))
    if capacity < n:
        raise PlacementError(f"random-{unit}s: needs {n} nodes but the {len(whole)} wholly free {unit}s hold "
                             f"{capacity}")
    by_unit = {u: list(g["node"]) for u, g in cand.groupby(unit, sort=False)}
    chosen: list[str] = []
    for i in rng.permutation(len(whole)):
        chosen += by_unit[whole[i]][: n - len(chosen)]
        if len(chosen) == n:
            break
    return chosen


def place_random_nodes(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """Any n free compute nodes, uniformly (Union's RN: jobs share routers)."""
    cand = _free_nodes(topo, free)["node"].to_numpy()
    if len(cand) < n:
        raise PlacementError(f"random-nodes: needs {n} nodes but {len(cand)} are free")
    return list(cand[rng.choice(len(cand), n, replace=False)])


def place_random_routers(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """Whole free routers in random order, their nodes taken consecutively (Union's RR).

    The last router may be partly used; its other nodes stay free for random-nodes jobs only,
    since a random-routers job never takes a router another job already uses."""
    return _whole_units(topo, n, rng, free, "router")


def place_random_groups(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """Whole free groups in random order, their nodes taken consecutively (Union's RG)."""
    return _whole_units(topo, n, rng, free, "group")


def place_same_group(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """n random free nodes of one random group with room for them (locality: same group)."""
    cand = _free_nodes(topo, free)
    sizes = cand.groupby("group", sort=False).size()
    fits = [g for g in sizes.index if sizes[g] >= n]
    if not fits:
        raise PlacementError(f"same-group: needs {n} nodes in one group but the largest free share of a group "
                             f"is {int(sizes.max()) if len(sizes) else 0} nodes")
    nodes = cand.loc[cand["group"] == fits[rng.integers(len(fits))], "node"].to_numpy()
    return list(nodes[rng.choice(len(nodes), n, replace=False)])


def _spread(cand: pd.DataFrame, n: int, rng: np.random.Generator, unit: str) -> list[str]:
    """n random nodes of ``cand`` that span at least two ``unit``s: one node in each of two random
    units first, the rest uniformly among the remaining nodes."""
    units = list(pd.unique(cand[unit]))
    a, b = rng.choice(len(units), 2, replace=False)
    first = []
    for u in (units[a], units[b]):
        nodes = cand.loc[cand[unit] == u, "node"].to_numpy()
        first.append(nodes[rng.integers(len(nodes))])
    rest = cand.loc[~cand["node"].isin(first), "node"].to_numpy()
    return first + list(rest[rng.choice(len(rest), n - 2, replace=False)])


def place_same_island(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """n random free nodes of one island, in at least two of its groups (locality: same island)."""
    if not topo.has_islands:
        raise PlacementError("same-island: the topology has no islands (system.groups_per_island: 0)")
    if n < 2:
        raise PlacementError("same-island: a 1-node job is always in one group")
    cand = _free_nodes(topo, free)
    per_island = cand.groupby("island", sort=False).agg(nodes=("node", "size"), groups=("group", "nunique"))
    fits = [i for i, row in per_island.iterrows() if row["nodes"] >= n and row["groups"] >= 2]
    if not fits:
        raise PlacementError(f"same-island: no island has {n} free nodes in two or more groups")
    return _spread(cand[cand["island"] == fits[rng.integers(len(fits))]], n, rng, "group")


def place_different_islands(topo: Topology, n: int, rng: np.random.Generator,
                            free: set[str] | None = None) -> list[str]:
    """n random free nodes spanning at least two islands (locality: different islands)."""
    cand = _free_nodes(topo, free)
    if cand["island"].nunique() < 2:
        raise PlacementError("different-islands: needs free nodes on two islands, found "
                             f"{cand['island'].nunique()} island(s) with free nodes")
    if len(cand) < n or n < 2:
        raise PlacementError(f"different-islands: needs {n} >= 2 nodes, {len(cand)} are free")
    return _spread(cand, n, rng, "island")


#: Policy name -> function(topology, nodes, rng, free) -> node names.
PLACEMENT_POLICIES = {
    "random-nodes": place_random_nodes,
    "random-routers": place_random_routers,
    "random-groups": place_random_groups,
    "same-group": place_same_group,
    "same-island": place_same_island,
    "different-islands": place_different_islands,
}
#: Policies that make sense for every job of a workload (Union); the others are victim locality classes.
JOB_WIDE_POLICIES = ("random-nodes", "random-routers", "random-groups")


def place(topo: Topology, policy: str, nodes: int, rng: np.random.Generator, free: set[str] | None = None,
          job: str = "job") -> Placement:
    """Place one job of ``nodes`` nodes with ``policy`` among ``free`` nodes (default: all compute nodes)."""
    if policy not in PLACEMENT_POLICIES:
        raise PlacementError(f"unknown placement policy {policy!r}; expected one of {', '.join(PLACEMENT_POLICIES)}")
    try:
        chosen = PLACEMENT_POLICIES[policy](topo, nodes, rng, free)
    except PlacementError as exc:
        raise PlacementError(f"job {job!r} ({nodes} nodes): {exc}") from None
    return Placement.of(topo, job, chosen, policy)


def place_jobs(topo: Topology, requests: list[tuple[str, int, str]], rng: np.random.Generator,
               free: set[str] | None = None, share: bool = False) -> list[Placement]:
    """Place ``(job, nodes, policy)`` requests in order among ``free`` nodes (default: every compute
    node), without overlap; ``share`` lets every job choose among all of them (a toy cluster)."""
    free = set(topo.compute_nodes) if free is None else set(free)
    out = []
    for job, nodes, policy in requests:
        p = place(topo, policy, nodes, rng, free, job)
        if not share:
            free -= set(p.nodes)
        out.append(p)
    return out


__all__ = [
    "PLACEMENT_POLICIES", "JOB_WIDE_POLICIES", "PlacementError", "Placement", "seeded_rng",
    "place", "place_jobs", "place_random_nodes", "place_random_routers", "place_random_groups",
    "place_same_group", "place_same_island", "place_different_islands",
]
