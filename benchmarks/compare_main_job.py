"""Are the main job's outputs the same before and after a change? (Refactorings must not change them.)

Runs the main job (`snakemake --cores 2`: simulate seed 0, collate, analyses, report) on a git
revision and on the current working tree, each in a copy of its own with the same pseudonym salt
(``HPCVAR_SALT``), and compares what they wrote:

* ``summary.txt``;
* every ``analyses/*/summary.json``, key by key (numbers exactly), leaving out what differs from
  run to run by nature: timings (``*_seconds``, ``seconds``, ``elapsed_s``), MLflow run and experiment ids,
  tracking URIs and absolute paths of the copy;
* every CSV table under ``analyses/``, cell by cell, without timing columns;
* the report's numbers: the text of every table cell of ``report.html``.

Exit status 0 when everything agrees, 1 with a list of the differences otherwise. Each main
job's wall time and job count are printed as it ends, then both and each job's (from
Snakemake's log) side by side with their ratio, and each main job's CPU time (Snakemake and
every process under it, user and system) with the share of the two cores' time it kept busy:
a main job that keeps both cores busy is faster only with less work.

``--mape-points P`` compares a change that is allowed to move the models' errors (a model
setting): forecast and deviation MAPEs (keys and columns named ``mape*``, and the report's
percentage cells) may differ by up to P percentage points; every other value, the best cells,
feature sets, rankings, drivers and verdicts among them, must still be the same. The shifts
within P are counted and the largest is printed.

    python benchmarks/compare_main_job.py --before HEAD        # this tree's change against HEAD (~7 min)
    python benchmarks/compare_main_job.py --before d36a4f4 --after 9feb621
    python benchmarks/compare_main_job.py --results A/results B/results   # compare two finished runs
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SALT = "compare-main-job"
VOLATILE_KEY = re.compile(r"(_seconds|^seconds|^elapsed_s|^tracking_uri|^experiment_id|^run_ids?|_run_id|^mlflow.*)$")
VOLATILE_COLUMN = re.compile(r"(_seconds|^seconds|^elapsed_s)$")
HEX32 = re.compile(r"\b[0-9a-f]{32}\b")


def checkout(rev: str | None, into: Path) -> Path:
    """A copy of ``rev`` (None: the working tree, uncommitted changes included) at ``into``."""
    into.mkdir(parents=True, exist_ok=True)
    if rev is None:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True,
                               capture_output=True, text=True).stdout.split("\n")
        for name in filter(None, files):
            if (REPO / name).is_file():
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, into / name)
    else:
        archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def rule_times(log: str) -> dict[str, float]:
    """Each job's wall time (s) from Snakemake's log: ``rule`` or ``rule[wildcards]`` -> seconds
    from its start line to its ``Finished jobid`` line (timestamps to the second)."""
    return {name: (end - start).total_seconds() for name, (start, end) in job_spans(log).items()}


def job_spans(log: str) -> dict:
    """Each finished job's (start, end) datetimes from Snakemake's log, by ``rule`` or
    ``rule[wildcards]``."""
    from datetime import datetime

    started, names, spans = {}, {}, {}
    stamp = None
    for line in log.splitlines():
        m = re.match(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]$", line)
        if m:
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
            continue
        m = re.match(r"^(?:local)?(?:rule|checkpoint) (\w+):$", line)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^\s+jobid: (\d+)$", line)
        if m and stamp is not None:
            started[m.group(1)], names[m.group(1)] = stamp, current
            continue
        m = re.match(r"^\s+wildcards: (.*)$", line)
        if m and started:
            last = list(started)[-1]
            names[last] = f"{names[last]}[{m.group(1)}]"
            continue
        m = re.match(r"^Finished jobid: (\d+)", line)
        if m and m.group(1) in started and stamp is not None:
            spans[names[m.group(1)]] = (started[m.group(1)], stamp)
    return spans


CORES = 2  # the main job's --cores, as README runs it


def children_cpu() -> float:
    """User and system CPU seconds of this process's children that have ended and been waited
    for, and of theirs (each process's own waited-for children are counted in it when it is
    waited for): Snakemake's jobs and the worker processes under them."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main_job(tree: Path) -> Path:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "HPCVAR_SALT": SALT}
    env.pop("MLFLOW_TRACKING_URI", None)
    snakemake = Path(sys.executable).with_name("snakemake")
    print(f"main job in {tree} ...", flush=True)
    t0, cpu0 = time.perf_counter(), children_cpu()
    out = subprocess.run([str(snakemake), "--cores", str(CORES)], cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the main job failed in {tree}:\n{out.stderr[-3000:]}")
    wall, cpu = time.perf_counter() - t0, children_cpu() - cpu0
    done = re.findall(r"(\d+) of (\d+) steps \(100%\) done", out.stderr)
    print(f"  {wall:.0f} s wall, {cpu:.0f} s CPU ({busy(cpu, wall)} of {CORES} cores' time busy), "
          f"{done[-1][1] if done else '?'} jobs", flush=True)
    (tree / "main_job.json").write_text(json.dumps({"wall_s": wall, "cpu_s": cpu, "rules_s": rule_times(out.stderr)}))
    return tree / "results"


def busy(cpu: float, wall: float) -> str:
    """The share of the cores' time (``CORES`` x wall) that ``cpu`` seconds kept busy."""
    return f"{100 * cpu / (CORES * wall):.0f}%"


def print_times(before: Path, after: Path) -> None:
    """Both main jobs' wall times and their ratio, then each job's (from the Snakemake logs)."""
    b, a = (json.loads((p.parent / "main_job.json").read_text()) for p in (before, after))
    print(f"{'':34s} {'before':>8s} {'after':>8s} {'ratio':>6s}")
    print(f"{'main job (wall)':34s} {b['wall_s']:8.0f} {a['wall_s']:8.0f} {a['wall_s'] / b['wall_s']:6.2f}")
    if "cpu_s" in b and "cpu_s" in a:
        print(f"{'main job (CPU, user + system)':34s} {b['cpu_s']:8.0f} {a['cpu_s']:8.0f} {a['cpu_s'] / b['cpu_s']:6.2f}")
        print(f"{f'cores busy (of {CORES} x wall)':34s} {busy(b['cpu_s'], b['wall_s']):>8s} "
              f"{busy(a['cpu_s'], a['wall_s']):>8s}")
    for name in sorted(set(b["rules_s"]) | set(a["rules_s"])):
        x, y = b["rules_s"].get(name), a["rules_s"].get(name)
        ratio = f"{y / x:6.2f}" if x and y else ""
        print(f"  {name:32s} {x if x is not None else float('nan'):8.0f} {y if y is not None else float('nan'):8.0f} "
              f"{ratio}")


class Tolerance:
    """MAPEs (fractions in the JSON and CSV files, percentages in the report) allowed to move by
    ``points`` percentage points; the shifts seen within it."""

    def __init__(self, points: float = 0.0):
        self.points, self.shifts = points, []

    def allows(self, name: str, a, b, scale: float = 100.0) -> bool:
        if not self.points or "mape" not in name.lower():
            return False
        try:
            shift = abs(float(a) - float(b)) * scale
        except (TypeError, ValueError):
            return False
        if shift <= self.points:
            self.shifts.append((shift, name))
            return True
        return False


PERCENT = re.compile(r"^-?\d+(?:\.\d+)?%$")


def _walk(a, b, where: str, roots: tuple[str, str], out: list[str], tol: Tolerance | None = None) -> None:
    tol = tol or Tolerance()
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if VOLATILE_KEY.search(str(key)):
                continue
            if key not in a or key not in b:
                out.append(f"{where}.{key}: only in {'after' if key in b else 'before'}")
            else:
                _walk(a[key], b[key], f"{where}.{key}", roots, out, tol)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items before, {len(b)} after")
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{where}[{i}]", roots, out, tol)
    else:
        if isinstance(a, str) and isinstance(b, str):
            a, b = HEX32.sub("<id>", a.replace(roots[0], "<root>")), HEX32.sub("<id>", b.replace(roots[1], "<root>"))
        if a != b and not (isinstance(a, float) and isinstance(b, float) and tol.allows(where, a, b)):
            out.append(f"{where}: {a!r} before, {b!r} after")


def _csv(path: Path) -> list[list[str]]:
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return rows
    keep = [i for i, name in enumerate(rows[0]) if not VOLATILE_COLUMN.search(name)]
    return [[row[i] for i in keep if i < len(row)] for row in rows]


def _cells(report: Path) -> list[str]:
    text = report.read_text(errors="replace")
    cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", text, flags=re.S)
    return [HEX32.sub("<id>", html.unescape(re.sub(r"<[^>]+>", "", c)).strip()) for c in cells]


def _csv_diffs(name, a: list[list[str]], b: list[list[str]], tol: Tolerance) -> bool:
    """True when the tables differ beyond ``tol`` (the same shape, cells equal or MAPEs within it)."""
    if len(a) != len(b) or (a and a[0] != b[0]):
        return True
    head = a[0] if a else []
    for x, y in zip(a[1:], b[1:]):
        if len(x) != len(y):
            return True
        for col, u, v in zip(head, x, y):
            if u != v and not tol.allows(f"{name}:{col}", u, v):
                return True
    return False


def compare(before: Path, after: Path, tol: Tolerance | None = None) -> list[str]:
    tol = tol or Tolerance()
    diffs: list[str] = []
    roots = (str(before.parent), str(after.parent))
    if (before / "summary.txt").read_text() != (after / "summary.txt").read_text():
        diffs.append("summary.txt differs")
    for name in sorted({p.relative_to(before) for p in before.glob("analyses/*/summary.json")}
                       | {p.relative_to(after) for p in after.glob("analyses/*/summary.json")}):
        if not (before / name).exists() or not (after / name).exists():
            diffs.append(f"{name}: only {'after' if (after / name).exists() else 'before'}")
            continue
        _walk(json.loads((before / name).read_text()), json.loads((after / name).read_text()), str(name), roots,
              diffs, tol)
    for name in sorted({p.relative_to(before) for p in before.glob("analyses/**/*.csv")}
                       | {p.relative_to(after) for p in after.glob("analyses/**/*.csv")}):
        if not (before / name).exists() or not (after / name).exists():
            diffs.append(f"{name}: only {'after' if (after / name).exists() else 'before'}")
        elif _csv_diffs(str(name), _csv(before / name), _csv(after / name), tol):
            diffs.append(f"{name}: cells differ")
    a, b = _cells(before / "report.html"), _cells(after / "report.html")
    changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y
               and not (PERCENT.match(x) and PERCENT.match(y) and tol.allows("report mape cell", x[:-1], y[:-1], 1.0))]
    if len(a) != len(b) or changed:
        diffs.append(f"report.html: {len(a)} table cells before, {len(b)} after; first differing cells: "
                     + "; ".join(f"{a[i]!r} -> {b[i]!r}" for i in changed[:5]))
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="git revision of the reference run")
    ap.add_argument("--after", help="git revision to compare (default: the working tree)")
    ap.add_argument("--results", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two finished results dirs")
    ap.add_argument("--keep", action="store_true", help="keep the two copies (their paths are printed)")
    ap.add_argument("--mape-points", type=float, default=0.0, metavar="P",
                    help="let MAPEs differ by up to P percentage points (a change to a model's settings)")
    a = ap.parse_args(argv)
    if a.results:
        before, after = map(Path, a.results)
    elif a.before:
        work = Path(tempfile.mkdtemp(prefix="compare-main-job-"))
        before = main_job(checkout(a.before, (work / "before")))
        after = main_job(checkout(a.after, (work / "after")))
        print_times(before, after)
    else:
        ap.error("give --before REV (and optionally --after REV) or --results BEFORE AFTER")
    tol = Tolerance(a.mape_points)
    diffs = compare(before, after, tol)
    for d in diffs:
        print("DIFF", d)
    if tol.shifts:
        largest = max(tol.shifts)
        print(f"{len(tol.shifts)} MAPEs moved within {a.mape_points} points, the largest {largest[0]:.2f} ({largest[1]})")
    print(f"{len(diffs)} differences between {before} and {after}")
    if a.before and not a.keep:
        shutil.rmtree(before.parent.parent, ignore_errors=True)
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
