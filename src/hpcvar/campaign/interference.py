"""Interference experiments for real: a victim and aggressors placed by policy on a Slurm cluster.

The experiment file is the one ``hpcvar interference simulate`` reads (config/experiments/): the
victim and the aggressors are tests of the ReFrame suite (``test:``; the ``periodic-allreduce`` and
``uniform-random`` aggressors are the suite's ``Aggressor`` test), with node counts, placement
policies and repetitions; its ``slurm:`` section says how to reach the cluster
(:class:`hpcvar.experiments.spec.SlurmSpec`). ReFrame runs in the current directory, and relative
paths of the file (``slurm.reframe_config``, ``slurm.checks``, ``slurm.topology``) are taken from
there, like any path on the command line; the workflow runs from the project directory. For every
policy and repetition:

1. **Placement.** The free nodes (``sinfo``, states ``slurm.free_states``) and the topology map
   (``slurm.topology``; without one, sinfo's nodes each their own router in one group) give every
   job a node list by the policy, with the placement functions and random streams the simulator
   uses too (:mod:`hpcvar.experiments.placement`). The placement is saved first
   (``placements/<policy>-<rep>.json``), so a resumed experiment keeps it.
2. **Alone.** The victim's test runs by itself on its nodes (``reframe -J nodelist=...``), then
   each aggressor's, for the aggressors' duration: ``slurm.aggressor_duration_s``, by default 1.5x
   the victim's time alone plus 30 s, so the aggressors outlast the victim in the mixed run.
3. **Mixed.** The aggressors start (each its own ReFrame process); once Slurm runs all of them
   and ``settle_s`` has passed, the victim runs; then the aggressors run out their time.

Every job is an ordinary ReFrame run, so its report is imported (:mod:`reframe_import`: ``sacct``
of its window, its files) into ``OUT/raw`` and collated into ``OUT/dataset`` like a campaign's
runs; ``OUT/experiment.csv`` records which run is which (policy, repetition, workload, job, role,
node list, routers, groups). A step whose report exists is not run again, so re-running the
command after an interruption continues where it stopped. :mod:`hpcvar.analyses.interference`
turns the runs into slowdowns.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from hpcvar.campaign.reframe_import import import_reports, run_id_of
from hpcvar.data.rawlayout import TOPOLOGY
from hpcvar.experiments.placement import Placement, PlacementError, place_jobs, seeded_rng
from hpcvar.experiments.spec import Experiment, JobSpec, SlurmSpec
from hpcvar.system.topology import Topology
from hpcvar.util.fileio import atomic_path
from hpcvar.util.naming import slug

#: Experiment ``test`` -> (ReFrame test, the family ``HPCVAR_RFM_NODES`` sets node counts of).
TESTS: dict[str, tuple[str, str]] = {
    "amg": ("AMG2013", "amg"), "amg2013": ("AMG2013", "amg"), "amg2023": ("AMG2023", "amg"),
    "milc": ("MILC", "milc"), "minivite": ("MiniVite", "minivite"), "umt": ("UMT", "umt"),
    "amgproxy": ("AMGProxy", "amgproxy"),
    "collectives": ("Collectives", "microbenchmarks"), "overtime": ("Overtime", "microbenchmarks"),
    "confidence": ("Confidence", "microbenchmarks"), "aggressor": ("Aggressor", "microbenchmarks"),
}
#: Patterns the Aggressor test generates (its -S variables come from the job's spec).
AGGRESSOR_PATTERNS = ("periodic-allreduce", "uniform-random")
BOOK_COLUMNS = ["experiment", "policy", "victim_policy", "aggressor_policy", "repetition", "workload", "job",
                "role", "test", "pattern", "nodes", "node_list", "num_routers", "num_groups", "report", "run_id",
                "duration_s"]


class ExperimentRunError(RuntimeError):
    """A step of a real experiment could not be carried out (the message says which and why)."""


def test_of(job: JobSpec) -> tuple[str, str]:
    """The ReFrame test and node-count family that play ``job``."""
    name = (job.test or ("aggressor" if job.role == "aggressor" and job.pattern in AGGRESSOR_PATTERNS else "")).lower()
    if name not in TESTS:
        known = ", ".join(sorted(TESTS))
        raise ExperimentRunError(f"job {job.name!r}: test {job.test!r} is not a test of the suite ({known}); "
                                 f"an aggressor without a test must have pattern {' or '.join(AGGRESSOR_PATTERNS)}")
    return TESTS[name]


# --- the cluster -------------------------------------------------------------------------------

_STATE_FLAGS = re.compile(r"[*~#!%$@^-]+$")


def parse_sinfo(text: str, states: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``sinfo -h -N -o '%N|%T'`` -> (every node, the nodes in one of ``states``), in sinfo's order.

    A node listed in several partitions appears once; state flags (``idle*``: not responding,
    ``mixed~``: powered down, ...) make a node unusable."""
    nodes, free = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, state = line.strip().partition("|")
        if not state:
            raise ExperimentRunError(f"sinfo output line {line!r}: expected NODE|STATE")
        if name not in nodes:
            nodes.append(name)
        usable = not _STATE_FLAGS.search(state) and state.lower() in states
        if usable and name not in free:
            free.append(name)
    return nodes, free


