"""The forecast's datasets spread over processes (``workers``): the numbers of one process.

Not in tests/test_forecast.py: that module's own ``campaign`` fixture (the forecasting campaign
per seed) shadows conftest's, the small demo campaign this test wants."""

from __future__ import annotations

import pandas as pd
import pytest

from hpcvar.analyses import forecast


@pytest.mark.slow
def test_datasets_spread_over_processes_forecast_as_in_one(campaign, tmp_path):
    """workers=2 forecasts each dataset in a process of its own: the same numbers as one process."""
    c = campaign("demo", 3, 2)
    cfg = {"ensemble": 2, "max_epochs": 8, "patience": 3, "feature_sets": ["job", "job+placement"],
           "grid": {"amg": {"m": [3], "k": [5]}, "milc": {"m": [10], "k": [20]}, "umt": {"m": [2], "k": [2]},
                    "minivite": {"m": [2], "k": [1]}}, "importance_repeats": 1}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(tmp_path)
        one = forecast.run(c.dataset, tmp_path / "one", {**cfg, "workers": 1})
        two = forecast.run(c.dataset, tmp_path / "two", {**cfg, "workers": 2})
    assert len(one.datasets) >= 4 and list(one.datasets) == list(two.datasets)
    for name in one.datasets:
        a, b = (pd.read_csv(d / name / "grid.csv").drop(columns="train_seconds") for d in (tmp_path / "one",
                                                                                           tmp_path / "two"))
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert one.datasets[name].best == two.datasets[name].best
        assert one.datasets[name].importance == two.datasets[name].importance
