"""What each part of the forecaster costs: ``hpcvar forecast`` as the main job runs it, and the same
with parts of its work left out, each in a fresh process on a fresh MLflow store, in turns:

  as it is        the main job's forecast
  no LightGBM     without the grid's LightGBM fits (both learners, every cell, feature set, fold)
  no MLflow       without logging to MLflow (the runs, the models, the artifacts)
  neither         without both: the attention networks, importance, final models and figures

A variant that leaves work out is a measurement, not a forecast: its summary lacks what it left
out. The medians show how far leaving out a part would take the forecaster, e.g. whether any
LightGBM setting could bring it to a given time (issue 35's goal: a quarter of 1975633's).

    .venv/bin/snakemake --cores 2                                 # the main job, once
    .venv/bin/python benchmarks/bench_forecast_floor.py results    # [--repeat 3] [--workers 2]

RESULTS is a main job's results directory: its ``dataset``, ``raw/truth.json`` and the effective
configuration ``config.yaml`` (whose ``analyses: forecast:`` settings are used, as the workflow
passes them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

#: Run in the child before ``hpcvar.cli.main``: what the variant leaves out.
BOOTSTRAP = """
import sys
leave_out = set(sys.argv[1].split(",")) - {""}
if "lightgbm" in leave_out:
    import hpcvar.analyses.forecast.grid as grid
    grid.TRAINERS = {}
if "mlflow" in leave_out:
    from hpcvar.analyses.forecast import outputs
    from hpcvar.results.forecast import DatasetRun
    outputs.log_dataset = lambda res, experiment_id, *rest: DatasetRun(experiment_id=experiment_id,
                                                                       run_id="0" * 32)
from hpcvar.cli import main
sys.exit(main(sys.argv[2:]))
"""

VARIANTS = {"as it is": "", "no LightGBM": "lightgbm", "no MLflow": "mlflow", "neither": "lightgbm,mlflow"}


def forecast_command(results: Path, out: Path, workers: int) -> list[str]:
    """``hpcvar forecast`` with the main job's settings (its effective config.yaml)."""
    config = yaml.safe_load((results / "config.yaml").read_text())
    forecast = (config.get("analyses") or {}).get("forecast") if isinstance(config, dict) else None
    if not isinstance(forecast, dict):
        raise SystemExit(f"bench_forecast_floor: {results / 'config.yaml'}: no 'analyses: forecast:' settings "
                         "(the effective configuration a main job writes)")
    settings = {**forecast, "workers": workers}
    return ["forecast", str(results / "dataset"), "--out", str(out), "--truth", str(results / "raw" / "truth.json"),
            *(f"--set={key}={json.dumps(value)}" for key, value in settings.items())]


def run(results: Path, leave_out: str, workers: int, workdir: Path | None = None) -> float:
    """Seconds of one forecast leaving out ``leave_out`` ("lightgbm", "mlflow", both comma-separated,
    or nothing), run in ``workdir`` (its output and MLflow store; a temporary directory when None)."""
    scratch = (contextlib.nullcontext(workdir) if workdir
               else tempfile.TemporaryDirectory(prefix="bench-forecast-floor-"))
    with scratch as where:
        where = Path(where)
        args = forecast_command(results, where / "forecast", workers)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, leave_out, *args], capture_output=True, text=True,
                              cwd=where, env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{where / 'mlflow.db'}"})
        took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench_forecast_floor: {leave_out or 'as it is'}: exit {proc.returncode}\n"
                         f"{proc.stderr[-3000:]}")
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a main job's results directory (dataset, raw/truth.json, config.yaml)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the four variants (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="the forecaster's processes (the main job's: 2)")
    a = ap.parse_args(argv)
    a.results = a.results.resolve()  # the forecaster runs in a temporary directory (its MLflow store's)
    for need in ("dataset", "raw/truth.json", "config.yaml"):
        if not (a.results / need).exists():
            raise SystemExit(f"bench_forecast_floor: {a.results / need}: not found (run the main job first)")
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(a.repeat):
        for name, leave_out in VARIANTS.items():
            times[name].append(run(a.results, leave_out, a.workers))
            print(f"round {round_ + 1}: {name:<12} {times[name][-1]:6.1f} s", file=sys.stderr, flush=True)
    base = statistics.median(times["as it is"])
    print(f"# hpcvar forecast on {a.results / 'dataset'}, {a.workers} processes; medians of {a.repeat}, in turns")
    print(f"{'variant':<14}{'seconds':>9}{'of as it is':>13}   each run")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<14}{med:9.1f}{med / base:13.2f}   " + " ".join(f"{t:.1f}" for t in ts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
