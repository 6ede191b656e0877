"""Forecaster against the simulator's oracle on a MILC campaign as long as the study's: MAPE per
model, the attention model's ratio to the oracle, and training time per cell.

    .venv/bin/python benchmarks/bench_forecast.py                      # 150 days, seeds 0 and 1
    .venv/bin/python benchmarks/bench_forecast.py --days 30 --seeds 0 --set ensemble=1
    .venv/bin/python benchmarks/bench_forecast.py --feature-sets job+placement+io+sys --keep /tmp/bf

The demo machine with only the two MILC datasets (about 225 runs each over 150 days), the grid
cell m=10, k=20, and the paper's full feature set (job counters, placement, io, sys) with and
without the neighbours' presence. About 30 minutes per seed on one core. The issue's bar is
attention within 1.25x of the oracle's MAPE. Measured with the paper's set (--feature-sets
job+placement+io+sys), networks trained on every horizon: milc-128 1.239x (seed 0) and 1.149x
(seed 1), milc-512 1.179x and 1.178x.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

MILC = ("milc-128", "milc-512")
FEATURE_SETS = ("job+placement+io+sys", "job+placement+io+sys+neighbours")


def campaign(base: Path, days: int, seed: int) -> Path:
    """The demo machine's two MILC datasets over ``days`` (simulated and collated once, reused)."""
    from hpcvar.collate import collate
    from hpcvar.simulate import simulate
    from hpcvar.simulate.presets import get_preset
    from hpcvar.util.anonymise import Pseudonymiser

    d = base / f"milc-d{days}-s{seed}"
    if not (d / "dataset").exists():
        preset = get_preset("demo", {"days": days, "mpip_fraction": 0.02})
        preset = replace(preset, datasets=tuple(x for x in preset.datasets if x.name in MILC), extra_datasets=())
        simulate(preset, seed, d / "raw", progress=False)
        collate(d / "raw", d / "dataset", Pseudonymiser(b"bench"))
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=150)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="forecast setting, e.g. --set ensemble=1 --set hidden=64")
    ap.add_argument("--feature-sets", nargs="+", default=list(FEATURE_SETS), metavar="SET")
    ap.add_argument("--datasets", nargs="+", default=list(MILC), choices=MILC)
    ap.add_argument("--keep", help="keep (and reuse) the campaigns under this directory")
    a = ap.parse_args()
    from hpcvar.analyses import forecast

    settings = {k: json.loads(v) for k, v in (s.split("=", 1) for s in a.set)}
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-forecast-"))
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    print(f"{'seed':>4} {'dataset':<9} {'features':<32} {'runs':>5} {'oracle':>7} {'attention':>9} {'ratio':>6} "
          f"{'lightgbm':>8} {'persist':>7} {'train_s':>8}")
    for seed in a.seeds:
        t0 = time.perf_counter()
        d = campaign(base, a.days, seed)
        made = time.perf_counter() - t0
        os.chdir(d)
        summary = forecast.run(d / "dataset", d / "forecast", {
            "datasets": a.datasets, "grid": {"milc": {"m": [10], "k": [20]}}, "seed": seed,
            "feature_sets": a.feature_sets, **settings}, truth=d / "raw" / "truth.json")
        for name in a.datasets:
            d_ = summary.datasets[name]
            grid = pd.DataFrame([r.model_dump() for r in d_.grid])
            for fs, g in grid.groupby("feature_set", sort=False):
                g = g.set_index("model")
                print(f"{seed:>4} {name:<9} {fs:<32} {d_.runs:>5} "
                      f"{g.loc['oracle', 'mape']:>7.4f} {g.loc['attention', 'mape']:>9.4f} "
                      f"{g.loc['attention', 'mape'] / g.loc['oracle', 'mape']:>6.3f} {g.loc['lightgbm', 'mape']:>8.4f} "
                      f"{g.loc['persistence', 'mape']:>7.4f} {g.loc['attention', 'train_seconds']:>8.1f}", flush=True)
        print(f"     (simulate + collate {made:.0f} s; campaigns in {base})")


if __name__ == "__main__":
    main()
