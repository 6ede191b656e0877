"""Scoring the analyses' answers against what the simulator planted (``truth_runs.parquet``).

Read by the checks only (tests, benchmarks): the analyses never see the truth.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

#: The per-run truth file: one row per run, its dominant planted cause (``dominant``: the category
#: that added the most seconds; ``dominant_user``: for neighbours, the culprit who added the most).
TRUTH_RUNS = "truth_runs.parquet"


def score_explanations(truth_runs: pd.DataFrame, runs_tables: dict[str, pd.DataFrame],
                       pseudonym: Callable[[str], str], slow: float = 0.2) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per dataset, among the runs at least ``slow`` slower than the dataset's median (explain's
    ``runs.csv``): how many runs, how many whose top cause is the planted dominant one (the same
    category, and for neighbours the same user, compared by pseudonym), and the share. Also the
    confusion between planted (rows) and named (columns) categories over those runs."""
    truth = truth_runs.set_index("run_id")
    rows, pairs = [], []
    for name, table in runs_tables.items():
        t = table[(table["slowdown"] >= 1 + slow) & table["run_id"].isin(truth.index)]
        hits = 0
        for r in t.itertuples():
            planted = truth.loc[r.run_id]
            user = planted["dominant_user"]
            want = pseudonym(user) if isinstance(user, str) else None
            hits += bool(r.top_category == planted["dominant"]
                         and (planted["dominant"] != "neighbours" or r.top_user == want))
            pairs.append((planted["dominant"], r.top_category))
        rows.append({"dataset": name, "slow_runs": len(t), "hits": hits,
                     "accuracy": hits / len(t) if len(t) else float("nan")})
    confusion = pd.crosstab(pd.Series([p for p, _ in pairs], name="planted", dtype=object),
                            pd.Series([n for _, n in pairs], name="named", dtype=object))
    return pd.DataFrame(rows), confusion
