"""Simulator (and optionally collation) cost per preset: wall time and peak memory.

    .venv/bin/python benchmarks/bench_simulate.py                 # demo and paper
    .venv/bin/python benchmarks/bench_simulate.py --preset paper --collate
    .venv/bin/python benchmarks/bench_simulate.py --preset paper --days 30 --collate   # the tests' paper fixture

Each phase runs in a fresh process so its peak RSS is its own. Prints one line per phase.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

PHASE = r"""
import json, resource, sys, time
from pathlib import Path
phase, preset, raw, ds, days = sys.argv[1:6]
t = time.perf_counter()
if phase == "simulate":
    from hpcvar.simulate import simulate
    truth = simulate(preset, seed=0, out=raw, overrides={"days": int(days)} if days else None, progress=False)
    n = sum(d["runs"] for d in truth["datasets"].values())
else:
    from hpcvar.collate import collate
    from hpcvar.util.anonymise import Pseudonymiser
    n = len(collate(raw, ds, Pseudonymiser(b"bench")).new_runs)
print(json.dumps({"runs": n, "seconds": time.perf_counter() - t,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def du_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", action="append", choices=["demo", "paper"])
    ap.add_argument("--collate", action="store_true", help="also time collation of the simulated files")
    ap.add_argument("--days", type=int, help="simulate this many days instead of the preset's")
    ap.add_argument("--keep", type=Path, help="write the raw files here instead of a temporary directory")
    args = ap.parse_args()
    for preset in args.preset or ["demo", "paper"]:
        with tempfile.TemporaryDirectory() as tmp:
            base = args.keep or Path(tmp)
            raw, ds = base / f"raw-{preset}", base / f"dataset-{preset}"
            for phase in ["simulate"] + (["collate"] if args.collate else []):
                out = subprocess.run([sys.executable, "-c", PHASE, phase, preset, str(raw), str(ds),
                                      str(args.days or "")],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                size = du_mb(raw if phase == "simulate" else ds)
                print(f"{phase:8s} preset={preset:5s} runs={r['runs']:5d}  {r['seconds']:7.1f} s  "
                      f"peak RSS {r['peak_rss_mb']:7.0f} MB  output {size:8.1f} MB", flush=True)


if __name__ == "__main__":
    main()