def sinfo(spec: SlurmSpec, env: dict | None = None) -> tuple[list[str], list[str]]:
    cmd = ["sinfo", "-h", "-N", "-o", "%N|%T"] + (["-p", spec.partition] if spec.partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    except FileNotFoundError as exc:
        raise ExperimentRunError("sinfo not found: real experiments need Slurm's commands on this machine") from exc
    if out.returncode != 0:
        raise ExperimentRunError(f"{' '.join(cmd)} failed: {out.stderr.strip()[:300]}")
    return parse_sinfo(out.stdout, tuple(s.lower() for s in spec.free_states))


def check_paths(spec: SlurmSpec) -> None:
    """The ReFrame configuration and check paths exist (relative ones in the current directory,
    where ReFrame runs), or an error names the key, the path and the directory."""
    for key, value in (("slurm.reframe_config", spec.reframe_config), *(("slurm.checks", c) for c in spec.checks)):
        path = Path(value)
        if not path.exists():
            where = "" if path.is_absolute() else f" (relative to the current directory {Path.cwd()})"
            raise ExperimentRunError(f"{key}: {path} not found{where}")


def topology_for(spec: SlurmSpec, nodes: list[str], out: Path) -> Path:
    """The topology map: the site's (``slurm.topology``), or sinfo's nodes flat (each node its own
    router, all in one group: without a map the policies cannot see the network)."""
    if spec.topology:
        path = Path(spec.topology)  # relative: to the current directory, as every path of the file
        if not path.exists():
            where = "" if path.is_absolute() else f" (relative to the current directory {Path.cwd()})"
            raise ExperimentRunError(f"slurm.topology: {path} not found{where}")
        return path
    path = out / TOPOLOGY
    known = set(pd.read_csv(path, comment="#")["node"]) if path.exists() else set()
    new = [n for n in nodes if n not in known]
    if new or not path.exists():
        text = path.read_text() if path.exists() else "# sinfo's nodes, no network structure known\nnode,router,group\n"
        path.write_text(text + "".join(f"{n},{n},flat\n" for n in new))
    return path


def choose_placements(exp: Experiment, policy_index: int, rep: int, topo: Topology, free: list[str],
                      share: bool) -> list[Placement]:
    """Node lists of the victim and the aggressors (in that order) for one policy and repetition:
    the placement policies on the cluster's topology, among its free nodes, drawn from the same
    random stream as the simulator's for that policy and repetition."""
    policy = exp.policies[policy_index]
    requests = [(j.name, j.nodes, policy.victim if j.role == "victim" else policy.aggressors) for j in exp.jobs]
    usable = set(free) & set(topo.compute_nodes)
    try:
        return place_jobs(topo, requests, seeded_rng(exp.seed, policy_index, rep, 0), usable, share=share)
    except PlacementError as exc:
        hint = "" if share else " (slurm.share_nodes: true lets jobs share nodes on a small cluster)"
        raise ExperimentRunError(f"policy {policy.label!r}, repetition {rep}: {exc}; {len(usable)} free nodes{hint}") \
            from None


# --- one ReFrame run ---------------------------------------------------------------------------

@dataclass
class Step:
    """One job's ReFrame run in one workload: where its report goes and how it is started."""

    job: JobSpec
    placement: Placement
    workload: str           # "alone" or "mixed"
    report: Path
    job_name: str
    duration_s: float | None = None   # aggressors: how long they run


def reframe_command(step: Step, spec: SlurmSpec) -> list[str]:
    test, _ = test_of(step.job)
    exe = Path(sys.executable).with_name("reframe")
    cmd = [str(exe) if exe.exists() else "reframe", "-C", spec.reframe_config, "--system", spec.system]
    for c in spec.checks:
        cmd += ["-c", c]
    cmd += ["-R", "-n", rf"^{test}\b", "-J", f"nodelist={step.placement.nodelist}", "-J", f"job-name={step.job_name}"]
    if test == "Aggressor":
        j = step.job
        variables = {"pattern": j.pattern, "message_bytes": j.message_bytes, "messages": j.messages,
                     "compute_s": j.compute_s, "duration_s": step.duration_s,
                     # Slurm must not end it before its time is up: its duration plus start-up.
                     "time_limit": f"{int(math.ceil((step.duration_s or 60) / 60)) + 10}m"}
        for key, value in variables.items():
            cmd += ["-S", f"Aggressor.{key}={value}"]
    return [*cmd, *spec.options, *step.job.options, "--report-file", str(step.report), "-r"]


def reframe_env(step: Step, out: Path) -> dict[str, str]:
    _, family = test_of(step.job)
    prefix = out / "reframe" / step.report.parent.name / f"{step.workload}-{step.job.name}"
    return {**os.environ, "HPCVAR_RFM_NODES": f"{family}:{step.job.nodes}", "HPCVAR_RFM_PREFIX": str(prefix),
            "HPCVAR_RFM_DB": str(out / "reframe" / "results.db")}


def _partial(step: Step) -> Path:
    """Where ReFrame writes the run's report before :func:`finish` puts it in place."""
    return step.report.with_name(f".{step.report.name}.partial")


def as_user(user: str) -> list[str]:
    """ReFrame arguments that make a test's job another user's: root submits it with sbatch's
    ``--uid``/``--gid`` (the job runs as that user, accounting books it to them). The job's stage
    directory must then be writable for them (ReFrame runs with umask 0), and the job runs without
    the node samplers: they run hpcvar from this project's environment, which that user may not
    be able to reach (a virtual environment under /root)."""
    import grp
    import pwd

    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise ExperimentRunError(f"user {user!r}: no such Unix user (`hpcvar dev slurm up --extra-user {user}` "
                                 "creates and registers one)") from None
    group = grp.getgrgid(pw.pw_gid).gr_name
    return ["-J", f"uid={user}", "-J", f"gid={group}", "-S", "sample_counters=false"]


def start(step: Step, spec: SlurmSpec, out: Path, log) -> subprocess.Popen:
    step.report.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial(step)
    partial.unlink(missing_ok=True)
    cmd = reframe_command(Step(step.job, step.placement, step.workload, partial, step.job_name, step.duration_s),
                          spec)
    umask = None
    if step.job.user:
        if os.geteuid() != 0:
            raise ExperimentRunError(f"job {step.job.name}: running it as user {step.job.user} needs root "
                                     "(sbatch --uid)")
        cmd[-1:-1] = as_user(step.job.user)  # before the final -r
        umask = 0
    logfile = open(step.report.with_suffix(".log"), "w")
    log(f"{step.workload} {step.job.name} on {step.placement.nodelist}: {' '.join(cmd)}")
    return subprocess.Popen(cmd, env=reframe_env(step, out), stdout=logfile, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def finish(step: Step, proc: subprocess.Popen) -> None:
    """Wait for a ReFrame run; its report appears only once ReFrame wrote it (a failed test is in it
    as a failure and becomes a failed run)."""
    proc.wait()
    partial = _partial(step)
    if not partial.exists():
        raise ExperimentRunError(f"{step.workload} {step.job.name}: ReFrame exited {proc.returncode} without a "
                                 f"report; see {step.report.with_suffix('.log')}")
    doc = json.loads(partial.read_text())
    ran = [c for run in doc["runs"][-1:] for c in run["testcases"] if c.get("dataset") and c.get("jobid")]
    if not ran:
        raise ExperimentRunError(f"{step.workload} {step.job.name}: the test never got a job (wrong test name, "
                                 f"partition or node list?); see {step.report.with_suffix('.log')}")
    partial.replace(step.report)


def wait_running(names: list[str], procs: list[subprocess.Popen], timeout: float, env=None) -> None:
    """Until Slurm lists every job name as RUNNING (their ReFrame processes still alive)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["squeue", "-h", "-o", "%j|%T"], capture_output=True, text=True, timeout=60, env=env)
        running = {line.split("|")[0] for line in out.stdout.splitlines() if line.endswith("|RUNNING")}
        if all(n in running for n in names):
            return
        dead = [n for n, p in zip(names, procs) if p.poll() is not None and n not in running]
        if dead:
            raise ExperimentRunError(f"aggressor job(s) {dead} ended before the victim could start")
        if time.monotonic() > deadline:
            raise ExperimentRunError(f"aggressor job(s) {[n for n in names if n not in running]} not running after "
                                     f"{timeout:.0f} s (queue busy? free_states?)")
        time.sleep(1)


def _slug(text: str) -> str:
    """Lower-case ASCII letters and digits joined by ``-``: file and Slurm job names of a step
    (a resumed experiment finds its placements and reports again by these names)."""
    return slug(text, keep="A-Za-z0-9").lower()


# --- the experiment ----------------------------------------------------------------------------

def run(exp: Experiment, out: str | Path, log=None, queue_timeout: float = 900) -> pd.DataFrame:
    """Carry out every policy x repetition (resuming a partial run); returns the bookkeeping table
    (also ``OUT/experiment.csv``) with the run id of every job and workload."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    spec = exp.slurm or SlurmSpec()
    log = log or (lambda msg: print(f"interference: {msg}", file=sys.stderr, flush=True))
    for j in exp.jobs:
        test_of(j)  # every job has a test before anything is submitted
    check_paths(spec)
    nodes, free = sinfo(spec)
    topo_path = topology_for(spec, nodes, out)
    topo = Topology.from_file(topo_path)
    rows = []
    total = len(exp.policies) * exp.repetitions
    for pi, policy in enumerate(exp.policies):
        for rep in range(exp.repetitions):
            tag = f"{_slug(policy.label)}-{rep}"
            saved = out / "placements" / f"{tag}.json"
            if saved.exists():
                placements = [Placement.of(topo, p["job"], p["nodes"], p["policy"])
                              for p in json.loads(saved.read_text())]
            else:
                _, free = sinfo(spec)
                placements = choose_placements(exp, pi, rep, topo, free, spec.share_nodes)
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(json.dumps([{"job": p.job, "policy": p.policy, "nodes": list(p.nodes)}
                                             for p in placements], indent=1))
            log(f"policy {policy.label} repetition {rep} ({pi * exp.repetitions + rep + 1}/{total}): "
                + ", ".join(f"{p.job} on {p.nodelist}" for p in placements))
            where = dict(zip((j.name for j in exp.jobs), placements))
            reports = out / "reports" / tag

            def step(job, workload, duration=None):
                return Step(job, where[job.name], workload, reports / f"{workload}-{_slug(job.name)}.json",
                            f"hpcvar-{_slug(exp.name)}-{tag}-{workload}-{_slug(job.name)}"[:120], duration)

            victim_alone = step(exp.victim, "alone")
            if not victim_alone.report.exists():
                finish(victim_alone, start(victim_alone, spec, out, log))
            case = _case(victim_alone.report)
            took = float(case["job_completion_time_unix"]) - float(case["job_submit_time"])
            duration = spec.aggressor_duration_s or math.ceil(1.5 * took + 30)
            steps = [victim_alone]
            for a in exp.aggressors:
                s = step(a, "alone", duration)
                if not s.report.exists():
                    finish(s, start(s, spec, out, log))
                steps.append(s)
            mixed = [step(a, "mixed", duration) for a in exp.aggressors]
            victim_mixed = step(exp.victim, "mixed")
            if not (victim_mixed.report.exists() and all(s.report.exists() for s in mixed)):
                procs = [start(s, spec, out, log) for s in mixed]
                try:
                    wait_running([s.job_name for s in mixed], procs, queue_timeout)
                    time.sleep(spec.settle_s)
                    finish(victim_mixed, start(victim_mixed, spec, out, log))
                    for s, p in zip(mixed, procs):
                        finish(s, p)
                except BaseException:
                    for p in procs:
                        if p.poll() is None:
                            p.terminate()  # ReFrame cancels its job on SIGTERM
                    raise
            steps += [victim_mixed, *mixed]
            for s in steps:
                feats = topo.placement(list(s.placement.nodes))
                rows.append({"experiment": exp.name, "policy": policy.label, "victim_policy": policy.victim,
                             "aggressor_policy": policy.aggressors, "repetition": rep, "workload": s.workload,
                             "job": s.job.name, "role": s.job.role, "test": test_of(s.job)[0],
                             "pattern": s.job.pattern, "nodes": s.job.nodes, "node_list": s.placement.nodelist,
                             "num_routers": feats["num_routers"], "num_groups": feats["num_groups"],
                             "report": str(s.report.relative_to(out)), "run_id": _run_id(s.report),
                             "duration_s": s.duration_s})
    book = pd.DataFrame(rows, columns=BOOK_COLUMNS)
    imported = import_reports(sorted(out / r for r in book["report"]), out / "raw", topology=topo_path,
                              ldms_store=spec.ldms)
    for e in imported.errors:
        log(f"not imported: {e['run_id']}: {e['file']}: {e['error']}")
    with atomic_path(out / "experiment.csv") as tmp:
        book.to_csv(tmp, index=False)
    return book


def _case(report: Path) -> dict:
    """The report's one test case that ran a job (the experiment runs one test per report)."""
    doc = json.loads(report.read_text())
    cases = [c for run in doc["runs"][-1:] for c in run["testcases"] if c.get("dataset") and c.get("jobid")]
    if len(cases) != 1:
        raise ExperimentRunError(f"{report}: expected one test case with a job, found {len(cases)}")
    return {**cases[0], "session": doc["session_info"]["uuid"]}


def _run_id(report: Path) -> str:
    """The run id import-reframe gives the report's test case."""
    case = _case(report)
    return run_id_of(case, case["session"])


__all__ = ["TESTS", "ExperimentRunError", "test_of", "parse_sinfo", "sinfo", "topology_for", "choose_placements",
           "reframe_command", "run"]
