"""ReFrame run reports -> the raw campaign layout (docs/raw-layout.md) that ``hpcvar collate`` reads.

Every test case of the suite that carries a ``dataset`` (the campaign's run tests, not fixtures)
becomes one immutable run directory ``runs/<run_id>/``: its files copied from ReFrame's output
directory, then ``manifest.json`` (checksums, job, provenance) written last. A run directory
that already has a manifest is never touched again, so importing the same report twice, or a
report of a later round, only adds what is new.

* run id: ``<system>-<job id>`` for batch jobs (Slurm ids are unique); ``<system>-<session>-<pid>``
  for ReFrame's local scheduler, whose job ids are process ids.
* applications: ``app.out`` (output timestamped by ``ts``) becomes ``stdout.txt``; the node
  samplers' files and the mpiP reports are kept as they are (collation turns the samples into
  per-step counters).
* microbenchmarks: their CSV files are kept (collate reads them into ``latency`` and
  ``latency_histograms``), with the job's stdout as ``stdout.txt``.
* LDMS: with a store (``--ldms``), the rows of the job's window go to ``ldms/`` (:func:`slice_ldms`),
  so the run keeps its own system-wide counters however the store is later rotated or pruned.
* job: for the local scheduler the manifest carries the job itself (nodes, start, end, state,
  user from the report); for Slurm runs ``sacct.txt`` is collected (``collect_sacct``): every
  user's jobs that ran during the job's window, so collate finds the job's own state and its
  neighbourhood.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from hpcvar.data.rawlayout import (APP_OUTPUT, MPIP_SUFFIX, RUNS_DIR, RUN_LDMS_DIR, SACCT, STDERR, STDOUT,
                                   SYSTEM_FILE, TOPOLOGY, is_complete, read_system, write_manifest, write_system)
from hpcvar.parsers import ldms
from hpcvar.parsers.errors import ParseError
from hpcvar.parsers.reframe import final_attempts
from hpcvar.util.fileio import atomic_path, atomic_write_text
from hpcvar.util.progress import Progress

#: sacct fields written to sacct.txt (collate needs User, Submit, Start, End, State, NNodes, NodeList).
SACCT_FORMAT = "JobID,JobName,User,Account,Partition,Submit,Start,End,Elapsed,Timelimit,State,ExitCode,NNodes,NodeList"

MICROBENCHMARKS = {"hpcvar-collectives": "collectives", "hpcvar-overtime": "overtime",
                   "hpcvar-confidence": "confidence", "hpcvar-aggressor": "aggressor"}


@dataclass
class ImportResult:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)     # run directory already complete
    ignored: list[str] = field(default_factory=list)     # fixtures, tests without a dataset, never ran
    errors: list[dict] = field(default_factory=list)     # not imported this time (retried next time)


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(float(epoch), tz=timezone.utc).isoformat()


def run_id_of(case: dict, session: str) -> str:
    if case.get("scheduler") == "local":
        return f"{case['system']}-{session[:8]}-{case['jobid']}"
    return f"{case['system']}-{case['jobid']}"


def _job(case: dict, session_user: str | None, outdir: Path) -> dict:
    """Job facts from the report; the start is the first timestamp the job's files record."""
    start = case.get("job_submit_time")
    for f in outdir.glob("*.csv"):
        with open(f) as fh:
            for line in fh:
                if not line.startswith("#"):
                    break
                if line.startswith("# start_epoch="):
                    start = min(start or float("inf"), float(line.split("=", 1)[1]))
    state = "COMPLETED" if case.get("job_exitcode") == 0 and case.get("fail_phase") != "run" else "FAILED"
    return {"scheduler": case.get("scheduler"), "node_list": list(case.get("job_nodelist") or []),
            "submit": _iso(case.get("job_submit_time")), "start": _iso(start),
            "end": _iso(case.get("job_completion_time_unix")), "exitcode": case.get("job_exitcode"),
            "state": state, "user": session_user}


