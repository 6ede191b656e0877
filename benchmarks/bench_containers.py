"""Containers against bare metal: what building the images costs, how large they are, and whether a
test in an image measures what it measures bare metal.

    sudo .venv/bin/python benchmarks/bench_containers.py [--repetitions 5] [--systems local,testbed]

(as root: mmdebstrap and the testbed; with ``testbed`` in --systems, bring it up first:
``sudo .venv/bin/hpcvar dev slurm up --nodes 6 --groups 2``.)

Prints:

* the build, cold (a fresh store: the builder and both images) and cached (nothing changed), and
  each image's size (directory and single-file image);
* the start-up of the runtime alone: ``ch-run IMAGE -- true`` against ``true`` here, and under
  ``srun`` on 2 nodes of the testbed;
* per system and node count (``local``: 2 ranks; ``testbed``: 2 and 4 nodes, one rank each, half
  in each group) and per figure (the collectives' 64 KiB allreduce median, Overtime's latency and
  allreduce phases, the AMG proxy's mean step time): the median over repetitions bare metal and
  in the image and their ratio, sessions alternating bare metal and image so that drift hits
  both; and the run phase's median wall time either way (the start-up overhead, apart from the
  figures, which the programs time themselves).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
IMAGES = ("microbenchmarks", "amgproxy")
#: (test, performance variable) -> the figure's name in the table.
FIGURES = {("Collectives", "allreduce_65536B_median"): "allreduce 64 KiB median (us)",
           ("Overtime", "latency_median"): "Overtime latency phase (us)",
           ("Overtime", "allreduce_median"): "Overtime allreduce phase (us)",
           ("AMGProxy", "mean_step_time"): "AMG proxy mean step (s)"}
TESTBED_PLACEMENT = {2: "n01,n04", 4: "n01,n02,n04,n05"}


def run(cmd, env=None, check=True, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})}, **kw)
    if check and out.returncode != 0:
        raise SystemExit(f"bench_containers: {' '.join(map(str, cmd))} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return out


def build(store: Path) -> dict:
    t0 = time.monotonic()
    run([BIN / "hpcvar", "containers", "build", *IMAGES, "--store", str(store)])
    cold = time.monotonic() - t0
    t0 = time.monotonic()
    again = run([BIN / "hpcvar", "containers", "build", *IMAGES, "--store", str(store)])
    cached = time.monotonic() - t0
    assert "builder up to date" in again.stderr
    records = {n: json.loads((store / f"{n}.json").read_text()) for n in IMAGES}
    return {"cold_s": cold, "cached_s": cached, "records": records}


def startup(store: Path, slurm_env: dict | None, work: Path) -> list[tuple[str, float, float]]:
    """Median wall time of `true` bare and through ch-run, here and (with the testbed) under srun."""
    image = str(store / "microbenchmarks.sqfs")
    rows = []

    def median_of(cmd, env=None, n=7):
        times = []
        for _ in range(n):
            t0 = time.monotonic()
            subprocess.run(cmd, cwd=work, env={**os.environ, **(env or {})}, capture_output=True, check=True)
            times.append(time.monotonic() - t0)
        return statistics.median(times)

    rows.append(("here", median_of(["true"]), median_of(["ch-run", image, "--", "true"])))
    if slurm_env:
        srun = ["srun", "-N2", "-w", "n01,n04", "--mpi=pmix"]
        rows.append(("srun, 2 testbed nodes", median_of([*srun, "true"], slurm_env),
                     median_of([*srun, "ch-run", image, "--", "true"], {**slurm_env, "PMIX_MCA_gds": "hash"})))
    return rows


def session(system: str, prefix: Path, image: bool, store: Path, env: dict, nodes: int | None) -> list[dict]:
    report = prefix / "report.json"
    cmd = [BIN / "reframe", "-C", "config/reframe/settings.py", "--system", system, "-c", "reframe_tests", "-R",
           "-n", "^Collectives", "-n", "^Overtime", "-n", "^AMGProxy", "-S", "Collectives.sizes=65536",
           "-S", "Collectives.collectives=allreduce", "-S", "Collectives.iterations=100", "-S", "Overtime.cycles=1",
           # One job at a time: the nodes share this machine's two cores.
           "--exec-policy=serial", "--report-file", str(report)]
    if image:
        cmd += ["-S", "image=auto"]
    if nodes:
        cmd += ["-S", "tasks_per_node=1", "-S", "exclusive_access=false", "-J", f"nodelist={TESTBED_PLACEMENT[nodes]}"]
    full = {"HPCVAR_RFM_PREFIX": str(prefix), "HPCVAR_RFM_SIZE": "toy", "HPCVAR_OFFLINE": "1",
            "HPCVAR_IMAGES": str(store), "USER": os.environ.get("USER") or "root", **env}
    if nodes:
        full["HPCVAR_RFM_NODES"] = f"amgproxy:{nodes};microbenchmarks:{nodes}"
    out = run([*cmd, "-r"], env=full, check=False, timeout=1800)
    if not report.exists():
        raise SystemExit(f"bench_containers: ReFrame wrote no report:\n{out.stdout[-3000:]}")
    cases = [c for r in json.loads(report.read_text())["runs"] for c in r["testcases"] if c.get("dataset")]
    for c in cases:
        if c["result"] != "pass":  # counted, left out of the medians, and said
            print(f"bench_containers: {prefix.name}: {c['display_name']} failed in {c.get('fail_phase')}: "
                  f"{str(c.get('fail_reason'))[:300]} (stage {c.get('stagedir')})", file=sys.stderr)
    return cases


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repetitions", type=int, default=5, help="sessions each way per system and node count")
    p.add_argument("--systems", default="local,testbed", help="local, testbed or both (default both)")
    p.add_argument("--nodes", default="2,4", help="testbed node counts (default 2,4)")
    p.add_argument("--store", help="an image store to reuse (built or brought up to date first; default: a new one)")
    a = p.parse_args()
    systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    os.environ.setdefault("USER", "root")
    slurm_env = None
    if "testbed" in systems:
        from hpcvar.dev import slurm, testbed

        layout = slurm.Layout(slurm.state_dir())
        spec = testbed.load_spec(layout.root)
        if spec is None or not testbed.is_built(spec):
            raise SystemExit("bench_containers: no testbed is up: sudo .venv/bin/hpcvar dev slurm up --nodes 6 "
                             "--groups 2")
        slurm_env = slurm.slurm_env(layout)
    work = Path(tempfile.mkdtemp(prefix="hpcvar-bench-containers-", dir="/var/tmp"))
    store = Path(a.store).resolve() if a.store else work / "images"
    print(f"bench_containers: {work}", file=sys.stderr)
    built = build(store)
    print(f"build: cold {built['cold_s']:.0f} s (the builder and {len(IMAGES)} images), cached "
          f"{built['cached_s']:.0f} s")
    for name, rec in built["records"].items():
        print(f"  {name:<16} {rec['squashfs_bytes'] / 1e6:6.0f} MB single-file, {rec['directory_bytes'] / 1e6:6.0f} MB "
              f"directory, {len(rec['packages'])} packages, image stage {rec['build_s']:.0f} s")
    print("\nstart-up of the runtime alone (median of 7):")
    for where, bare, chrun in startup(store, slurm_env, work):
        print(f"  {where:<24} bare {bare * 1e3:7.1f} ms   ch-run {chrun * 1e3:7.1f} ms   (+{(chrun - bare) * 1e3:.0f} ms)")

    cases = ([("local", None, {})] if "local" in systems else []) + (
        [("testbed", int(n), slurm_env) for n in a.nodes.split(",")] if slurm_env else [])
    print(f"\nper figure: median over {a.repetitions} sessions each way, container / bare metal")
    print(f"  {'system':<10} {'nodes':>5}  {'figure':<30} {'bare':>10} {'image':>10} {'ratio':>6}")
    for system, nodes, env in cases:
        values = {True: {}, False: {}}
        walls = {True: {}, False: {}}
        failed = {True: 0, False: 0}
        for rep in range(a.repetitions):
            for image in (False, True):  # alternating: drift hits both
                prefix = work / f"{system}-{nodes or 2}-{'image' if image else 'bare'}-{rep}"
                for c in session(system, prefix, image, store, env, nodes):
                    test = c["display_name"].split()[0]
                    if c["result"] != "pass":
                        failed[image] += 1
                        continue
                    walls[image].setdefault(test, []).append(c["time_run"])
                    # perfvalues: {"<system>:<partition>:<variable>": [value, reference, ...]}
                    for name, perf in (c.get("perfvalues") or {}).items():
                        key = (test, name.rsplit(":", 1)[-1])
                        if key in FIGURES:
                            values[image].setdefault(key, []).append(float(perf[0]))
        for key, label in FIGURES.items():
            bare, img = values[False].get(key), values[True].get(key)
            if not bare or not img:
                continue
            b, i = statistics.median(bare), statistics.median(img)
            print(f"  {system:<10} {nodes or 1:>5}  {label:<30} {b:10.4g} {i:10.4g} {i / b:6.3f}")
        if failed[False] or failed[True]:
            print(f"  {system:<10} {nodes or 1:>5}  failed test cases (left out): bare {failed[False]}, image "
                  f"{failed[True]}")
        for test in sorted(walls[False]):
            b, i = statistics.median(walls[False][test]), statistics.median(walls[True].get(test, [float("nan")]))
            print(f"  {system:<10} {nodes or 1:>5}  {'run phase, ' + test + ' (s)':<30} {b:10.3f} {i:10.3f} "
                  f"{i - b:+6.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
