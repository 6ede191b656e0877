"""Where collation's time and memory go: ``collate()`` on a raw campaign directory, with the
parent process's resident size and peak printed before and after the LDMS pass and at the end.

    python benchmarks/bench_collate_memory.py RAW_DIR            # the runs read by 2 processes
    python benchmarks/bench_collate_memory.py RAW_DIR --workers 1

RAW_DIR is what ``hpcvar simulate --out RAW_DIR`` writes (``--preset paper``, or ``--set days=60``
for 4x the demo campaign), or any campaign's raw directory. The dataset goes to a temporary
directory, removed at the end. Peak figures are the parent's (``ru_maxrss``); the worker processes
that read the runs' files are not in them.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import hpcvar.collate as collate_mod
from hpcvar.util.anonymise import Pseudonymiser


def resident_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 1e6


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("--workers", type=int, default=2, help="processes reading the runs' files (default 2)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows: list[tuple[str, float, float, float]] = []

    def mark(what: str) -> None:
        rows.append((what, time.perf_counter() - t0, resident_mb(), peak_mb()))

    real = collate_mod.system_counters

    def system_counters(*a, **k):
        mark("LDMS pass starts")
        out = real(*a, **k)
        mark("LDMS pass ends")
        return out

    collate_mod.system_counters = system_counters
    with tempfile.TemporaryDirectory() as out:
        result = collate_mod.collate(args.raw, Path(out) / "dataset", Pseudonymiser(b"bench"), workers=args.workers)
        mark("collated")
    print(f"{args.raw}: {len(result.new_runs)} runs collated, {args.workers} processes reading runs")
    print(f"{'':<18} {'seconds':>8} {'resident MB':>12} {'peak MB':>8}")
    for what, seconds, resident, peak in rows:
        print(f"{what:<18} {seconds:8.1f} {resident:12.0f} {peak:8.0f}")


if __name__ == "__main__":
    main()
