"""Other users' jobs around a campaign's rounds, with known causes: the planted workload of a
campaign on the dev clusters (``campaign.background``; config/campaign-testbed.yaml).

Every configured job is present in its ``share`` of the rounds, placed at random by its kind,
submitted as its user (``sbatch --uid``: the round runs as root on the dev cluster) before the
round's ReFrame starts, and cancelled after it. Which rounds it is present in is a *balanced*
design over the campaign's rounds (``design: balanced``, the default): each job is present in
exactly ``round(share x rounds)`` of them, and of many random draws of that, the one whose
presences are least correlated with each other and with the upgrade (below) is kept
(re-randomisation; Morgan and Rubin, Ann. Stat. 2012). A short campaign drawn round by round can
otherwise put a decoy beside the culprit in most of the culprit's rounds, and then no analysis can
tell the two apart. ``design: independent`` draws every round's presence on its own, as do rounds
requested beyond the campaign's fixed ones. Both are drawn from the seed (and the number of rounds),
so a rerun of a round plants the same:

* ``global-traffic``: TCP traffic both ways (``iperf3 --bidir``) at ``bitrate`` each way between
  nodes of different groups, so it crosses the global links: the *culprit*;
* ``group-traffic``: the same traffic between nodes of one group: as much traffic, harmless to the
  global links (a *decoy*);
* ``cpu``: busy loops, one per node, each busy for ``load`` of the time, no traffic (a decoy that
  loads the CPUs the testbed's nodes share).

The traffic takes the nodes' data network (interface ``data0`` on the testbed) and, being TCP in
the kernel, little CPU: the testbed's nodes share two cores, and an MPI traffic generator spinning
on them would slow every job by CPU alone. Its ``bitrate`` is meant to lie between the global and
the node links' rates (the default 30 Mbit/s each way, on the testbed's 50 and 200 Mbit/s links):
it then takes most of a global link and little of a node link, so only the runs sharing a global
link with it feel it, and a slower global link (the upgrade) leaves them even less room.

``upgrade`` plants a change of the fabric: from round ``round`` on, every global link is shaped
to ``global_rate`` (e.g. 50 -> 15 Mbit/s), what a regression check should find. What was planted,
when and where, is written per round (``rounds/<id>/background.json``) and gathered in the
campaign's truth file ``<results>/truth.json``, read by nothing but the checks.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from hpcvar.data.rawlayout import TRUTH
from hpcvar.util.fileio import atomic_write_json

KINDS = ("global-traffic", "group-traffic", "cpu")
#: The traffic's job step: task 0 serves (its data address in a file beside), task 1 connects with
#: ``streams`` TCP connections each way (the campaign's jobs: one), each at ``bitrate`` (iperf3's
#: ``-b`` is per connection; 0: as fast as the link allows).
TRAFFIC = r"""if [ "$SLURM_PROCID" = 0 ]; then
  addr=$(ip -4 -o addr show data0 2>/dev/null | awk '{{print $4}}' | cut -d/ -f1); [ -n "$addr" ] || addr=$(hostname)
  echo "$addr" > {server}.tmp && mv {server}.tmp {server}
  exec iperf3 -s -1 -p {port} > {log}.server 2>&1
else
  while [ ! -s {server} ]; do sleep 0.2; done; sleep 0.5
  exec iperf3 -c $(cat {server}) -p {port} --bidir -P {streams} -b {bitrate} -t {duration} > {log}.client 2>&1
