"""Simulated runs of the collectives microbenchmark, with known causes of their latency spread.

Each run of ``hpcvar-collectives`` (``reframe_tests/microbenchmarks``) takes
``microbenchmark_nodes`` free nodes at its start, placed by one of the Dragonfly+ locality
levels of Salimi Beni et al. (all nodes in one group, in one island, or on different islands),
and times every iteration of Allreduce and Alltoall at two message sizes. Planted causes:

- **placement**: the less local the nodes, the slower and the more exposed to congestion
  (:data:`LOCALITY_FACTOR`, :data:`TAIL_FACTOR`);
- **background traffic**: the communication-weighted share of the machine's nodes held by
  running jobs (``load``) raises the run's typical latency and the probability and size of
  congestion delays (a long tail, as in the paper's Figure 2);
- **a system upgrade** on ``upgrade_day``: from then on every operation takes one of two
  paths, 0.65x or 1.35x as long, with equal probability -- the same mean and median, a second
  mode (the shape change of the Jaguar SeaStar upgrade in Settlemyer et al.).

Runs use their own random stream, so adding them leaves the application datasets unchanged.
The files written are the ones a real run leaves: the benchmark's CSV, its stdout, the sacct of
the run's window and the manifest.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.data.rawlayout import RUNS_DIR, SACCT, STDOUT, write_manifest
from hpcvar.parsers import microbenchmarks
from hpcvar.simulate.writers import hostlist

DATASET_APP = "collectives"
#: Median latency (us) of each timed operation on a quiet machine, all nodes in one group.
BASE_US = {("allreduce", 8): 6.0, ("allreduce", 65536): 70.0, ("alltoall", 8): 25.0, ("alltoall", 65536): 1200.0}
LOCALITY_CLASSES = ("same-group", "same-island", "different-islands")
#: Typical latency relative to a single-group placement.
LOCALITY_FACTOR = {"same-group": 1.0, "same-island": 1.2, "different-islands": 1.45}
#: How strongly congestion reaches the run: less local links carry more foreign traffic.
TAIL_FACTOR = {"same-group": 1.0, "same-island": 1.6, "different-islands": 2.4}
#: After the upgrade: (probability, latency factor) of the two paths; mean and median stay 1.
UPGRADE_PATHS = ((0.5, 0.65), (0.5, 1.35))
MPI_LIBRARY = "Cray MPICH 8.1.28 (simulated)"
#: The data file the benchmark writes in its run directory.
DATA_FILE = "hpcvar-collectives.csv"


def latencies(rng: np.random.Generator, base: float, locality: str, load: float, upgraded: bool,
              iterations: int) -> np.ndarray:
    """Per-iteration time (us) of one operation in one run."""
    tail = TAIL_FACTOR[locality] * load
    typical = base * LOCALITY_FACTOR[locality] * (1 + 0.3 * tail)
    values = typical * rng.lognormal(0.0, 0.04, iterations)
    if upgraded:
        probs, factors = zip(*UPGRADE_PATHS)
        values *= rng.choice(factors, size=iterations, p=probs)
    delayed = rng.random(iterations) < min(0.5, 0.6 * tail)
    values[delayed] += rng.exponential(base * 1.5 * tail, delayed.sum())
    return values


class MicrobenchmarkRuns:
    """Places and writes the microbenchmark runs of one simulated campaign."""

    def __init__(self, campaign, jobs: pd.DataFrame, seed: int):
        self.c = campaign
        self.p = campaign.p
        self.rng = np.random.default_rng([seed, 0x3B])
        self.jobs = jobs
        table = campaign.topo.table.reset_index(drop=True)
        self.compute = (table["role"] == "compute").to_numpy()
        self.group = table["group"].to_numpy()
        island = table["island"] if "island" in table.columns else table["group"]
        self.island = island.astype(str).to_numpy()
        self.name = f"{DATASET_APP}-{self.p.microbenchmark_nodes}"
        self.sizes = sorted({s for _, s in BASE_US})
        self.operations = list(dict.fromkeys(o for o, _ in BASE_US))

    # --- placement -------------------------------------------------------------------------
    def free_nodes(self, t0: float, t1: float) -> np.ndarray:
        busy = self.jobs[(self.jobs["start"] < t1) & (self.jobs["end"] > t0)]["node_idx"]
        free = self.compute.copy()
        for idx in busy:
            free[idx] = False
        return free

    def place(self, free: np.ndarray, wanted: str) -> tuple[np.ndarray, str] | None:
        """``n`` free nodes in the locality class ``wanted`` (or the next feasible one)."""
        n, rng = self.p.microbenchmark_nodes, self.rng
        order = list(LOCALITY_CLASSES[LOCALITY_CLASSES.index(wanted):]) + list(LOCALITY_CLASSES)
        free_idx = np.flatnonzero(free)
        by_group = {g: free_idx[self.group[free_idx] == g] for g in np.unique(self.group[free_idx])}
        island_of = dict(zip(self.group, self.island))
        half = (n + 1) // 2
        for cls in dict.fromkeys(order):
            if cls == "same-group":
                ok = [g for g, idx in by_group.items() if len(idx) >= n]
                if ok:
                    g = ok[rng.integers(len(ok))]
                    return np.sort(rng.choice(by_group[g], n, replace=False)), cls
                continue
            roomy = [g for g, idx in by_group.items() if len(idx) >= half]
            pairs = [(a, b) for a in roomy for b in roomy if a < b
                     and (island_of[a] == island_of[b]) == (cls == "same-island")]
            if pairs:
                a, b = pairs[rng.integers(len(pairs))]
                take = np.concatenate([rng.choice(by_group[a], half, replace=False),
                                       rng.choice(by_group[b], n - half, replace=False)])
                return np.sort(take), cls
        return None

    # --- runs -------------------------------------------------------------------------------
    def load(self, t: float) -> tuple[float, dict]:
        """True background load at ``t`` and the scheduler's view of it (the b heuristic's terms,
        on the jobs sacct shows running at the run's start, as collation computes b)."""
        bg = self.c.background
        nodes = bg.jobs["nodes"].to_numpy()[bg.running_in_sacct(t)]
        n_t = int(self.compute.sum())
        load = bg.load(t, n_t)
        n_a = int(nodes.sum())
        n_c = int(nodes[nodes >= 2].sum())  # the simulator never shares nodes: N_c = N'_c
        b = (n_c / n_t) * (n_c / n_a) * 100 if n_a else 0.0
        return load, {"b": b, "n_a": n_a, "n_c": n_c, "n_t": n_t}

    def run(self, write_run: Callable[[list], None], upgrade_t: float | None) -> dict:
        """Every run of the campaign's microbenchmark; ``write_run`` writes a run's files (the
        campaign's :class:`~hpcvar.simulate._RunWrites`, given each run's writes in order)."""
        p, rng = self.p, self.rng
        topo_nodes = self.c.topo.table["node"].to_numpy()
        records = []
        for day in range(p.days):
            for k in range(p.microbenchmark_runs_per_day):
                wanted = LOCALITY_CLASSES[rng.integers(len(LOCALITY_CLASSES))]
                start = self.c.t0 + day * 86400 + rng.uniform(0, 86400)
                est = 120.0
                placed = self.place(self.free_nodes(start, start + est), wanted)
                if placed is None:
                    continue
                idx, cls = placed
                load, sched = self.load(start)
                upgraded = upgrade_t is not None and start >= upgrade_t
                job_id = str(2_000_000 + len(records))
                rec = self.one_run(job_id, start, topo_nodes[idx], cls, load, upgraded, write_run)
                records.append({**rec, "wanted": wanted, "load": load, **sched, "upgraded": upgraded})
        return {"dataset": self.name, "app": DATASET_APP, "nodes": p.microbenchmark_nodes,
                "operations": [f"{o}_{s}B" for o, s in BASE_US],
                "locality_factor": LOCALITY_FACTOR, "tail_factor": TAIL_FACTOR,
                "latency_driver": "background load: communication-weighted share of the machine's nodes held by "
                                  "running jobs, raising the typical latency and the congestion tail",
                "upgrade": None if upgrade_t is None else {
                    "time": pd.Timestamp(upgrade_t, unit="s", tz="UTC").isoformat(),
                    "effect": "added mode: every operation takes a 0.65x or a 1.35x path with equal probability "
                              "(mean and median unchanged)",
                    "affects": [self.name]},
                "runs": records}

    def one_run(self, job_id, start, nodes, cls, load, upgraded, write_run) -> dict:
        """One run: its latencies drawn, its files handed to ``write_run``; its truth record."""
        p, rng = self.p, self.rng
        rows, stdout = [], []
        for op in self.operations:
            for size in self.sizes:
                v = latencies(rng, BASE_US[(op, size)], cls, load, upgraded, p.microbenchmark_iterations)
                rows.append(pd.DataFrame({"collective": op, "size_bytes": size,
                                          "iteration": np.arange(len(v)), "max_us": v,
                                          "min_us": v * rng.uniform(0.6, 0.9, len(v)),
                                          "mean_us": v * rng.uniform(0.85, 0.97, len(v)),
                                          "max_rank": rng.integers(0, len(nodes), len(v))}))
                stdout.append(f"hpcvar-collectives: {op} size={size} iterations={len(v)} min_us={v.min():.3f} "
                              f"median_us={np.median(v):.3f} mean_us={v.mean():.3f} max_us={v.max():.3f}")
        frame = pd.concat(rows, ignore_index=True)
        end = start + 15.0 + frame["max_us"].sum() * 1.1e-6 + rng.uniform(2, 8)
        run_id = f"{p.system}-{job_id}"
        run_dir = self.c.out / RUNS_DIR / run_id
        run_dir.mkdir()
        stdout.append(f"hpcvar-collectives: done rows={len(frame)} file={DATA_FILE}")
        job = types.SimpleNamespace(job_id=job_id, job_name=f"Collectives_{len(nodes)}",
                                    submit=start - rng.uniform(5, 120), start=start, nodes=len(nodes))
        node_list = hostlist(nodes)
        write_run([
            (microbenchmarks.write_collectives, (run_dir / DATA_FILE, frame),
             {"hosts": list(nodes), "start_epoch": start + 10.0, "mpi_library": MPI_LIBRARY}),
            (Path.write_text, (run_dir / STDOUT, "\n".join(stdout) + "\n"), {}),
            self.c.sacct_write(run_dir / SACCT, job, nodes, node_list, end, "COMPLETED"),
            (write_manifest, (run_dir, {
                "run_id": run_id, "system": p.system, "app": DATASET_APP, "dataset": self.name,
                "kind": "microbenchmark",
                "input": f"-s {','.join(map(str, self.sizes))} -i {p.microbenchmark_iterations} "
                         f"-c {','.join(self.operations)}",
                "num_nodes": len(nodes), "job_id": job_id, "test": f"Collectives %num_nodes={len(nodes)}",
                "software": "hpcvar-collectives 1", "container": None, "submit": float(job.submit),
                "start": float(start), "end": float(end), "node_list": node_list,
                "state": "COMPLETED"}), {})])
        return {"run_id": run_id, "start": pd.Timestamp(start, unit="s", tz="UTC").isoformat(),
                "locality_dfplus": cls}
