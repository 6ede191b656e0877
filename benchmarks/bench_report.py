"""Report size and build time for a finished main job (the issue's bound: < 20 MB on `paper`).

    .venv/bin/snakemake --cores 2 --config results=results-paper ...   # a run of the preset first
    .venv/bin/python benchmarks/bench_report.py results-paper

Rebuilds the report from RESULTS/dataset and RESULTS/analyses into a temporary directory and
prints its size, figure count and build time. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from hpcvar.report import build
from hpcvar.util.anonymise import Pseudonymiser


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="results directory of a finished main job")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        r = build(a.results / "dataset", Path(tmp) / "report.html", analyses_dir=a.results / "analyses",
                  figures_dir=Path(tmp) / "figures", pseudo=Pseudonymiser(b"bench"))
        seconds = time.perf_counter() - t
    runs = len(__import__("pandas").read_parquet(a.results / "dataset" / "runs"))
    figures = sum(len(s["figures"]) for s in r["sections"].values())
    print(f"report of {a.results} ({runs} runs): {r['bytes'] / 1e6:.1f} MB, {figures} figures, built in {seconds:.1f} s")


if __name__ == "__main__":
    main()
