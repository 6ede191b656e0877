"""The suite's collectives microbenchmark against the Intel MPI Benchmarks (IMB-MPI1 2021.11).

Runs the ReFrame tests ``Collectives`` (reframe_tests/microbenchmarks) and ``IMBCollectives``
(reframe_tests/reference) in one session on the same system, ranks, collectives, message sizes
and iterations, ``--repeat`` times each (runs interleaved by ReFrame), then prints per
(collective, size):

* ours: the median over every iteration of every run of the per-iteration time of the slowest
  rank (``max_us`` of collectives.csv: a collective is done when its last rank is);
* IMB: the median over the runs of ``t_max`` (the slowest rank's mean over IMB's repetitions:
  IMB prints means, not every iteration), and of ``t_avg``;
* the ratio ours / IMB t_max, and whether it is within 10%.

A gap is expected where the two do not time the same thing: ours times each iteration alone
(a barrier before it, then the collective on every rank, the max over ranks of that one call);
IMB times a loop of back-to-back calls and divides, so pipelining of consecutive calls and the
spread of rank arrival are folded into its mean. Small messages on shared memory (sub-microsecond
calls) are dominated by that difference.

    python benchmarks/bench_imb_reference.py                      # local system, 5 runs each, ~2 min
    python benchmarks/bench_imb_reference.py --system local-slurm --repeat 10

Needs a source mirror with IMB (``HPCVAR_SOURCE_MIRROR``; fill one with
reframe_tests/apps/build/fetch.sh --mirror DIR where there is internet).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
try:
    from hpcvar.parsers import apps, microbenchmarks
except ImportError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(REPO / "src"))
    from hpcvar.parsers import apps, microbenchmarks

import pandas as pd  # noqa: E402

IMB_NAMES = {"bcast": "Bcast", "reduce": "Reduce", "alltoall": "Alltoall", "allreduce": "Allreduce"}


def run_suite(system: str, repeat: int, iterations: int, prefix: Path) -> list[dict]:
    report = prefix / "report.json"
    if not os.environ.get("HPCVAR_SOURCE_MIRROR"):
        raise SystemExit("bench_imb_reference: IMB is built from the source mirror: set HPCVAR_SOURCE_MIRROR "
                         "(fill one with reframe_tests/apps/build/fetch.sh --mirror DIR where there is internet)")
    env = {**os.environ, "HPCVAR_RFM_PREFIX": str(prefix)}
    cmd = [str(Path(sys.executable).with_name("reframe")), "-C", "config/reframe/settings.py", "--system", system,
           "-c", "reframe_tests/microbenchmarks", "-c", "reframe_tests/reference", "-R",
           "-n", "^Collectives", "-n", "^IMBCollectives", "--repeat", str(repeat),
           "-S", f"iterations={iterations}", "--report-file", str(report), "-r"]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=REPO, env=env, check=False)
    cases = [c for run in json.loads(report.read_text())["runs"] for c in run["testcases"] if not c.get("fixture")]
    failed = [c["display_name"] for c in cases if c["result"] != "pass"]
    if failed:
        raise SystemExit(f"failed: {failed}; see {prefix}")
    return cases


def compare(cases: list[dict]) -> pd.DataFrame:
    ours, imb = [], []
    for c in cases:
        stage = Path(c["stagedir"])
        if c["display_name"].startswith("IMBCollectives"):
            t = apps.read(stage / "rfm_job.out").table
            imb.append(t.pivot_table(index=["benchmark", "size_bytes"], columns="metric", values="value").reset_index())
        elif c["display_name"].startswith("Collectives"):
            ours.append(microbenchmarks.read_collectives(stage / "collectives.csv"))
    mine = pd.concat(ours).groupby(["collective", "size_bytes"])["max_us"].median().rename("ours_median_us")
    ref = pd.concat(imb).groupby(["benchmark", "size_bytes"])[["t_max", "t_avg"]].median()
    ref.index = ref.index.set_names(["collective", "size_bytes"])
    ref = ref.rename(index={v: k for k, v in IMB_NAMES.items()}, level=0)
    table = pd.concat([mine, ref.rename(columns={"t_max": "imb_t_max_us", "t_avg": "imb_t_avg_us"})], axis=1)
    table["ratio"] = table["ours_median_us"] / table["imb_t_max_us"]
    table["within_10pct"] = (table["ratio"] - 1).abs() <= 0.10
    return table.reset_index()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", default="local")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=1000)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-imb-") as tmp:
        table = compare(run_suite(a.system, a.repeat, a.iterations, Path(tmp)))
    with pd.option_context("display.width", 140):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"{int(table['within_10pct'].sum())}/{len(table)} within 10% of IMB's t_max")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
