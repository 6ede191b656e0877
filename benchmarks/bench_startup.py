"""How long the command line takes to start: ``hpcvar --help`` and ``hpcvar inspect`` of two real
sample files (an sacct log and an mpiP report, from ``../shared/samples`` or ``HPCVAR_SAMPLES``),
here and, with ``--baseline``, in another checkout (its own ``.venv``), measured alternately in one
run: the median wall time of each and their ratio (issue 35's goal: at most 0.4x of 1975633's).

    .venv/bin/python benchmarks/bench_startup.py --baseline /path/to/a/clone/of/1975633 [--repeat 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = Path(os.environ.get("HPCVAR_SAMPLES") or REPO.parent / "shared" / "samples")
COMMANDS = {
    "hpcvar --help": ["--help"],
    "hpcvar inspect (sacct log)": ["inspect", SAMPLES / "slurm" / "sacct" / "sacct_P_26fields_simple.log"],
    "hpcvar inspect (mpiP report)": ["inspect", SAMPLES / "mpiP" / "mpiP-3.4.1_cori_milc_su3_rmd.128.16720.1.mpiP"],
}


def wall(hpcvar: Path, args: list) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([str(hpcvar), *map(str, args)], capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{hpcvar} {' '.join(map(str, args))}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, help="another checkout with its .venv (e.g. a clone of 1975633)")
    ap.add_argument("--repeat", type=int, default=9, help="runs of each command per tree (default 9)")
    a = ap.parse_args(argv)
    trees = {"this tree": REPO}
    if a.baseline:
        trees = {"baseline": a.baseline.resolve(), **trees}
    for path in (p for args in COMMANDS.values() for p in args[1:]):
        if not Path(path).is_file():
            raise SystemExit(f"bench_startup: {path}: not found (set HPCVAR_SAMPLES)")
    times = {(t, c): [] for t in trees for c in COMMANDS}
    for tree, root in trees.items():  # once each, unmeasured: compiled byte code and a warm page cache
        for args in COMMANDS.values():
            wall(root / ".venv" / "bin" / "hpcvar", args)
    for _ in range(a.repeat):
        for command, args in COMMANDS.items():
            for tree, root in trees.items():
                times[tree, command].append(wall(root / ".venv" / "bin" / "hpcvar", args))
    head = "".join(f" {t + ' (s)':>16}" for t in trees) + (f" {'ratio':>7}" if a.baseline else "")
    print(f"# medians of {a.repeat}, alternating; {', '.join(f'{t}: {r}' for t, r in trees.items())}")
    print(f"{'command':30}{head}")
    for command in COMMANDS:
        med = [statistics.median(times[t, command]) for t in trees]
        ratio = f" {med[-1] / med[0]:>6.2f}x" if a.baseline else ""
        print(f"{command:30}" + "".join(f" {m:>16.3f}" for m in med) + ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
