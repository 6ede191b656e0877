"""A testbed campaign's truth file (``<results>/truth.json``, written by
:mod:`hpcvar.campaign.background`) against its runs: which runs had what planted around them, and
how the analyses' answers score against it.

Read by the checks only (tests/test_testbed_campaign.py, benchmarks/bench_testbed_campaign.py):
the analyses never see the truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from hpcvar.data.rawlayout import TRUTH
from hpcvar.parsers.sacct import accounted_second


def load(results: str | Path) -> dict:
    path = Path(results) / TRUTH
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no truth file (a campaign with campaign.background writes it)")
    return json.loads(path.read_text())


def runs_with_truth(runs: pd.DataFrame, truth: dict) -> pd.DataFrame:
    """The runs (the dataset's ``runs`` table) with, from the round they started in: ``round``,
    ``culprit`` (its traffic crossed the global links), ``hog`` (the CPU-only user was there),
    ``decoys`` (how many group-traffic jobs), ``global_rate`` (the links' rate that round), and
    ``across`` (the run spans more than one group, so it shares a global link with the culprit's
    traffic whenever that runs).

    Slurm's accounting gives whole seconds, the rounds' windows fractions of one: a window opens
    at its whole second (:func:`hpcvar.parsers.sacct.accounted_second`)."""
    rows = []
    for r in truth["rounds"]:
        kinds = [j["kind"] for j in r["jobs"]]
        rows.append({"round": r["round"], "t0": accounted_second(r["start"]), "t1": r["end"],
                     "global_rate": r["global_rate"],
                     "culprit": "global-traffic" in kinds, "hog": "cpu" in kinds,
                     "decoys": kinds.count("group-traffic")})
    rounds = pd.DataFrame(rows)
    out = runs.copy()
    start = out["start"].map(lambda t: t.timestamp())
    idx = start.map(lambda t: next((i for i, r in rounds.iterrows() if r["t0"] <= t <= r["t1"]), None))
    matched = rounds.reindex(idx.fillna(-1).astype(int).to_numpy()).reset_index(drop=True)
    matched.index = out.index
    for col in ("round", "global_rate"):
        out[col] = matched[col]
    for col in ("culprit", "hog"):  # a run outside every round's window had nothing planted around it
        out[col] = matched[col].fillna(False).astype(bool)
    out["decoys"] = matched["decoys"].fillna(0).astype(int)
    out["across"] = out["num_groups"] > 1
    return out


def score_explanations(explained: pd.DataFrame, runs: pd.DataFrame, truth: dict,
                       pseudonym: Callable[[str], str], slow: float = 0.2) -> dict:
    """How ``hpcvar explain``'s top causes (its ``runs.csv`` rows, all datasets) read against the
    planted workload:

    * ``culprit``: the runs that shared a global link with the culprit's traffic (across groups, in
      a round with it) and were at least ``slow`` slower than their dataset's median (``run_ids``);
      ``hits``: those whose top cause is the culprit (neighbours, its pseudonym);
    * ``hog``: the slowed runs inside one group of rounds with the CPU-only user and without the
      culprit, before the upgrade (after it the slower links are a real network cause);
      ``blamed_on_network``: those whose top cause is the network or a traffic neighbour. A run
      across the groups is left out (``across_named``: what it was put on): its own traffic
      crosses the slower global link, which its counters show, so the network is among its causes
      whoever else was there.
    """
    table = runs_with_truth(runs, truth).merge(explained, on="run_id", how="inner")
    culprit = next(pseudonym(u) for u, role in truth["users"].items() if role == "culprit")
    slowed = table[table["slowdown"] >= 1 + slow]
    shared = slowed[slowed["culprit"] & slowed["across"]]
    hits = shared[(shared["top_category"] == "neighbours") & (shared["top_user"] == culprit)]
    base = truth["rounds"][0]["global_rate"] if truth["rounds"] else None
    hog_rounds = slowed[slowed["hog"] & ~slowed["culprit"] & (slowed["global_rate"] == base)]
    hog = hog_rounds[~hog_rounds["across"]]
    network = hog[hog["top_category"].isin(["network", "neighbours"])]
    return {"culprit": {"runs": len(shared), "hits": len(hits), "share": len(hits) / len(shared) if len(shared) else None,
                        "named": shared["top_category"].fillna("none").value_counts().to_dict(),
                        "run_ids": shared["run_id"].tolist()},
            "hog": {"runs": len(hog), "blamed_on_network": len(network),
                    "named": hog["top_category"].fillna("none").value_counts().to_dict(),
                    "across_named": hog_rounds.loc[hog_rounds["across"], "top_category"].fillna("none")
                    .value_counts().to_dict()}}
