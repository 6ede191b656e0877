"""The raw files of a simulated campaign, one function per format: what a real campaign leaves.

Each writer takes plain values (paths, tables, the run's :class:`~hpcvar.simulate.model.RunResult`)
and goes through the parser module that reads the format back (:mod:`hpcvar.parsers`):

- :func:`write_sacct`: a run's ``sacct --allusers -P`` over its window;
- :func:`perflog_record`, :func:`write_perflogs`: ReFrame perflogs, one record per run;
- :func:`write_stdout`: the application's timestamped output;
- :func:`mpip_report`: an mpiP report with per-rank times (what :func:`hpcvar.parsers.mpip.write` writes);
- :func:`write_ldms`: the LDMS store of system-wide router counters, sampled around our runs.

Node lists are Slurm's compressed host lists (:func:`nid_hostlist`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.data.rawlayout import MPIP_SUFFIX
from hpcvar.parsers import apps, ldms, reframe, sacct
from hpcvar.simulate import model
from hpcvar.simulate.presets import DatasetSpec
from hpcvar.system.topology import Topology

SACCT_FIELDS = ["JobID", "JobIDRaw", "JobName", "User", "UID", "Account", "Partition", "Submit", "Start",
                "End", "Elapsed", "State", "ExitCode", "NNodes", "NodeList"]
#: What the suite's files call each app: its software version, ReFrame test and stdout parser.
APP_VERSIONS = {"amg": "AMG2013 1.1", "milc": "MILC 7.8.0", "minivite": "miniVite 1.0", "umt": "UMT 2.0"}
TEST_NAMES = {"amg": "AMGTest", "milc": "MILCTest", "minivite": "MiniViteTest", "umt": "UMTTest"}
APP_STDOUT = {"amg": "amg2013", "milc": "milc", "minivite": "minivite", "umt": "umt"}
PERFLOG_FIELDS = ["job_completion_time", "version", "display_name", "system", "partition", "environ", "jobid",
                  "result", "num_tasks", "software", "perfvalues"]
#: The ReFrame partition our runs ran in (``perflogs/<system>/<partition>/``).
PERFLOG_PARTITION = "compute"
CALLS_PER_STEP = {"Iprobe": 4000, "Test": 3000, "Testall": 800, "Waitall": 400, "Allreduce": 12, "Isend": 600,
                  "Irecv": 600, "Wait": 1200, "Barrier": 4}
#: The LDMS schema of the router counters and its store directory (``system.yaml``'s ``ldms``).
LDMS_SCHEMA = "aries_rtr_mmr"
LDMS_STORE = f"ldms/{LDMS_SCHEMA}"


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


def hostlist(nodes) -> str:
    """The compressed host list of node names ``nidNNNNN``."""
    return nid_hostlist(np.asarray([int(n[3:]) for n in nodes]))


def write_sacct(path: Path, others: pd.DataFrame, ours: dict, batch_node: str) -> None:
    """``sacct --allusers -P -S <start> -E <end>`` at the end of our job: every job running in its window.

    ``others`` (other users' jobs) and ``ours`` (our allocation, listed with its batch, extern and
    srun steps) have ``job_id``, ``job_name``, ``user``, ``uid``, ``account``, ``submit``,
    ``start``, ``end``, ``state``, ``nodes`` and ``node_list``; ``batch_node`` ran the batch script.
    """
    end = ours["end"]
    done = others["end"].to_numpy() <= end  # jobs still running at query time have no End yet
    records = pd.DataFrame({
        "job_id": others["job_id"].to_numpy(), "job_name": others["job_name"].to_numpy(),
        "user": others["user"].to_numpy(), "uid": others["uid"].to_numpy(), "account": others["account"].to_numpy(),
        "partition": "regular", "submit": others["submit"].to_numpy(), "start": others["start"].to_numpy(),
        "end": np.where(done, others["end"].to_numpy(), np.nan),
        "state": np.where(done, others["state"].to_numpy(), "RUNNING"),
        "node_list_raw": others["node_list"].to_numpy(), "node_count": others["nodes"].to_numpy()})
    alloc = {"job_id": ours["job_id"], "job_name": ours["job_name"], "user": ours["user"], "uid": ours["uid"],
             "account": ours["account"], "partition": "regular", "submit": ours["submit"], "start": ours["start"],
             "end": end, "state": ours["state"], "node_list_raw": ours["node_list"], "node_count": ours["nodes"]}
    # Our allocation and its batch, extern and srun steps, as sacct lists them.
    steps = [{**alloc, "job_id": f"{ours['job_id']}.{step}", "job_name": name, "user": "", "uid": None,
              "partition": "", "node_list_raw": step_nodes, "node_count": count}
             for step, name, step_nodes, count in (
                 ("batch", "batch", batch_node, 1),
                 ("extern", "extern", ours["node_list"], ours["nodes"]),
                 ("0", ours["job_name"].split("_")[0].lower(), ours["node_list"], ours["nodes"]))]
    df = pd.concat([records, pd.DataFrame([alloc, *steps])], ignore_index=True)
    for col in ("submit", "start", "end"):
        df[col] = pd.to_datetime(df[col].astype(float), unit="s").dt.floor("s")
    df["elapsed_s"] = (df["end"].fillna(pd.Timestamp(end, unit="s")) - df["start"]).dt.total_seconds()
    df["exit_code"] = np.where(df["state"].isin(["COMPLETED", "RUNNING"]), "0:0", "1:0")
    df["uid"] = df["uid"].astype("Int64")
    sacct.write(path, df, fields=SACCT_FIELDS)


def perflog_record(ds: DatasetSpec, system: str, job_id: str, nranks: int, end: float, total_s: float,
                   steps: int) -> dict:
    """A passed run's perflog record: its total and mean step time, logged at ``end``."""
    return {"job_completion_time": pd.Timestamp(round(end), unit="s", tz="UTC").to_pydatetime(),
            "version": "4.10.4", "display_name": f"{TEST_NAMES[ds.app]} %num_nodes={ds.nodes}",
            "system": system, "partition": PERFLOG_PARTITION, "environ": "gnu", "jobid": job_id,
            "result": "pass", "num_tasks": nranks, "software": APP_VERSIONS[ds.app],
            "perfvalues": {"total_time": (round(total_s, 3), 0, None, None, "s"),
                           "mean_step_time": (round(total_s / steps, 4), 0, None, None, "s")}}


