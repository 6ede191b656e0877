"""The campaign's schedule: our jobs among the other users' jobs, placed, and who ran beside each run.

:func:`build_schedule` draws our runs (each dataset's runs per day) and the background workload
(:mod:`hpcvar.simulate.system`), places them all with the FCFS scheduler and gives them job ids
and final states. :class:`Background` keeps the other users' jobs sorted by start, to find the
ones running in a run's window (its neighbours and its ``sacct``) or at a moment (the load the
LDMS routers and the microbenchmark see).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hpcvar.simulate import model
from hpcvar.simulate.presets import Preset
from hpcvar.simulate.system import LARGE_JOB_NODES, Users, make_background_jobs, schedule
from hpcvar.simulate.writers import TEST_NAMES, nid_hostlist
from hpcvar.system.topology import Topology

#: Our jobs' Slurm uid and account (the user is the preset's ``campaign_user``).
CAMPAIGN_UID = 1001
CAMPAIGN_ACCOUNT = "varstudy"


def our_jobs(p: Preset, t0: float, rng: np.random.Generator) -> pd.DataFrame:
    """Each dataset's runs: ``runs_per_day`` a day (or one on a random day), each submitted at a
    random time of its day and asking for its step profile's time and some more."""
    rows = []
    for ds in p.all_datasets:
        profile_total = float(model.step_profile(ds, rng).sum())
        days = [rng.integers(p.days)] if ds.only_once else range(p.days)
        for day in days:
            for _ in range(int(rng.integers(ds.runs_per_day[0], ds.runs_per_day[1] + 1))):
                rows.append({"user": p.campaign_user, "uid": CAMPAIGN_UID, "account": CAMPAIGN_ACCOUNT,
                             "submit": t0 + day * 86400 + rng.uniform(0, 86400),
                             "nodes": ds.nodes, "duration": 1.6 * profile_total + 120,
                             "job_name": f"{TEST_NAMES[ds.app]}_{ds.nodes}", "dataset": ds.name})
    return pd.DataFrame(rows)


def build_schedule(p: Preset, topo: Topology, users: Users, t0: float, t1: float,
                   rng: np.random.Generator) -> pd.DataFrame:
    """Our jobs (``dataset`` set) and the background jobs (``dataset`` None) from two days before
    ``t0`` to a day after ``t1``, in submit order, placed, with ``job_id`` and ``state``."""
    bg = make_background_jobs(p, users, rng, t0 - 2 * 86400, t1 + 86400)
    ours = our_jobs(p, t0, rng)
    jobs = pd.concat([bg.assign(dataset=None), ours], ignore_index=True)
    jobs = jobs.sort_values("submit", kind="stable").reset_index(drop=True)
    jobs = schedule(jobs, topo, rng)
    jobs["job_id"] = (1_000_000 + np.arange(len(jobs))).astype(str)
    jobs["state"] = "COMPLETED"
    # Some background jobs fail or are cancelled: sacct must show real state variety.
    r = rng.random(len(jobs))
    bg_mask = jobs["dataset"].isna().to_numpy()
    jobs.loc[bg_mask & (r < 0.04), "state"] = "FAILED"
    jobs.loc[bg_mask & (r >= 0.04) & (r < 0.07), "state"] = "TIMEOUT"
    cancelled = bg_mask & (r >= 0.07) & (r < 0.09)
    jobs.loc[cancelled, "state"] = [f"CANCELLED by {u}" for u in jobs.loc[cancelled, "uid"]]
    return jobs


