"""The simulated dragonfly system: writes the raw files a real campaign writes, plus ``truth.json``.

``simulate(preset, seed, out)`` produces::

    out/system.yaml                       system name, time zone, topology and LDMS locations
    out/topology.csv                      node -> router -> group map (with I/O roles)
    out/truth.json                        planted causes (never read by collation)
    out/truth_oracle.parquet              the oracle forecaster's expected k-step sums per run and t_c
    out/truth_steps.parquet               the hidden state per run and step: culprit intensity, AR(1)
                                          congestion, the I/O process at the step's start, and the
                                          seconds each planted cause added to the step (culprit,
                                          its strongest user, congestion, placement, I/O, noise)
    out/truth_runs.parquet                per run: those seconds summed, and its dominant cause
    out/ldms/aries_rtr_mmr/aries_rtr_mmr.<epoch>   LDMS store_csv, one rollover file per day
    out/perflogs/<system>/compute/<Test>.log       ReFrame perflogs, one record per run
    out/runs/<run_id>/stdout.txt          timestamped application output (ts '%.s')
    out/runs/<run_id>/counters.csv        per-step network counters
    out/runs/<run_id>/<app>.<ntasks>.<pid>.1.mpiP  mpiP report
    out/runs/<run_id>/sacct.txt           sacct -P --allusers for the run's window
    out/runs/<run_id>/manifest.json       written last: ids, times, nodes, checksums
    out/runs/<run_id>/hpcvar-collectives.csv   microbenchmark runs (simulate/microbench.py) instead of
                                          stdout steps, counters and mpiP

Everything downstream reads these files back through :mod:`hpcvar.parsers`. This module runs the
campaign; the schedule comes from :mod:`~hpcvar.simulate.schedule`, each run's behaviour from
:mod:`~hpcvar.simulate.model`, its files from :mod:`~hpcvar.simulate.writers`, and the truth
files from :mod:`~hpcvar.simulate.truth`. With ``workers`` above 1 our runs' files are written by
that many forked processes while the campaign goes on (:class:`_RunWrites`): every random draw
is made before a run's files are handed over, so they are the same at any count.
"""

from __future__ import annotations

import multiprocessing
import shutil
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.data.rawlayout import (COUNTERS, PERFLOGS_DIR, RUNS_DIR, SACCT, STDOUT, SYSTEM_FILE, TOPOLOGY, read_system,
                                   write_manifest, write_system)
from hpcvar.parsers import counters as counter_files
from hpcvar.parsers import mpip as mpip_files
from hpcvar.simulate import model, writers
from hpcvar.simulate.microbench import MicrobenchmarkRuns
from hpcvar.simulate.presets import DatasetSpec, Preset, get_preset
from hpcvar.simulate.schedule import CAMPAIGN_ACCOUNT, CAMPAIGN_UID, Background, build_schedule
from hpcvar.simulate.system import build_topology, make_users
from hpcvar.simulate.truth import TruthRecorder
from hpcvar.util.progress import Progress

FAILURE_RATE = 0.02  # share of our runs that fail (node failure / timeout) and must not be collated

#: A run's file writes, in order: ``(function, args, kwargs)``; the manifest comes last.
Writes = list[tuple[Callable, tuple, dict]]


def _write_run(writes: Writes) -> None:
    for function, args, kwargs in writes:
        function(*args, **kwargs)


class _RunWrites:
    """Our runs' files: written at once (``workers`` <= 1), or handed to ``workers`` forked
    processes, a run's files in one process and in order (its manifest, which checksums them,
    last). At most two runs per process wait, so memory holds a few runs' data whatever the
    campaign's size; :meth:`finish` waits for the rest and raises a writer's error."""

    def __init__(self, workers: int):
        self.pool = None if workers <= 1 else ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("fork"))
        self.limit = 2 * workers
        self.pending: deque[Future] = deque()

    def __call__(self, writes: Writes) -> None:
        if self.pool is None:
            _write_run(writes)
            return
        self.pending.append(self.pool.submit(_write_run, writes))
        while len(self.pending) > self.limit:
            self.pending.popleft().result()

    def finish(self) -> None:
        while self.pending:
            self.pending.popleft().result()

    def close(self) -> None:
        if self.pool is not None:
            for future in self.pending:
                future.cancel()
            self.pool.shutdown(wait=True, cancel_futures=True)