#: sacct states of a job that has not ended (as far as accounting knows yet).
UNFINISHED = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING", "CONFIGURING"}


def collect_sacct(case: dict, dst: Path, sacct: str = "sacct", wait_s: float = 60) -> None:
    """``sacct --allusers`` of the job's window (submit to completion) into ``dst``: the job itself
    and every allocation that overlapped it. Times as sacct prints them (the cluster's local
    time; system.yaml's ``timezone`` converts them)."""
    def fmt(epoch):
        return datetime.fromtimestamp(float(epoch)).strftime("%Y-%m-%dT%H:%M:%S")

    start, end = case.get("job_submit_time"), case.get("job_completion_time_unix")
    if start is None or end is None:
        raise ParseError(dst, f"job {case['jobid']} has no submit/completion time in the report: no window for sacct")
    cmd = [sacct, "--allusers", "--parsable2", f"--format={SACCT_FORMAT}", "-S", fmt(start), "-E", fmt(float(end) + 1)]
    deadline = time.monotonic() + wait_s
    while True:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except FileNotFoundError as exc:
            raise ParseError(dst, f"{sacct} not found: Slurm runs need sacct on the machine that imports them") from exc
        if out.returncode != 0:
            raise ParseError(dst, f"{' '.join(cmd)} failed: {out.stderr.strip()[:300]}")
        state = _job_state(out.stdout, str(case["jobid"]))
        if state is not None and state not in UNFINISHED:
            break
        # slurmdbd records a job's end shortly after it: wait for it rather than record it running.
        if time.monotonic() > deadline:
            raise ParseError(dst, f"sacct lists job {case['jobid']} as {state or 'missing'} {wait_s:.0f} s after "
                                  "ReFrame saw it end (accounting lag, or another cluster?)")
        time.sleep(2)
    atomic_write_text(dst, out.stdout)


def _job_state(text: str, job_id: str) -> str | None:
    """The allocation's State in ``sacct --parsable2`` output, or None when the job is not listed."""
    lines = text.splitlines()
    if not lines:
        return None
    header = lines[0].split("|")
    for line in lines[1:]:
        fields = line.split("|")
        if fields[0] == job_id and len(fields) == len(header):
            return fields[header.index("State")].split()[0]
    return None


