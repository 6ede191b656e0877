"""One campaign round: every dataset's ReFrame test once, in random order.

The pattern: ReFrame runs where the workflow runs (a login node, or here) and submits its own
batch jobs through the site configuration's scheduler (``--system``), waiting for them; the
Snakemake rule that calls this is a local rule and holds no allocation. A round writes ReFrame's
JSON run report; tests that failed (killed, timed out, wrong answer) are in it as failures and
become failed runs when imported, so a failure never stops the campaign. ReFrame crashing
without a report is an error, and the round is re-run on the next invocation.

Each round keeps its own stage/output tree (``<prefix>/rounds/<round>``) so a later round cannot
overwrite files a round has not imported yet, and all rounds share one results database
(``<prefix>/results.db``) for ``reframe --performance-compare``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: Variables of ``environment`` that name paths: relative ones are taken from the current directory
#: (the workflow's), made absolute because ReFrame's tests run in their own stage directories.
PATH_VARIABLES = ("HPCVAR_SOURCE_MIRROR", "HPCVAR_BUILD_CACHE", "HPCVAR_SOURCES", "HPCVAR_IMAGES")


def reframe_command(report: Path, config: str, system: str, checks: list[str], tests: list[str],
                    options: list[str]) -> list[str]:
    exe = Path(sys.executable).with_name("reframe")
    cmd = [str(exe) if exe.exists() else "reframe", "-C", config, "--system", system]
    for c in checks:
        cmd += ["-c", c]
    # Campaign datasets only: the interference experiments' traffic generator (tag interference) is not one.
    cmd += ["-R", "-t", "campaign"]
    for t in tests:
        cmd += ["-n", t]
    return [*cmd, "--exec-order=random", "--report-file", str(report), *options, "-r"]


def alongside_command(test: str, config: str, system: str, checks: list[str], options: list[str],
                      job_name: str, report: Path) -> list[str]:
    """ReFrame running ``test`` (e.g. the suite's ``Aggressor``) as the job alongside a round."""
    exe = Path(sys.executable).with_name("reframe")
    cmd = [str(exe) if exe.exists() else "reframe", "-C", config, "--system", system]
    for c in checks:
        cmd += ["-c", c]
    return [*cmd, "-R", "-n", rf"^{test}\b", "-J", f"job-name={job_name}", *options,
            "--report-file", str(report), "-r"]


def _start_alongside(alongside: dict, *, config: str, system: str, checks: list[str], env: dict,
                     round_prefix: Path, job_name: str) -> subprocess.Popen:
    """Start the job alongside and wait until Slurm runs it (or fail if it ends or never starts)."""
    from hpcvar.campaign.interference import ExperimentRunError, wait_running

    out = round_prefix / "alongside"
    out.mkdir(parents=True, exist_ok=True)
    cmd = alongside_command(alongside["test"], config, system, checks, list(alongside.get("options") or []),
                            job_name, out / "reframe-report.json")
    print("campaign round: alongside:", " ".join(cmd), flush=True)
    log = open(out / "reframe.log", "w")
    proc = subprocess.Popen(cmd, env={**env, "HPCVAR_RFM_PREFIX": str(out)}, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_running([job_name], [proc], float(alongside.get("start_timeout_s", 300)), env=env)
    except ExperimentRunError as exc:
        _stop_alongside(proc, job_name, env)
        raise SystemExit(f"campaign round: the job alongside did not start: {exc}; see {out / 'reframe.log'}")
    return proc


def _stop_alongside(proc: subprocess.Popen, job_name: str, env: dict) -> None:
    """Cancel the job alongside (the round is over) and let its ReFrame process finish."""
    subprocess.run(["scancel", "--name", job_name], env=env, capture_output=True, timeout=60)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(timeout=60)


def run_round(report: str | Path, *, config: str, system: str, checks: list[str], tests: list[str],
              options: list[str], prefix: str | Path, environment: dict[str, str] | None = None,
              alongside: dict | None = None, background: dict | None = None, topology: str | None = None,
              round_index: int | None = None, rounds: int | None = None, image: str | None = None) -> int:
    """Run one round; returns 0 when ReFrame wrote its report (failed tests included).

    ReFrame runs in the current directory (the workflow's: the project directory), so relative
    paths (``config``, ``checks``) are taken from there, as any path on the command line.

    ``environment`` is added to ReFrame's environment (``HPCVAR_RFM_SIZE``,
    ``HPCVAR_SOURCE_MIRROR``, ...). ``alongside`` (``{test, options}``) starts that ReFrame test of
    ``checks`` as a job of its own before the round and cancels it after: a known neighbour
    (the suite's ``Aggressor``) in every run's neighbourhood. ``background`` (``campaign.background``:
    other users' jobs with planted causes, :mod:`hpcvar.campaign.background`) is placed on
    ``topology``'s nodes for round number ``round_index`` of the campaign's ``rounds`` (its
    balanced design spans them), submitted before the round and cancelled after it; what was
    planted goes to the campaign's truth file.
    """
    missing = [f"{option} {path}" for option, path in (("--reframe-config", config), *(("--checks", c) for c in checks))
               if not Path(path).exists()]
    if missing:
        raise SystemExit(f"campaign round: {', '.join(missing)}: not found (relative paths are taken from the "
                         f"current directory, {Path.cwd()}, where ReFrame runs)")
    report = Path(report).resolve()
    prefix = Path(prefix).resolve()
    round_prefix = prefix / "rounds" / report.parent.name
    environment = {k: str(Path(v).resolve()) if k in PATH_VARIABLES and v else v
                   for k, v in (environment or {}).items()}
    env = {**os.environ, **environment, "HPCVAR_RFM_PREFIX": str(round_prefix),
           "HPCVAR_RFM_DB": str(prefix / "results.db")}
    preflight(system, [prefix, report, Path.cwd()], image, tests, env)
    if image:
        options = [*options, "-S", f"image={image}"]
    report.parent.mkdir(parents=True, exist_ok=True)
    partial = report.with_name(f".{report.name}.partial")
    partial.unlink(missing_ok=True)
    cmd = reframe_command(partial, config, system, checks, tests, options)
    job_name = f"hpcvar-alongside-{report.parent.name}"
    planted, bg, bg_ids = None, None, []
    if background:
        from hpcvar.campaign import background as bgmod

        bg = bgmod.Background.from_config(background, topology, rounds)
        planted = bgmod.plan(bg, report.parent.name, round_index or 1, results=report.parent.parent.parent)
        bgmod.set_fabric(bg, planted)
        bg_ids = bgmod.submit(planted, report.parent.parent.parent, env)
        who = ", ".join(f"{j['user']} ({j['kind']}) on {','.join(j['nodes'])}" for j in planted.jobs) or "none"
        print(f"campaign round: background: {who}; global links {planted.global_rate}", flush=True)
        try:
            bgmod.wait_running(bg_ids, env)
        except bgmod.BackgroundError:
            bgmod.cancel(bg_ids, env)
            raise
        time.sleep(bg.settle_s)
        planted.start = time.time()
    side = (_start_alongside(alongside, config=config, system=system, checks=checks, env=env,
                             round_prefix=round_prefix, job_name=job_name) if alongside else None)
    print("campaign round:", " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, env=env)
    finally:
        if side is not None:
            _stop_alongside(side, job_name, env)
        if planted is not None:
            planted.end = time.time()
            bgmod.cancel(bg_ids, env)
            bgmod.record(report.parent.parent.parent, planted, bg)
    if not partial.exists():
        print(f"campaign round: ReFrame exited {proc.returncode} without a run report ({partial}); "
              "the round will be run again", file=sys.stderr)
        return proc.returncode or 1
    never_ran = [c["display_name"] for run in json.loads(partial.read_text())["runs"][-1:] for c in run["testcases"]
                 if c.get("dataset") and not c.get("jobid")]
    if never_ran:
        # Nothing was measured for these datasets (submission failed, a fixture failed): the round
        # is not done. Its report stays as .partial for inspection; the next invocation reruns it.
        print(f"campaign round: {len(never_ran)} tests never got a job ({', '.join(never_ran)}); see "
              f"{partial} and the ReFrame log. The round will be run again.", file=sys.stderr)
        return 1
    if proc.returncode != 0:
        print(f"campaign round: ReFrame exited {proc.returncode}: some tests failed after their job ran; "
              "they are recorded as failed runs", flush=True)
    partial.replace(report)  # the round's output appears only once its report is complete
    return 0


def preflight(system: str, paths: list[Path], image: str | None, tests: list[str], env: dict) -> None:
    """What would fail every job of the round, refused before anything is submitted: on the
    testbed, paths under /tmp (each node has its own), the Python environment of this hpcvar
    among them (the nodes run its `hpcvar sample`, and the workflow's jobs its `hpcvar`); images
    that are missing, changed since their build, or that this machine cannot run (SystemExit
    naming the path and the fix)."""
    from hpcvar.dev.testbed import node_local_reason

    if system == "testbed":
        for path in paths:
            reason = node_local_reason(path)
            if reason:
                raise SystemExit(f"campaign round: refused on the testbed: {reason}")
        reason = node_local_reason(sys.prefix)
        if reason:
            raise SystemExit(f"campaign round: refused on the testbed: the Python environment of hpcvar, whose "
                             f"`hpcvar` the nodes run (the counter sampler, the workflow's jobs): {reason}")
    if not image:
        return
    from hpcvar.containers import definition, runtime, store

    try:
        defs = definition.load()
        where = store.store_dir(env.get("HPCVAR_IMAGES"))
        for resolved in store.resolve_for_tests(image, tests, defs, where):
            problems = runtime.problems(resolved.runtime, need_user=False)
            if system == "testbed":
                problems += [r for r in [node_local_reason(resolved.path)] if r]
            if problems:
                raise store.ImageError(f"image {resolved.path}: " + "; ".join(problems))
            print(f"campaign round: image {resolved.container} ({resolved.path})", flush=True)
    except (definition.DefinitionError, store.ImageError) as exc:
        raise SystemExit(f"campaign round: {exc}") from None


def requested(results: str | Path) -> list[str]:
    """Round ids requested by hand or by a schedule (``results/rounds/requested.txt``)."""
    path = Path(results) / "rounds" / "requested.txt"
    return [line.strip() for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def request(results: str | Path, round_id: str | None = None) -> str:
    """Ask for one more round (id: the UTC time, unless given); the next invocation runs it."""
    from datetime import datetime, timezone

    round_id = round_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(results) / "rounds" / "requested.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    if round_id not in requested(results):
        with path.open("a") as fh:
            fh.write(round_id + "\n")
    return round_id


def results_of(configfile: str | Path) -> str:
    """The ``results:`` of a workflow configuration file (the schema's default ``results``)."""
    import yaml

    doc = yaml.safe_load(Path(configfile).read_text()) or {}
    return str(doc.get("results") or "results")


def schedule_line(repo: Path, profile: str, every: str, configfile: str, results: str | None = None,
                  hour: int = 2) -> str:
    """An scrontab/crontab line that requests and runs a round of the campaign ``configfile``
    every day or week (Slurm's ``scrontab -e`` runs it as a batch job; cron on a login node works
    the same). The request, the workflow and the log use that campaign's results directory."""
    when = {"day": f"0 {hour} * * *", "week": f"0 {hour} * * 1"}[every]
    bindir = Path(sys.executable).parent
    results = results or results_of(repo / configfile)
    return (f"{when} cd {repo} && {bindir}/hpcvar campaign request --results {results} && "
            f"{bindir}/snakemake --profile {profile} --configfile {configfile} "
            f">> {results}/logs/scheduled-rounds.log 2>&1")


def install_schedule(line: str, tool: str = "scrontab") -> bool:
    """Add ``line`` to the user's ``scrontab`` (Slurm runs it as a batch job; needs
    ``ScronParameters=enable``) or ``crontab`` (a login node's cron): the current table is read
    (``-l``), the line appended unless an entry for the same command is there, and the whole table
    written back from a file, so other entries stay. Returns False when it was already there."""
    import shutil
    import tempfile

    if tool not in ("scrontab", "crontab"):
        raise ValueError(f"unknown schedule tool {tool!r}: scrontab or crontab")
    if shutil.which(tool) is None:
        raise RuntimeError(f"{tool} not found on PATH" + (" (Slurm's scrontab needs slurm-client 20.11 or newer)"
                                                          if tool == "scrontab" else " (install cron)"))
    current = subprocess.run([tool, "-l"], capture_output=True, text=True)
    # "no crontab for user" is an empty table, any other failure is an error.
    empty = any(s in current.stderr.lower() for s in ("no crontab", "no scrontab"))
    if current.returncode != 0 and not empty:
        raise RuntimeError(f"{tool} -l failed: {current.stderr.strip()[:300]}")
    lines = current.stdout.splitlines() if current.returncode == 0 else []
    if line in lines:
        return False
    # The same command on another schedule is replaced: one schedule of rounds, not two.
    command = line.split(None, 5)[5]
    lines = [e for e in lines if e.startswith("#") or e.split(None, 5)[5:] != [command]]
    with tempfile.NamedTemporaryFile("w", suffix=".cron", delete=False) as fh:
        fh.write("\n".join([*lines, line]) + "\n")
    try:
        out = subprocess.run([tool, fh.name], capture_output=True, text=True)
    finally:
        Path(fh.name).unlink(missing_ok=True)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} {fh.name} failed: {out.stderr.strip()[:300]}")
    return True
