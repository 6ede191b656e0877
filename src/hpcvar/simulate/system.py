"""The simulated machine and its workload: topology, users with traits, jobs, and a scheduler.

The scheduler is first-come-first-served over one pool of compute nodes and always takes the
lowest-numbered free nodes (what Slurm does without topology awareness), so placements fragment
over groups as the machine churns: the source of the paper's NUM_ROUTERS/NUM_GROUPS spread.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd

from hpcvar.settings import NeighbourhoodSettings
from hpcvar.simulate.presets import Preset
from hpcvar.system.topology import Topology

#: Other users' jobs larger than this many nodes are large: the neighbourhood analysis's default
#: ``threshold_nodes``, which every job of the large users exceeds.
LARGE_JOB_NODES = NeighbourhoodSettings.model_fields["threshold_nodes"].default

_SURNAMES = ("adams baker chen diaz evans fischer garcia hughes ito jones kim lopez muller nguyen "
             "okafor patel quinn rossi singh tanaka usman valdez wang xu yamada zhou abbott brooks "
             "castro dubois eriksen ferreira gupta hansen ivanova jensen kowalski larsen moreau "
             "novak olsen petrov ramos silva torres ueda vogel weber young zimmer").split()


def build_topology(p: Preset) -> Topology:
    """Dragonfly: ``groups`` x (``rows`` x ``cols`` routers) x ``nodes_per_router`` nodes named nidNNNNN.

    Routers are named like Cray XC blades (cname without the node), so a router name says where
    it sits; the first ``io_routers_per_group`` routers of the first ``io_groups`` groups serve
    I/O nodes. Every ``groups_per_island`` consecutive groups form a Dragonfly+ island (``i0``,
    ``i1``, ...; the last may be smaller); with 0 there is no island column.
    """
    rows = []
    nid = 0
    for g in range(p.groups):
        for r in range(p.rows):
            for c in range(p.cols):
                router = f"c{2 * g + r // 3}-0c{r % 3}s{c}"
                io = g < p.io_groups and r * p.cols + c < p.io_routers_per_group
                for n in range(p.nodes_per_router):
                    rows.append((f"nid{nid:05d}", router, f"g{g}", "io" if io else "compute", r, c, f"{router}n{n}"))
                    nid += 1
    table = pd.DataFrame(rows, columns=["node", "router", "group", "role", "row", "col", "cname"])
    if p.groups_per_island > 0:
        table.insert(3, "island", "i" + (table["group"].str[1:].astype(int) // p.groups_per_island).astype(str))
    return Topology(table, nodes_per_router=p.nodes_per_router, source="simulated")


@dataclass
class Users:
    """Background users and their traits (one row per user)."""

    table: pd.DataFrame  # user, uid, account, median_nodes, median_hours, comm, io, jobs_per_day, large
    culprits: dict[str, list[str]]  # dataset name -> culprit users
    culprit_strength: dict[str, float]


def make_users(p: Preset, rng: np.random.Generator, datasets: list[str]) -> Users:
    names: list[str] = []
    while len(names) < p.users:
        name = f"{chr(97 + rng.integers(26))}{rng.choice(_SURNAMES)}{'' if rng.random() < 0.6 else rng.integers(2, 99)}"
        if name not in names and name != p.campaign_user:
            names.append(name)
    compute_nodes = p.num_nodes * (1 - (p.io_groups * p.io_routers_per_group) / (p.groups * p.rows * p.cols))
    rows = []
    for i, name in enumerate(names):
        large = i < p.large_users
        if large:
            median_nodes = float(rng.choice([160, 192, 256, 384, 512, 768, 1024]))
            median_hours = float(rng.uniform(2, 8))
        else:
            median_nodes = float(rng.choice([8, 16, 32, 48, 64, 96]))
            median_hours = float(rng.uniform(1, 8))
        median_nodes = min(median_nodes, compute_nodes / 8)
        rows.append({"user": name, "uid": 20000 + i, "account": f"m{1000 + i % 17}",
                     "median_nodes": median_nodes, "median_hours": median_hours,
                     "comm": float(rng.beta(2, 3)), "io": float(rng.beta(1.5, 4)), "large": large})
    table = pd.DataFrame(rows)
    # Culprits: communication-heavy large users whose jobs are up 10-40% of the time.
    pool = list(table.loc[table["large"]].sample(p.culprit_pool, random_state=int(rng.integers(1 << 31)))["user"])
    culprit_strength = {u: float(rng.uniform(0.5, 1.0)) for u in pool}
    table.loc[table["user"].isin(pool), "comm"] = rng.uniform(0.75, 0.95, len(pool))
    lo, hi = p.culprit_coverage
    coverage = {u: float(rng.uniform(lo, hi)) for u in pool}
    # Jobs per day from the wanted share of time up: coverage = rate * hours / 24.
    table["jobs_per_day"] = 0.0
    for u in pool:
        h = table.loc[table["user"] == u, "median_hours"].iloc[0]
        table.loc[table["user"] == u, "jobs_per_day"] = coverage[u] * 24 / h
    # Other large users are up 30-90% of the time: frequent neighbours that do not hurt.
    others = table["large"] & ~table["user"].isin(pool)
    table.loc[others, "jobs_per_day"] = rng.uniform(0.3, 0.9, others.sum()) * 24 / table.loc[others, "median_hours"]
    # Small users fill the machine up to the target utilisation.
    used = (table["jobs_per_day"] * table["median_nodes"] * table["median_hours"]).sum() / 24
    small = ~table["large"]
    room = max(p.utilisation * compute_nodes - used, 0.05 * compute_nodes)
    weights = rng.dirichlet(np.ones(small.sum()))
    table.loc[small, "jobs_per_day"] = room * weights * 24 / (table.loc[small, "median_nodes"] * table.loc[small, "median_hours"])
    culprits = {}
    for ds in datasets:
        k = int(rng.integers(p.culprits_per_dataset[0], p.culprits_per_dataset[1] + 1))
        culprits[ds] = sorted(rng.choice(pool, size=min(k, len(pool)), replace=False).tolist())
    return Users(table, culprits, culprit_strength)


def make_background_jobs(p: Preset, users: Users, rng: np.random.Generator, t0: float, t1: float) -> pd.DataFrame:
    """Poisson arrivals per user with log-normal sizes and durations around the user's medians."""
    frames = []
    days = (t1 - t0) / 86400
    for row in users.table.itertuples():
        n = rng.poisson(row.jobs_per_day * days)
        if n == 0:
            continue
        submit = np.sort(rng.uniform(t0, t1, n))
        nodes = np.maximum(1, np.round(row.median_nodes * rng.lognormal(0, 0.25 if row.large else 0.6, n))).astype(int)
        if row.large:
            nodes = np.maximum(nodes, LARGE_JOB_NODES + 1)
        hours = row.median_hours * rng.lognormal(0, 0.35, n)
        frames.append(pd.DataFrame({"user": row.user, "uid": row.uid, "account": row.account,
                                    "submit": submit, "nodes": nodes, "duration": hours * 3600,
                                    "job_name": f"{row.user[:3]}_{rng.choice(['run', 'sim', 'solve', 'train'])}"}))
    return pd.concat(frames, ignore_index=True)


