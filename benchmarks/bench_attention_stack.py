"""One grid cell's attention networks trained one at a time against stacked (``attention.fit_many``).

    .venv/bin/python benchmarks/bench_attention_stack.py                  # demo MILC, 30 days, seed 0
    .venv/bin/python benchmarks/bench_attention_stack.py --dataset milc-512 --ensemble 4 --keep /tmp/bas
    .venv/bin/python benchmarks/bench_attention_stack.py --default-transfer    # the stack's batch hook

The networks of the forecaster's cell m=10, k=20 on a simulated MILC dataset (every feature
set, ``--ensemble`` members, every fold: what ``grid.evaluate_cell`` trains), built as the
forecaster builds them (``models.attention_jobs``), trained twice with the forecaster's
settings: each network alone (``attention.fit``, one Lightning loop each) and all of them in
one loop, those of one shape stacked into one model (``attention.fit_many``). Prints both wall
times, their ratio, and whether every network's weights are the same to the last bit (they
must be: fit_many's contract, tests/test_forecast.py). ``--default-transfer`` trains the stack
twice instead: with Lightning's default ``transfer_batch_to_device``, then with the stack's own,
which hands the step's row indices over as they are.

"One at a time" is not what the forecaster did before the stack (27f828d): that trained a cell's
networks in one Lightning loop too, calling each network's forward and loss in turn. Against that
loop the stack took about 0.9 of the time (docs/benchmarks.md, "A slower machine").
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_forecast import campaign  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dataset", default="milc-128", choices=("milc-128", "milc-512"))
    ap.add_argument("--ensemble", type=int, default=2)
    ap.add_argument("--keep", help="keep (and reuse) the campaign under this directory")
    ap.add_argument("--default-transfer", action="store_true",
                    help="instead of one at a time, train the stack with Lightning's default "
                         "transfer_batch_to_device (which walks each step's index lists), then with fit_many's own")
    a = ap.parse_args()
    import torch

    from hpcvar.analyses import common, forecast
    from hpcvar.analyses.forecast import attention
    from hpcvar.analyses.forecast.models import attention_jobs
    from hpcvar.analyses.forecast.windows import make_folds, series
    from hpcvar.settings import ForecastSettings

    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-attention-stack-"))
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    d = campaign(base, a.days, a.seed)
    settings = ForecastSettings.from_mapping({"seed": a.seed, "ensemble": a.ensemble,
                                              "feature_sets": list(forecast.FEATURE_SETS)})
    data = common.load(d / "dataset", tables=("runs", "steps", "step_counters", "system_counters", "neighbourhood"))
    frame = forecast.with_neighbours(data, a.dataset, common.step_frame(data, a.dataset), settings)
    fsets, _ = forecast.feature_sets_of(frame, settings.feature_sets)
    columns = list(dict.fromkeys(c for cols in fsets.values() for c in cols))
    s = series(frame, a.dataset, columns)
    folds = make_folds(s, settings.folds, settings.val_fraction, settings.seed)
    jobs = [j for cols in fsets.values() for f in folds
            for j in attention_jobs(s, f, 10, 20, [0] + [1 + columns.index(c) for c in cols], settings,
                                    settings.seed + f.number)]
    kw = dict(hidden=settings.hidden, lr=settings.lr, weight_decay=settings.weight_decay,
              max_epochs=settings.max_epochs, patience=settings.patience, batch_size=settings.batch_size)
    print(f"{a.dataset}: {len(s.run_ids)} runs; {len(jobs)} networks ({len(fsets)} feature sets x {len(folds)} folds "
          f"x {a.ensemble}), {sum(len(j.x) for j in jobs)} training windows in all; torch threads "
          f"{torch.get_num_threads()}", flush=True)
    t0 = time.perf_counter()
    if a.default_transfer:
        import pytorch_lightning as pl

        own = attention.Together.transfer_batch_to_device
        attention.Together.transfer_batch_to_device = pl.LightningModule.transfer_batch_to_device
        try:
            alone = attention.fit_many(jobs, **kw)
        finally:
            attention.Together.transfer_batch_to_device = own
        what = "Lightning's default transfer"
    else:
        alone = [attention.fit(j.x, j.y, j.x_val, j.y_val, seed=j.seed, **kw) for j in jobs]
        what = "one at a time"
    t_alone = time.perf_counter() - t0
    print(f"{what}: {t_alone:.1f} s", flush=True)
    t0 = time.perf_counter()
    stacked = attention.fit_many(jobs, **kw)
    t_stacked = time.perf_counter() - t0
    same = all(torch.equal(x, y) for p, q in zip(alone, stacked) for x, y in zip(p.state_dict().values(),
                                                                                q.state_dict().values()))
    print(f"stacked:       {t_stacked:.1f} s  ({t_stacked / t_alone:.2f} of {what}); "
          f"the same weights to the last bit: {same}")


if __name__ == "__main__":
    main()
