"""How late ``ts`` stamps the AMG proxy's step boundaries under srun: the stamped step times
against the program's own, per revision of the proxy's source, launches alternated.

The ReFrame suite stamps a job's output after srun has forwarded it (reframe_tests/common/mixins.py,
``TimestampedOutput``). Slurm's step I/O connection holds a line written while the one before
it waits for its delayed acknowledgement (docs/explanation/suite.md), so a step boundary printed
right after other output can be stamped up to 40 ms late. Needs a Slurm cluster (as root):

    .venv/bin/hpcvar dev slurm up                     # or the testbed: --nodes 6 --groups 2
    .venv/bin/python benchmarks/bench_srun_stamps.py --revisions 169636f HEAD --launches 10 --n 32

Prints, per revision: the launches, the first step's stamped minus own time (median, most
negative), how many first steps were more than 20 ms off, and the largest gap of the other steps.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
try:
    from hpcvar.dev import probe, slurm, testbed
    from hpcvar.parsers import apps
except ImportError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(REPO / "src"))
    from hpcvar.dev import probe, slurm, testbed
    from hpcvar.parsers import apps

SOURCE = "reframe_tests/apps/amgproxy/src"
#: As the suite's launch: output through ts after srun, the program line-buffered.
JOB = """#!/bin/bash
exec 3>&1 > >(ts '%.s' | tee {out})
HPCVAR_TS_PID=$!
srun -n2 --mpi=pmix stdbuf -oL -eL {binary} -P 2 1 1 -n {n} {n} {n} -stencil 27 -steps {steps} -tol 1e-8
exec 1>&3 3>&-
wait $HPCVAR_TS_PID
"""


def build(revision: str, work: Path) -> Path:
    """The proxy's source at ``revision`` (git), built into ``work/<revision>``."""
    out = work / revision.replace("/", "_")
    out.mkdir(parents=True)
    for name in ("amgproxy.c", "Makefile"):
        text = subprocess.run(["git", "show", f"{revision}:{SOURCE}/{name}"], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout
        (out / name).write_text(text)
    made = subprocess.run(["make", "-s", "-C", str(out)], capture_output=True, text=True)
    if made.returncode != 0:
        raise SystemExit(f"bench_srun_stamps: building the proxy of {revision} failed:\n{made.stderr}")
    return out / "hpcvar-amgproxy"


def launch(binary: Path, out: Path, env: dict, node: list[str], n: int, steps: int) -> pd.DataFrame:
    script = out.with_suffix(".sh")
    script.write_text(JOB.format(out=out, binary=binary, n=n, steps=steps))
    script.chmod(0o755)
    proc = subprocess.run(["sbatch", "-W", "-N1", "-n2", *node, "-o", str(out.with_suffix(".log")),
                           "--chdir", str(out.parent), str(script)], env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{script}: sbatch failed: {proc.stderr.strip()} (log: {out.with_suffix('.log')})")
    parsed = apps.read(out)
    if not parsed.timestamped:
        raise SystemExit(f"bench_srun_stamps: {out} has no timestamps (is moreutils' ts installed?)")
    return parsed.steps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--revisions", nargs="+", default=["HEAD"], help="git revisions of the proxy's source")
    p.add_argument("--launches", type=int, default=10, help="launches per revision (alternated)")
    p.add_argument("--n", type=int, default=24, help="points per rank and direction (the toy test: 32)")
    p.add_argument("--steps", type=int, default=8, help="time steps (at least 2: the first against the others)")
    a = p.parse_args()
    if a.steps < 2:
        p.error("--steps: at least 2")
    a.revisions = list(dict.fromkeys(a.revisions))
    layout = slurm.Layout(slurm.state_dir())
    env = slurm.slurm_env(layout)
    spec = testbed.load_spec(layout.root)
    on_testbed = spec is not None and testbed.is_built(spec)
    # The testbed's nodes are namespaces: Open MPI on its data network, as the probe runs it.
    env.update(probe.MPI_ENV if on_testbed else {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                                                  "OMPI_MCA_mpi_yield_when_idle": "1"})
    node = ["-w", spec.nodes_of(0)[0]] if on_testbed else []
    work = Path(tempfile.mkdtemp(prefix="hpcvar-bench-stamps-", dir="/var/tmp"))
    binaries = {rev: build(rev, work) for rev in a.revisions}
    rows = []
    for k in range(a.launches):
        for rev, binary in binaries.items():
            steps = launch(binary, work / f"{rev.replace('/', '_')}-{k}.out", env, node, a.n, a.steps)
            gap = (steps["duration_s"] - steps["reported_s"]).to_numpy()
            rows.append({"revision": rev, "launch": k, "first_ms": gap[0] * 1e3,
                         "others_max_ms": np.abs(gap[1:]).max() * 1e3, "first_own_s": steps["reported_s"].iloc[0]})
            print(f"{rev} launch {k + 1}/{a.launches}: first step stamped {rows[-1]['first_ms']:+.1f} ms against "
                  f"its own {rows[-1]['first_own_s']:.3f} s", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    per = table.groupby("revision", sort=False).agg(
        launches=("launch", "size"), first_median_ms=("first_ms", "median"), first_min_ms=("first_ms", "min"),
        first_off_20ms=("first_ms", lambda s: int((s.abs() > 20).sum())), others_max_ms=("others_max_ms", "max"))
    print(f"srun stamps: the AMG proxy, 2 ranks, -n {a.n}^3, {a.steps} steps, {'testbed node' if on_testbed else 'local'}"
          f" Slurm; stamped minus own step time")
    print(per.round(1).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