def write_perflogs(perflogs: Path, system: str, records: dict[str, list[dict]]) -> None:
    """One perflog per app's test (``records``: app -> its runs' records) under ``perflogs``."""
    base = perflogs / system / PERFLOG_PARTITION
    base.mkdir(parents=True, exist_ok=True)
    for app, recs in records.items():
        reframe.write_perflog(base / f"{TEST_NAMES[app]}.log", recs, PERFLOG_FIELDS)


def write_stdout(path: Path, app: str, steps: list, nranks: int, complete: bool) -> None:
    """Timestamped stdout; a failed run's output stops mid-run (the job died)."""
    name = APP_STDOUT[app]
    apps.write_timestamped(path, name, steps, nranks=nranks,
                           version=APP_VERSIONS[app].split()[-1] if name == "milc" else None)
    if not complete:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[: max(1, int(len(lines) * 0.7))]))


def mpip_report(run_dir: Path, ds: DatasetSpec, job_id: str, nodes, ranks_per_node: int, res: model.RunResult,
                start: float, end: float, rng: np.random.Generator) -> tuple[Path, dict]:
    """An mpiP report with per-rank times, the run's MPI time split over ranks and routines:
    its path and :func:`hpcvar.parsers.mpip.write`'s keyword arguments (the random draws made)."""
    nranks = ds.nodes * ranks_per_node
    app = (res.compute_s + res.mpi_s) * rng.normal(1, 0.002, nranks)
    share = rng.dirichlet(np.full(nranks, 400.0)) * nranks  # mean 1 per rank
    times = {r: t * share * rng.normal(1, 0.01, nranks) for r, t in res.routines.items()}
    counts = {r: np.full(nranks, len(res.step_start) * CALLS_PER_STEP.get(r, 50)) for r in res.routines}
    when = lambda t: pd.Timestamp(round(t), unit="s", tz="UTC").to_pydatetime()  # noqa: E731
    pid = int(job_id) % 90000 + 10000
    return run_dir / f"{ds.app}.{nranks}.{pid}.1{MPIP_SUFFIX}", {
        "command": f"./{ds.app} {ds.input}", "hosts": np.repeat(nodes, ranks_per_node).tolist(),
        "app_time_s": app.tolist(), "routine_time_s": {k: v.tolist() for k, v in times.items()},
        "routine_count": {k: v.tolist() for k, v in counts.items()}, "start": when(start), "stop": when(end),
        "pid": pid}


def write_ldms(store: Path, topo: Topology, sys_routers: int, windows: list[tuple[float, float]], interval: float,
               io: Callable, load: Callable[[float], float], rng: np.random.Generator) -> None:
    """System-wide router counters from the I/O routers and ``sys_routers`` sampled compute routers,
    recorded every ``interval`` seconds during ``windows`` (monitoring everything all the time would
    be TBs). The I/O routers follow the I/O process ``io``, the others the background ``load``."""
    io_routers = sorted(topo.io_routers)
    compute_routers = [r for r in topo.routers if r not in topo.io_routers]
    sampled = sorted(rng.choice(compute_routers, size=min(sys_routers, len(compute_routers)),
                                replace=False).tolist())
    routers = io_routers + sampled
    producer = {r: topo.table.loc[topo.table["router"] == r, "node"].iloc[0] for r in routers}
    is_io = np.array([r in topo.io_routers for r in routers])
    comp_id = np.array([int(producer[r][3:]) for r in routers])
    # Merge overlapping windows into sampling intervals on a global grid.
    merged: list[list[float]] = []
    for a, b in sorted(windows):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    store.mkdir(parents=True)
    cumulative = rng.uniform(1e9, 1e11, (len(routers), len(model.LDMS_COUNTERS)))
    grid = np.concatenate([np.arange(np.ceil(a / interval) * interval, b, interval)
                           for a, b in merged]) if merged else np.empty(0)
    producers = np.array([producer[r] for r in routers])
    io_shape = np.array([1.0, 0.6, 2.5, 1.2])
    days = (grid // 86400).astype(int)
    last_t = None
    for day in np.unique(days):
        times = grid[days == day]
        block = np.empty((len(times), len(routers), len(model.LDMS_COUNTERS)))
        for i, t in enumerate(times):
            dt = interval if last_t is None else min(t - last_t, interval)
            last_t = t
            level = np.where(is_io[:, None], float(np.exp(io(t))) * io_shape, load(t) * 2.0)
            cumulative += dt * model.LDMS_RATES * level * rng.lognormal(0, 0.1, cumulative.shape)
            block[i] = cumulative
        # One rollover file per day, rows in sampling order (producers interleaved), as LDMS writes.
        with ldms.StoreCsvWriter(store / f"{LDMS_SCHEMA}.{day * 86400}", list(model.LDMS_COUNTERS)) as writer:
            writer.write_rows(np.repeat(times, len(routers)), np.tile(producers, len(times)),
                              np.tile(comp_id, len(times)), 0,
                              np.round(block.reshape(-1, len(model.LDMS_COUNTERS))).astype(np.int64))