class RefusedOutput(ValueError):
    """``out`` holds something other than a simulated campaign: the simulator never replaces it."""


def check_replaceable(out: Path, system: str) -> None:
    """A simulated campaign replaces ``out`` only when it is absent, empty, or an earlier simulated
    campaign of ``system`` (its system.yaml says so): never a real campaign's raw files."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not (out / SYSTEM_FILE).is_file():
        raise RefusedOutput(f"{out} exists and is not a raw campaign directory (no {SYSTEM_FILE}): not replaced; "
                            "simulate into an empty or new directory")
    theirs = str((read_system(out) or {}).get("system"))
    if theirs != system:
        raise RefusedOutput(f"{out} is the raw directory of system {theirs!r}, not a simulated {system!r} "
                            "campaign: not replaced (give this configuration its own `results:`)")


class _Campaign:
    """One simulated campaign: the machine and its users, then (:meth:`run`) the schedule, each of
    our runs simulated and written, the system-wide files and the truth. One random stream drives
    it all, in that order (the microbenchmark runs have their own)."""

    def __init__(self, p: Preset, seed: int, out: Path, workers: int = 1):
        self.p, self.seed, self.out, self.workers = p, seed, out, workers
        self.rng = np.random.default_rng(seed)
        self.topo = build_topology(p)
        self.t0 = pd.Timestamp(p.start, tz="UTC").timestamp()
        self.t1 = self.t0 + p.days * 86400
        self.users = make_users(p, self.rng, [d.name for d in p.all_datasets])
        self.io = model.OUProcess(self.t0 - 3600, self.t1 + 86400, self.rng)

    def run(self, progress: bool = True) -> dict:
        out, p = self.out, self.p
        check_replaceable(out, p.system)
        if out.exists():
            shutil.rmtree(out)
        (out / RUNS_DIR).mkdir(parents=True)
        self.topo.to_csv(out / TOPOLOGY)
        write_system(out, {
            "system": p.system, "timezone": "UTC", "topology": TOPOLOGY,
            "ldms": writers.LDMS_STORE, "campaign_user": p.campaign_user,
            "ranks_per_node": p.ranks_per_node})
        jobs = build_schedule(p, self.topo, self.users, self.t0, self.t1, self.rng)
        ours = jobs[jobs["dataset"].notna()].reset_index(drop=True)
        self.background = Background(jobs[jobs["dataset"].isna()].reset_index(drop=True), self.users)
        self.truth = TruthRecorder()
        self._seen: dict[str, int] = {}  # runs simulated per dataset (every k-th is profiled)
        profiles = {ds.name: model.step_profile(ds, self.rng) for ds in p.all_datasets}
        specs = {ds.name: ds for ds in p.all_datasets}
        windows = []
        bar = Progress("simulate", len(ours), stream=None) if progress else None
        perflog_records: dict[str, list[dict]] = {}
        self.write_run = _RunWrites(self.workers)
        try:
            for job in ours.itertuples():
                ds = specs[job.dataset]
                start, end, perflog = self.simulate_one(job, ds, profiles[ds.name])
                windows.append((start - p.ldms_margin_s, end + p.ldms_margin_s))
                if perflog is not None:
                    perflog_records.setdefault(ds.app, []).append(perflog)
                if bar:
                    bar.step()
            writers.write_perflogs(out / PERFLOGS_DIR, p.system, perflog_records)
            writers.write_ldms(out / writers.LDMS_STORE, self.topo, p.ldms_sys_routers, windows, p.ldms_interval,
                               self.io, lambda t: self.background.load(t, len(self.topo.table)), self.rng)
            microbenchmarks = None
            if p.microbenchmark_nodes > 0:
                upgrade_t = self.t0 + p.upgrade_day * 86400 if 0 <= p.upgrade_day < p.days else None
                microbenchmarks = MicrobenchmarkRuns(self, jobs, self.seed).run(self.write_run, upgrade_t)
            self.write_run.finish()
        finally:
            self.write_run.close()
        return self.truth.write(out, p, self.seed, self.users, microbenchmarks)

    def simulate_one(self, job, ds: DatasetSpec, profile: np.ndarray) -> tuple[float, float, dict | None]:
        """One of our runs, simulated and written to its run directory; returns its start, its end
        and its perflog record (None: the run failed)."""
        p, rng = self.p, self.rng
        nodes = self.topo.table["node"].to_numpy()[job.node_idx]
        place = self.topo.placement(nodes)
        min_groups = int(np.ceil(ds.nodes / self.topo.nodes_per_group))
        frag = (place["num_groups"] - min_groups) / max(len(self.topo.groups) - min_groups, 1)
        near = self.background.neighbours(job.start, job.start + job.duration, self.users.culprits[ds.name],
                                          self.users.culprit_strength)
        res = model.simulate_run(ds, profile, job.start + rng.uniform(15, 40), place["num_routers"], frag,
                                 near.level(near.strength), near.level(near.benign), self.io,
                                 p.noise, p.counter_noise, rng)
        end = float(res.step_end[-1] + rng.uniform(3, 10))
        failed = rng.random() < FAILURE_RATE and not ds.only_once
        state = "COMPLETED"
        n_written = len(profile)
        if failed:
            state = str(rng.choice(["NODE_FAIL", "TIMEOUT", "FAILED"]))
            n_written = int(rng.integers(1, max(len(profile) - 1, 2)))
            end = float(res.step_end[n_written - 1] + rng.uniform(1, 5))
        run_id = f"{p.system}-{job.job_id}"
        run_dir = self.out / RUNS_DIR / run_id
        run_dir.mkdir()
        nranks = ds.nodes * p.ranks_per_node
        steps = list(zip(res.step_start[:n_written], res.step_end[:n_written]))
        writes: Writes = [
            (writers.write_stdout, (run_dir / STDOUT, ds.app, steps, nranks), {"complete": not failed}),
            (counter_files.write, (run_dir / COUNTERS, np.arange(1, n_written + 1),
                                   {k: v[:n_written] for k, v in res.counters.items()}),
             {"comment": f"AriesNCL via PAPI, summed over {place['num_routers']} routers"})]
        self._seen[ds.name] = self._seen.get(ds.name, -1) + 1
        if not failed and self._seen[ds.name] % max(round(1 / p.mpip_fraction), 1) == 0:
            path, report = writers.mpip_report(run_dir, ds, job.job_id, nodes, p.ranks_per_node, res, job.start,
                                               end, rng)
            writes.append((mpip_files.write, (path,), report))
        node_list = writers.hostlist(nodes)
        writes.append(self.sacct_write(run_dir / SACCT, job, nodes, node_list, end, state))
        writes.append((write_manifest, (run_dir, {
            "run_id": run_id, "system": p.system, "app": ds.app, "dataset": ds.name, "input": ds.input,
            "num_nodes": ds.nodes, "job_id": job.job_id, "test": writers.TEST_NAMES[ds.app],
            "software": writers.APP_VERSIONS[ds.app], "container": None,
            "submit": float(job.submit), "start": float(job.start), "end": end,
            "node_list": node_list, "state": state}), {}))
        self.write_run(writes)
        self.truth.add_run(run_id, ds, profile, res, frag, self.io, n_written, failed,
                           [near.strongest_culprit(t) for t in res.step_start[:n_written]])
        perflog = None if failed else writers.perflog_record(
            ds, p.system, job.job_id, nranks, end, float(res.step_end[-1] - res.step_start[0]), len(profile))
        return float(res.step_start[0]), end, perflog

    def sacct_write(self, path: Path, job, nodes, node_list: str, end: float, state: str) -> tuple:
        """The write of the sacct of our ``job`` (``job_id``, ``job_name``, ``submit``, ``start``,
        ``nodes``) on ``nodes``, ending at ``end`` in ``state``, and of the other users' jobs in its
        window: ``(function, args, kwargs)``."""
        ours = {"job_id": job.job_id, "job_name": job.job_name, "user": self.p.campaign_user, "uid": CAMPAIGN_UID,
                "account": CAMPAIGN_ACCOUNT, "submit": job.submit, "start": job.start, "end": end,
                "state": state, "nodes": int(job.nodes), "node_list": node_list}
        return writers.write_sacct, (path, self.background.window(job.start, end), ours), {"batch_node": nodes[0]}


def simulate(preset: str | Preset = "demo", seed: int = 0, out: str | Path = "results/raw",
             overrides: dict | None = None, progress: bool = True, workers: int = 1) -> dict:
    """Generate a campaign's raw files under ``out`` (replacing it); returns the truth dict.
    ``workers`` processes write our runs' files (the same files at any count)."""
    p = preset if isinstance(preset, Preset) else get_preset(preset, overrides)
    return _Campaign(p, seed, Path(out), workers).run(progress)
