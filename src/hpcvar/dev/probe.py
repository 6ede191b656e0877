"""Measure the testbed: a victim's MPI latency under a chosen background, with the link counters
of its window (``benchmarks/bench_testbed.py`` prints the table; tests/test_testbed.py checks it).

Backgrounds, each another Unix user's Slurm job (the second user of ``hpcvar dev slurm up``):

* ``alone``: nothing;
* ``aggressor-across``: TCP traffic both ways as fast as the links allow (the planted culprit's
  generator of a testbed campaign, ``hpcvar.campaign.background.TRAFFIC``: iperf3 in the kernel,
  little CPU), :data:`STREAMS` connections each way, between two nodes in different groups, so it
  crosses the global link the victim uses;
* ``aggressor-inside``: the same traffic between two nodes of one group: as much traffic, none of
  it on the global link;
* ``cpu``: busy loops on two nodes, no traffic: what the two shared CPUs alone do.

The victim is the collectives microbenchmark (a 2-rank allreduce, every iteration timed) on two
nodes in different groups.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from hpcvar.campaign.background import TRAFFIC
from hpcvar.dev.linksampler import store_files
from hpcvar.dev.testbed import TestbedSpec
from hpcvar.parsers import ldms, microbenchmarks

REPO = Path(__file__).resolve().parents[3]
BACKGROUNDS = ("alone", "aggressor-across", "aggressor-inside", "cpu")
#: The aggressor's TCP connections each way. The global link's queue is first in, first out, and
#: with one connection each way it dropped nothing: each connection's share was what it had in
#: flight, and the victim's share swung with iperf3's congestion window (medians of 87-184 ms in
#: 8 launches, a third of them near the CPU-only control). With four the victim's share stays
#: small: 139-188 ms in 8 launches (the queue then drops a few dozen packets).
STREAMS = 4
#: Open MPI on the testbed's networks (as the ReFrame system `testbed`).
MPI_ENV = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self", "OMPI_MCA_btl_tcp_if_include": "10.77.0.0/16",
           "OMPI_MCA_oob_tcp_if_include": "10.78.0.0/24", "OMPI_MCA_hwloc_base_binding_policy": "none",
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_mpi_yield_when_idle": "1"}


@dataclass(frozen=True)
class Placement:
    """Nodes of the victim and the backgrounds: victim across groups g0 and g1."""

    victim: tuple[str, str]
    across: tuple[str, str]
    inside: tuple[str, str]

    @classmethod
    def of(cls, spec: TestbedSpec) -> Placement:
        g0, g1 = spec.nodes_of(0), spec.nodes_of(1)
        if len(g0) < 3 or len(g1) < 2:
            raise ValueError("the probe needs three nodes in group 0 and two in group 1 (e.g. --nodes 6 --groups 2)")
        return cls(victim=(g0[0], g1[0]), across=(g0[1], g1[1]), inside=(g0[1], g0[2]))


def build(work: Path) -> Path:
    """The microbenchmarks built into ``work/bin`` (outside /tmp: every node must see them)."""
    src = REPO / "reframe_tests" / "microbenchmarks" / "src"
    out = Path(work) / "bin"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    subprocess.run(["make", "-s", "-C", str(out)], check=True, capture_output=True, text=True)
    return out


def _env(slurm_env: dict) -> dict:
    return {**slurm_env, **MPI_ENV}


def start_background(kind: str, nodes: tuple[str, str], bindir: Path, work: Path, slurm_env: dict, user: str,
                     duration: float) -> subprocess.Popen | None:
    """Another user's job on ``nodes`` for ``duration`` seconds; None for ``alone``."""
    if kind == "alone":
        return None
    if kind == "cpu":
        step = f"srun -N2 -n4 -w {','.join(nodes)} timeout {duration:.0f} sh -c 'while :; do :; done'"
    else:
        # An MPI traffic generator needs the CPUs to progress its messages (rendezvous, TCP
        # fragments): with the two cores busy elsewhere its traffic, and so its effect, shrank by
        # half. Kernel TCP keeps the link full whatever the CPUs do.
        tag = Path(work) / f"aggressor-{time.monotonic_ns()}"
        script = tag.with_suffix(".sh")
        script.write_text("#!/bin/sh\n" + TRAFFIC.format(server=f"{tag}.server-addr", port=5299, log=tag,
                                                         bitrate=0, streams=STREAMS,
                                                         duration=f"{duration:.0f}") + "\n")
        script.chmod(0o755)
        step = f"srun -N2 -n2 --ntasks-per-node=1 -w {','.join(nodes)} {script}"
    cmd = ["runuser", "-u", user, "--", "sh", "-c", step]
    return subprocess.Popen(cmd, env=_env(slurm_env), cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_victim(nodes: tuple[str, str], bindir: Path, work: Path, slurm_env: dict, iterations: int = 30,
               size: int = 262144) -> pd.DataFrame:
    """The victim's iterations: a 2-rank allreduce of ``size`` bytes, slowest rank's time (us)."""
    out = Path(work) / f"victim-{time.monotonic_ns()}.csv"
    cmd = ["srun", "-N2", "-n2", "-w", ",".join(nodes), "--mpi=pmix", str(bindir / "hpcvar-collectives"),
           "-s", str(size), "-c", "allreduce", "-i", str(iterations), "-w", "3", "-o", str(out)]
    proc = subprocess.run(cmd, env=_env(slurm_env), cwd=work, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"victim failed: {proc.stderr[-2000:]}")
    return microbenchmarks.read_collectives(out)


def link_window(store: Path, start: float, end: float, router: str, device: str) -> dict[str, float]:
    """The change of one link end's counters over [start, end], and the share of the window with
    a queue (``QUEUED_US`` over the window's length).

    Both samples come from one store file: the sampler writes a file per start (``links.<epoch>``),
    and a restart (``down`` then ``up``, another shape) starts every counter again from the new
    network's, so a difference across two files means nothing. The window must lie in the run of
    the sampler that took the first sample at or after ``end``: the first file, in the order
    written, that has one (two runs never overlap)."""
    for source in store_files(store):
        table = ldms.read(source)
        mine = table[table["producer"] == router].sort_values("time", kind="stable")
        after = mine[mine["time"] >= end].head(1)
        if not after.empty:
            before = mine[mine["time"] <= start].tail(1)
            break
    else:
        raise RuntimeError(f"the link store {store} has no sample of {router} at or after {end}")
    if before.empty:
        raise RuntimeError(f"{source}: no sample of {router} at or before {start}: the window starts before "
                           "this run of the link sampler (the testbed came up after it began)")
    out = {}
    for metric in ("TX_BYTES", "OVERLIMITS", "QUEUED_US", "BACKLOG_BMS", "DROPS"):
        col = f"GL_{metric}#{device}"
        if col not in after.columns:
            raise RuntimeError(f"{source}: router {router} has no link to {device} (no column {col})")
        out[metric.lower()] = float(after[col].iloc[0]) - float(before[col].iloc[0])
    span = float(after["time"].iloc[0]) - float(before["time"].iloc[0])
    out["queued_share"] = out["queued_us"] / 1e6 / span
    return out


def measure(spec: TestbedSpec, state: Path, work: Path, slurm_env: dict, user: str, repetitions: int = 3,
            iterations: int = 30, backgrounds=BACKGROUNDS, progress=print) -> pd.DataFrame:
    """One row per (background, repetition), the backgrounds interleaved: the victim's median and
    p90 (ms) and the global link's counters (router of the victim's first node, towards the other
    group) over the victim's run."""
    place = Placement.of(spec)
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o1777)  # the other user's jobs write there too
    bindir = build(work)
    store = Path(state) / "ldms"
    router, device = spec.router(spec.group_of(place.victim[0])), spec.router(spec.group_of(place.victim[1]))
    rows = []
    for rep in range(repetitions):
        for kind in backgrounds:
            nodes = place.inside if kind == "aggressor-inside" else place.across if kind == "aggressor-across" \
                else place.inside
            bg = start_background(kind, nodes, bindir, work, slurm_env, user, duration=30 + iterations * 0.5)
            try:
                if bg is not None:
                    time.sleep(3)  # the background's job running and communicating
                t0 = time.time()
                table = run_victim(place.victim, bindir, work, slurm_env, iterations)
                t1 = time.time()
            finally:
                if bg is not None:
                    subprocess.run(["scancel", "-u", user], env=slurm_env, capture_output=True)
                    bg.wait(timeout=60)
            time.sleep(1.5)  # a link sample after the window
            link = link_window(store, t0, t1, router, device)
            ms = table["max_us"].to_numpy() / 1000
            rows.append({"background": kind, "repetition": rep, "median_ms": float(np.median(ms)),
                         "p90_ms": float(np.quantile(ms, 0.9)), **{f"gl_{k}": v for k, v in link.items()}})
            progress(f"probe: {kind} repetition {rep + 1}/{repetitions}: median {rows[-1]['median_ms']:.1f} ms, "
                     f"global link queued {link['queued_share']:.2f} of the time")
            time.sleep(1)
    return pd.DataFrame(rows)
