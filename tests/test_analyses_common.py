"""What the analyses share (hpcvar.analyses.common): per-step feature tables and the large
neighbours' presence per step, on hand-made steps and on the paper preset."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import SALT
from hpcvar.analyses.common import step_frame
from hpcvar.util.anonymise import Pseudonymiser


def pseudo(name):
    return Pseudonymiser(SALT)(name)


def test_step_frame_normalises_counters_per_router(paper):
    c, _, _, _ = paper
    from hpcvar.data.dataset import Dataset

    data = {t: Dataset(c.dataset).read(t) for t in ("runs", "steps", "step_counters", "system_counters")}
    frame = step_frame(data, "milc-128")
    run = frame["run_id"].iloc[0]
    raw = data["step_counters"].query("run_id == @run and step == 1 and counter == 'RT_RB_STL'")["value"].iloc[0]
    routers = data["runs"].set_index("run_id").loc[run, "num_routers"]
    assert frame.query("run_id == @run and step == 1")["RT_RB_STL"].iloc[0] == pytest.approx(raw / routers)
    assert {"io_PT_FLIT_TOT", "sys_RT_RB_STL"} <= set(frame.columns)


def test_neighbour_presence_recovers_the_planted_culprit_intensity(paper):
    """Per step, the culprits' running jobs (from sacct, through collation) weighted by their
    planted strengths are the culprit congestion the simulator applied at that step."""
    from hpcvar.analyses.common import frequent_neighbours, neighbour_presence
    from hpcvar.data.dataset import Dataset

    c = paper[0]
    data = {t: Dataset(c.dataset).read(t) for t in ("runs", "steps", "step_counters", "neighbourhood")}
    truth = pd.read_parquet(c.raw / "truth_steps.parquet")
    for name in ("milc-128", "amg-512"):
        users = frequent_neighbours(data, name, min_nodes=128, max_users=32)
        culprits = {pseudo(u): c.truth["culprit_strength"][u] for u in c.truth["datasets"][name]["culprits"]}
        assert set(culprits) <= set(users)
        frame = neighbour_presence(step_frame(data, name), data, users, min_nodes=128)
        got = sum(w * frame[f"nbr_{u}"] for u, w in culprits.items())
        want = frame[["run_id", "step"]].merge(truth, on=["run_id", "step"], how="left")["culprit"]
        assert want.notna().all() and (want > 0).mean() > 0.05  # culprits were there in some steps
        # sacct rounds job times to whole seconds: a step starting within a second of a culprit
        # job's start or end may fall on the other side.
        assert np.isclose(got, want).mean() > 0.995, name
        counts = frame[[f"nbr_{u}" for u in users]].to_numpy()
        assert (counts >= 0).all() and (counts == np.round(counts)).all()


def test_neighbour_presence_on_hand_made_steps():
    from hpcvar.analyses.common import frequent_neighbours, neighbour_presence

    t0 = pd.Timestamp("2026-11-01T00:00:00", tz="UTC")
    sec = lambda s: t0 + pd.Timedelta(s, "s")  # noqa: E731
    runs = pd.DataFrame({"run_id": ["a", "b"], "dataset": "x-1", "start": [sec(0), sec(100)]})
    # Run a has step starts; run b has none (placed at its start plus the durations before).
    steps = pd.DataFrame({"run_id": ["a"] * 3 + ["b"] * 3, "step": [1, 2, 3] * 2,
                          "start": [sec(5), sec(15), sec(25), pd.NaT, pd.NaT, pd.NaT],
                          "duration_s": [10.0] * 6})
    neigh = pd.DataFrame({
        "run_id": ["a", "a", "a", "b", "b"], "user": ["big", "big", "tiny", "big", "other"],
        "num_nodes": [256, 512, 16, 256, 1024],
        "start": [sec(0), sec(14), sec(0), sec(105), sec(50)],
        "end": [sec(20), pd.NaT, sec(30), sec(115), sec(100)]})
    data = {"runs": runs, "steps": steps, "neighbourhood": neigh}
    # "other" ran beside one run only, "tiny" is too small.
    assert frequent_neighbours(data, "x-1", min_nodes=128, max_users=8) == ["big"]
    frame = steps[["run_id", "step", "duration_s"]]
    got = neighbour_presence(frame, data, ["big", "other"], min_nodes=128)
    # a: t=5 one job, t=15 both (the second still running when sacct was asked), t=25 the second.
    # b: t=100 (other's job ended at 100: gone), t=110 big, t=120 (big's ended at 115).
    assert got["nbr_big"].tolist() == [1, 2, 1, 0, 1, 0]
    assert got["nbr_other"].tolist() == [0] * 6
