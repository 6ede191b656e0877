"""Raw campaign directory -> tidy dataset (``hpcvar collate RAW_DIR --out DATASET_DIR``).

Reads the raw layout documented in ``docs/raw-layout.md`` (its shared files through
:mod:`hpcvar.data.rawlayout`): ``system.yaml``, the topology map, ``runs/<run_id>/`` directories (each
complete only once its ``manifest.json`` exists), ReFrame perflogs, and LDMS store_csv files. For
every run not yet in the dataset it parses the run's files; a run whose files are bad is
quarantined as a whole (file, line, error) and the rest collate. Runs whose Slurm state is not
COMPLETED are recorded as failed, not collated as data. System-wide LDMS counters are aggregated
per run step in one streaming pass over the LDMS files.

A round is written as it is read (:meth:`hpcvar.data.dataset.Dataset.round`): each batch of runs'
tables goes to the round's files, so memory holds one batch, not the campaign; the round becomes
visible as a whole at the end, or not at all.

Collation is idempotent: runs already in the dataset are skipped, so re-running gives identical
tables, and appending a round never rewrites earlier parts.

The other way into a dataset, from plain per-run tables instead of a raw directory, is
:mod:`hpcvar.collate.neighbourhood_import` (``hpcvar import-neighbourhood``).
"""

from __future__ import annotations

import json
import multiprocessing
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import hostlist
import numpy as np
import pandas as pd

from hpcvar.data.dataset import Dataset
from hpcvar.data.rawlayout import (COUNTERS, MANIFEST, MPIP_SUFFIX, NODE_COUNTERS_GLOB, PERFLOGS_DIR, RUNS_DIR,
                                   RUN_LDMS_DIR, SACCT, STDERR, STDOUT, SYSTEM_FILE, SystemInfo, is_complete,
                                   read_manifest)
from hpcvar.data.schema import MPI_PROFILE, NEIGHBOURHOOD, RUN_COUNTERS, STEP_COUNTERS, SYSTEM_COUNTERS
from hpcvar.parsers import apps, ldms, microbenchmarks, mpip, node_counters, reframe, sacct
from hpcvar.parsers import counters as counter_files
from hpcvar.parsers.errors import ParseError, TruncatedOutput
from hpcvar.system import aries, background, linkcounters
from hpcvar.system.topology import Topology
from hpcvar.util.anonymise import Pseudonymiser
from hpcvar.util.cores import usable_cores
from hpcvar.util.progress import Progress


#: sacct fields collation needs (parsed column -> sacct field name).
SACCT_NEEDED = {"user": "User", "submit": "Submit", "start": "Start", "end": "End", "state": "State",
                "node_count": "NNodes", "node_list": "NodeList"}


@dataclass
class RunData:
    run: dict
    steps: pd.DataFrame
    step_counters: pd.DataFrame
    mpi_profile: pd.DataFrame
    neighbourhood: pd.DataFrame
    routers: set[str]
    latency: pd.DataFrame | None = None
    latency_histograms: pd.DataFrame | None = None
    run_counters: pd.DataFrame | None = None
    #: Input of the run set aside (quarantine entries) while the run itself is collated.
    set_aside: list[dict] = field(default_factory=list)
    #: The names of the step counters written to the dataset already (:meth:`release`).
    written_counters: frozenset[str] = frozenset()

    def counter_names(self) -> set[str]:
        """The names of the run's step counters, written or not."""
        held = self.step_counters
        return set(self.written_counters) | (set(held["counter"]) if held is not None and len(held) else set())

    def release(self) -> None:
        """Let go of the tables written to the dataset; the run, its steps (the LDMS pass matches
        them to monitoring), its routers and run counters (the LDMS pass adds to them) stay."""
        self.written_counters = frozenset(self.counter_names())
        self.step_counters = self.mpi_profile = self.neighbourhood = None
        self.latency = self.latency_histograms = None


@dataclass(frozen=True)
class FailedRun:
    """A run that is not data: Slurm did not complete its job, or ReFrame failed its test. It is
    recorded in the dataset's quarantine (:meth:`as_record`) instead of being collated."""

    run_id: str
    dataset: str
    job_id: str
    state: str                      # the job's Slurm state
    file: str                       # what the state was read from: sacct.txt, or the manifest
    start: str | None               # ISO 8601; None when sacct had none
    end: str | None
    reframe: str | None = None      # "<phase> failed" when ReFrame failed the test
    #: What the run's own output says (:func:`_output_of_failed_run`): the job's ``stderr`` (its
    #: last lines), the application's ``output``, and ``output_line`` and ``completed_steps`` when
    #: it was cut short.
    output: dict = field(default_factory=dict)

    def as_record(self) -> dict:
        """The run's line of ``quarantine.jsonl`` (kind ``failed-run``)."""
        record = {"run_id": self.run_id, "dataset": self.dataset, "job_id": self.job_id, "state": self.state,
                  "file": self.file, "kind": "failed-run", "start": self.start, "end": self.end}
        if self.reframe is not None:
            record["reframe"] = self.reframe
        return {**record, **self.output}


@dataclass
class CollateResult:
    new_runs: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)       # already collated
    incomplete: list[str] = field(default_factory=list)    # no manifest yet
    failed: list[dict] = field(default_factory=list)       # not data: FailedRun.as_record() of each
    quarantined: list[dict] = field(default_factory=list)  # bad input
    ldms_files: int = 0

    def as_dict(self) -> dict:
        return {"new_runs": len(self.new_runs), "skipped_already_collated": len(self.skipped),
                "incomplete": self.incomplete, "failed": self.failed, "quarantined": self.quarantined,
                "ldms_files": self.ldms_files}


