"""Throughput and memory of the LDMS store_csv reader against a plain ``pyarrow.csv.read_csv``.

Writes a system-wide router-counter store with :class:`hpcvar.parsers.ldms.StoreCsvWriter`
(producers interleaved in random order within each sampling step, as an aggregator stores them),
then times, each in a fresh process so that peak RSS belongs to that phase alone:

  (a) ``pyarrow.csv.read_csv`` of the whole file (the reference),
  (b) ``ldms.iter_chunks`` consumed fully,
  (c) ``ldms.iter_deltas`` consumed fully,

and prints rows/s, MB/s, the ratio to (a) and the peak RSS of each phase. The phases take turns,
``--repeat`` rounds of the three (default 5), and the medians are printed: a phase run once, or
always first, is at the mercy of the page cache and the machine's other work (one read_csv here
took 0.6 s or 1.8 s in turn).

    python benchmarks/bench_ldms.py                 # ~2e6 rows
    python benchmarks/bench_ldms.py --rows 200000   # quick check
    python benchmarks/bench_ldms.py --gb 3          # multi-GB file
    python benchmarks/bench_ldms.py --path store.csv  # reuse (or create) this file
    python benchmarks/bench_ldms.py --repeat 9      # more rounds
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    from hpcvar.parsers import ldms
except ImportError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from hpcvar.parsers import ldms

# Real Aries router counter names (AriesNCL counter list, tile 0_0).
METRICS = [f"AR_RTR_0_0_INQ_PRF_INCOMING_FLIT_VC{vc}" for vc in range(8)] + [
    "AR_RTR_0_0_INQ_PRF_ROWBUS_STALL_CNT", "AR_RTR_0_0_INQ_PRF_ROWBUS_2X_USAGE_CNT",
    "AR_RTR_0_0_INQ_PRF_PKT_TO_DEAD_LINK_CNT", "AR_RTR_0_0_INQ_PRF_MATCH_FLIT_3_TO_0_FILTERING_CNT"]
STEPS_PER_WRITE = 100


def generate(path: Path, rows: int | None, gigabytes: float | None, producers: int, seed: int = 1) -> int:
    """Write the store; returns the number of data rows."""
    rng = np.random.default_rng(seed)
    names = np.array([f"nid{i:05d}" for i in range(producers)], dtype=object)
    counters = rng.integers(0, 2**40, size=(producers, len(METRICS)), dtype=np.uint64)
    target_bytes = gigabytes * 1e9 if gigabytes else None
    written, step, t0 = 0, 0, 1_466_700_000.0
    with ldms.StoreCsvWriter(path, METRICS) as writer:
        while (written < rows) if target_bytes is None else (path.stat().st_size < target_bytes):
            order, times, values = [], [], []
            for _ in range(STEPS_PER_WRITE):
                perm = rng.permutation(producers)
                counters += rng.integers(0, 10**6, size=counters.shape, dtype=np.uint64)
                order.append(perm)
                times.append(t0 + step + np.sort(rng.uniform(0, 0.01, producers)))
                values.append(counters[perm])
                step += 1
            order_all = np.concatenate(order)
            writer.write_rows(np.concatenate(times), names[order_all], order_all, 0, np.concatenate(values))
            written += len(order_all)
    return written


def run_phase(phase: str, path: Path, chunk_rows: int) -> dict:
    start = time.perf_counter()
    if phase == "arrow":
        import pyarrow.csv as pacsv

        rows = pacsv.read_csv(path).num_rows
    elif phase == "chunks":
        rows = sum(len(frame) for frame in ldms.iter_chunks(path, chunk_rows=chunk_rows))
    else:
        stats = ldms.DeltaStats()
        sum(len(frame) for frame in ldms.iter_deltas(path, chunk_rows=chunk_rows, stats=stats))
        rows = stats.samples
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"phase": phase, "seconds": seconds, "rows": rows, "peak_rss_mb": peak_mb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="data rows to generate")
    parser.add_argument("--gb", type=float, help="generate a file of about this many GB instead")
    parser.add_argument("--path", type=Path, help="store file to reuse (generated there if missing)")
    parser.add_argument("--producers", type=int, default=512)
    parser.add_argument("--chunk-rows", type=int, default=ldms.CHUNK_ROWS)
    parser.add_argument("--repeat", type=int, default=5, help="rounds of the three phases, taking turns (default 5)")
    parser.add_argument("--phase", choices=["arrow", "chunks", "deltas"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")

    if args.phase:
        print(json.dumps(run_phase(args.phase, args.path, args.chunk_rows)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or Path(tmp) / "router.csv"
        if not path.exists():
            start = time.perf_counter()
            rows = generate(path, args.rows, args.gb, args.producers)
            print(f"generated {rows} rows, {path.stat().st_size / 1e6:.1f} MB in "
                  f"{time.perf_counter() - start:.1f} s: {path}")
        report(path, args.chunk_rows, args.repeat)


def report(path: Path, chunk_rows: int, repeat: int) -> None:
    size_mb = path.stat().st_size / 1e6
    phases = ("arrow", "chunks", "deltas")
    runs: dict[str, list[dict]] = {phase: [] for phase in phases}
    for _ in range(repeat):
        for phase in phases:
            out = subprocess.run([sys.executable, __file__, "--phase", phase, "--path", str(path),
                                  "--chunk-rows", str(chunk_rows)], check=True, capture_output=True, text=True)
            runs[phase].append(json.loads(out.stdout))
    seconds = {phase: statistics.median(r["seconds"] for r in runs[phase]) for phase in phases}
    rows = runs["arrow"][0]["rows"]
    print(f"file {size_mb:.1f} MB, {rows} rows, chunk_rows={chunk_rows}; "
          f"medians of {repeat} rounds, phases taking turns")
    print(f"{'phase':<8}{'seconds':>9}{'min-max':>13}{'rows/s':>13}{'MB/s':>9}{'vs (a)':>8}{'peak RSS MB':>13}")
    for phase in phases:
        times = [r["seconds"] for r in runs[phase]]
        peak = max(r["peak_rss_mb"] for r in runs[phase])
        print(f"{phase:<8}{seconds[phase]:>9.2f}{f'{min(times):.2f}-{max(times):.2f}':>13}"
              f"{rows / seconds[phase]:>13,.0f}{size_mb / seconds[phase]:>9.1f}"
              f"{seconds['arrow'] / seconds[phase]:>8.2f}{peak:>13.0f}")


if __name__ == "__main__":
    main()
