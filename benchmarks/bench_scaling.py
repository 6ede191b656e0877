"""How the main job's cost grows with the campaign: each step at 1x, 4x and 16x the demo's runs.

Runs the main job (`snakemake --cores 2`, docs/getting-started/main-job.md) in a copy of the
working tree at each scale: the demo preset with `days` multiplied (15 days is 1x: about 190 runs, and the LDMS rows grow with
them), and reads what Snakemake's `benchmark:` files recorded for every job (wall seconds, peak
memory of the job's processes). Prints, per step and scale, the seconds, the seconds per run and
the peak memory, and draws them on log-log axes (`scaling.png` in --out). Flat or falling
seconds per run means a step costs no more than the work; a flat peak means it streams.

    .venv/bin/python benchmarks/bench_scaling.py                            # 1x, 4x (~15 min here)
    .venv/bin/python benchmarks/bench_scaling.py --scales 1 4 16 --until collate
    .venv/bin/python benchmarks/bench_scaling.py --table OUT                # print a finished run again

Each scale runs alone (both cores are the job's), one after the other.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_main_job import checkout  # noqa: E402  (the same copy of the working tree)

DEMO_DAYS = 15
TARGETS = {"collate": ["results/dataset/collated.json"], "all": []}


def run_scale(tree: Path, scale: int, until: str) -> dict:
    """The main job at ``scale`` in ``tree``: wall time, runs, LDMS rows and each job's benchmark."""
    snakemake = Path(sys.executable).with_name("snakemake")
    # The simulate section in a config file of its own (--config would pass the numbers as text).
    (tree / "scale.yaml").write_text(json.dumps({"simulate": {"preset": "demo", "seed": 0,
                                                              "overrides": {"days": DEMO_DAYS * scale}}}))
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    env.pop("MLFLOW_TRACKING_URI", None)
    print(f"scale {scale}x ({DEMO_DAYS * scale} days) in {tree} ...", flush=True)
    t0 = time.perf_counter()
    # Targets before --configfile, which takes every word after it.
    out = subprocess.run([str(snakemake), "--cores", "2", *TARGETS[until], "--configfile", "scale.yaml"],
                         cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the main job failed at {scale}x:\n{out.stderr[-3000:]}")
    wall = time.perf_counter() - t0
    results = tree / "results"
    collated = json.loads((results / "dataset" / "collated.json").read_text())
    # store_csv files (raw/ldms/<schema>/<schema>.<epoch>): their rows, header lines (#) left out
    ldms_rows = sum(sum(1 for line in open(p, "rb") if not line.startswith(b"#"))
                    for p in (results / "raw" / "ldms").rglob("*") if p.is_file())
    jobs = {}
    for tsv in sorted((results / "benchmarks").rglob("*.tsv")):
        with open(tsv, newline="") as fh:
            row = next(csv.DictReader(fh, delimiter="\t"))
        name = str(tsv.relative_to(results / "benchmarks").with_suffix(""))
        jobs[name] = {"s": float(row["s"]), "max_rss_mb": float(row["max_rss"]) if row["max_rss"] != "NA" else None}
    record = {"scale": scale, "days": DEMO_DAYS * scale, "wall_s": wall, "runs": int(collated["new_runs"]),
              "ldms_rows": ldms_rows, "jobs": jobs}
    print(f"  {wall:.0f} s wall, {record['runs']} runs, {ldms_rows} LDMS rows", flush=True)
    return record


def table(records: list[dict]) -> str:
    names = sorted({n for r in records for n in r["jobs"]} - {"effective_config"})
    head = f"{'step':24s}" + "".join(f" {str(r['scale']) + 'x s':>9s} {'ms/run':>7s} {'MB':>6s}" for r in records)
    lines = [f"{'runs':24s}" + "".join(f" {r['runs']:9d} {'':7s} {'':6s}" for r in records),
             f"{'LDMS rows':24s}" + "".join(f" {r['ldms_rows']:9d} {'':7s} {'':6s}" for r in records),
             f"{'main job (wall)':24s}" + "".join(f" {r['wall_s']:9.0f} {1e3 * r['wall_s'] / r['runs']:7.0f} {'':6s}"
                                                  for r in records), head]
    for name in names:
        cells = []
        for r in records:
            j = r["jobs"].get(name)
            if j is None:
                cells.append(f" {'':9s} {'':7s} {'':6s}")
            else:
                rss = f"{j['max_rss_mb']:6.0f}" if j["max_rss_mb"] is not None else f"{'':6s}"
                cells.append(f" {j['s']:9.1f} {1e3 * j['s'] / r['runs']:7.0f} {rss}")
        lines.append(f"{name:24s}" + "".join(cells))
    lines.append("(ms/run: milliseconds per collated run; MB: the job's peak resident memory)")
    return "\n".join(lines)


def figure(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({n for r in records for n in r["jobs"]} - {"effective_config"})
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.5))
    for a in (ax, bx):  # a colour per step (the default cycle has ten)
        a.set_prop_cycle(color=[plt.cm.tab20(i) for i in range(20)])
    for name in names:
        pts = [(r["runs"], r["jobs"][name]) for r in records if name in r["jobs"]]
        runs = [p[0] for p in pts]
        ax.plot(runs, [p[1]["s"] for p in pts], "o-", label=name)
        if all(p[1]["max_rss_mb"] for p in pts):
            bx.plot(runs, [p[1]["max_rss_mb"] for p in pts], "o-", label=name)
    xs = [r["runs"] for r in records]
    if len(xs) > 1 and "collate" in records[0]["jobs"]:  # the slope of cost growing as the work
        ref = records[0]["jobs"]["collate"]["s"]
        ax.plot(xs, [ref * x / xs[0] for x in xs], "k:", label="proportional to runs (through collate)")
    for a, label in ((ax, "wall time (s)"), (bx, "peak memory (MB)")):
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("collated runs")
        a.set_ylabel(label)
    ax.legend(fontsize=7)
    fig.suptitle("The main job's steps against the campaign's size (demo preset, days x scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4], help="multiples of the demo's 15 days")
    ap.add_argument("--until", choices=sorted(TARGETS), default="all",
                    help="collate: simulate and collate only; all: the whole main job (default)")
    ap.add_argument("--out", type=Path, help="directory for scaling.json and scaling.png (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep each scale's copy of the tree")
    ap.add_argument("--table", type=Path, metavar="OUT", help="print the table of a finished run's scaling.json")
    a = ap.parse_args(argv)
    if a.table:
        print(table(json.loads((a.table / "scaling.json").read_text())))
        return 0
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for scale in a.scales:
        tree = checkout(None, out / f"tree-{scale}x")
        records.append(run_scale(tree, scale, a.until))
        (out / "scaling.json").write_text(json.dumps(records, indent=1))
        if not a.keep:
            subprocess.run(["rm", "-rf", str(tree)], check=True)
    print(table(records))
    figure(records, out / "scaling.png")
    print(f"table: {out / 'scaling.json'}; figure: {out / 'scaling.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
