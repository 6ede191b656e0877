"""Table I's codes across the testbed's groups, from a source mirror: per application and node
count, the groups its runs spanned, the runs ReFrame passed, the repetitions (time steps) they hold,
the median step time, and srun's reports of crashed tasks (docs/testbed.md, docs/benchmarks.md).

Needs the testbed up and a source mirror (reframe_tests/apps/build/fetch.sh --mirror DIR):

    sudo .venv/bin/hpcvar dev slurm up --nodes 6 --groups 2
    sudo HPCVAR_SOURCE_MIRROR=DIR .venv/bin/python benchmarks/bench_table1_testbed.py [--repeat 3]

Runs ReFrame's system ``testbed`` on the codes whose archives the mirror holds (a missing one is
named), toy-sized (or ``--size small``), at 2 and 4 nodes (``HPCVAR_RFM_NODES``), one job at a
time, with no retries; then imports and collates ReFrame's report as a campaign round does. A
crash report is srun's line for tasks that ended on a signal (``srun: error: n03: tasks 4-5:
Segmentation fault``) in a job's standard error: one per node where ranks crashed, in each
launch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
#: ReFrame test -> (the sources.yaml entry it builds from, its datasets' prefix).
TABLE_I = {"AMG2013": ("amg2013", "amg"), "AMG2023": ("amg2023", "amg2023"), "MILC": ("milc", "milc"),
           "MiniVite": ("minivite", "minivite"), "UMT": ("umt", "umt")}


#: srun's line for a task that ended on a signal, in the job's standard error: one per node and launch.
CRASH = re.compile(r"^srun: error: \S+: tasks? [\d,-]+: (Segmentation fault|Aborted|Bus error|Killed)", re.M)


def job_stderr(case: dict) -> str:
    """A test case's job's standard error, where srun reports a crashed task: a passed test's
    is kept in its output directory, a failed one's in its stage directory."""
    for where in ("outputdir", "stagedir"):
        path = Path(case.get(where) or "") / (case.get("job_stderr") or "rfm_job.err")
        if case.get(where) and path.is_file():
            return path.read_text(errors="replace")
    return ""


def in_mirror(mirror: Path) -> tuple[list[str], list[str]]:
    """The Table I tests whose archives (and their dependencies') the mirror holds, and the others."""
    sources = yaml.safe_load((REPO / "reframe_tests" / "apps" / "sources.yaml").read_text())
    have, missing = [], []
    for test, (entry, _) in TABLE_I.items():
        archives = [sources[entry]["mirror"], *(d["mirror"] for d in (sources[entry].get("deps") or {}).values())]
        (have if all((mirror / a).is_file() for a in archives) else missing).append(test)
    return have, missing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=1, help="ReFrame's --repeat: runs of each test and node count")
    p.add_argument("--nodes", default="2,4", help="HPCVAR_RFM_NODES (default 2,4)")
    p.add_argument("--size", default="toy", choices=("toy", "small"),
                   help="HPCVAR_RFM_SIZE (default toy; small: larger AMG and miniVite inputs)")
    p.add_argument("--tests", default=",".join(TABLE_I), help="which of Table I's tests (default: all)")
    p.add_argument("--work", type=Path, help="where ReFrame runs (default: a new directory under /var/tmp, "
                   "which every node sees)")
    a = p.parse_args()
    mirror = Path(os.environ.get("HPCVAR_SOURCE_MIRROR", "")).expanduser()
    if not os.environ.get("HPCVAR_SOURCE_MIRROR") or not mirror.is_dir():
        raise SystemExit("bench_table1_testbed: set HPCVAR_SOURCE_MIRROR to a filled source mirror")
    have, missing = in_mirror(mirror)
    wanted = [t.strip() for t in a.tests.split(",") if t.strip()]
    if unknown := sorted(set(wanted) - set(TABLE_I)):
        raise SystemExit(f"bench_table1_testbed: --tests {', '.join(unknown)}: not Table I's ({', '.join(TABLE_I)})")
    have, missing = [t for t in have if t in wanted], [t for t in missing if t in wanted]
    for test in missing:
        print(f"{test}: not in the mirror {mirror} (reframe_tests/apps/build/fetch.sh --mirror)", flush=True)
    if not have:
        return 1
    work = a.work or Path(tempfile.mkdtemp(prefix="hpcvar-table1-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    report = work / "report.json"
    env = {**os.environ, "SLURM_CONF": "/var/tmp/hpcvar-slurm/etc/slurm.conf", "HPCVAR_RFM_SIZE": a.size,
           "HPCVAR_RFM_NODES": a.nodes, "HPCVAR_OFFLINE": "1", "HPCVAR_RFM_PREFIX": str(work / "rfm"),
           "HPCVAR_BUILD_CACHE": os.environ.get("HPCVAR_BUILD_CACHE", str(work / "build-cache"))}
    cmd = [str(Path(sys.executable).with_name("reframe")), "-C", "config/reframe/settings.py", "--system", "testbed",
           "-c", "reframe_tests/apps", "-R", "-n", f"^({'|'.join(have)})([ _%]|$)", "--exec-policy=serial",
           "--repeat", str(a.repeat), "-S", "mpip=1", "--report-file", str(report), "-r"]
    print("$", " ".join(cmd), f"(in {work})", flush=True)
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=REPO, env=env, check=False)
    print(f"ReFrame: {time.monotonic() - t0:.0f} s", flush=True)
    if not report.exists():
        print("no ReFrame report", file=sys.stderr)
        return 1
    hp = [sys.executable, "-m", "hpcvar"]
    # The testbed's map (written by `up`), so that each run's groups are known.
    from hpcvar.dev import slurm as dev

    topology = dev.Layout(dev.state_dir()).topology_map
    subprocess.run([*hp, "import-reframe", str(report), "--raw", str(work / "raw"),
                    *(["--topology", str(topology)] if topology.is_file() else [])], check=True, env=env)
    subprocess.run([*hp, "collate", str(work / "raw"), "--out", str(work / "dataset")], check=True, env=env)
    from hpcvar.data.dataset import Dataset

    ds = Dataset(work / "dataset")
    runs, steps = ds.read("runs"), ds.read("steps")
    cases = [c for run in json.loads(report.read_text())["runs"] for c in run["testcases"] if not c.get("fixture")]
    print(f"\n{'test':10} {'nodes':>5} {'groups':>6} {'runs passed':>12} {'steps':>6} {'median step s':>14} "
          f"{'srun crash reports':>19}")
    failed = 0
    for test in have:
        for nodes in sorted({int(n) for n in a.nodes.split(",")}):
            mine = [c for c in cases if c["display_name"].split(" ")[0] == test
                    and f"%num_nodes={nodes}" in c["display_name"]]
            passed = [c for c in mine if c["result"] == "pass"]
            failed += len(mine) - len(passed)
            crashed = 0
            for c in mine:
                crashed += len(CRASH.findall(job_stderr(c)))
            these = runs[runs["dataset"] == f"{TABLE_I[test][1]}-{nodes}"]
            groups = ",".join(str(g) for g in sorted(these["num_groups"].dropna().unique())) or "-"
            durations = steps.loc[steps["run_id"].isin(these["run_id"]), "duration_s"]
            median = statistics.median(durations) if len(durations) else float("nan")
            print(f"{test:10} {nodes:>5} {groups:>6} {len(passed):>5} of {len(mine):<5} {len(durations):>6} "
                  f"{median:>14.3f} {crashed:>19}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