@dataclass
class Neighbours:
    """The other users' jobs running some time during one run: their users, the congestion each
    adds to the run (``strength``: a culprit's large jobs; ``benign``: other large jobs, seen by
    the counters only), and their start and end."""

    user: np.ndarray
    strength: np.ndarray
    benign: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def level(self, weights: np.ndarray):
        """``weights`` summed over the jobs running at ``t``, as a function of ``t``."""
        cs, ce = self.start, self.end
        return lambda t: float(weights[(cs <= t) & (ce > t)].sum())

    def strongest_culprit(self, t: float) -> str | None:
        """The culprit user whose large jobs add the most congestion at ``t`` (None: none)."""
        on = (self.start <= t) & (self.end > t) & (self.strength > 0)
        if not on.any():
            return None
        users = self.user[on]
        if (users == users[0]).all():  # one culprit's jobs: no sums to compare
            return str(users[0])
        per_user = pd.Series(self.strength[on]).groupby(users).sum()
        return str(per_user.idxmax())


class Background:
    """The other users' jobs of a schedule, sorted by start."""

    def __init__(self, jobs: pd.DataFrame, users: Users):
        order = np.argsort(jobs["start"].to_numpy())
        self.jobs = jobs.iloc[order].reset_index(drop=True)
        self.start = self.jobs["start"].to_numpy()
        self.end = self.jobs["end"].to_numpy()
        # The times as sacct prints them (whole seconds, floored: simulate/writers.py).
        self._start_s, self._end_s = np.floor(self.start), np.floor(self.end)
        self.max_duration = float((self.jobs["end"] - self.jobs["start"]).max())
        # Each job's user's communication intensity, and whether the job is large.
        self.comm = users.table.set_index("user").loc[self.jobs["user"], "comm"].to_numpy()
        self.large = (self.jobs["nodes"] > LARGE_JOB_NODES).to_numpy()
        self._weights = self.comm * self.jobs["nodes"].to_numpy()
        self._node_idx = self.jobs["node_idx"].to_numpy()
        self._node_lists: dict[int, str] = {}

    def overlapping(self, t0: float, t1: float) -> np.ndarray:
        """Positions of the jobs running some time in ``[t0, t1)`` (a bounded search through the
        start-sorted arrays)."""
        lo = np.searchsorted(self.start, t0 - self.max_duration)
        hi = np.searchsorted(self.start, t1)
        idx = np.arange(lo, hi)
        return idx[self.end[idx] > t0]

    def running(self, t: float) -> np.ndarray:
        """Which jobs run at ``t`` (a mask)."""
        return (self.start <= t) & (self.end > t)

    def running_in_sacct(self, t: float) -> np.ndarray:
        """Which jobs sacct shows running at ``t``'s second, as collation counts them
        (:func:`hpcvar.system.background.running_at`, ``start <= t < end`` on the whole seconds
        sacct prints): a job that starts or ends within that second is on the other side of it."""
        at = np.floor(t)
        return (self._start_s <= at) & (self._end_s > at)

    def load(self, t: float, nodes: int) -> float:
        """The nodes held by the jobs running at ``t``, each weighted by its user's communication
        intensity, as a share of ``nodes``."""
        return float(self._weights[self.running(t)].sum()) / nodes

    def window(self, t0: float, t1: float) -> pd.DataFrame:
        """The jobs running some time in ``[t0, t1)``, with their compressed ``node_list``."""
        idx = self.overlapping(t0, t1)
        for i in idx:
            if i not in self._node_lists:
                self._node_lists[i] = nid_hostlist(self._node_idx[i])
        return self.jobs.iloc[idx].assign(node_list=[self._node_lists[i] for i in idx])

    def neighbours(self, t0: float, t1: float, culprits: list[str], culprit_strength: dict[str, float]) -> Neighbours:
        """The jobs running some time in ``[t0, t1)`` and the congestion each adds to a run of a
        dataset with these ``culprits``: only large jobs add any."""
        idx = self.overlapping(t0, t1)
        users = self.jobs["user"].to_numpy()[idx]
        culprits = set(culprits)
        strength = np.array([culprit_strength.get(u, 0.0) if u in culprits else 0.0 for u in users]) * self.large[idx]
        benign = self.comm[idx] * self.large[idx] * (strength == 0) * 0.5
        return Neighbours(users, strength, benign, self.start[idx], self.end[idx])