fi"""
#: The CPU load's job step, one per node: busy for ``load`` of every 100 ms (the system's Python:
#: the other users cannot run the campaign's virtual environment).
CPU_LOAD = """import time
while True:
    t = time.perf_counter() + {busy}
    while time.perf_counter() < t:
        pass
    time.sleep({idle})"""
BITRATE_RE = r"^[0-9]+(\.[0-9]+)?[KMG]?$"
DESIGNS = ("balanced", "independent")
#: Random draws of the balanced design among which the least correlated is kept.
DRAWS = 2000


class BackgroundError(RuntimeError):
    """The planted workload could not be set up (the message says why)."""


@dataclass(frozen=True)
class BackgroundJob:
    user: str
    kind: str
    nodes: int = 2
    share: float = 0.5
    bitrate: str = "30M"
    load: float = 1.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise BackgroundError(f"background job of {self.user}: kind {self.kind!r}, expected one of {', '.join(KINDS)}")
        if not 0.0 <= self.share <= 1.0:
            raise BackgroundError(f"background job of {self.user}: share {self.share} is not in [0, 1]")
        if not re.match(BITRATE_RE, self.bitrate):
            raise BackgroundError(f"background job of {self.user}: bitrate {self.bitrate!r}, expected iperf3's "
                                  "notation such as 40M")
        if not 0.0 < self.load <= 1.0:
            raise BackgroundError(f"background job of {self.user}: load {self.load} is not in (0, 1]")
        if self.nodes < 1 or (self.kind != "cpu" and self.nodes != 2):
            raise BackgroundError(f"background job of {self.user}: {self.nodes} nodes (traffic runs between two)")


@dataclass(frozen=True)
class Background:
    jobs: tuple[BackgroundJob, ...]
    topology: str
    seed: int = 0
    upgrade_round: int | None = None
    upgrade_rate: str | None = None
    settle_s: float = 3.0
    workdir: str = "background"
    design: str = "balanced"
    #: The campaign's fixed rounds (``campaign.rounds``), over which the balanced design is drawn.
    rounds: int | None = None

    def __post_init__(self):
        if self.design not in DESIGNS:
            raise BackgroundError(f"campaign.background.design {self.design!r}, expected one of {', '.join(DESIGNS)}")

    @classmethod
    def from_config(cls, doc: dict, topology: str | None, rounds: int | None = None) -> Background:
        if not topology:
            raise BackgroundError("campaign.background needs campaign.topology: the map its placements follow")
        upgrade = doc.get("upgrade") or {}
        return cls(jobs=tuple(BackgroundJob(**j) for j in doc.get("jobs", [])), topology=str(topology),
                   seed=int(doc.get("seed", 0)), upgrade_round=upgrade.get("round"),
                   upgrade_rate=upgrade.get("global_rate"), settle_s=float(doc.get("settle_s", 3.0)),
                   design=doc.get("design", "balanced"), rounds=rounds)


@dataclass
class Planted:
    """What one round had around it (the round's truth)."""

    round: str
    index: int
    global_rate: str | None
    jobs: list[dict] = field(default_factory=list)
    start: float | None = None
    end: float | None = None


def _groups(topology: str) -> dict[str, list[str]]:
    from hpcvar.system.topology import Topology

    topo = Topology.from_file(topology)
    return {g: sorted(topo.table.index[topo.table["group"] == g]) for g in topo.groups}


def place(job: BackgroundJob, groups: dict[str, list[str]], rng: np.random.Generator) -> list[str]:
    """Nodes for a job by its kind, at random: across groups, inside one group, or anywhere."""
    names = sorted(groups)
    if job.kind == "global-traffic":
        if len(names) < 2:
            raise BackgroundError("global traffic needs two groups")
        chosen = rng.choice(len(names), size=min(len(names), job.nodes), replace=False)
        picks = [str(rng.choice(groups[names[i]])) for i in chosen]
        rest = [n for g in names for n in groups[g] if n not in picks]
        picks += [str(n) for n in rng.choice(rest, size=job.nodes - len(picks), replace=False)]
        return sorted(picks)
    if job.kind == "group-traffic":
        fit = [g for g in names if len(groups[g]) >= job.nodes]
        if not fit:
            raise BackgroundError(f"no group has {job.nodes} nodes for {job.user}'s group traffic")
        g = fit[int(rng.integers(len(fit)))]
        return sorted(str(n) for n in rng.choice(groups[g], size=job.nodes, replace=False))
    every = [n for g in names for n in groups[g]]
    return sorted(str(n) for n in rng.choice(every, size=job.nodes, replace=False))


def _imbalance(columns: np.ndarray) -> tuple[float, float]:
    """The largest |Pearson r| between two columns that vary, and the sum of the squares of all
    of them (both 0 for fewer than two such columns): what the design makes small, in that order."""
    varying = columns[:, columns.std(axis=0) > 0].astype(float)
    if varying.shape[1] < 2:
        return 0.0, 0.0
    r = np.abs(np.corrcoef(varying.T)[~np.eye(varying.shape[1], dtype=bool)])
    return round(float(r.max()), 9), round(float((r ** 2).sum()), 9)


def _better_exchange(design: np.ndarray, after: np.ndarray, score: tuple) -> tuple | None:
    """The first design that exchanging a present and an absent round of one job makes less
    imbalanced, with its imbalance; None when no exchange does."""
    for k in range(design.shape[1]):
        for i in np.flatnonzero(design[:, k]):
            for j in np.flatnonzero(~design[:, k]):
                trial = design.copy()
                trial[[i, j], k] = trial[[j, i], k]
                trial_score = _imbalance(np.hstack([trial, after]))
                if trial_score < score:
                    return trial, trial_score
    return None


#: The balanced design's file in a campaign's results (``background/design.json``): drawn by the
#: first round, read by the others. Its ``inputs`` are everything the draw depends on.
DESIGN_FILE = Path("background") / "design.json"


def _counts(bg: Background) -> list[int]:
    """Rounds each job is present in, in the balanced design: its share of the campaign's rounds."""
    return [int(round(job.share * bg.rounds)) for job in bg.jobs]


def _design_inputs(bg: Background) -> dict:
    return {"algorithm": "balanced-1", "draws": DRAWS, "seed": bg.seed, "rounds": bg.rounds,
            "upgrade_round": bg.upgrade_round, "counts": _counts(bg)}


def stored_schedule(bg: Background, path: Path) -> np.ndarray:
    """:func:`schedule`, kept in ``path`` for the campaign's other rounds: each round is a process
    of its own, and the draw takes about a second of each. A file drawn for other inputs (another
    seed, number of rounds, upgrade or shares) is drawn again and replaced."""
    inputs = _design_inputs(bg)
    try:
        doc = json.loads(path.read_text())
        if doc.get("inputs") == inputs:
            return np.array(doc["design"], dtype=bool).reshape(bg.rounds, len(bg.jobs))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing, unreadable or from another design: drawn again below
    design = schedule(bg)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"inputs": inputs, "design": design.astype(int).tolist(),
                             "jobs": [job.user for job in bg.jobs]})
    return design