def _copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def slice_ldms(case: dict, run_dir: Path, store: Path | None, margin: float) -> tuple[list[str], list[str]]:
    """The LDMS store's rows of the job's window (``margin`` seconds either side, so the first
    interval of the run has a sample before it) into ``run_dir/ldms/``: every producer, because
    collate's ``io`` and ``sys`` scopes are the routers *outside* the job. Returns the files (for
    the manifest) and notes; without a store, or with one that is missing, the run has no slice
    and a note says why."""
    if store is None:
        return [], []
    if not store.is_dir():
        return [], [f"LDMS: store {store} not found; no system counters for this run"]
    start, end = case.get("job_submit_time"), case.get("job_completion_time_unix")
    if start is None or end is None:
        return [], ["LDMS: the report has no job window; no system counters for this run"]
    files = sorted(p for p in store.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        return [], [f"LDMS: store {store} is empty"]
    written = ldms.slice_window(files, float(start) - margin, float(end) + margin, run_dir / RUN_LDMS_DIR)
    if not written:
        return [], [f"LDMS: store {store} has no samples between {_iso(float(start) - margin)} and "
                    f"{_iso(float(end) + margin)}"]
    return [f"ldms/{p.name}" for p in written], []


def import_case(case: dict, session: dict, raw: Path, sacct: str = "sacct", ldms_store: Path | None = None,
                ldms_margin: float = 60.0) -> str | None:
    """One test case -> ``runs/<run_id>/``; returns the run id, or None when already imported."""
    run_id = run_id_of(case, session["uuid"])
    run_dir = raw / RUNS_DIR / run_id
    if is_complete(run_dir):
        return None
    passed = case.get("result") == "pass"
    # ReFrame copies a passed test's files to its output directory; a failed test's stay in its
    # (kept) stage directory.
    outdir = Path(case["outputdir"] if passed else case.get("stagedir") or case["outputdir"])
    if not outdir.is_dir():
        raise ParseError(outdir, f"{'output' if passed else 'stage'} directory of {case['display_name']} "
                                 f"(job {case['jobid']}) not found")
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a previous import stopped half-way: no manifest, nothing collated
    run_dir.mkdir(parents=True)
    program = Path(case.get("program") or case.get("executable") or "").name
    kind = "microbenchmark" if program in MICROBENCHMARKS else "app"
    files, notes = [], []
    for f in sorted(outdir.iterdir()):
        if f.is_file() and (f.suffix == ".csv" or f.name.endswith(MPIP_SUFFIX)):
            _copy(f, run_dir / f.name)
            files.append(f.name)
    stdout = outdir / (APP_OUTPUT if kind == "app" else case.get("job_stdout") or "rfm_job.out")
    if stdout.exists():
        _copy(stdout, run_dir / STDOUT)
        files.append(STDOUT)
    elif passed:
        raise ParseError(stdout, f"job output of {case['display_name']} not kept in the output directory")
    if case.get("scheduler") != "local":
        collect_sacct(case, run_dir / SACCT, sacct)
        files.append(SACCT)
    if not passed:
        notes.append(f"ReFrame: {case.get('fail_phase')} failed: {case.get('fail_reason')}")
        # What MPI, the launcher or the container runtime said when the job stopped.
        stderr = outdir / (case.get("job_stderr") or "rfm_job.err")
        if stderr.is_file() and stderr.stat().st_size:
            _copy(stderr, run_dir / STDERR)
            files.append(STDERR)
    else:
        sliced, ldms_notes = slice_ldms(case, run_dir, ldms_store, ldms_margin)
        files += sliced
        notes += ldms_notes
    app = MICROBENCHMARKS.get(program) or str(case.get("app_name") or program)
    manifest = {
        "run_id": run_id, "app": app, "dataset": case["dataset"], "kind": kind,
        # The app's own arguments (AppRun's app_input), not the launch wrappers around them.
        "input": case.get("app_input") or " ".join(map(str, case.get("executable_opts") or [])),
        "num_nodes": int(case.get("num_nodes") or len(case.get("job_nodelist") or []) or 1),
        "job_id": str(case["jobid"]), "software": case.get("software") or None,
        "container": case.get("container") or None,
        "test": case["display_name"], "system": case["system"], "partition": case["partition"],
        "environ": case["environ"], "session": session["uuid"], "result": case["result"],
        "fail_phase": case.get("fail_phase"),
        "job": _job(case, session.get("user"), outdir),
        "files": {},  # the checksums of `files`: write_manifest fills them in here
        "notes": notes,
    }
    write_manifest(run_dir, manifest, files)  # last: the run is complete
    return run_id


def _local_timezone() -> str:
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        return tz
    etc = Path("/etc/timezone")
    if etc.exists() and etc.read_text().strip():
        return etc.read_text().strip()
    link = Path("/etc/localtime")
    if link.is_symlink() and "zoneinfo/" in os.readlink(link):
        return os.readlink(link).split("zoneinfo/", 1)[1]
    return "UTC"


#: The header of the flat topology this module writes when there is no site map.
FLAT_TOPOLOGY_HEADER = "node,router,group"


class RefusedRawDir(ParseError):
    """The raw directory belongs to another system, or holds a topology this import cannot extend:
    nothing was written."""


def check_raw_dir(raw: Path, systems: set[str], topology: Path | None) -> None:
    """Refuse, before anything is written, to import runs of ``systems`` into ``raw`` when its
    system.yaml names another system (or several systems come at once), or when new nodes would
    have to be appended to a topology file this module did not write."""
    if len(systems) > 1:
        raise RefusedRawDir(raw, f"the reports hold runs of several systems ({', '.join(sorted(systems))}): "
                                 "import each system into a raw directory of its own")
    if not (raw / SYSTEM_FILE).exists():
        return
    doc = read_system(raw) or {}
    theirs = str(doc.get("system"))
    ours = next(iter(systems), theirs)
    if theirs != ours:
        raise RefusedRawDir(raw / SYSTEM_FILE,
                            f"{raw} is the raw directory of system {theirs!r}, these runs are of system {ours!r}: "
                            "nothing imported; import them into a raw directory of their own (in the workflow: "
                            "give the campaign its own `results:` or `raw_dir:`)")
    if topology is None and doc.get("topology"):
        path = raw / doc["topology"]
        if path.exists():
            header = path.read_text().split("\n", 1)[0].strip()
            if header != FLAT_TOPOLOGY_HEADER:
                raise RefusedRawDir(path, f"topology with columns {header!r}, not the {FLAT_TOPOLOGY_HEADER!r} this "
                                          "import writes: nodes cannot be added to it (pass the site's map with "
                                          "--topology, or import into a raw directory of its own)", 1)


def _ensure_system(raw: Path, system: str, nodes: set[str], topology: Path | None) -> None:
    """system.yaml and a topology for the raw directory (:func:`check_raw_dir` has accepted it).
    Without a site map (``--topology``), nodes are recorded flat: each its own router, all in one
    group (no network structure known)."""
    raw.mkdir(parents=True, exist_ok=True)
    if not (raw / SYSTEM_FILE).exists():
        topo_name = topology.name if topology else TOPOLOGY
        # sacct prints the cluster's local time: the importing (login) node's zone.
        write_system(raw, {"system": system, "timezone": _local_timezone(), "topology": topo_name})
    doc = read_system(raw)
    if topology:
        if not (raw / topology.name).exists():
            shutil.copyfile(topology, raw / topology.name)
        return
    path = raw / doc["topology"]
    known = set()
    if path.exists():
        known = {line.split(",", 1)[0] for line in path.read_text().splitlines()[1:] if line.strip()}
    new = sorted(nodes - known)
    if new:
        text = path.read_text() if path.exists() else FLAT_TOPOLOGY_HEADER + "\n"
        atomic_write_text(path, text + "".join(f"{n},{n},flat\n" for n in new))


def import_reports(reports: list[str | Path], raw: str | Path, topology: str | Path | None = None,
                   sacct: str = "sacct", ldms_store: str | Path | None = None,
                   ldms_margin: float = 60.0) -> ImportResult:
    raw, result = Path(raw), ImportResult()
    loaded = []
    for report in map(Path, reports):
        try:
            doc = json.loads(report.read_text())
            session, runs = doc["session_info"], doc["runs"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise ParseError(report, f"not a ReFrame JSON run report ({exc})") from exc
        loaded.append((report, session, final_attempts(runs)))  # a retried failure gives way to its retry
    # Every report is read and the raw directory checked before anything is written.
    check_raw_dir(raw, {c["system"] for _, _, cases in loaded for c in cases if _importable(c)},
                  Path(topology) if topology else None)
    for report, session, cases in loaded:
        bar = Progress(f"import-reframe: {report.name}", len(cases))
        for case in cases:
            bar.step()
            if not _importable(case):
                result.ignored.append(case.get("display_name", "?"))
                continue
            _ensure_system(raw, case["system"], set(case.get("job_nodelist") or []),
                           Path(topology) if topology else None)
            try:
                run_id = import_case(case, session, raw, sacct, Path(ldms_store) if ldms_store else None,
                                     ldms_margin)
            except ParseError as exc:
                # The directory stays without a manifest (collate skips it); the next import retries.
                result.errors.append({**exc.as_dict(), "run_id": run_id_of(case, session["uuid"])})
                continue
            (result.imported if run_id else result.skipped).append(run_id or run_id_of(case, session["uuid"]))
    return result


def _importable(case: dict) -> bool:
    """A campaign run: not a fixture, with a dataset and a job."""
    return not case.get("fixture") and bool(case.get("dataset")) and bool(case.get("jobid"))
