"""How often `hpcvar explain` names the cause the simulator planted, per dataset.

Simulates a campaign (default: the paper preset, 30 days, a seed the explanation was not tuned
on), collates it, runs the neighbourhood and deviation analyses and `hpcvar explain` over every
run, and compares, for the runs at least 20% slower than their dataset's median, the top cause
explain names with the dominant planted cause (``truth_runs.parquet``: the cause that added the
most seconds; for the culprits, the user who added the most). A hit is the same category and,
for neighbours, the same user. Prints the hit rate per dataset, the confusion between
categories, and the wall time of each stage.

    .venv/bin/python benchmarks/bench_explain.py [--preset paper] [--seed 7] [--days 30] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from hpcvar.analyses import deviation, explain, neighbourhood
from hpcvar.collate import collate
from hpcvar.simulate import simulate
from hpcvar.simulate.truth import TRUTH_RUNS, score_explanations
from hpcvar.util.anonymise import Pseudonymiser

SALT = b"bench-explain"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--keep", type=Path, help="work here and keep the files (default: a temporary directory)")
    a = ap.parse_args(argv)
    work = a.keep or Path(tempfile.mkdtemp(prefix="bench-explain-"))
    times = {}
    t0 = time.perf_counter()
    simulate(a.preset, seed=a.seed, out=work / "raw", overrides={"days": a.days}, progress=False)
    times["simulate"] = time.perf_counter() - t0
    pseudo = Pseudonymiser(SALT)
    t0 = time.perf_counter()
    collate(work / "raw", work / "dataset", pseudo)
    times["collate"] = time.perf_counter() - t0
    for name, mod in (("neighbourhood", neighbourhood), ("deviation", deviation)):
        t0 = time.perf_counter()
        mod.run(work / "dataset", work / "analyses" / name)
        times[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = explain.run(work / "dataset", work / "analyses" / "explain", analyses_dir=work / "analyses")
    times["explain (every run)"] = time.perf_counter() - t0
    tables = {name: pd.read_csv(work / "analyses" / "explain" / d.runs_table(name), dtype={"top_user": str})
              for name, d in res.datasets.items()}
    truth_runs = pd.read_parquet(work / "raw" / TRUTH_RUNS)
    table, confusion = score_explanations(truth_runs, tables, pseudo)
    print(f"# {a.preset} preset, seed {a.seed}, {a.days} days: runs >= 20% slower than their dataset's median")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    total = table["slow_runs"].sum()
    print(f"all: {table['hits'].sum()} of {total} ({table['hits'].sum() / max(total, 1):.1%})")
    print("\n# planted (rows) vs named (columns)")
    print(confusion.to_string())
    print("\n# wall time")
    for k, v in times.items():
        print(f"{k:22s} {v:7.1f} s")
    if not a.keep:
        print(f"(work directory {work}: remove it, or pass --keep to choose one)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