@lru_cache(maxsize=8)
def schedule(bg: Background) -> np.ndarray:
    """The balanced design: rounds x jobs, True where the job is present (see the module's text).

    Each job is present in exactly ``round(share x rounds)`` rounds. Of :data:`DRAWS` random
    draws, the one with the smallest largest correlation between two jobs' presences, or between a
    job's presence and the rounds after the upgrade (then the smallest sum of squares of all of
    them), is kept, and improved by exchanging a present and an absent round of one job while
    that makes it smaller (coordinate exchange): twelve rounds then reach zero correlation."""
    if not bg.rounds:
        raise BackgroundError("a balanced background needs the campaign's number of rounds")
    n = bg.rounds
    rng = np.random.default_rng([bg.seed, n])
    counts = _counts(bg)
    after = (np.arange(1, n + 1) >= (bg.upgrade_round or n + 1))[:, None]
    best, best_score = None, (np.inf, np.inf)
    for _ in range(DRAWS):
        design = np.zeros((n, len(bg.jobs)), dtype=bool)
        for k, c in enumerate(counts):
            design[rng.choice(n, size=c, replace=False), k] = True
        score = _imbalance(np.hstack([design, after]))
        if score < best_score:
            best, best_score = design, score
    while best_score > (0.0, 0.0) and (found := _better_exchange(best, after, best_score)):
        best, best_score = found
    return best


def plan(bg: Background, round_id: str, index: int, results: Path | None = None) -> Planted:
    """Who is present in round ``index`` (1-based) and where: the same for the same seed, design
    and number of rounds. With ``results`` (the campaign's), the balanced design is kept there
    (:data:`DESIGN_FILE`) for the other rounds."""
    rng = np.random.default_rng([bg.seed, index])
    groups = _groups(bg.topology)
    rate = bg.upgrade_rate if bg.upgrade_round is not None and index >= bg.upgrade_round else None
    planted = Planted(round_id, index, rate)
    balanced = bg.design == "balanced" and bg.rounds is not None and index <= bg.rounds
    design = ((stored_schedule(bg, Path(results) / DESIGN_FILE) if results is not None else schedule(bg))[index - 1]
              if balanced else None)
    for k, job in enumerate(bg.jobs):
        drawn = rng.random() < job.share  # drawn either way: the placements do not depend on the design
        present = bool(design[k]) if balanced else drawn
        nodes = place(job, groups, rng)  # drawn either way, so one job's presence does not move the others
        if present:
            planted.jobs.append({"user": job.user, "kind": job.kind, "nodes": nodes,
                                 **({"load": job.load} if job.kind == "cpu" else {"bitrate": job.bitrate})})
    return planted


def _uid_options(user: str) -> list[str]:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise BackgroundError(f"user {user!r}: no such Unix user (`hpcvar dev slurm up --extra-user {user}` creates "
                              "and registers one)") from None
    return [f"--uid={user}", f"--gid={grp.getgrgid(pw.pw_gid).gr_name}"]