def to_utc(ts: pd.Series | pd.Timestamp, tz: str):
    """sacct prints local wall-clock time of the cluster: localise, then convert to UTC."""
    if isinstance(ts, pd.Series):
        return ts.dt.tz_localize(tz, ambiguous="NaT", nonexistent="shift_forward").dt.tz_convert("UTC")
    return ts.tz_localize(tz, ambiguous="NaT", nonexistent="shift_forward").tz_convert("UTC")


def _iso(ts) -> str | None:
    """A timestamp as ISO 8601 text for quarantine.jsonl (None when sacct had none)."""
    return None if ts is None or pd.isna(ts) else pd.Timestamp(ts).isoformat()


def _our_job(jobs: pd.DataFrame, job_id: str, path: Path) -> pd.Series:
    mine = jobs[(jobs["job_id"] == str(job_id)) & jobs["step"].isna()]
    if mine.empty:
        raise ParseError(path, f"job {job_id} (from manifest.json) not found in sacct output")
    return mine.iloc[-1]


#: The neighbourhood table's columns but the run id (added per run).
NEIGHBOUR_COLUMNS = [c for c in NEIGHBOURHOOD.column_names if c != "run_id"]


def neighbourhood(jobs: pd.DataFrame, me: pd.Series, topo: Topology, my_routers: set, my_groups: set,
                  window_end: pd.Timestamp) -> pd.DataFrame:
    """Other users' and our other allocations that ran during [start, end] of our job."""
    columns = NEIGHBOUR_COLUMNS
    alloc = jobs[jobs["step"].isna() & (jobs["job_id"] != me["job_id"]) & jobs["start"].notna()].copy()
    if alloc.empty:  # nobody else was running
        return pd.DataFrame(columns=columns)
    end = alloc["end"].fillna(window_end)
    overlap = (np.minimum(end, me["end"]) - np.maximum(alloc["start"], me["start"])).dt.total_seconds()
    alloc = alloc.assign(overlap_s=overlap)
    # sacct has whole seconds: a run shorter than one (start == end) overlaps nothing by length,
    # yet every job running in that second was its neighbour.
    instant = me["end"] <= me["start"]
    alloc = alloc[(alloc["overlap_s"] > 0) | (instant & (alloc["start"] <= me["start"]) & (end >= me["end"]))]
    rows = []
    for j in alloc.itertuples():
        nodes = j.node_list if isinstance(j.node_list, list) else []
        rows.append({"job_id": j.job_id, "user": j.user,
                     "num_nodes": int(j.node_count) if pd.notna(j.node_count) else len(nodes),
                     "overlap_s": float(j.overlap_s),
                     "shared_groups": len(topo.groups_of(nodes) & my_groups),
                     "shared_routers": len(topo.routers_of(nodes) & my_routers),
                     "start": j.start, "end": j.end})
    return pd.DataFrame(rows, columns=columns)


def _background(jobs: pd.DataFrame | None, me: pd.Series, topo: Topology) -> dict:
    """The ``bg_*`` run columns: background traffic ``b`` at the job's start (:mod:`hpcvar.system.background`),
    null without sacct; ``system_nodes`` (N_t) always."""
    n_t = len(topo.compute_nodes)
    if jobs is None:
        return {"bg_traffic": None, "bg_nodes_alloc": None, "bg_nodes_comm": None, "bg_nodes_comm_unique": None,
                "system_nodes": n_t}
    if n_t == 0:
        raise ParseError(topo.source, "topology has no compute nodes: background traffic needs N_t > 0")
    running = background.running_at(jobs, me["start"], exclude_job=me["job_id"])
    b = background.background_traffic(running, n_t, system_nodes=topo.compute_nodes)
    return {"bg_traffic": b["b"], "bg_nodes_alloc": b["n_a"], "bg_nodes_comm": b["n_c_prime"],
            "bg_nodes_comm_unique": b["n_c"], "system_nodes": n_t}


def _job_from_manifest(run_dir: Path, meta: dict) -> pd.Series:
    """Our job as the manifest records it, for runs without a batch scheduler's accounting
    (ReFrame's local scheduler): there is no sacct, so no neighbourhood either."""
    path = run_dir / MANIFEST
    job = meta.get("job")
    if not isinstance(job, dict) or job.get("scheduler") != "local":
        raise ParseError(run_dir / SACCT, "missing: a run on a batch scheduler needs the sacct output of its "
                                                "window (only runs of ReFrame's local scheduler may omit it)")
    for key in ("node_list", "start", "end", "state"):
        if job.get(key) in (None, "", []):
            raise ParseError(path, f"manifest job lacks {key!r}")
    start, end = pd.Timestamp(job["start"]), pd.Timestamp(job["end"])
    return pd.Series({"job_id": str(meta["job_id"]), "user": job.get("user"), "state": job["state"],
                      "node_list": list(job["node_list"]), "submit": start, "start": start, "end": end,
                      "elapsed_s": (end - start).total_seconds(), "line": 1})


