"""A victim across the testbed's groups: alone, beside another user's traffic sharing its global
link, beside the same traffic inside one group, and beside CPU hogs only; with the global link's
counters of each case (docs/testbed.md).

Needs the testbed up (as root):

    sudo .venv/bin/hpcvar dev slurm up --nodes 6 --groups 2
    sudo .venv/bin/python benchmarks/bench_testbed.py [--repetitions 5] [--iterations 40]

Prints one line per case: the victim's median and p90 per-iteration time (2-rank 256 KiB
allreduce, n01 <-> n04) over the repetitions' medians, and per case the medians of what the
global link r0 -> r1 counted during the victim's run: bytes, overlimits, mean backlog.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
try:
    from hpcvar.dev import probe, slurm, testbed
except ImportError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(REPO / "src"))
    from hpcvar.dev import probe, slurm, testbed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--user", default="hpcvar-aggressor", help="the other user (the second user of `up`)")
    a = p.parse_args()
    layout = slurm.Layout(slurm.state_dir())
    spec = testbed.load_spec(layout.root)
    if spec is None or not testbed.is_built(spec):
        raise SystemExit("bench_testbed: no testbed is up: sudo .venv/bin/hpcvar dev slurm up --nodes 6 --groups 2")
    work = Path("/var/tmp") / f"hpcvar-bench-testbed-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    table = probe.measure(spec, layout.root, work, slurm.slurm_env(layout), a.user, a.repetitions, a.iterations,
                          progress=lambda m: print(m, file=sys.stderr, flush=True))
    seconds = time.monotonic() - t0
    # B*ms over the us with a queue: the mean backlog while there was one, in kB
    table["gl_mean_backlog_kb"] = table["gl_backlog_bms"] / table["gl_queued_us"].clip(lower=1)
    per = table.groupby("background", sort=False).agg(
        median_ms=("median_ms", "median"), p90_ms=("p90_ms", "median"), runs=("median_ms", "size"),
        gl_mb=("gl_tx_bytes", lambda s: s.median() / 1e6), gl_overlimits=("gl_overlimits", "median"),
        gl_backlog_kb=("gl_mean_backlog_kb", "median"), gl_drops=("gl_drops", "sum"))
    alone = per.loc["alone", "median_ms"]
    per["vs_alone"] = per["median_ms"] / alone
    print(f"testbed: {spec.nodes} nodes, {spec.groups} groups, global links {spec.global_rate}, node links "
          f"{spec.node_rate}; victim {probe.Placement.of(spec).victim}, {a.iterations} iterations x "
          f"{a.repetitions} repetitions; {seconds:.0f} s")
    print(per.round(2).to_string())
    print("\nper repetition:")
    print(table.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