def submit(planted: Planted, results: Path, env: dict, duration_s: int = 3600) -> list[str]:
    """Submit the round's jobs as their users; their job ids."""
    if os.geteuid() != 0:
        raise BackgroundError("other users' jobs are submitted with sbatch --uid, which needs root")
    if shutil.which("iperf3") is None and any(j["kind"] != "cpu" for j in planted.jobs):
        raise BackgroundError("the planted traffic needs iperf3 (apt-get install iperf3; apt-packages.txt)")
    work = Path(results).resolve() / "background" / planted.round
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o1777)
    ids = []
    for k, job in enumerate(planted.jobs):
        n = len(job["nodes"])
        if job["kind"] == "cpu":
            script = work / f"{job['user']}.py"
            script.write_text(CPU_LOAD.format(busy=round(0.1 * job["load"], 4), idle=round(0.1 * (1 - job["load"]), 4)))
            step = f"srun -N{n} -n{n} --ntasks-per-node=1 timeout {duration_s} /usr/bin/python3 {script}"
        else:
            (work / f"{job['user']}.server-addr").unlink(missing_ok=True)  # a rerun of the round starts afresh
            script = work / f"{job['user']}.sh"
            script.write_text("#!/bin/sh\n" + TRAFFIC.format(server=work / f"{job['user']}.server-addr",
                                                            port=5301 + k, log=work / job["user"],
                                                            bitrate=job["bitrate"], streams=1,
                                                            duration=duration_s) + "\n")
            script.chmod(0o755)
            step = f"srun -N2 -n2 --ntasks-per-node=1 {script}"
        name = f"hpcvar-bg-{planted.round}-{job['user']}"
        cmd = ["sbatch", "--parsable", *_uid_options(job["user"]), "-J", name, "-N", str(n), "-n", str(n),
               "-w", ",".join(job["nodes"]), "--time", f"{duration_s // 60 + 5}", "-o", f"{work}/{job['user']}.out",
               "--chdir", str(work), "--wrap", step]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise BackgroundError(f"submitting {job['user']}'s job failed: {proc.stderr.strip()}")
        job["job_id"] = proc.stdout.strip().split(";")[0]
        ids.append(job["job_id"])
    return ids


def wait_running(ids: list[str], env: dict, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while ids:
        out = subprocess.run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T"], env=env, capture_output=True,
                             text=True, timeout=60).stdout.split()
        states = dict(zip(out[::2], out[1::2]))
        if all(states.get(i) == "RUNNING" for i in ids):
            return
        if time.monotonic() > deadline:
            raise BackgroundError(f"background jobs not running after {timeout:.0f} s: {states}")
        time.sleep(0.5)


def cancel(ids: list[str], env: dict) -> None:
    if ids:
        subprocess.run(["scancel", *ids], env=env, capture_output=True, timeout=60)


def set_fabric(bg: Background, planted: Planted) -> None:
    """The round's global link rate: the upgrade's from its round on, else the testbed's own."""
    if bg.upgrade_round is None:
        return
    from hpcvar.dev import slurm as dev
    from hpcvar.dev import testbed as tb

    spec = tb.load_spec(dev.state_dir())
    if spec is None:
        raise BackgroundError("campaign.background.upgrade changes the testbed's links: no testbed is up")
    rate = planted.global_rate or spec.global_rate
    if tb.global_rate(spec) != rate.lower():
        tb.set_global_rate(spec, rate)
    planted.global_rate = rate


def record(results: Path, planted: Planted, bg: Background) -> None:
    """The round's truth, and the campaign's truth file gathered from every round's."""
    results = Path(results)
    atomic_write_json(results / "rounds" / planted.round / "background.json", asdict(planted))
    rounds = []
    for path in sorted((results / "rounds").glob("*/background.json")):
        rounds.append(json.loads(path.read_text()))
    roles = {j.user: {"global-traffic": "culprit", "group-traffic": "decoy (traffic inside one group)",
                      "cpu": "decoy (CPU only)"}[j.kind] for j in bg.jobs}
    atomic_write_json(results / TRUTH, {
        "kind": "campaign background (planted causes)", "seed": bg.seed, "users": roles,
        "design": bg.design if bg.design == "independent" or bg.rounds else "independent (no number of rounds given)",
        "design_rounds": bg.rounds,
        "upgrade": {"round": bg.upgrade_round, "global_rate": bg.upgrade_rate} if bg.upgrade_round else None,
        "rounds": rounds})
