"""Defaults that stages which must not import one another share.

The forecasting grid is the forecaster's default (:data:`hpcvar.analyses.forecast.DEFAULT_GRID`
is this object) and the windows on which the simulator scores its oracle forecaster
(``truth.json``'s ``oracle_mape``), so the simulated ground truth and the analysis compare the
same windows without the simulator importing the analyses. The ReFrame configuration's path is
the default of every command that runs ReFrame (the command line must not import the analyses to
show it).
"""

from __future__ import annotations

#: ReFrame's site configuration, relative to the current directory (the project directory when the
#: workflow runs): ``hpcvar compare --reframe-config`` and ``hpcvar campaign round --reframe-config``.
REFRAME_CONFIG = "config/reframe/settings.py"

#: Default forecasting grid per app: temporal context m and horizon k (the paper's Figures 8, 10).
FORECAST_GRID = {"amg": {"m": [3, 8], "k": [5, 10]}, "milc": {"m": [10, 20], "k": [20, 40]},
                 "minivite": {"m": [2, 3], "k": [1, 2]}, "umt": {"m": [2, 3], "k": [2, 3]},
                 # hpcvar's AMG proxy (not Table I's): 6 steps toy-sized, 20 at full size
                 "amgproxy": {"m": [2, 3], "k": [1, 2]}}

#: The feature groups of the paper's ablations (Section V-C): job counters, then placement, I/O
#: and system counters, then the large neighbours' presence (not in the paper's runs).
FEATURE_GROUPS = ("job", "placement", "io", "sys", "neighbours")
#: The forecaster's cumulative feature sets, each adding one group: ``job``, ``job+placement``, ...
FORECAST_FEATURE_SETS = tuple("+".join(FEATURE_GROUPS[:i + 1]) for i in range(len(FEATURE_GROUPS)))


def feature_groups(feature_set: str) -> tuple[str, ...]:
    """The groups a cumulative feature set adds up (``job+placement`` -> ``job``, ``placement``)."""
    return tuple(feature_set.split("+"))


def cell_key(m: int, k: int) -> str:
    """A forecasting cell's name (``m=10,k=20``): the key of the oracle's MAPE per cell in the
    simulator's ``truth.json`` and in the forecast's result (``oracle_mape``, ``oracle_mape_truth``),
    which must name the same cells."""
    return f"m={m},k={k}"
