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

Everything downstream reads these files back through :mod:`hpcvar.parsers`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.defaults import FORECAST_GRID
from hpcvar.parsers import apps, ldms, mpip, reframe, sacct
from hpcvar.parsers import counters as counter_files
from hpcvar.progress import Progress
from hpcvar.rawlayout import (COUNTERS, MPIP_SUFFIX, RUNS_DIR, SACCT, STDOUT, SYSTEM_FILE, TOPOLOGY, read_system,
                              write_manifest, write_system)
from hpcvar.simulate import model
from hpcvar.simulate.microbench import MicrobenchmarkRuns
from hpcvar.simulate.presets import DatasetSpec, Preset, get_preset
from hpcvar.simulate.system import build_topology, make_background_jobs, make_users, schedule
from hpcvar.simulate.truth import TRUTH_RUNS

SACCT_FIELDS = ["JobID", "JobIDRaw", "JobName", "User", "UID", "Account", "Partition", "Submit", "Start",
                "End", "Elapsed", "State", "ExitCode", "NNodes", "NodeList"]
APP_VERSIONS = {"amg": "AMG2013 1.1", "milc": "MILC 7.8.0", "minivite": "miniVite 1.0", "umt": "UMT 2.0"}
TEST_NAMES = {"amg": "AMGTest", "milc": "MILCTest", "minivite": "MiniViteTest", "umt": "UMTTest"}
APP_STDOUT = {"amg": "amg2013", "milc": "milc", "minivite": "minivite", "umt": "umt"}
PERFLOG_FIELDS = ["job_completion_time", "version", "display_name", "system", "partition", "environ", "jobid",
                  "result", "num_tasks", "software", "perfvalues"]
CALLS_PER_STEP = {"Iprobe": 4000, "Test": 3000, "Testall": 800, "Waitall": 400, "Allreduce": 12, "Isend": 600,
                  "Irecv": 600, "Wait": 1200, "Barrier": 4}
FAILURE_RATE = 0.02  # share of our runs that fail (node failure / timeout) and must not be collated


