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
job's wall time and job count are printed as it ends.

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


def main_job(tree: Path) -> Path:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "HPCVAR_SALT": SALT}
    env.pop("MLFLOW_TRACKING_URI", None)
    snakemake = Path(sys.executable).with_name("snakemake")
    print(f"main job in {tree} ...", flush=True)
    t0 = time.perf_counter()
    out = subprocess.run([str(snakemake), "--cores", "2"], cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the main job failed in {tree}:\n{out.stderr[-3000:]}")
    done = re.findall(r"(\d+) of (\d+) steps \(100%\) done", out.stderr)
    print(f"  {time.perf_counter() - t0:.0f} s wall, {done[-1][1] if done else '?'} jobs", flush=True)
    return tree / "results"


def _walk(a, b, where: str, roots: tuple[str, str], out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if VOLATILE_KEY.search(str(key)):
                continue
            if key not in a or key not in b:
                out.append(f"{where}.{key}: only in {'after' if key in b else 'before'}")
            else:
                _walk(a[key], b[key], f"{where}.{key}", roots, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: {len(a)} items before, {len(b)} after")
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{where}[{i}]", roots, out)
    else:
        if isinstance(a, str) and isinstance(b, str):
            a, b = HEX32.sub("<id>", a.replace(roots[0], "<root>")), HEX32.sub("<id>", b.replace(roots[1], "<root>"))
        if a != b:
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


def compare(before: Path, after: Path) -> list[str]:
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
              diffs)
    for name in sorted({p.relative_to(before) for p in before.glob("analyses/**/*.csv")}
                       | {p.relative_to(after) for p in after.glob("analyses/**/*.csv")}):
        if not (before / name).exists() or not (after / name).exists():
            diffs.append(f"{name}: only {'after' if (after / name).exists() else 'before'}")
        elif _csv(before / name) != _csv(after / name):
            diffs.append(f"{name}: cells differ")
    a, b = _cells(before / "report.html"), _cells(after / "report.html")
    if a != b:
        changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        diffs.append(f"report.html: {len(a)} table cells before, {len(b)} after; first differing cells: "
                     + "; ".join(f"{a[i]!r} -> {b[i]!r}" for i in changed[:5]))
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="git revision of the reference run")
    ap.add_argument("--after", help="git revision to compare (default: the working tree)")
    ap.add_argument("--results", nargs=2, metavar=("BEFORE", "AFTER"), help="compare two finished results dirs")
    ap.add_argument("--keep", action="store_true", help="keep the two copies (their paths are printed)")
    a = ap.parse_args(argv)
    if a.results:
        before, after = map(Path, a.results)
    elif a.before:
        work = Path(tempfile.mkdtemp(prefix="compare-main-job-"))
        before = main_job(checkout(a.before, (work / "before")))
        after = main_job(checkout(a.after, (work / "after")))
    else:
        ap.error("give --before REV (and optionally --after REV) or --results BEFORE AFTER")
    diffs = compare(before, after)
    for d in diffs:
        print("DIFF", d)
    print(f"{len(diffs)} differences between {before} and {after}")
    if a.before and not a.keep:
        shutil.rmtree(before.parent.parent, ignore_errors=True)
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
