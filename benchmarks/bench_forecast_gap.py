"""Where the forecaster's distance to the simulator's oracle comes from (issue 3's 1.25x bar).

On the same MILC campaigns, cell (m, k) = (10, 20) and folds as ``bench_forecast.py``, the
held-out MAPE of simple learners given more and more of what the oracle knows:

    persistence          the last m steps' mean ratio to the profile
    observed             LightGBM on summaries of the window (duration deviation: mean, last 3,
                         last; job counters' log-ratios: mean, last 3; io/sys rates: mean, last;
                         placement): what the forecaster sees
    observed+culprit     ... plus the true culprit congestion at t_c (the simulator's hidden state)
    observed+hidden      ... plus the true AR(1) congestion state and the true I/O process at
                         the starts of steps t_c-m+1..t_c+1 (what slows the next steps, with
                         its 60 s lag, is already past at t_c): all the state the oracle holds
    oracle-as-feature    a ridge regression on the oracle's own forecast (log-ratio to our
                         profile): checks that our profile and windows lose nothing on the way

"oracle-as-feature" near 1.0x says the profile and scoring are sound; if "observed+hidden" stays
well above 1.0x, the distance is in learning the dynamics (the I/O lag, the congestion's
persistence, the nonlinear floors) from a campaign's few hundred runs, not in missing data.

    .venv/bin/python benchmarks/bench_forecast_gap.py --days 150 --seeds 0 1 --keep /tmp/bench-fc

A few minutes per seed beyond the simulation (reuses bench_forecast.py's campaigns with --keep).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from bench_forecast import MILC, campaign

M, K = 10, 20
LEVELS = ("persistence", "observed", "observed+culprit", "observed+hidden", "oracle-as-feature")


def summaries(x: np.ndarray, names: list[str]) -> np.ndarray:
    """Per window: duration deviation (mean, last 3, last), job counters' log-ratios (mean, last
    3), io/sys rates (mean, last), placement (last)."""
    from hpcvar.analyses.forecast import attention

    lr = attention.log_ratio(x)
    job = [i for i, n in enumerate(names) if i and not n.startswith(("io_", "sys_", "num_"))]
    system = [i for i, n in enumerate(names) if n.startswith(("io_", "sys_"))]
    place = [i for i, n in enumerate(names) if n.startswith("num_")]
    cols = [x[:, :, 0].mean(1), x[:, -3:, 0].mean(1), x[:, -1, 0],
            *lr[:, :, job].mean(1).T, *lr[:, -3:, job].mean(1).T,
            *lr[:, :, system].mean(1).T, *lr[:, -1, system].T, *x[:, -1, place].T]
    return np.column_stack(cols)


def gap(d: Path, name: str, seed: int) -> dict[str, float]:
    import lightgbm
    from sklearn.linear_model import RidgeCV

    from hpcvar.analyses import common, forecast
    from hpcvar.analyses.forecast import models, windows
    from hpcvar.settings import ForecastSettings

    settings = ForecastSettings(seed=seed)
    data = common.load(d / "dataset")
    frame = common.step_frame(data, name)
    fs = forecast.PAPER_FEATURE_SETS[-1]
    columns = forecast.feature_sets_of(frame, [fs])[0][fs]
    s = windows.series(frame, name, columns)
    names = ["duration", *columns]
    oracle, _ = forecast.load_oracle(d / "raw" / "truth.json")
    hidden = pd.read_parquet(d / "raw" / "truth_steps.parquet").set_index(["run_id", "step"])
    errors: dict[str, list[np.ndarray]] = {level: [] for level in (*LEVELS, "oracle")}
    for fold in windows.make_folds(s, settings.folds, settings.val_fraction, seed):
        parts = {}
        for part, runs in (("train", fold.train), ("test", fold.test)):
            w = windows.Windows.of(s.lengths, runs, M, K)
            x = w.inputs(fold.dev)
            profile_s = fold.profile.sums(w.t_c, K)
            ids = s.run_ids[w.run]
            # The oracle holds the culprit congestion of the next step (known when it starts) and
            # starts the AR(1) from the last observed step's state.
            culprit = hidden["culprit"].reindex(pd.MultiIndex.from_arrays([ids, w.t_c + 1])).to_numpy()
            ar1 = hidden["ar1"].reindex(pd.MultiIndex.from_arrays([ids, w.t_c])).to_numpy()
            back = w.t_c[:, None] + np.arange(-M + 1, 2)
            io = hidden["io"].reindex(pd.MultiIndex.from_arrays([np.repeat(ids, M + 1), back.ravel()]))
            io = io.to_numpy().reshape(len(w), M + 1)
            orc = oracle.reindex(pd.MultiIndex.from_arrays([ids, w.t_c, np.full(len(w), K)])).to_numpy()
            obs = summaries(x, names)
            parts[part] = {
                "x": x, "profile_s": profile_s, "seconds": w.target_seconds(s.duration), "oracle": orc,
                "observed": obs, "observed+culprit": np.column_stack([obs, culprit]),
                "observed+hidden": np.column_stack([obs, culprit, ar1, io]),
                "oracle-as-feature": np.log(orc / profile_s)[:, None]}
        tr, te = parts["train"], parts["test"]
        y = np.log(tr["seconds"] / tr["profile_s"])
        predictions = {"persistence": models.persistence(te["x"], te["profile_s"]), "oracle": te["oracle"]}
        for level in ("observed", "observed+culprit", "observed+hidden"):
            model = lightgbm.LGBMRegressor(**settings.lgbm.as_dict(), objective="l1", random_state=seed, n_jobs=1, verbose=-1)
            predictions[level] = te["profile_s"] * np.exp(model.fit(tr[level], y).predict(te[level]))
        ridge = RidgeCV(alphas=np.logspace(-3, 3, 13)).fit(tr["oracle-as-feature"], y)
        predictions["oracle-as-feature"] = te["profile_s"] * np.exp(ridge.predict(te["oracle-as-feature"]))
        for level, pred in predictions.items():
            errors[level].append(np.abs(pred - te["seconds"]) / te["seconds"])
    return {level: float(np.concatenate(e).mean()) for level, e in errors.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=150)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--keep", help="keep (and reuse) the campaigns under this directory")
    a = ap.parse_args()
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-forecast-"))
    print(f"{'seed':>4} {'dataset':<9} {'oracle':>7}  " + "  ".join(f"{lv:>17}" for lv in LEVELS))
    print(f"{'':>4} {'':<9} {'MAPE':>7}  " + "  ".join(f"{'x oracle':>17}" for _ in LEVELS))
    for seed in a.seeds:
        d = campaign(base, a.days, seed)
        for name in MILC:
            r = gap(d, name, seed)
            print(f"{seed:>4} {name:<9} {r['oracle']:>7.4f}  "
                  + "  ".join(f"{r[lv]:>8.4f} {r[lv] / r['oracle']:>7.3f}x" for lv in LEVELS), flush=True)
    print(f"(campaigns in {base})")


if __name__ == "__main__":
    main()