def _microbenchmark_tables(run_dir: Path, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The ``latency`` and ``latency_histograms`` rows of one microbenchmark run's data files."""
    lat, hist = [], []
    for f in sorted(run_dir.glob("*.csv")):
        with open(f) as fh:
            if not microbenchmarks.sniff(fh.readline(), f.name):
                continue
        t = microbenchmarks.read(f)
        kind = t.attrs["kind"]
        if kind == microbenchmarks.KIND_COLLECTIVES:
            lat.append(pd.DataFrame({"benchmark": "collectives", "operation": t["collective"],
                                     "size_bytes": t["size_bytes"], "pair": "", "cycle": 0,
                                     "iteration": t["iteration"], "value_us": t["max_us"]}))
        elif kind == microbenchmarks.KIND_OVERTIME_ITERATIONS:
            lat.append(pd.DataFrame({"benchmark": "overtime", "operation": t["phase"], "size_bytes": t["size_bytes"],
                                     "pair": "", "cycle": t["cycle"], "iteration": t["iteration"],
                                     "value_us": t["max_us"]}))
        elif kind == microbenchmarks.KIND_CONFIDENCE_MINIMA:
            lat.append(pd.DataFrame({"benchmark": "confidence", "operation": "pairwise_min", "size_bytes": 1,
                                     "pair": t["rank_a"].astype(str) + "-" + t["rank_b"].astype(str),
                                     "cycle": t["cycle"], "iteration": 0, "value_us": t["min_pairwise_us"]}))
        elif kind == microbenchmarks.KIND_AGGRESSOR:
            lat.append(pd.DataFrame({"benchmark": "aggressor", "operation": t.attrs["meta"]["pattern"],
                                     "size_bytes": t.attrs["meta"]["size_bytes"], "pair": "", "cycle": 0,
                                     "iteration": t["iteration"], "value_us": t["comm_max_us"],
                                     "start_epoch_s": t["start_epoch_s"]}))
        elif kind == microbenchmarks.KIND_CONFIDENCE_HISTOGRAM:
            # Pairs as "<a>-<b>"; the timer histogram is per rank.
            pair = np.where(t["kind"] == "timer", t["rank_a"].astype(str),
                            t["rank_a"].astype(str) + "-" + t["rank_b"].astype(str))
            hist.append(pd.DataFrame({"kind": t["kind"], "pair": pair, "bin": t["bin"], "lower_us": t["lower_us"],
                                      "upper_us": t["upper_us"], "count": t["count"]}))
    if not lat and not hist:
        raise ParseError(run_dir / MANIFEST, "a microbenchmark run without hpcvar microbenchmark CSV files")
    latency = pd.concat(lat, ignore_index=True).assign(run_id=run_id) if lat else pd.DataFrame()
    histograms = pd.concat(hist, ignore_index=True).assign(run_id=run_id) if hist else pd.DataFrame()
    return latency, histograms


#: Microbenchmarks whose timed operations run back to back, so that their sum is the time the
#: run spent in them (Confidence's pairwise minima are minima of cycles, not a duration).
BACK_TO_BACK = ("collectives", "overtime", "aggressor")


def _microbenchmark_time(latency: pd.DataFrame, me: dict) -> float:
    """A microbenchmark run's ``total_time_s``: its back-to-back timed operations' sum, else the
    job's wall time."""
    timed = latency[latency["benchmark"].isin(BACK_TO_BACK)] if len(latency) else latency
    if len(timed) and timed["value_us"].sum() > 0:
        return float(timed["value_us"].sum()) / 1e6
    return float((me["end"] - me["start"]).total_seconds())


RUN_COUNTER_COLUMNS = RUN_COUNTERS.column_names


def _sampler_run_counters(run_dir: Path, run_id: str) -> pd.DataFrame:
    """``run_counters`` rows of scope ``job``: each counter's change over the span that every
    node's samples cover, summed over nodes and devices (loopback left out)."""
    files = sorted(run_dir.glob(NODE_COUNTERS_GLOB))
    if not files:
        return pd.DataFrame(columns=RUN_COUNTER_COLUMNS)
    samples = [node_counters.read(p) for p in files]
    frame = pd.concat(samples, ignore_index=True)
    frame = frame[frame["device"] != "lo"]
    if frame.empty:
        return pd.DataFrame(columns=RUN_COUNTER_COLUMNS)
    spans = frame.groupby(["node", "source", "device", "counter"])["epoch"].agg(["min", "max"])
    start, end = float(spans["min"].max()), float(spans["max"].min())
    if not end > start:
        # A job shorter than the sampling interval: one sample per counter, no change to report.
        return pd.DataFrame(columns=RUN_COUNTER_COLUMNS)
    deltas = node_counters.step_deltas(frame, pd.DataFrame({"step": [0], "start": [start], "end": [end]}))
    names = [c for c in deltas.columns if c != "step"]
    return pd.DataFrame({"run_id": run_id, "scope": "job", "counter": names,
                         "value": [float(deltas[n].iloc[0]) for n in names], "seconds": end - start,
                         "sources": frame["node"].nunique()})


def collate_run(run_dir: Path, system: SystemInfo, topo: Topology, meta: dict) -> RunData | FailedRun:
    """Parse one complete run directory: its data, or :class:`FailedRun` for a job that did not
    complete or a test ReFrame failed."""
    run_id = meta["run_id"]
    sacct_path = run_dir / SACCT
    if sacct_path.exists():
        jobs = sacct.read(sacct_path)
        missing = [f for col, f in SACCT_NEEDED.items() if col not in jobs.columns]
        if missing:
            raise ParseError(sacct_path, f"sacct output lacks fields {missing}; collect it with "
                                         f"--format={','.join(SACCT_NEEDED.values())},...", 1)
        for col in ("submit", "start", "end"):
            if col in jobs.columns:
                jobs[col] = to_utc(jobs[col], system.timezone)
        me = _our_job(jobs, meta["job_id"], sacct_path)
    else:
        jobs, me = None, _job_from_manifest(run_dir, meta)
    if me["state"] != "COMPLETED" or meta.get("result") == "fail":
        # A job Slurm completed but ReFrame failed (wrong answer, missing output) is not data either.
        return FailedRun(run_id, meta["dataset"], str(meta["job_id"]), me["state"],
                         str(sacct_path if jobs is not None else run_dir / MANIFEST), _iso(me.get("start")),
                         _iso(me.get("end")),
                         reframe=f"{meta.get('fail_phase')} failed" if meta.get("result") == "fail" else None,
                         output=_output_of_failed_run(run_dir, meta))
    nodes = list(me["node_list"])
    unknown = topo.unknown_nodes(nodes)
    if unknown:
        raise ParseError(sacct_path, f"job {me['job_id']} has nodes not in the topology: "
                                     f"{hostlist.collect_hostlist(unknown[:10])}", int(me["line"]))
    place = topo.placement(nodes)
    traffic = _background(jobs, me, topo)
    my_routers, my_groups = topo.routers_of(nodes), topo.groups_of(nodes)
    neigh = (neighbourhood(jobs, me, topo, my_routers, my_groups, me["end"]) if jobs is not None
             else pd.DataFrame(columns=NEIGHBOUR_COLUMNS)
             ).assign(run_id=run_id)
    run = {
        "run_id": run_id, "system": system.name, "app": meta["app"], "dataset": meta["dataset"],
        "input": meta.get("input"), "num_nodes": int(meta["num_nodes"]), "job_id": str(me["job_id"]),
        "user": me.get("user"), "submit": me.get("submit"), "start": me["start"], "end": me["end"],
        "elapsed_s": me.get("elapsed_s"), "state": me["state"], "node_list": nodes, **place, **traffic,
        "software": meta.get("software"), "container": meta.get("container"),
        "raw_dir": str(run_dir.relative_to(run_dir.parents[1])),
    }
    if meta.get("kind") == "microbenchmark":
        # No time steps: the run's time is what its timed operations took (the slowest rank's,
        # back to back), its data every timed operation. sacct's wall time, in whole seconds and
        # mostly MPI's start-up for a run of a few seconds, says little of the network it met.
        latency, histograms = _microbenchmark_tables(run_dir, run_id)
        run.update(total_time_s=_microbenchmark_time(latency, me), num_steps=0)
        empty = pd.DataFrame()
        return RunData(run, empty, empty, empty, neigh, my_routers, latency, histograms,
                       _sampler_run_counters(run_dir, run_id))
    out = apps.read(run_dir / STDOUT)
    steps = out.steps.copy()
    if steps.empty:
        raise ParseError(run_dir / STDOUT, "no time steps found")
    steps = pd.DataFrame({
        "run_id": run_id, "step": steps["step"].astype("int32"),
        "start": pd.to_datetime(steps["start"], unit="s", utc=True).dt.round("us"),
        "end": pd.to_datetime(steps["end"], unit="s", utc=True).dt.round("us"),
        "duration_s": steps["duration_s"].astype(float),
        "reported_s": steps["reported_s"].astype(float)})
    columns = STEP_COUNTERS.column_names
    step_counters, set_aside = pd.DataFrame(columns=columns), []
    if (run_dir / COUNTERS).exists():
        long = counter_files.read(run_dir / COUNTERS)
        if long["step"].nunique() != len(steps):
            raise ParseError(run_dir / COUNTERS,
                             f"{long['step'].nunique()} steps of counters but {len(steps)} steps in stdout.txt")
        step_counters = long.assign(run_id=run_id)[columns]
    elif samples := sorted(run_dir.glob(NODE_COUNTERS_GLOB)):
        try:
            step_counters = sampled_step_counters(samples, out.steps).assign(run_id=run_id)[columns]
        except ParseError as exc:  # a malformed sampler file: the run stays, without step counters
            set_aside.append({**exc.as_dict(), "run_id": run_id, "kind": "step_counters"})
        except ValueError as exc:  # samples that do not cover every step, or steps without a time
            set_aside.append({"file": str(samples[0].parent / NODE_COUNTERS_GLOB), "line": None,
                              "error": str(exc), "run_id": run_id, "kind": "step_counters"})
    mpi = _mpi_profile(run_id, sorted(run_dir.glob("*" + MPIP_SUFFIX)))
    run.update(total_time_s=float(steps["duration_s"].sum()), num_steps=len(steps))
    return RunData(run, steps, step_counters, mpi, neigh, my_routers, set_aside=set_aside)


def sampled_step_counters(samples: list[Path], steps: pd.DataFrame) -> pd.DataFrame:
    """The node samplers' counters (``hpcvar sample``, one file per node) as per-step changes,
    summed over nodes and devices (:func:`hpcvar.parsers.node_counters.step_deltas`), in whole
    counts as ``counters.csv`` holds them: the long table ``step, counter, value``. ValueError
    when the samples do not cover every step."""
    deltas = node_counters.step_deltas([node_counters.read(p) for p in samples], steps)
    values = deltas.drop(columns="step")
    uncovered = ~np.isfinite(values.to_numpy(dtype=float)).all(axis=1)
    if uncovered.any():
        raise ValueError(f"steps {deltas.loc[uncovered, 'step'].tolist()[:10]} are not covered by every node's "
                         "samples: the run has no per-step counters")
    return counter_files.long_table(pd.concat([deltas[["step"]], values.round()], axis=1))


#: Distinct lines of a failed run's job standard error kept in its failure record.
STDERR_LINES = 20


def _output_of_failed_run(run_dir: Path, meta: dict) -> dict:
    """What a failed run's own output says: why it stopped where it did (a killed application's
    output is truncated: the reason, with file and line), the steps it completed before, and the
    end of the job's standard error (MPI's or the container runtime's error), kept in the failure
    record (quarantine.jsonl) although the run is not data."""
    found = {}
    stderr = run_dir / STDERR
    if stderr.exists():
        # Every rank prints the same error: its distinct lines, in order, are the message.
        lines = dict.fromkeys(line.strip()[:200] for line in stderr.read_text(errors="replace").splitlines()
                              if line.strip().strip("-"))
        found["stderr"] = "\n".join(list(lines)[:STDERR_LINES])
    stdout = run_dir / STDOUT
    if meta.get("kind") == "microbenchmark" or not stdout.exists():
        return found
    try:
        out = apps.read(stdout)
    except TruncatedOutput as exc:
        return {**found, "output": exc.message, "output_line": exc.line, "completed_steps": exc.completed}
    except ParseError as exc:
        return {**found, "output": exc.message, "output_line": exc.line}
    return {**found, "output": f"complete application output with {len(out.steps)} steps"}


def _mpi_profile(run_id: str, paths: list[Path]) -> pd.DataFrame:
    """The run's mpiP profile: its report as mpiP wrote it, or, for a job that launched the
    application several times (one report per launch: miniVite's repetitions), their sum per
    routine, with each routine's share of the summed MPI time."""
    columns = MPI_PROFILE.column_names
    if not paths:
        return pd.DataFrame(columns=columns)
    reports = [mpip.read(p) for p in paths]
    if len(reports) == 1:
        rep = reports[0]
        r = rep.routines
        return pd.DataFrame({"run_id": run_id, "routine": r["routine"], "time_s": r["time_s"],
                             "calls": r["count"] if "count" in r else None, "mpi_pct": r["mpi_pct"],
                             "app_time_s": rep.app_time_s, "mpi_time_s": rep.mpi_time_s, "ntasks": rep.ntasks})
    for path, rep in zip(paths[1:], reports[1:]):
        if rep.ntasks != reports[0].ntasks:
            raise ParseError(path, f"mpiP report of {rep.ntasks} tasks beside one of {reports[0].ntasks} "
                                   f"({paths[0].name}) in the same run", 1)
    routines = pd.concat([r.routines.reindex(columns=["routine", "time_s", "count"]) for r in reports])
    summed = routines.groupby("routine", sort=False).agg(time_s=("time_s", "sum"),
                                                         calls=("count", lambda c: c.sum(min_count=1)))
    summed = summed.sort_values("time_s", ascending=False).reset_index()
    mpi_time = sum(r.mpi_time_s for r in reports)
    return pd.DataFrame({"run_id": run_id, "routine": summed["routine"], "time_s": summed["time_s"],
                         "calls": summed["calls"], "mpi_pct": 100 * summed["time_s"] / mpi_time,
                         "app_time_s": sum(r.app_time_s for r in reports), "mpi_time_s": mpi_time,
                         "ntasks": reports[0].ntasks})


def system_counters(ldms_dir: Path, topo: Topology, runs: list[RunData], result: CollateResult) -> pd.DataFrame:
    """Mean per-router counter change per run step, over I/O routers and over routers without our nodes.

    Aries router counters (producers: nodes, mapped to their routers) and the link counters of
    :mod:`hpcvar.system.linkcounters` (producers: the routers themselves, as the testbed's link sampler
    writes them). Link counters also get the scope ``job``, the routers serving the run's nodes,
    summed (the caller moves them to the run's step counters).

    One streaming pass over all LDMS files; an LDMS interval's change is split over the steps it
    overlaps in proportion to the overlap. Intervals longer than 3x the median sampling interval
    span a monitoring gap and are not attributed. A run without steps (a microbenchmark) gets one
    window, its job, as step 0 (the caller's ``run_counters``).
    """
    files = sorted(p for p in ldms_dir.iterdir() if p.is_file() and not p.name.startswith(".")
                   and not p.name.endswith(".HEADER"))
    result.ldms_files += len(files)
    windows = []
    epoch = pd.Timestamp(0, tz="UTC")
    for k, rd in enumerate(runs):
        s = rd.steps
        if s.empty and rd.run.get("num_steps") == 0:
            start, end = (pd.Timestamp(rd.run[c]) for c in ("start", "end"))
            if end > start:
                windows.append((k, np.array([(start - epoch).total_seconds()]),
                                np.array([(end - epoch).total_seconds()]), np.array([0])))
            continue
        if s.empty or s["start"].isna().any():
            continue  # untimestamped steps: nothing to match to monitoring
        windows.append((k, (s["start"] - epoch).dt.total_seconds().to_numpy(),
                        (s["end"] - epoch).dt.total_seconds().to_numpy(), s["step"].to_numpy()))
    if not windows:
        return pd.DataFrame()
    spans = np.array([[w[1][0], w[2][-1]] for w in windows])
    # A producer is a node (its router's counters, as Aries LDMS samplers) or a router itself.
    router_of = {**{r: r for r in topo.routers}, **topo.table["router"].to_dict()}
    good = list(files)
    while good:
        sums: dict[tuple, np.ndarray] = {}
        reporters: dict[tuple, np.ndarray] = {}
        try:
            metric_names = _aggregate_ldms(good, router_of, topo, runs, windows, spans, sums, reporters)
            break
        except ParseError as exc:
            # Set the bad file aside and aggregate the others again from the start.
            remaining = [f for f in good if str(f) != exc.path]
            if len(remaining) == len(good):
                raise
            result.quarantined.append({**exc.as_dict(), "kind": "ldms"})
            good = remaining
    else:
        return pd.DataFrame()
    if not sums:
        return pd.DataFrame(columns=SYSTEM_COUNTERS.column_names)
    # One row per (run, step, scope) and counter, key after key: a job scope keeps its link
    # counters, summed over the job's own routers as step counters are; the other scopes are means
    # over their routers.
    names = np.array(_ldms_names(metric_names), dtype=object)
    keys = list(sums)
    total = np.vstack([sums[key] for key in keys])
    n = np.array([int.from_bytes(reporters[key].tobytes(), "little").bit_count() for key in keys])
    scope = np.array([key[2] for key in keys], dtype=object)
    is_job = scope == "job"
    value = np.where(is_job[:, None], total, total / n[:, None])
    keep = ~is_job[:, None] | np.array([linkcounters.is_counter(name) for name in names])[None, :]
    row_key, column = np.nonzero(keep)
    run_ids = np.array([runs[key[0]].run["run_id"] for key in keys], dtype=object)
    return pd.DataFrame({"run_id": run_ids[row_key], "step": np.array([key[1] for key in keys])[row_key],
                         "scope": scope[row_key], "counter": names[column], "value": value[row_key, column],
                         "num_routers": n[row_key]}, columns=SYSTEM_COUNTERS.column_names)


def _ldms_names(metric_names: list[str]) -> list[str]:
    """The counter names of :func:`_ldms_values`' columns."""
    return _ldms_values(pd.DataFrame(columns=metric_names)).columns.tolist()


def _ldms_values(chunk: pd.DataFrame) -> pd.DataFrame:
    """Aries counters as Table II abbreviations, then link counters summed per router."""
    return pd.concat([aries.to_table2(chunk), linkcounters.router_totals(chunk)], axis=1)


def _aggregate_ldms(files, router_of, topo, runs, windows, spans, sums, reporters) -> list[str]:
    """Stream LDMS deltas once; split each interval's change over the run steps it overlaps.

    An interval [t_prev, t] contributes ``delta * overlap / (t - t_prev)`` to every step it
    overlaps, so steps shorter than the sampling interval still get their share.
    """
    metric_names: list[str] | None = None
    # Routers by number: a run's routers and the I/O routers are boolean tables over the numbers,
    # looked up per row (np.isin over the rows' router names took 52 ms per run and chunk).
    number = {r: i for i, r in enumerate(dict.fromkeys(r for r in router_of.values() if pd.notna(r)))}
    number_of = {producer: number[r] for producer, r in router_of.items() if pd.notna(r)}
    io_table = np.zeros(len(number), dtype=bool)
    io_table[[number[r] for r in topo.io_routers if r in number]] = True
    mine_tables: dict[int, np.ndarray] = {}
    # The routers that reported, per key: one bit per router number. Sets of router names held
    # 170 MB more for the paper preset (2.1 million names in 95,000 sets).
    flags = np.zeros(len(number), dtype=bool)
    bar = Progress("collate: LDMS chunks", 0)
    for chunk in ldms.iter_deltas(files):
        bar.step()
        if metric_names is None:
            metric_names = [c for c in chunk.columns if aries.is_counter(c) or linkcounters.is_counter(c)]
            link_only = np.array([linkcounters.is_counter(n) for n in _ldms_names(metric_names)])
        numbers = chunk["producer"].map(number_of)
        known = numbers.notna().to_numpy()
        chunk, numbers = chunk[known], numbers[known].to_numpy(dtype=np.int64)
        if chunk.empty:
            continue
        t, t_prev = chunk["time"].to_numpy(), chunk["t_prev"].to_numpy()
        span = t - t_prev
        ok = span <= 3 * np.median(span)  # longer intervals span a monitoring gap
        values = _ldms_values(chunk[metric_names]).to_numpy()
        is_io = io_table[numbers]
        for h in np.flatnonzero((spans[:, 0] < t.max()) & (spans[:, 1] > t_prev.min())):
            k, starts, ends, stepno = windows[h]
            first = np.searchsorted(ends, t_prev, side="right")   # first step ending after t_prev
            last = np.searchsorted(starts, t, side="left") - 1    # last step starting before t
            hit = ok & (first <= last)
            if not hit.any():
                continue
            if k not in mine_tables:
                mine_tables[k] = np.zeros(len(number), dtype=bool)
                mine_tables[k][[number[r] for r in runs[k].routers if r in number]] = True
            not_mine = ~mine_tables[k][numbers]
            for offset in range(int((last[hit] - first[hit]).max()) + 1):
                step_i = first + offset
                sel = hit & (step_i <= last)
                if not sel.any():
                    continue
                si = step_i[sel]
                overlap = np.minimum(t[sel], ends[si]) - np.maximum(t_prev[sel], starts[si])
                weighted = values[sel] * (overlap / span[sel])[:, None]
                scopes = [("io", is_io[sel]), ("sys", ~is_io[sel] & not_mine[sel])]
                if link_only.any():
                    scopes.append(("job", ~not_mine[sel]))
                for scope, mask in scopes:
                    for step_idx in np.unique(si[mask]):
                        rows = mask & (si == step_idx)
                        key = (k, int(stepno[step_idx]), scope)
                        sums[key] = sums.get(key, 0) + weighted[rows].sum(axis=0)
                        reported = numbers[sel][rows]
                        flags[reported] = True
                        bits = np.packbits(flags, bitorder="little")
                        flags[reported] = False
                        if key in reporters:
                            reporters[key] |= bits
                        else:
                            reporters[key] = bits
    return metric_names or []


def perflog_provenance(raw: Path, result: CollateResult) -> pd.DataFrame:
    """ReFrame perflog records of the campaign (for provenance fields the manifests lack)."""
    frames = []
    for f in sorted((raw / PERFLOGS_DIR).rglob("*.log")) if (raw / PERFLOGS_DIR).exists() else []:
        try:
            frames.append(reframe.read_perflog(f))
        except ParseError as exc:
            result.quarantined.append({**exc.as_dict(), "kind": "reframe_perflog"})
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


class RefusedCollation(ParseError):
    """The raw directory holds runs of more than one system, or the dataset is another system's:
    nothing was collated."""


def check_systems(raw: str | Path, out: str | Path, rebuild: bool = False) -> None:
    """Refuse, before anything is written, a raw directory whose runs' manifests name another
    system than its system.yaml, and (unless the dataset is to be rebuilt) a dataset holding runs
    of another system."""
    raw = Path(raw)
    system = SystemInfo(raw)
    others: dict[str, list[str]] = defaultdict(list)
    for run_dir in sorted((raw / RUNS_DIR).iterdir()) if (raw / RUNS_DIR).is_dir() else []:
        if not is_complete(run_dir):
            continue
        try:
            named = json.loads((run_dir / MANIFEST).read_text()).get("system")
        except (json.JSONDecodeError, OSError):
            continue  # a broken manifest is the run's own problem: it is quarantined in collate
        if named is not None and str(named) != system.name:
            others[str(named)].append(run_dir.name)
    if others:
        found = "; ".join(f"{len(runs)} of system {name!r} (e.g. runs/{runs[0]})" for name, runs in sorted(others.items()))
        raise RefusedCollation(raw / SYSTEM_FILE, f"{raw} is the raw directory of system {system.name!r} but holds "
                                                  f"runs of another system: {found}. Nothing collated: each "
                                                  "system's runs belong in a raw directory of their own")
    if rebuild:
        return
    theirs = Dataset(out).systems() - {system.name}
    if theirs:
        raise RefusedCollation(Path(out), f"the dataset holds runs of system {', '.join(map(repr, sorted(theirs)))}; "
                                          f"{raw} is system {system.name!r}: collate it into a dataset of its own")


def _collate_one(run_dir: Path, system: SystemInfo, topo: Topology, have: set) -> tuple[str, object]:
    """One run directory: ``("incomplete", name)``, ``("skipped", run_id)``, ``("quarantined",
    record)`` for a file that does not parse, else ``("run", RunData | FailedRun)``."""
    if not is_complete(run_dir):
        return "incomplete", run_dir.name
    try:
        meta = read_manifest(run_dir)
        if meta["run_id"] in have:
            return "skipped", meta["run_id"]
        return "run", collate_run(run_dir, system, topo, meta)
    except ParseError as exc:
        return "quarantined", {**exc.as_dict(), "run_id": run_dir.name, "kind": "run"}


#: What every worker of :func:`_collate_runs` reads runs against (set once per pool, see there).
_WORKER: dict = {}


def _start_worker(system: SystemInfo, topo: Topology, have: set) -> None:
    _WORKER.update(system=system, topo=topo, have=have)


def _collate_in_worker(run_dir: Path) -> tuple[str, object]:
    return _collate_one(run_dir, _WORKER["system"], _WORKER["topo"], _WORKER["have"])


def _collate_runs(run_dirs: list[Path], system: SystemInfo, topo: Topology, have: set, workers: int):
    """:func:`_collate_one` of each run directory, in order, over ``workers`` processes (a run's
    files are read by one process; the results are the same at any count).

    The workers fork with the system, topology and collated run ids as they are, once: passed with
    each batch of runs instead, the topology of a 10,000-node machine (2 MB pickled) cost 28 ms a
    batch to send.
    """
    if workers <= 1 or len(run_dirs) < 2:
        yield from (_collate_one(d, system, topo, have) for d in run_dirs)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                             initializer=_start_worker, initargs=(system, topo, have)) as pool:
        yield from pool.map(_collate_in_worker, run_dirs,
                            chunksize=max(1, min(8, len(run_dirs) // (4 * workers))))


#: Runs read before their tables are written to the round (see :func:`collate`).
BATCH_RUNS = 256

#: The tables a run's own files give, written with each batch of runs.
RUN_TABLES = ("steps", "step_counters", "mpi_profile", "latency", "latency_histograms")


def collate(raw: str | Path, out: str | Path, pseudonymise: Pseudonymiser, workers: int | None = None) -> CollateResult:
    """Collate the runs of ``raw`` not yet in the dataset at ``out``; the runs' files are read by
    ``workers`` processes (default: one per usable core).

    The round is written as it is read (:meth:`Dataset.round`): every :data:`BATCH_RUNS` runs,
    their own tables go to the round's files and only what the LDMS pass needs of them (the run,
    its steps and routers) stays in memory. The round becomes visible once the runs table is
    written, at the end; an error anywhere leaves the dataset as it was.
    """
    raw, ds = Path(raw), Dataset(out)
    check_systems(raw, out)
    system = SystemInfo(raw)
    topo = Topology.from_file(system.topology)
    if system.io_routers:
        topo = topo.with_io_routers(system.io_routers)
    result = CollateResult()
    have = ds.run_ids()
    run_dirs = sorted(p for p in (raw / RUNS_DIR).iterdir() if p.is_dir()) if (raw / RUNS_DIR).exists() else []
    # Set aside in the order the files are taken up: runs, perflogs, LDMS (each run's own, the store).
    later, own_ldms = CollateResult(), CollateResult()
    perflogs = perflog_provenance(raw, later)
    collected: list[RunData] = []
    shared: list[RunData] = []  # runs whose system counters come from the campaign's LDMS store
    own_sysc: list[pd.DataFrame] = []
    bar = Progress("collate: runs", len(run_dirs))
    with ds.round(origin=str(raw)) as round_:
        batch: list[RunData] = []
        for kind, rd in _collate_runs(run_dirs, system, topo, have, workers or usable_cores()):
            bar.step()
            if kind == "incomplete":
                result.incomplete.append(rd)
            elif kind == "skipped":
                result.skipped.append(rd)
            elif kind == "quarantined":
                result.quarantined.append(rd)
            elif isinstance(rd, FailedRun):
                result.failed.append(rd.as_record())
            else:
                result.quarantined += rd.set_aside
                _add_provenance(rd, perflogs)
                # System-wide counters: from the run's own LDMS slice (import-reframe --ldms) when
                # it has one, now; else from the campaign's store (system.yaml `ldms:`), below.
                if (raw / rd.run["raw_dir"] / RUN_LDMS_DIR).is_dir():
                    sysc = system_counters(raw / rd.run["raw_dir"] / RUN_LDMS_DIR, topo, [rd], own_ldms)
                    own_sysc.append(_attach_system_counters(sysc, [rd]))
                else:
                    shared.append(rd)
                collected.append(rd)
                batch.append(rd)
                if len(batch) == BATCH_RUNS:
                    _write_batch(round_, batch, pseudonymise)
                    batch = []
        _write_batch(round_, batch, pseudonymise)
        result.quarantined += later.quarantined + own_ldms.quarantined
        result.ldms_files += own_ldms.ldms_files
        frames = own_sysc
        if shared and system.ldms is not None and system.ldms.exists():
            sysc = system_counters(system.ldms, topo, shared, result)
            frames.append(_attach_system_counters(sysc, shared))
            # The link counters of the store's runs' own routers: step counters found after the
            # runs' own were written, so they follow them in the round.
            late = [rd.step_counters for rd in shared if rd.step_counters is not None and len(rd.step_counters)]
            if late:
                round_.add({"step_counters": pd.concat(late, ignore_index=True)})
        frames = [f for f in frames if not f.empty]
        if collected:
            tables = {}
            run_counters = [rd.run_counters for rd in collected if rd.run_counters is not None and len(rd.run_counters)]
            if run_counters:
                tables["run_counters"] = pd.concat(run_counters, ignore_index=True)
            if frames:
                tables["system_counters"] = pd.concat(frames, ignore_index=True)
            runs = pd.DataFrame([rd.run for rd in collected])
            runs["user"] = pseudonymise.series(runs["user"])
            tables["runs"] = runs
            round_.add(tables)
    result.new_runs = [rd.run["run_id"] for rd in collected]
    ds.add_quarantine(result.quarantined + result.failed)
    return result


def _add_provenance(rd: RunData, perflogs: pd.DataFrame) -> None:
    """Perflog fields a site adds for provenance (the perflog's own `version` is ReFrame's)."""
    if perflogs.empty or "job_id" not in perflogs.columns:
        return
    hit = perflogs[perflogs["job_id"].astype(str) == rd.run["job_id"]]
    for key in ("software", "container"):
        if rd.run[key] is None and key in hit.columns and hit[key].notna().any():
            rd.run[key] = str(hit[key].dropna().iloc[0])


def _attach_system_counters(sysc: pd.DataFrame, runs: list[RunData]) -> pd.DataFrame:
    """Give ``runs`` what is theirs of their system counters; returns the rest, the system_counters
    table's rows.

    Link counters of a run's own routers are its step counters (as AriesNCL's counters.csv), unless
    its own files had them; a run without steps (step 0: the whole job's window) gets its counters
    as run counters.
    """
    if sysc.empty:
        return sysc
    own_steps = (sysc["scope"] == "job") & (sysc["step"] > 0)
    job_rows = dict(tuple(sysc[own_steps].groupby("run_id", sort=False)))
    whole = sysc["step"] == 0
    ldms_runs = sysc[whole & ~own_steps].rename(columns={"num_routers": "sources"}).drop(columns="step")
    run_rows = dict(tuple(ldms_runs.groupby("run_id", sort=False)))
    for rd in runs:
        run_id = rd.run["run_id"]
        if (mine := job_rows.get(run_id)) is not None:
            add = mine[~mine["counter"].isin(rd.counter_names())][["run_id", "step", "counter", "value"]]
            rd.step_counters = pd.concat([rd.step_counters, add], ignore_index=True)
        if (mine := run_rows.get(run_id)) is not None:
            seconds = (pd.Timestamp(rd.run["end"]) - pd.Timestamp(rd.run["start"])).total_seconds()
            rd.run_counters = pd.concat([rd.run_counters, mine.assign(seconds=seconds)[RUN_COUNTER_COLUMNS]],
                                        ignore_index=True)
    return sysc[~own_steps & ~whole]


def _write_batch(round_, batch: list[RunData], pseudonymise: Pseudonymiser) -> None:
    """Write a batch of runs' own tables to the round, then let go of all but what the rest of
    collation needs (the run, its steps for the LDMS pass, its step counters' names)."""
    if not batch:
        return
    neigh = pd.concat([rd.neighbourhood for rd in batch], ignore_index=True)
    neigh["user"] = pseudonymise.series(neigh["user"])
    tables = {"neighbourhood": neigh}
    for name in RUN_TABLES:
        # Microbenchmark runs have no steps, application runs no latency samples.
        parts = [getattr(rd, name) for rd in batch if getattr(rd, name) is not None and len(getattr(rd, name))]
        if parts:
            tables[name] = pd.concat(parts, ignore_index=True)
    round_.add(tables)
    for rd in batch:
        rd.release()