def nid_hostlist(nids: np.ndarray) -> str:
    """Slurm's compressed host list of ``nidNNNNN`` nodes, e.g. ``nid[00004-00007,00012]``.

    The simulator knows its node numbers, so it forms the ranges directly; python-hostlist's
    general ``collect_hostlist`` (which the parsers use to read them back) took most of the
    simulator's time at the paper's scale.
    """
    nids = np.unique(nids)
    if len(nids) == 1:
        return f"nid{nids[0]:05d}"
    breaks = np.flatnonzero(np.diff(nids) != 1) + 1
    parts = []
    for run in np.split(nids, breaks):
        parts.append(f"{run[0]:05d}" if len(run) == 1 else f"{run[0]:05d}-{run[-1]:05d}")
    return f"nid[{','.join(parts)}]"


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
    def __init__(self, p: Preset, seed: int, out: Path):
        self.p, self.seed, self.out = p, seed, out
        self.rng = np.random.default_rng(seed)
        self.topo = build_topology(p)
        self.t0 = pd.Timestamp(p.start, tz="UTC").timestamp()
        self.t1 = self.t0 + p.days * 86400
        self.datasets = list(p.all_datasets)
        self.users = make_users(p, self.rng, [d.name for d in self.datasets])
        self.io = model.OUProcess(self.t0 - 3600, self.t1 + 86400, self.rng)

    # --- jobs -----------------------------------------------------------------------------
    def our_jobs(self) -> pd.DataFrame:
        rows = []
        for ds in self.datasets:
            profile_total = float(model.step_profile(ds, self.rng).sum())
            days = [self.rng.integers(self.p.days)] if ds.only_once else range(self.p.days)
            for day in days:
                for _ in range(int(self.rng.integers(ds.runs_per_day[0], ds.runs_per_day[1] + 1))):
                    rows.append({"user": self.p.campaign_user, "uid": 1001, "account": "varstudy",
                                 "submit": self.t0 + day * 86400 + self.rng.uniform(0, 86400),
                                 "nodes": ds.nodes, "duration": 1.6 * profile_total + 120,
                                 "job_name": f"{TEST_NAMES[ds.app]}_{ds.nodes}", "dataset": ds.name})
        return pd.DataFrame(rows)

    def build_schedule(self) -> pd.DataFrame:
        bg = make_background_jobs(self.p, self.users, self.rng, self.t0 - 2 * 86400, self.t1 + 86400)
        ours = self.our_jobs()
        jobs = pd.concat([bg.assign(dataset=None), ours], ignore_index=True)
        jobs = jobs.sort_values("submit", kind="stable").reset_index(drop=True)
        jobs = schedule(jobs, self.topo, self.rng)
        jobs["job_id"] = (1_000_000 + np.arange(len(jobs))).astype(str)
        jobs["state"] = "COMPLETED"
        # Some background jobs fail or are cancelled: sacct must show real state variety.
        r = self.rng.random(len(jobs))
        bg_mask = jobs["dataset"].isna().to_numpy()
        jobs.loc[bg_mask & (r < 0.04), "state"] = "FAILED"
        jobs.loc[bg_mask & (r >= 0.04) & (r < 0.07), "state"] = "TIMEOUT"
        cancelled = bg_mask & (r >= 0.07) & (r < 0.09)
        jobs.loc[cancelled, "state"] = [f"CANCELLED by {u}" for u in jobs.loc[cancelled, "uid"]]
        return jobs

    # --- writing --------------------------------------------------------------------------
    def run(self, progress: bool = True) -> dict:
        out, p = self.out, self.p
        check_replaceable(out, p.system)
        if out.exists():
            shutil.rmtree(out)
        (out / RUNS_DIR).mkdir(parents=True)
        self.topo.to_csv(out / TOPOLOGY)
        write_system(out, {
            "system": p.system, "timezone": "UTC", "topology": TOPOLOGY,
            "ldms": "ldms/aries_rtr_mmr", "campaign_user": p.campaign_user,
            "ranks_per_node": p.ranks_per_node})
        jobs = self.build_schedule()
        ours = jobs[jobs["dataset"].notna()].reset_index(drop=True)
        bg = jobs[jobs["dataset"].isna()].reset_index(drop=True)
        order = np.argsort(bg["start"].to_numpy())
        bg = bg.iloc[order].reset_index(drop=True)
        self._bg = bg
        self._bg_start = bg["start"].to_numpy()
        self._bg_end = bg["end"].to_numpy()
        self._bg_maxdur = float((bg["end"] - bg["start"]).max())
        utab = self.users.table.set_index("user")
        self._bg_comm = utab.loc[bg["user"], "comm"].to_numpy()
        self._bg_large = (bg["nodes"] > 128).to_numpy()
        self._bg_nid = bg["node_idx"].to_numpy()
        self._hostlists: dict[int, str] = {}
        self._seen: dict[str, int] = {}  # runs simulated per dataset (every k-th is profiled)
        self._oracle: list[tuple] = []   # (run_id, dataset, t_c, k, oracle_s, actual_s)
        self._steps: list[pd.DataFrame] = []  # hidden state per step (truth_steps.parquet)
        profiles = {ds.name: model.step_profile(ds, self.rng) for ds in self.datasets}
        specs = {ds.name: ds for ds in self.datasets}
        windows = []
        truth_runs = []
        bar = Progress("simulate", len(ours), stream=None) if progress else None
        perflog_records: dict[str, list[dict]] = {}
        for job in ours.itertuples():
            ds = specs[job.dataset]
            rec = self.simulate_one(job, ds, profiles[ds.name])
            windows.append((rec["start"] - p.ldms_margin_s, rec["end"] + p.ldms_margin_s, rec["routers"]))
            truth_runs.append(rec["truth"])
            if rec["perflog"] is not None:
                perflog_records.setdefault(ds.app, []).append(rec["perflog"])
            if bar:
                bar.step()
        self.write_perflogs(perflog_records)
        self.write_ldms(windows)
        oracle = pd.DataFrame(self._oracle, columns=["run_id", "dataset", "t_c", "k", "oracle_s", "actual_s"])
        oracle.to_parquet(out / "truth_oracle.parquet", index=False)
        steps = (pd.concat(self._steps, ignore_index=True) if self._steps else
                 pd.DataFrame({c: [] for c in ("run_id", "dataset", "step", "culprit", "ar1", "io",
                                               *model.CAUSE_COLUMNS, "culprit_user")}))
        steps.to_parquet(out / "truth_steps.parquet", index=False)
        model.dominant_causes(steps, truth_runs).to_parquet(out / TRUTH_RUNS, index=False)
        truth = self.truth(truth_runs, profiles, oracle)
        if p.microbenchmark_nodes > 0:
            upgrade_t = self.t0 + p.upgrade_day * 86400 if 0 <= p.upgrade_day < p.days else None
            truth["microbenchmarks"] = MicrobenchmarkRuns(self, jobs, self.seed).run(self.write_sacct, upgrade_t)
        (out / "truth.json").write_text(json.dumps(truth, indent=1))
        return truth

    def simulate_one(self, job, ds: DatasetSpec, profile: np.ndarray) -> dict:
        p, rng = self.p, self.rng
        nodes = self.topo.table["node"].to_numpy()[job.node_idx]
        place = self.topo.placement(nodes)
        min_groups = int(np.ceil(ds.nodes / self.topo.nodes_per_group))
        frag = (place["num_groups"] - min_groups) / max(len(self.topo.groups) - min_groups, 1)
        # Background jobs that may overlap (bounded search through start-sorted arrays).
        horizon = job.start + job.duration
        lo = np.searchsorted(self._bg_start, job.start - self._bg_maxdur)
        hi = np.searchsorted(self._bg_start, horizon)
        idx = np.arange(lo, hi)
        idx = idx[self._bg_end[idx] > job.start]
        cand = self._bg.iloc[idx]
        culprits = set(self.users.culprits[ds.name])
        strength = np.array([self.users.culprit_strength.get(u, 0.0) if u in culprits else 0.0
                             for u in cand["user"]]) * self._bg_large[idx]
        benign = self._bg_comm[idx] * self._bg_large[idx] * (strength == 0) * 0.5
        cs, ce = self._bg_start[idx], self._bg_end[idx]

        def active(weights):
            return lambda t: float(weights[(cs <= t) & (ce > t)].sum())

        res = model.simulate_run(ds, profile, job.start + rng.uniform(15, 40), place["num_routers"], frag,
                                 active(strength), active(benign), self.io,
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
        self.write_stdout(run_dir / STDOUT, ds, steps, nranks, complete=not failed)
        counter_files.write(run_dir / COUNTERS, np.arange(1, n_written + 1),
                            {k: v[:n_written] for k, v in res.counters.items()},
                            comment=f"AriesNCL via PAPI, summed over {place['num_routers']} routers")
        self._seen[ds.name] = self._seen.get(ds.name, -1) + 1
        if not failed and self._seen[ds.name] % max(round(1 / p.mpip_fraction), 1) == 0:
            self.write_mpip(run_dir, ds, job, nodes, res, end)
        self.write_sacct(run_dir / SACCT, job, nodes, end, state)
        meta = {"run_id": run_id, "system": p.system, "app": ds.app, "dataset": ds.name, "input": ds.input,
                "num_nodes": ds.nodes, "job_id": job.job_id, "test": TEST_NAMES[ds.app],
                "software": APP_VERSIONS[ds.app], "container": None,
                "submit": float(job.submit), "start": float(job.start), "end": end,
                "node_list": self._hostlist(job.Index, nodes), "state": state}
        write_manifest(run_dir, meta)
        perflog = None
        if not failed:
            total = float(res.step_end[-1] - res.step_start[0])
            perflog = {"job_completion_time": pd.Timestamp(round(end), unit="s", tz="UTC").to_pydatetime(),
                       "version": "4.10.4", "display_name": f"{TEST_NAMES[ds.app]} %num_nodes={ds.nodes}",
                       "system": p.system, "partition": "compute", "environ": "gnu", "jobid": job.job_id,
                       "result": "pass", "num_tasks": nranks, "software": APP_VERSIONS[ds.app],
                       "perfvalues": {"total_time": (round(total, 3), 0, None, None, "s"),
                                      "mean_step_time": (round(total / len(profile), 4), 0, None, None, "s")}}
        if not failed:
            durations = res.step_end - res.step_start
            cum = np.concatenate([[0.0], np.cumsum(durations)])
            self._oracle += [(run_id, ds.name, t_c, k, o, float(cum[t_c + k] - cum[t_c]))
                             for t_c, k, o in model.oracle_sums(ds, profile, res, frag, self.io, len(profile))]
        causes = model.step_causes(ds, profile, res, frag, self.io)
        strongest = [self._strongest_culprit(cand["user"].to_numpy(), strength, cs, ce, t)
                     for t in res.step_start[:n_written]]
        self._steps.append(pd.DataFrame({
            "run_id": run_id, "dataset": ds.name, "step": np.arange(1, n_written + 1, dtype=np.int32),
            "culprit": res.culprit_share[:n_written], "ar1": res.ar1[:n_written],
            "io": self.io(res.step_start[:n_written]),
            **{c: v[:n_written] for c, v in causes.items()}, "culprit_user": strongest}))
        truth = {"run_id": run_id, "dataset": ds.name, "failed": failed,
                 "culprit_steps": float(np.mean(res.culprit_share > 0)),
                 "abs_rel_noise": float(np.mean(np.abs((res.step_end - res.step_start) - res.noise_free)
                                               / (res.step_end - res.step_start)))}
        return {"start": float(res.step_start[0]), "end": end, "routers": self.topo.routers_of(nodes),
                "perflog": perflog, "truth": truth}

    @staticmethod
    def _strongest_culprit(users, strength, starts, ends, t: float) -> str | None:
        """The culprit user whose large jobs add the most congestion at time ``t`` (None: none)."""
        on = (starts <= t) & (ends > t) & (strength > 0)
        if not on.any():
            return None
        per_user = pd.Series(strength[on]).groupby(users[on]).sum()
        return str(per_user.idxmax())

    def _hostlist(self, key, nodes) -> str:
        if key not in self._hostlists:
            self._hostlists[key] = nid_hostlist(np.asarray([int(n[3:]) for n in nodes]))
        return self._hostlists[key]

    def write_sacct(self, path: Path, job, nodes, end: float, state: str) -> None:
        """``sacct --allusers -P -S <start> -E <end>``: every job running in our run's window."""
        lo = np.searchsorted(self._bg_start, job.start - self._bg_maxdur)
        hi = np.searchsorted(self._bg_start, end)
        idx = np.arange(lo, hi)
        idx = idx[self._bg_end[idx] > job.start]
        bg = self._bg.iloc[idx]
        done = bg["end"].to_numpy() <= end  # jobs still running at query time have no End yet
        for i in idx:
            if ("bg", i) not in self._hostlists:
                self._hostlists[("bg", i)] = nid_hostlist(self._bg_nid[i])
        records = pd.DataFrame({
            "job_id": bg["job_id"].to_numpy(), "job_name": bg["job_name"].to_numpy(),
            "user": bg["user"].to_numpy(), "uid": bg["uid"].to_numpy(), "account": bg["account"].to_numpy(),
            "partition": "regular", "submit": bg["submit"].to_numpy(), "start": bg["start"].to_numpy(),
            "end": np.where(done, bg["end"].to_numpy(), np.nan),
            "state": np.where(done, bg["state"].to_numpy(), "RUNNING"),
            "node_list_raw": [self._hostlists[("bg", i)] for i in idx], "node_count": bg["nodes"].to_numpy()})
        ours = {"job_id": job.job_id, "job_name": job.job_name, "user": self.p.campaign_user, "uid": 1001,
                "account": "varstudy", "partition": "regular", "submit": job.submit, "start": job.start,
                "end": end, "state": state, "node_list_raw": self._hostlist(job.Index, nodes),
                "node_count": int(job.nodes)}
        # Our allocation and its batch, extern and srun steps, as sacct lists them.
        steps = [{**ours, "job_id": f"{job.job_id}.{step}", "job_name": name, "user": "", "uid": None,
                  "partition": "", "node_list_raw": step_nodes, "node_count": count}
                 for step, name, step_nodes, count in (
                     ("batch", "batch", nodes[0], 1),
                     ("extern", "extern", ours["node_list_raw"], int(job.nodes)),
                     ("0", job.job_name.split("_")[0].lower(), ours["node_list_raw"], int(job.nodes)))]
        df = pd.concat([records, pd.DataFrame([ours, *steps])], ignore_index=True)
        for col in ("submit", "start", "end"):
            df[col] = pd.to_datetime(df[col].astype(float), unit="s").dt.floor("s")
        df["elapsed_s"] = (df["end"].fillna(pd.Timestamp(end, unit="s")) - df["start"]).dt.total_seconds()
        df["exit_code"] = np.where(df["state"].isin(["COMPLETED", "RUNNING"]), "0:0", "1:0")
        df["uid"] = df["uid"].astype("Int64")
        sacct.write(path, df, fields=SACCT_FIELDS)

    def write_perflogs(self, records: dict[str, list[dict]]) -> None:
        base = self.out / "perflogs" / self.p.system / "compute"
        base.mkdir(parents=True, exist_ok=True)
        for app, recs in records.items():
            reframe.write_perflog(base / f"{TEST_NAMES[app]}.log", recs, PERFLOG_FIELDS)

    def write_stdout(self, path: Path, ds: DatasetSpec, steps: list, nranks: int, complete: bool) -> None:
        """Timestamped stdout; a failed run's output stops mid-run (the job died)."""
        app = APP_STDOUT[ds.app]
        apps.write_timestamped(path, app, steps, nranks=nranks,
                               version=APP_VERSIONS[ds.app].split()[-1] if app == "milc" else None)
        if not complete:
            lines = path.read_text().splitlines(keepends=True)
            path.write_text("".join(lines[: max(1, int(len(lines) * 0.7))]))

    def write_mpip(self, run_dir: Path, ds: DatasetSpec, job, nodes, res: model.RunResult, end: float) -> None:
        """mpiP report with per-rank times: the run's MPI time split over ranks and routines."""
        rng, rpn = self.rng, self.p.ranks_per_node
        nranks = ds.nodes * rpn
        app = (res.compute_s + res.mpi_s) * rng.normal(1, 0.002, nranks)
        share = rng.dirichlet(np.full(nranks, 400.0)) * nranks  # mean 1 per rank
        times = {r: t * share * rng.normal(1, 0.01, nranks) for r, t in res.routines.items()}
        counts = {r: np.full(nranks, len(res.step_start) * CALLS_PER_STEP.get(r, 50)) for r in res.routines}
        when = lambda t: pd.Timestamp(round(t), unit="s", tz="UTC").to_pydatetime()  # noqa: E731
        mpip.write(run_dir / f"{ds.app}.{nranks}.{int(job.job_id) % 90000 + 10000}.1{MPIP_SUFFIX}",
                   command=f"./{ds.app} {ds.input}", hosts=np.repeat(nodes, rpn).tolist(),
                   app_time_s=app.tolist(), routine_time_s={k: v.tolist() for k, v in times.items()},
                   routine_count={k: v.tolist() for k, v in counts.items()}, start=when(job.start),
                   stop=when(end), pid=int(job.job_id) % 90000 + 10000)

    def write_ldms(self, windows: list[tuple[float, float, set]]) -> None:
        """System-wide router counters from the I/O routers and a fixed sample of compute routers,
        recorded during our runs' windows (monitoring everything all the time would be TBs)."""
        p, rng = self.p, self.rng
        io_routers = sorted(self.topo.io_routers)
        compute_routers = [r for r in self.topo.routers if r not in self.topo.io_routers]
        sampled = sorted(rng.choice(compute_routers, size=min(p.ldms_sys_routers, len(compute_routers)),
                                    replace=False).tolist())
        routers = io_routers + sampled
        producer = {r: self.topo.table.loc[self.topo.table["router"] == r, "node"].iloc[0] for r in routers}
        is_io = np.array([r in self.topo.io_routers for r in routers])
        comp_id = np.array([int(producer[r][3:]) for r in routers])
        # Merge overlapping windows into sampling intervals on a global grid.
        spans = sorted((a, b) for a, b, _ in windows)
        merged: list[list[float]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        d = self.out / "ldms" / "aries_rtr_mmr"
        d.mkdir(parents=True)
        cumulative = rng.uniform(1e9, 1e11, (len(routers), len(model.LDMS_COUNTERS)))
        weights = self._bg_comm * self._bg["nodes"].to_numpy()
        grid = np.concatenate([np.arange(np.ceil(a / p.ldms_interval) * p.ldms_interval, b, p.ldms_interval)
                               for a, b in merged]) if merged else np.empty(0)
        producers = np.array([producer[r] for r in routers])
        io_shape = np.array([1.0, 0.6, 2.5, 1.2])
        days = (grid // 86400).astype(int)
        last_t = None
        for day in np.unique(days):
            times = grid[days == day]
            block = np.empty((len(times), len(routers), len(model.LDMS_COUNTERS)))
            for i, t in enumerate(times):
                dt = p.ldms_interval if last_t is None else min(t - last_t, p.ldms_interval)
                last_t = t
                act = (self._bg_start <= t) & (self._bg_end > t)
                load = float(weights[act].sum()) / len(self.topo.table)
                level = np.where(is_io[:, None], float(np.exp(self.io(t))) * io_shape, load * 2.0)
                cumulative += dt * model.LDMS_RATES * level * rng.lognormal(0, 0.1, cumulative.shape)
                block[i] = cumulative
            # One rollover file per day, rows in sampling order (producers interleaved), as LDMS writes.
            with ldms.StoreCsvWriter(d / f"aries_rtr_mmr.{day * 86400}", list(model.LDMS_COUNTERS)) as writer:
                writer.write_rows(np.repeat(times, len(routers)), np.tile(producers, len(times)),
                                  np.tile(comp_id, len(times)), 0,
                                  np.round(block.reshape(-1, len(model.LDMS_COUNTERS))).astype(np.int64))

    @staticmethod
    def oracle_mape(oracle: pd.DataFrame, app: str) -> dict[str, float]:
        """The oracle's MAPE on the default forecasting grid's windows (t_c from m to T-k)."""
        out = {}
        for m in FORECAST_GRID[app]["m"]:
            for k in FORECAST_GRID[app]["k"]:
                w = oracle[(oracle["k"] == k) & (oracle["t_c"] >= m)]
                if len(w):
                    out[f"m={m},k={k}"] = float((abs(w["oracle_s"] - w["actual_s"]) / w["actual_s"]).mean())
        return out

    def truth(self, runs: list[dict], profiles: dict, oracle: pd.DataFrame) -> dict:
        df = pd.DataFrame(runs)
        ok = df[~df["failed"]]
        return {
            "preset": self.p.name, "seed": self.seed, "system": self.p.system,
            "noise": self.p.noise, "counter_noise": self.p.counter_noise,
            "campaign_user": self.p.campaign_user,
            "neighbourhood_threshold_nodes": 128,
            "datasets": {
                ds.name: {
                    "app": ds.app, "nodes": ds.nodes, "steps": ds.steps,
                    "culprits": self.users.culprits[ds.name],
                    "drivers": list(ds.drivers),
                    "io_forecastable": ds.io_sensitivity > 0,
                    "runs": int((df["dataset"] == ds.name).sum()),
                    "failed_runs": int(((df["dataset"] == ds.name) & df["failed"]).sum()),
                    "runs_with_culprits": float((ok.loc[ok["dataset"] == ds.name, "culprit_steps"] > 0).mean()),
                    "best_achievable_mape": float(ok.loc[ok["dataset"] == ds.name, "abs_rel_noise"].mean()),
                    "oracle_mape": self.oracle_mape(oracle[oracle["dataset"] == ds.name], ds.app),
                } for ds in self.datasets
            },
            "culprit_strength": self.users.culprit_strength,
            "large_users": self.users.table.loc[self.users.table["large"], "user"].tolist(),
            "preset_fields": {k: v for k, v in asdict(self.p).items() if not isinstance(v, tuple)},
        }


def simulate(preset: str | Preset = "demo", seed: int = 0, out: str | Path = "results/raw",
             overrides: dict | None = None, progress: bool = True) -> dict:
    """Generate a campaign's raw files under ``out`` (replacing it); returns the truth dict."""
    p = preset if isinstance(preset, Preset) else get_preset(preset, overrides)
    return _Campaign(p, seed, Path(out)).run(progress)