def schedule(jobs: pd.DataFrame, topo: Topology, rng: np.random.Generator) -> pd.DataFrame:
    """FCFS with lowest-free-node placement; adds ``start``, ``end``, ``node_idx`` (array of node indices).

    A job whose size exceeds the free nodes waits for running jobs to end (no backfill);
    jobs never wait for jobs submitted after them.
    """
    compute = np.flatnonzero((topo.table["role"] == "compute").to_numpy()).astype(np.int32)
    free = np.ones(len(compute), dtype=bool)
    running: list[tuple[float, int]] = []  # (end, job position)
    order = np.argsort(jobs["submit"].to_numpy(), kind="stable")
    submit = jobs["submit"].to_numpy()
    nodes = jobs["nodes"].to_numpy()
    duration = jobs["duration"].to_numpy()
    start = np.empty(len(jobs))
    alloc: list[np.ndarray] = [None] * len(jobs)  # type: ignore[list-item]
    clock = -np.inf
    for pos in order:
        clock = max(clock, submit[pos])
        while running and running[0][0] <= clock:
            _, done = heapq.heappop(running)
            free[alloc[done]] = True
        need = min(nodes[pos], len(compute))
        while free.sum() < need:
            end, done = heapq.heappop(running)
            clock = max(clock, end)
            free[alloc[done]] = True
        # A copy, not a view: a view would keep the whole free-node index array alive per job.
        take = np.flatnonzero(free)[:need].astype(np.int32)
        free[take] = False
        alloc[pos] = take
        start[pos] = clock
        heapq.heappush(running, (clock + duration[pos], pos))
    out = jobs.copy()
    out["start"] = start
    out["end"] = start + duration
    out["node_idx"] = [compute[a] for a in alloc]
    return out
