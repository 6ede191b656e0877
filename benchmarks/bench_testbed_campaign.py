"""A campaign with a known cause on the emulated cluster: what was planted against what the
analyses found (docs/tutorials/known-cause.md).

Runs ``config/campaign-testbed.yaml`` (or ``--config``, e.g. ``config/campaign-testbed-apps.yaml``:
Table I's codes from a source mirror) end to end (``snakemake --profile profiles/local-slurm``) in
a work directory, or reads a finished one (``--results``), and prints, per dataset: the spread
(slowest/fastest run), the culprit's rank in the MI and Pearson rankings (and the decoys'), the
deviation model's top counters with their relevance and the CPU load's share of the spread, the
placement effect with and without the culprit (and per dataset: runs across the groups beside the
culprit against runs inside one group beside it), the regression check's verdicts across the
planted upgrade and across two earlier windows (where nothing was planted), how often `hpcvar
explain` names the culprit as the top cause of the runs it slowed (in all and per dataset), the
stored step times against the codes' own timers, and the wall time per round.

Needs the testbed up, as root, with the campaign's users:

    sudo .venv/bin/hpcvar dev slurm up --nodes 6 --groups 2 --link-etc --extra-user hpcvar-alice \\
         --extra-user hpcvar-bob --extra-user hpcvar-carol --extra-user hpcvar-dave
    sudo .venv/bin/python benchmarks/bench_testbed_campaign.py [--rounds 40] [--keep DIR]
    sudo HPCVAR_SOURCE_MIRROR=DIR .venv/bin/python benchmarks/bench_testbed_campaign.py \\
         --config config/campaign-testbed-apps.yaml [--rounds 30]
    .venv/bin/python benchmarks/bench_testbed_campaign.py --results DIR/results   # a finished one
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_campaign(work: Path, rounds: int, configfile: Path) -> Path:
    from hpcvar.dev import slurm as dev

    work.mkdir(parents=True, exist_ok=True)
    for item in ("Snakefile", "workflow", "config", "profiles"):
        if not (work / item).exists():
            subprocess.run(["cp", "-r", str(REPO / item), str(work / item)], check=True)
    if not (work / "reframe_tests").exists():
        (work / "reframe_tests").symlink_to(REPO / "reframe_tests")
    config = yaml.safe_load(configfile.read_text())
    config["results"] = "results"
    config["campaign"]["rounds"] = rounds
    if os.environ.get("HPCVAR_BUILD_CACHE"):  # builds kept from an earlier run (every node must see them)
        config["campaign"].setdefault("environment", {})["HPCVAR_BUILD_CACHE"] = os.environ["HPCVAR_BUILD_CACHE"]
    (work / "campaign.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, **dev.slurm_env(dev.Layout(dev.state_dir()))}
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.monotonic()
    proc = subprocess.run([str(BIN / "snakemake"), "--profile", str(REPO / "profiles" / "local-slurm"),
                           "--configfile", "campaign.yaml"], cwd=work, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bench_testbed_campaign: the campaign failed (exit {proc.returncode}); see {work}")
    print(f"campaign: {rounds} rounds in {(time.monotonic() - t0) / 60:.1f} min", flush=True)
    return work / "results"


def compare_rounds(dataset: Path, before: str, after: str, out: Path) -> pd.DataFrame:
    proc = subprocess.run([str(BIN / "hpcvar"), "compare", str(dataset), "--before", before, "--after", after,
                           "--out", str(out)], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"hpcvar compare {before} {after}: {proc.stderr}")
    return pd.read_csv(out / "compare.csv")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=None, help="campaign.rounds (default: the configuration's)")
    ap.add_argument("--config", type=Path, default=REPO / "config" / "campaign-testbed.yaml",
                    help="the campaign's configuration (default config/campaign-testbed.yaml)")
    ap.add_argument("--keep", type=Path, default=Path("/var/tmp/hpcvar-bench-campaign"),
                    help="the campaign's work directory (every node must see it: not /tmp)")
    ap.add_argument("--results", type=Path, help="a finished campaign's results directory: only read it")
    a = ap.parse_args(argv)

    from hpcvar.campaign import truth as campaign_truth
    from hpcvar.data.dataset import Dataset
    from hpcvar.data.rawlayout import STDOUT
    from hpcvar.parsers import apps as app_output
    from hpcvar.util.anonymise import Pseudonymiser, load_salt

    rounds = a.rounds or yaml.safe_load(a.config.read_text())["campaign"]["rounds"]
    res = a.results or run_campaign(a.keep, rounds, a.config.resolve())
    wd = res.parent
    truth = campaign_truth.load(res)
    pseudo = Pseudonymiser(load_salt(wd / ".hpcvar-salt"))
    roles = {pseudo(u): r for u, r in truth["users"].items()}
    culprit = next(p for p, r in roles.items() if r == "culprit")
    runs = campaign_truth.runs_with_truth(Dataset(res / "dataset").read("runs"), truth)
    n = len(truth["rounds"])
    planted = pd.DataFrame([{"round": r["round"], "culprit": any(j["kind"] == "global-traffic" for j in r["jobs"]),
                             "decoys": sum(j["kind"] == "group-traffic" for j in r["jobs"]),
                             "hog": any(j["kind"] == "cpu" for j in r["jobs"]), "rate": r["global_rate"],
                             "minutes": (r["end"] - r["start"]) / 60} for r in truth["rounds"]])
    print(f"# planted: {n} rounds; culprit {planted['culprit'].sum()}, CPU hog {planted['hog'].sum()}, "
          f"decoys {planted['decoys'].sum()} jobs; upgrade {truth['upgrade']}")
    print(f"# roles: " + ", ".join(f"{p} {r}" for p, r in roles.items()))

    print("\n# spread per dataset (run time, s)")
    spread = runs.groupby("dataset")["total_time_s"].agg(["count", "min", "median", "max"])
    spread["slowest/fastest"] = spread["max"] / spread["min"]
    print(spread.to_string(float_format=lambda v: f"{v:.2f}"))

    nb = json.loads((res / "analyses" / "neighbourhood" / "summary.json").read_text())
    print("\n# neighbourhood: rank of each planted user (MI, Pearson); 1 = first")
    rows = []
    for name, d in sorted(nb["datasets"].items()):
        mi = [u["user"] for u in d["top_users"]]
        pr = [u["user"] for u in d["top_users_by_nodes_r"]]
        row = {"dataset": name}
        for p, role in roles.items():
            short = role.split(" ")[0] if role == "culprit" else role
            row[f"{p} ({short})"] = f"{mi.index(p) + 1 if p in mi else '-'}, {pr.index(p) + 1 if p in pr else '-'}"
        rows.append(row)
    print(pd.DataFrame(rows).to_string(index=False))

    dv = json.loads((res / "analyses" / "deviation" / "summary.json").read_text())
    print("\n# deviation: top counters (relevance), MAPE, CPU pressure's share of the spread (R^2)")
    for name, d in sorted(dv["datasets"].items()):
        top = ", ".join(f"{r['counter']} ({r['relevance']:.2f})" for r in d["relevance"][:4])
        print(f"{name}: {top}; mape {d['mape']:.3f}; cpu_pressure_r2 {d.get('cpu_pressure_r2')}")

    print("\n# placement: run time over its dataset's median, runs with steps (median; runs)")
    runs["rel"] = runs["total_time_s"] / runs.groupby("dataset")["total_time_s"].transform("median")
    apps = runs[runs["num_steps"] > 0]
    for label, part in (("culprit there", apps[apps["culprit"]]),
                        ("culprit absent", apps[~apps["culprit"]])):
        across, inside = part.loc[part["across"], "rel"], part.loc[~part["across"], "rel"]
        print(f"{label:15s} across groups {across.median():.2f} ({len(across)}); inside one "
              f"{inside.median():.2f} ({len(inside)})")

    steps = Dataset(res / "dataset").read("steps")
    step_mean = steps.groupby("run_id")["duration_s"].mean()
    runs["step_s"] = runs["run_id"].map(step_mean)
    print("\n# per dataset: mean step time of a run (median over the runs, s; runs) across the groups and inside "
          "one, beside the culprit and without it; across/inside ratio")
    rows = []
    for name, part in runs[runs["num_steps"] > 0].groupby("dataset"):
        row = {"dataset": name}
        for label, sel in (("culprit", part["culprit"]), ("none", ~part["culprit"])):
            across, inside = part.loc[sel & part["across"], "step_s"], part.loc[sel & ~part["across"], "step_s"]
            row[f"across, {label}"] = f"{across.median():.3f} ({len(across)})"
            row[f"inside, {label}"] = f"{inside.median():.3f} ({len(inside)})"
            row[f"ratio, {label}"] = f"{across.median() / inside.median():.2f}"
        rows.append(row)
    print(pd.DataFrame(rows).to_string(index=False))

    if "reported_s" in steps and steps["reported_s"].notna().any():
        timed = steps[steps["reported_s"].notna()].merge(runs[["run_id", "dataset"]], on="run_id")
        diff = (timed["duration_s"] - timed["reported_s"]).abs()
        timed["within"] = diff <= (0.05 * timed["reported_s"]).clip(lower=0.02)
        timed["rel"] = diff / timed["reported_s"]
        print("\n# stored step times against the codes' own timers (within 5% or 20 ms; median and max |difference|)")
        for name, part in timed.groupby("dataset"):
            print(f"{name}: {int(part['within'].sum())} of {len(part)} steps; median {part['rel'].median():.2%}, "
                  f"max {part['rel'].max():.2%}")
        # Codes with one timer around all their steps (AMG 2013): the steps' sum against it, per run.
        # MILC's also holds the warm-ups and the last measurement: its stamped loop against it.
        loop = runs[runs["num_steps"].gt(0) & ~runs["run_id"].isin(timed["run_id"])]
        for name, part in loop.groupby("dataset"):
            rel, what = [], "the steps' sum"
            for r in part.itertuples():
                own = app_output.read(res / "raw" / r.raw_dir / STDOUT)
                if "loop_stamped_s" in own.checks:
                    stored, what = sum(own.checks["loop_stamped_s"]), "the stamped loop, warm-ups included"
                else:
                    stored = steps.loc[steps["run_id"] == r.run_id, "duration_s"].sum()
                rel.append(abs(stored - own.total_s) / own.total_s)
            within = sum(x <= 0.05 for x in rel)
            print(f"{name} (one timer around the steps: {what} against it): {within} of {len(rel)} runs; "
                  f"median {statistics.median(rel):.2%}, max {max(rel):.2%}")

    print("\n# compare (collectives-4 allreduce 64 KiB; amgproxy run times)")
    up = truth["upgrade"]["round"] if truth.get("upgrade") else None
    windows = []
    if up:
        w = max(1, min(10, (up - 1) // 3, n - up + 1))
        windows = [(up - 3 * w, up - 2 * w - 1, up - 2 * w, up - w - 1, "nothing planted"),
                   (up - 2 * w, up - w - 1, up - w, up - 1, "nothing planted"),
                   (up - w, up - 1, up, up + w - 1, "the rate drop")]
    for b0, b1, a0, a1, what in windows:
        table = compare_rounds(res / "dataset", f"round:{b0:03d}..{b1:03d}", f"round:{a0:03d}..{a1:03d}",
                               wd / f"compare-{b0:03d}-{a1:03d}")
        sel = table[(table["test"] == "collectives-4") & (table["variable"] == "allreduce_65536B_us")
                    | table["variable"].eq("run_time_s") & table["test"].str.startswith("amgproxy")]
        for r in sel.itertuples():
            print(f"rounds {b0}-{b1} vs {a0}-{a1} ({what}): {r.test} {r.variable}: {r.verdict} "
                  f"(median {r.median_before:.4g} -> {r.median_after:.4g})")

    explained = pd.concat([pd.read_csv(p, dtype={"top_user": str}) for p in
                           sorted((res / "analyses" / "explain").glob("*/runs.csv"))], ignore_index=True)
    base = runs.drop(columns=["round", "global_rate", "culprit", "hog", "decoys", "across", "rel", "step_s"])
    score = campaign_truth.score_explanations(explained, base, truth, pseudo)
    c, h = score["culprit"], score["hog"]
    print("\n# explain")
    print(f"runs across the groups beside the culprit, >= 20% slower: {c['runs']}; culprit named first: "
          f"{c['hits']} ({(c['share'] or 0):.0%}); top causes named: {c['named']}")
    print(f"slowed runs of rounds with the CPU hog, no culprit and the links' first rate: {h['runs']}; blamed on the network: "
          f"{h['blamed_on_network']}; top causes named: {h['named']}")
    for name in sorted(runs["dataset"].unique()):
        ids = set(runs.loc[runs["dataset"] == name, "run_id"])
        d = campaign_truth.score_explanations(explained[explained["run_id"].isin(ids)],
                                              base[base["run_id"].isin(ids)], truth, pseudo)["culprit"]
        print(f"{name}: culprit named first for {d['hits']} of {d['runs']} runs it slowed by >= 20%; "
              f"top causes named: {d['named']}")

    print("\n# wall time per round (min)")
    print(planted["minutes"].describe()[["count", "mean", "min", "max"]].to_string(float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
