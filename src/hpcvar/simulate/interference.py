"""What-if interference experiments: a victim job and aggressor jobs on a simulated dragonfly.

Owns three things, usable on their own:

1. **The experiment description** (:func:`load_experiment`): a YAML file naming the victim, the
   aggressors, the placement policies, the routing algorithms, repetitions and a seed, plus a
   ``system:`` section for the simulated network. The job/policy part is independent of
   ``system:`` so the same file can drive real Slurm experiments (ReFrame test names, node counts,
   policies). Every error names the file, the key and (when it comes from the file) the line.
2. **Placement policies** (:data:`PLACEMENT_POLICIES`, :func:`place`, :func:`place_jobs`): choose
   non-overlapping node lists for jobs on any :class:`hpcvar.topology.Topology` - random nodes,
   random (whole) routers, random (whole) groups as in the Union study, and same group / same
   island / different islands as in the Dragonfly+ locality study (Salimi Beni and Cosenza,
   CLUSTER 2022). Deterministic for a numpy Generator; :class:`PlacementError` when impossible.
3. **A flow-level dragonfly model** (:class:`DragonflyNetwork`, :func:`simulate_workload`) and the
   experiment loop (:func:`run_experiment`): victim slowdown (total time, communication time,
   message latency) of each policy x routing x repetition against the victim alone, and the same
   for every aggressor.

The model
---------
It is a steady-state, flow-level stand-in for the packet-level CODES simulations of the Union
study (Union: An Automatic Workload Manager for Accelerating Network Simulation; victim HPC jobs
co-running with ML jobs on 1D and 2D dragonflies under random-node/-router/-group placement and
minimal/adaptive routing). It runs in seconds, not hours, and keeps the mechanisms behind the
study's findings, not its packet-level detail.

*Network.* ``groups`` groups of routers; a group is 1D (``routers_per_group`` routers, all-to-all
local links) or 2D (``rows`` x ``cols`` as on a Cray XC: all-to-all within each row and within
each column). Each router has ``global_links_per_router`` global ports; group g's port
``p = k (G-1) + (d-1)`` (router ``p // h``) is the k-th of ``K = floor(a h / (G-1))`` parallel
links to group ``g+d mod G`` (spare ports stay unused). Every link is two directed channels of
its bandwidth; every node has its own injection and ejection channel. One rank per node.

*Traffic.* A job's pattern (:data:`PATTERNS`) gives, per iteration, rounds of messages between
ranks (rank i on the job's i-th node in topology order, as a Slurm node list orders them).
Messages in a round are concurrent and the round ends with its slowest message (a synchronous
step); rounds follow one another, then the job computes for ``compute_s``.

*Routing.* Minimal: local hop(s) to the router holding the global link to the destination group
(2D: along the row, then along the column), the global hop, local hop(s) in the destination
group; among the K parallel global links the one with index ``(src + dst) mod K`` (a static
spread). Adaptive (UGAL-style): per inter-group message, the minimal path or a Valiant path through
a random intermediate group (minimal to it, minimal on), chosen by comparing ``hops x (1 + queue)``
with ``queue = rho/(1-rho)`` of the path's busiest channel as the message meets it (other jobs at
their mean load, its own job's round-mates in flight). Choices are averaged over solver rounds
(method of successive averages), so they react to the congestion they cause and settle instead of
flapping; the result is a split of each message's traffic over its two paths. Intra-group traffic
is always routed minimally.

*Load and latency.* Channel utilisation ``rho`` = offered bytes/s over bandwidth. Other jobs load a
channel with their time-averaged rate (bytes per iteration / iteration time). A message of ``m``
bytes on a path pays, per channel, the hop latency, its first packet's serialisation and a queueing
wait of ``packet/B x min(rho/(1-rho), cap)`` (M/M/1 waiting time in packet times, capped at the
buffer depth ``buffer_bytes/packet_bytes`` because credit flow control bounds a queue), and once
its remaining ``m - packet`` bytes at the bottleneck channel's fair share ``B/(1 + queue)``
(processor sharing: ``B (1 - rho)`` below the cap). ``rho`` seen by a message is the other jobs'
load plus its round-mates' bytes (the other messages of its job and round) spread over its own
lifetime: its latency ``L`` is the fixed point ``L = latency(background + round-mates / (B L))``,
found by bisection (two equal messages sharing a channel each get half of it). A round ends with
its slowest message. A job's iteration time (compute + rounds) is in turn a fixed point with every
other job's mean load; the solver damps it over ``solver_rounds`` rounds.

*Per-iteration samples.* The victim (and every aggressor) gets ``samples`` iterations: in each, every
other job is in its communication phase with probability ``duty = comm/(compute + comm)`` (a random
burst phase, so a periodic ML allreduce either hits an iteration at its burst rate or not at all),
its rate multiplied by a log-normal ``fluctuation`` (mean 1), and the sample's latencies and round
times are solved at that load.

Assumptions and limits: steady state (no transients, no packet reordering, no deadlock); queues
are independent per channel; fair sharing between flows; one rank per node and no intra-node
traffic; routers have no internal contention; a round's messages have equal sizes (true of every
pattern here); offered load may exceed a channel's bandwidth (utilisation > 1) and then the queue
sits at the cap: such numbers are bounds, not predictions. Defaults (:class:`SystemSpec`): the
bandwidths of the Union study's systems (terminal 16, local 4.69, global 5.25 GiB/s), and CODES'
usual 4 KiB packets, 64 KiB virtual-channel buffers and 90 ns router delay.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import hostlist
import numpy as np
import pandas as pd
import yaml

from hpcvar.grids import factor
from hpcvar.parsers.errors import ParseError
from hpcvar.progress import Progress
from hpcvar.simulate.presets import Preset
from hpcvar.simulate.system import build_topology
from hpcvar.topology import Topology

GIB = 2.0 ** 30

# =============================================================================================
# Experiment description
# =============================================================================================

#: Traffic patterns a job can have (n: the job's nodes, one rank each), with what an iteration sends.
PATTERNS: dict[str, str] = {
    "allreduce": "recursive doubling: log2(n) rounds, rank i exchanges message_bytes with i xor 2^k",
    "periodic-allreduce": "ML-style burst: ring allreduce of message_bytes (2(n-1) rounds of message_bytes/n "
                          "to the next rank), then compute_s (> 0) until the next burst",
    "alltoall": "pairwise exchange: n-1 rounds, rank i sends message_bytes to i+r",
    "halo": "nearest neighbours on a periodic `dims`-dimensional grid (default 3; MILC: 4): one round, "
            "message_bytes to each of the 2 x dims neighbours",
    "bcast": "binomial tree from rank 0: log2(n) rounds",
    "reduce": "binomial tree to rank 0: log2(n) rounds",
    "uniform-random": "one round, each rank sends `messages` (default 1) messages to uniformly random ranks",
    "shift": "one round, rank i sends to rank i + `offset` (default n/2): adversarial for a dragonfly when "
             "offset is the job's nodes per group",
}
_PATTERN_KEYS = {"halo": {"dims"}, "uniform-random": {"messages"}, "shift": {"offset"}}
_JOB_KEYS = {"name", "test", "pattern", "nodes", "message_bytes", "compute_s", "fluctuation", "options"}

ROUTINGS = ("minimal", "adaptive")

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([KMG]i?B|B)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30}


class ExperimentError(ParseError):
    """A bad experiment description: names the file, the key and, if known, the line."""

    def __init__(self, path: str | Path, key: str, message: str, line: int | None = None):
        self.key = key
        super().__init__(path, f"{key}: {message}" if key else message, line)


@dataclass(frozen=True)
class JobSpec:
    """One job of an experiment: the victim or an aggressor."""

    name: str
    role: str                      # "victim" or "aggressor"
    pattern: str
    nodes: int
    message_bytes: int
    compute_s: float = 0.0         # computation between communication phases (ML: the burst period)
    fluctuation: float = 0.0       # log-normal sigma of the job's rate, drawn per sampled iteration
    test: str | None = None        # the ReFrame test that plays this job in real experiments
    options: tuple[str, ...] = ()  # extra ReFrame arguments for that test (real experiments)
    dims: int = 3                  # halo
    messages: int = 1              # uniform-random
    offset: int | None = None      # shift (None: nodes // 2)


@dataclass(frozen=True)
class SystemSpec:
    """The simulated dragonfly (the ``system:`` section)."""

    groups: int
    group_shape: str               # "1d" or "2d"
    rows: int                      # 1 for a 1d group
    cols: int                      # routers_per_group for a 1d group
    nodes_per_router: int
    global_links_per_router: int
    groups_per_island: int = 0     # 0: no islands (every group its own)
    terminal_gib_s: float = 16.0   # Union study, section IV-A
    local_gib_s: float = 4.69
    global_gib_s: float = 5.25
    hop_latency_ns: float = 90.0   # router + wire delay per channel (CODES' usual router_delay)
    packet_bytes: int = 4096       # CODES' usual packet size
    buffer_bytes: int = 65536      # per-channel buffer (CODES' usual VC size): caps a queue

    @property
    def routers_per_group(self) -> int:
        return self.rows * self.cols

    @property
    def num_nodes(self) -> int:
        return self.groups * self.routers_per_group * self.nodes_per_router

    @property
    def queue_cap(self) -> float:
        """Largest queue (in packets) a channel holds: the rho/(1-rho) cap."""
        return self.buffer_bytes / self.packet_bytes


@dataclass(frozen=True)
class SlurmSpec:
    """How real experiments reach the cluster (the ``slurm:`` section; ``hpcvar interference run``)."""

    reframe_config: str = "config/reframe/settings.py"
    system: str = "generic-slurm"            # ReFrame system (its partition's access sets partition/account)
    checks: tuple[str, ...] = ("reframe_tests",)
    topology: str | None = None              # node -> router -> group map; None: sinfo's nodes, flat
    partition: str | None = None             # where sinfo looks for free nodes (None: every partition)
    free_states: tuple[str, ...] = ("idle",)  # node states a placement may use
    share_nodes: bool = False                # too few free nodes: let jobs share them (toy clusters)
    aggressor_duration_s: float | None = None  # None: 1.5 x the victim's time alone + 30 s
    settle_s: float = 5.0                    # wait after the aggressors run before starting the victim
    options: tuple[str, ...] = ()            # ReFrame arguments for every job


@dataclass(frozen=True)
class PolicySpec:
    """A placement policy for one run: the victim's policy and the aggressors'."""

    label: str
    victim: str
    aggressors: str


@dataclass(frozen=True)
class Experiment:
    """A validated experiment file: the jobs, policies, routings, repetitions and the system."""

    name: str
    victim: JobSpec
    aggressors: tuple[JobSpec, ...]
    policies: tuple[PolicySpec, ...]
    routing: tuple[str, ...]
    repetitions: int
    seed: int
    samples: int
    solver_rounds: int
    system: SystemSpec | None      # None: the file describes real experiments only
    slurm: SlurmSpec | None = None  # None: defaults (hpcvar interference run)
    source: str = "<dict>"
    document: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def jobs(self) -> tuple[JobSpec, ...]:
        return (self.victim, *self.aggressors)


def parse_bytes(value) -> int:
    """``8``, ``"486KiB"``, ``"28.15 MiB"``, ``"10KB"`` -> bytes (KB = 1000, KiB = 1024)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size in bytes, got {value!r}")
    if isinstance(value, (int, float)):
        n = float(value)
    else:
        m = _SIZE_RE.match(str(value))
        if not m:
            raise ValueError(f"expected a size such as 8, 486KiB or 28.15MiB, got {value!r}")
        n = float(m[1]) * _SIZE_UNITS[m[2]]
    if not n >= 1:
        raise ValueError(f"expected at least 1 byte, got {value!r}")
    return int(round(n))


def _yaml_lines(text: str) -> dict[tuple, int]:
    """1-based line of every key and list item of a YAML document, by path (``("victim", "nodes")``)."""
    lines: dict[tuple, int] = {}

    def walk(node, path):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = (*path, k.value)
                lines[key] = k.start_mark.line + 1
                walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[(*path, i)] = item.start_mark.line + 1
                walk(item, (*path, i))

    try:
        walk(yaml.compose(text), ())
    except yaml.YAMLError:
        pass
    return lines


def apply_overrides(doc: dict, overrides: dict[str, object], source: str = "<dict>") -> dict:
    """Set dotted keys (``system.groups``, ``aggressors.0.nodes``) in a copy of ``doc``."""
    import copy

    doc = copy.deepcopy(doc)
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node = doc
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            where = ".".join(parts[: i + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ExperimentError(source, dotted, f"--set: {where!r} is not an item of a "
                                                          f"{len(node)}-item list")
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
            else:
                raise ExperimentError(source, dotted, f"--set: {'.'.join(parts[:i])!r} is a value, not a section")
    return doc


def load_experiment(path: str | Path, overrides: dict[str, object] | None = None) -> Experiment:
    """Read and validate an experiment YAML file; ``overrides`` set dotted keys first (``--set``)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ExperimentError(path, "", f"cannot read the experiment file ({exc.strerror})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ExperimentError(path, "", f"not valid YAML: {getattr(exc, 'problem', exc)}",
                              mark.line + 1 if mark else None) from None
    if not isinstance(doc, dict):
        raise ExperimentError(path, "", "expected a mapping with victim, aggressors, policies, routing, ...", 1)
    if overrides:
        doc = apply_overrides(doc, overrides, str(path))
    return parse_experiment(doc, str(path), _yaml_lines(text), set(overrides or ()))


class _Checker:
    """Typed reads from the experiment document that fail with the file, the key and the line."""

    def __init__(self, source: str, lines: dict[tuple, int], overridden: set[str]):
        self.source, self.lines, self.overridden = source, lines, overridden

    def fail(self, path: tuple, message: str):
        key = ".".join(map(str, path))
        if key in self.overridden:
            message += " (set with --set)"
        line = None if key in self.overridden else self.lines.get(path) or self._nearest(path)
        raise ExperimentError(self.source, key, message, line)

    def _nearest(self, path: tuple) -> int | None:
        while path:
            path = path[:-1]
            if path in self.lines:
                return self.lines[path]
        return None

    def mapping(self, value, path, allowed: set[str] | None = None) -> dict:
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {type(value).__name__} {value!r}")
        if allowed is not None:
            unknown = sorted(set(map(str, value)) - allowed)
            if unknown:
                self.fail((*path, unknown[0]), f"unknown key; expected one of {', '.join(sorted(allowed))}")
        return value

    def integer(self, d: dict, key: str, path: tuple, minimum: int, default=None, maximum: int | None = None) -> int:
        if key not in d:
            if default is None:
                self.fail((*path, key), "missing (expected an integer)")
            return default
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail((*path, key), f"expected an integer >= {minimum}, got {v!r}")
        if v < minimum or (maximum is not None and v > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            self.fail((*path, key), f"expected an integer {bound}, got {v}")
        return v

    def number(self, d: dict, key: str, path: tuple, default: float, positive: bool = False) -> float:
        v = d.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 \
                or (positive and v == 0):
            self.fail((*path, key), f"expected a {'positive' if positive else 'non-negative'} number, got {v!r}")
        return float(v)

    def choice(self, d: dict, key: str, path: tuple, choices, default=None) -> str:
        if key not in d and default is None:
            self.fail((*path, key), f"missing (expected one of {', '.join(choices)})")
        v = d.get(key, default)
        if v not in choices:
            self.fail((*path, key), f"expected one of {', '.join(choices)}, got {v!r}")
        return v

    def string_list(self, d: dict, key: str, path: tuple) -> list:
        v = d.get(key)
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not v:
            self.fail((*path, key), "missing or empty (expected a non-empty list)")
        return v


def _parse_job(ck: _Checker, raw, path: tuple, role: str) -> JobSpec:
    d = ck.mapping(raw, path)
    pattern = ck.choice(d, "pattern", path, list(PATTERNS))
    ck.mapping(d, path, _JOB_KEYS | _PATTERN_KEYS.get(pattern, set()))
    nodes = ck.integer(d, "nodes", path, 1)
    if "message_bytes" not in d:
        ck.fail((*path, "message_bytes"), "missing (expected a size such as 8, 486KiB or 28.15MiB)")
    try:
        message_bytes = parse_bytes(d["message_bytes"])
    except ValueError as exc:
        ck.fail((*path, "message_bytes"), str(exc))
    compute_s = ck.number(d, "compute_s", path, 0.0)
    if pattern == "periodic-allreduce" and compute_s <= 0:
        ck.fail((*path, "compute_s"), "periodic-allreduce needs compute_s > 0: the time between bursts")
    test = d.get("test")
    if test is not None and not isinstance(test, str):
        ck.fail((*path, "test"), f"expected a test name, got {test!r}")
    name = d.get("name", (test or role) if role == "victim" else None)
    if not isinstance(name, str) or not name:
        ck.fail((*path, "name"), "missing (every aggressor needs a name)" if name is None
                else f"expected a name, got {name!r}")
    extra = {}
    if pattern == "halo":
        extra["dims"] = ck.integer(d, "dims", path, 1, default=3, maximum=4)
    if pattern == "uniform-random":
        extra["messages"] = ck.integer(d, "messages", path, 1, default=1)
    if pattern == "shift":
        extra["offset"] = ck.integer(d, "offset", path, 1, default=nodes // 2, maximum=nodes - 1)
    options = d.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        ck.fail((*path, "options"), f"expected a list of ReFrame arguments (strings), got {options!r}")
    return JobSpec(name=name, role=role, pattern=pattern, nodes=nodes, message_bytes=message_bytes,
                   compute_s=compute_s, fluctuation=ck.number(d, "fluctuation", path, 0.0), test=test,
                   options=tuple(options), **extra)


def _parse_system(ck: _Checker, raw) -> SystemSpec:
    path = ("system",)
    allowed = {f for f in SystemSpec.__dataclass_fields__} | {"routers_per_group"}
    d = ck.mapping(raw, path, allowed)
    shape = ck.choice(d, "group_shape", path, ["1d", "2d"])
    if shape == "1d":
        for key in ("rows", "cols"):
            if key in d:
                ck.fail((*path, key), "a 1d group has no rows/cols: give routers_per_group")
        rows, cols = 1, ck.integer(d, "routers_per_group", path, 2)
    else:
        if "routers_per_group" in d:
            ck.fail((*path, "routers_per_group"), "a 2d group is rows x cols: give rows and cols")
        # Routers are named as Cray XC blades (3 chassis per cabinet, 2 cabinets per group): <= 6 rows.
        rows, cols = ck.integer(d, "rows", path, 1, maximum=6), ck.integer(d, "cols", path, 1)
        if rows * cols < 2:
            ck.fail((*path, "cols"), "a group needs at least 2 routers")
    groups = ck.integer(d, "groups", path, 2)
    h = ck.integer(d, "global_links_per_router", path, 1)
    if rows * cols * h < groups - 1:
        ck.fail((*path, "global_links_per_router"),
                f"{rows * cols} routers x {h} global links = {rows * cols * h} global ports per group, but "
                f"every group needs a link to each of the {groups - 1} others")
    spec = SystemSpec(
        groups=groups, group_shape=shape, rows=rows, cols=cols,
        nodes_per_router=ck.integer(d, "nodes_per_router", path, 1),
        global_links_per_router=h,
        groups_per_island=ck.integer(d, "groups_per_island", path, 0, default=0),
        terminal_gib_s=ck.number(d, "terminal_gib_s", path, SystemSpec.terminal_gib_s, positive=True),
        local_gib_s=ck.number(d, "local_gib_s", path, SystemSpec.local_gib_s, positive=True),
        global_gib_s=ck.number(d, "global_gib_s", path, SystemSpec.global_gib_s, positive=True),
        hop_latency_ns=ck.number(d, "hop_latency_ns", path, SystemSpec.hop_latency_ns),
        packet_bytes=ck.integer(d, "packet_bytes", path, 1, default=SystemSpec.packet_bytes),
        buffer_bytes=ck.integer(d, "buffer_bytes", path, 1, default=SystemSpec.buffer_bytes))
    if spec.buffer_bytes < spec.packet_bytes:
        ck.fail((*path, "buffer_bytes"), f"a buffer holds at least one packet ({spec.packet_bytes} bytes)")
    return spec


def _parse_slurm(ck: _Checker, raw) -> SlurmSpec:
    path = ("slurm",)
    d = ck.mapping(raw, path, set(SlurmSpec.__dataclass_fields__))
    out = {}
    for key in ("reframe_config", "system"):
        if key in d:
            if not isinstance(d[key], str) or not d[key]:
                ck.fail((*path, key), f"expected a string, got {d[key]!r}")
            out[key] = d[key]
    for key in ("topology", "partition"):
        if d.get(key) is not None:
            if not isinstance(d[key], str):
                ck.fail((*path, key), f"expected a string or null, got {d[key]!r}")
            out[key] = d[key]
    for key in ("checks", "free_states", "options"):
        if key in d:
            v = d[key]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or (key != "options" and not v):
                ck.fail((*path, key), f"expected a list of strings, got {v!r}")
            out[key] = tuple(v)
    if "share_nodes" in d:
        if not isinstance(d["share_nodes"], bool):
            ck.fail((*path, "share_nodes"), f"expected true or false, got {d['share_nodes']!r}")
        out["share_nodes"] = d["share_nodes"]
    if d.get("aggressor_duration_s") is not None:
        out["aggressor_duration_s"] = ck.number(d, "aggressor_duration_s", path, 0.0, positive=True)
    if "settle_s" in d:
        out["settle_s"] = ck.number(d, "settle_s", path, SlurmSpec.settle_s)
    return SlurmSpec(**out)


def _parse_policy(ck: _Checker, raw, path: tuple) -> PolicySpec:
    names = list(PLACEMENT_POLICIES)
    if isinstance(raw, str):
        if raw not in PLACEMENT_POLICIES:
            ck.fail(path, f"unknown placement policy {raw!r}; expected one of {', '.join(names)} "
                          "or a mapping {victim: ..., aggressors: ...}")
        # Locality classes are about the victim; the aggressors are then scattered like a busy machine's jobs.
        return PolicySpec(raw, raw, raw if raw in JOB_WIDE_POLICIES else "random-nodes")
    d = ck.mapping(raw, path, {"victim", "aggressors", "label"})
    victim = ck.choice(d, "victim", path, names)
    aggressors = ck.choice(d, "aggressors", path, names, default="random-nodes")
    label = d.get("label", victim if aggressors == victim else f"{victim}/{aggressors}")
    return PolicySpec(str(label), victim, aggressors)


def parse_experiment(doc: dict, source: str = "<dict>", lines: dict[tuple, int] | None = None,
                     overridden: set[str] | None = None) -> Experiment:
    """Validate an experiment document (see ``config/experiments/interference.yaml``)."""
    ck = _Checker(source, lines or {}, overridden or set())
    top = {"name", "description", "victim", "aggressors", "policies", "routing", "repetitions", "seed",
           "samples", "solver_rounds", "system", "slurm"}
    ck.mapping(doc, (), top)
    if "victim" not in doc:
        ck.fail(("victim",), "missing (expected {test, pattern, nodes, message_bytes, ...})")
    victim = _parse_job(ck, doc["victim"], ("victim",), "victim")
    raw_aggr = doc.get("aggressors")
    if not isinstance(raw_aggr, list) or not raw_aggr:
        ck.fail(("aggressors",), "missing or empty (expected a list of jobs {name, pattern, nodes, ...})")
    aggressors = tuple(_parse_job(ck, a, ("aggressors", i), "aggressor") for i, a in enumerate(raw_aggr))
    seen = {victim.name: ("victim",)}
    for i, a in enumerate(aggressors):
        if a.name in seen:
            also = ".".join(map(str, seen[a.name]))
            ck.fail(("aggressors", i, "name"), f"job name {a.name!r} is used twice (also {also})")
        seen[a.name] = ("aggressors", i)
    policies = tuple(_parse_policy(ck, p, ("policies", i))
                     for i, p in enumerate(ck.string_list(doc, "policies", ())))
    labels = [p.label for p in policies]
    if len(set(labels)) < len(labels):
        ck.fail(("policies",), f"policy {next(x for x in labels if labels.count(x) > 1)!r} is listed twice")
    routing = ck.string_list(doc, "routing", ())
    for i, r in enumerate(routing):
        if r not in ROUTINGS:
            ck.fail(("routing", i), f"expected one of {', '.join(ROUTINGS)}, got {r!r}")
    if len(set(routing)) < len(routing):
        ck.fail(("routing",), "a routing algorithm is listed twice")
    name = doc.get("name", Path(source).stem if source != "<dict>" else "interference")
    system = _parse_system(ck, doc["system"]) if doc.get("system") is not None else None
    slurm = _parse_slurm(ck, doc["slurm"]) if doc.get("slurm") is not None else None
    return Experiment(
        name=str(name), victim=victim, aggressors=aggressors, policies=policies, routing=tuple(routing),
        repetitions=ck.integer(doc, "repetitions", (), 1, default=1),
        seed=ck.integer(doc, "seed", (), 0, default=0),
        samples=ck.integer(doc, "samples", (), 1, default=32),
        solver_rounds=ck.integer(doc, "solver_rounds", (), 1, default=8),
        system=system, slurm=slurm, source=source, document=doc)


# =============================================================================================
# Placement policies
# =============================================================================================


class PlacementError(ValueError):
    """A policy cannot place a job: not enough free nodes, routers, groups or islands."""


@dataclass(frozen=True)
class Placement:
    """A job's nodes (topology order = rank order) and the routers/groups/islands they span."""

    job: str
    policy: str
    nodes: tuple[str, ...]
    routers: tuple[str, ...]
    groups: tuple[str, ...]
    islands: tuple[str, ...]

    @classmethod
    def of(cls, topo: Topology, job: str, nodes, policy: str = "given") -> "Placement":
        """The placement of a given node list (put in topology order)."""
        chosen = set(nodes)
        unknown = topo.unknown_nodes(chosen)
        if unknown:
            raise PlacementError(f"job {job!r}: nodes not in the topology: {sorted(unknown)[:5]}")
        ordered = [n for n in topo.table["node"] if n in chosen]
        return cls(job=job, policy=policy, nodes=tuple(ordered),
                   routers=tuple(dict.fromkeys(topo.router_of(n) for n in ordered)),
                   groups=tuple(dict.fromkeys(topo.group_of(n) for n in ordered)),
                   islands=tuple(dict.fromkeys(topo.island_of(n) for n in ordered)))

    @property
    def nodelist(self) -> str:
        """The nodes as a Slurm hostlist, for ``--nodelist``."""
        return hostlist.collect_hostlist(list(self.nodes))


def _free_nodes(topo: Topology, free: set[str] | None) -> pd.DataFrame:
    """Free compute nodes in topology order, with their island."""
    t = topo.table[topo.table["role"] == "compute"]
    if free is not None:
        t = t[t["node"].isin(free)]
    t = t[["node", "router", "group"]].reset_index(drop=True)
    t["island"] = [topo.island_of(n) for n in t["node"]]
    return t


def _whole_units(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None, unit: str) -> list[str]:
    """Random whole routers/groups (every compute node free), filled consecutively until n nodes."""
    cand = _free_nodes(topo, free)
    allc = _free_nodes(topo, None)
    size_all = allc.groupby(unit, sort=False).size()
    size_free = cand.groupby(unit, sort=False).size()
    whole = [u for u in size_all.index if size_free.get(u, 0) == size_all[u]]
    capacity = int(sum(size_all[u] for u in whole))
    if capacity < n:
        raise PlacementError(f"random-{unit}s: needs {n} nodes but the {len(whole)} wholly free {unit}s hold "
                             f"{capacity}")
    by_unit = {u: list(g["node"]) for u, g in cand.groupby(unit, sort=False)}
    chosen: list[str] = []
    for i in rng.permutation(len(whole)):
        chosen += by_unit[whole[i]][: n - len(chosen)]
        if len(chosen) == n:
            break
    return chosen


def place_random_nodes(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """Any n free compute nodes, uniformly (Union's RN: jobs share routers)."""
    cand = _free_nodes(topo, free)["node"].to_numpy()
    if len(cand) < n:
        raise PlacementError(f"random-nodes: needs {n} nodes but {len(cand)} are free")
    return list(cand[rng.choice(len(cand), n, replace=False)])


def place_random_routers(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """Whole free routers in random order, their nodes taken consecutively (Union's RR).

    The last router may be partly used; its other nodes stay free for random-nodes jobs only,
    since a random-routers job never takes a router another job already uses."""
    return _whole_units(topo, n, rng, free, "router")


def place_random_groups(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """Whole free groups in random order, their nodes taken consecutively (Union's RG)."""
    return _whole_units(topo, n, rng, free, "group")


def place_same_group(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """n random free nodes of one random group with room for them (locality: same group)."""
    cand = _free_nodes(topo, free)
    sizes = cand.groupby("group", sort=False).size()
    fits = [g for g in sizes.index if sizes[g] >= n]
    if not fits:
        raise PlacementError(f"same-group: needs {n} nodes in one group but the largest free share of a group "
                             f"is {int(sizes.max()) if len(sizes) else 0} nodes")
    nodes = cand.loc[cand["group"] == fits[rng.integers(len(fits))], "node"].to_numpy()
    return list(nodes[rng.choice(len(nodes), n, replace=False)])


def _spread(cand: pd.DataFrame, n: int, rng: np.random.Generator, unit: str) -> list[str]:
    """n random nodes of ``cand`` that span at least two ``unit``s: one node in each of two random
    units first, the rest uniformly among the remaining nodes."""
    units = list(pd.unique(cand[unit]))
    a, b = rng.choice(len(units), 2, replace=False)
    first = []
    for u in (units[a], units[b]):
        nodes = cand.loc[cand[unit] == u, "node"].to_numpy()
        first.append(nodes[rng.integers(len(nodes))])
    rest = cand.loc[~cand["node"].isin(first), "node"].to_numpy()
    return first + list(rest[rng.choice(len(rest), n - 2, replace=False)])


def place_same_island(topo: Topology, n: int, rng: np.random.Generator, free: set[str] | None = None) -> list[str]:
    """n random free nodes of one island, in at least two of its groups (locality: same island)."""
    if not topo.has_islands:
        raise PlacementError("same-island: the topology has no islands (system.groups_per_island: 0)")
    if n < 2:
        raise PlacementError("same-island: a 1-node job is always in one group")
    cand = _free_nodes(topo, free)
    per_island = cand.groupby("island", sort=False).agg(nodes=("node", "size"), groups=("group", "nunique"))
    fits = [i for i, row in per_island.iterrows() if row["nodes"] >= n and row["groups"] >= 2]
    if not fits:
        raise PlacementError(f"same-island: no island has {n} free nodes in two or more groups")
    return _spread(cand[cand["island"] == fits[rng.integers(len(fits))]], n, rng, "group")


def place_different_islands(topo: Topology, n: int, rng: np.random.Generator,
                            free: set[str] | None = None) -> list[str]:
    """n random free nodes spanning at least two islands (locality: different islands)."""
    cand = _free_nodes(topo, free)
    if cand["island"].nunique() < 2:
        raise PlacementError("different-islands: needs free nodes on two islands, found "
                             f"{cand['island'].nunique()} island(s) with free nodes")
    if len(cand) < n or n < 2:
        raise PlacementError(f"different-islands: needs {n} >= 2 nodes, {len(cand)} are free")
    return _spread(cand, n, rng, "island")


#: Policy name -> function(topology, nodes, rng, free) -> node names.
PLACEMENT_POLICIES = {
    "random-nodes": place_random_nodes,
    "random-routers": place_random_routers,
    "random-groups": place_random_groups,
    "same-group": place_same_group,
    "same-island": place_same_island,
    "different-islands": place_different_islands,
}
#: Policies that make sense for every job of a workload (Union); the others are victim locality classes.
JOB_WIDE_POLICIES = ("random-nodes", "random-routers", "random-groups")


def place(topo: Topology, policy: str, nodes: int, rng: np.random.Generator, free: set[str] | None = None,
          job: str = "job") -> Placement:
    """Place one job of ``nodes`` nodes with ``policy`` among ``free`` nodes (default: all compute nodes)."""
    if policy not in PLACEMENT_POLICIES:
        raise PlacementError(f"unknown placement policy {policy!r}; expected one of {', '.join(PLACEMENT_POLICIES)}")
    try:
        chosen = PLACEMENT_POLICIES[policy](topo, nodes, rng, free)
    except PlacementError as exc:
        raise PlacementError(f"job {job!r} ({nodes} nodes): {exc}") from None
    return Placement.of(topo, job, chosen, policy)


def place_jobs(topo: Topology, requests: list[tuple[str, int, str]], rng: np.random.Generator,
               free: set[str] | None = None, share: bool = False) -> list[Placement]:
    """Place ``(job, nodes, policy)`` requests in order among ``free`` nodes (default: every compute
    node), without overlap; ``share`` lets every job choose among all of them (a toy cluster)."""
    free = set(topo.compute_nodes) if free is None else set(free)
    out = []
    for job, nodes, policy in requests:
        p = place(topo, policy, nodes, rng, free, job)
        if not share:
            free -= set(p.nodes)
        out.append(p)
    return out


# =============================================================================================
# Traffic patterns
# =============================================================================================


def pattern_rounds(job: JobSpec, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray, float, int]]:
    """A job's iteration as rounds ``(src ranks, dst ranks, bytes per message, repeat)``."""
    n, m = job.nodes, float(job.message_bytes)
    ranks = np.arange(n)
    rounds = []
    if job.pattern == "allreduce":
        k = 1
        while k < n:
            partner = ranks ^ k
            keep = partner < n  # non-power-of-two sizes: ranks without a partner sit this round out
            rounds.append((ranks[keep], partner[keep], m, 1))
            k <<= 1
    elif job.pattern == "periodic-allreduce":
        rounds.append((ranks, (ranks + 1) % n, m / n, 2 * (n - 1)))
    elif job.pattern == "alltoall":
        rounds += [(ranks, (ranks + r) % n, m, 1) for r in range(1, n)]
    elif job.pattern == "halo":
        dims = factor(n, job.dims)
        coords = np.array(np.unravel_index(ranks, dims)).T
        src, dst = [], []
        for axis, extent in enumerate(dims):
            if extent == 1:
                continue
            for step in (1, -1):
                c = coords.copy()
                c[:, axis] = (c[:, axis] + step) % extent
                src.append(ranks)
                dst.append(np.ravel_multi_index(c.T, dims))
        rounds.append((np.concatenate(src), np.concatenate(dst), m, 1))
    elif job.pattern in ("bcast", "reduce"):
        k = 1
        while k < n:
            senders = ranks[(ranks < k) & (ranks + k < n)]
            rounds.append((senders, senders + k, m, 1))
            k <<= 1
        if job.pattern == "reduce":
            rounds = [(d, s, b, r) for s, d, b, r in reversed(rounds)]
    elif job.pattern == "uniform-random":
        src = np.repeat(ranks, job.messages)
        dst = (src + rng.integers(1, n, len(src))) % n
        rounds.append((src, dst, m, 1))
    elif job.pattern == "shift":
        rounds.append((ranks, (ranks + (job.offset or n // 2)) % n, m, 1))
    else:  # pragma: no cover - validated in parse_experiment
        raise ValueError(f"unknown pattern {job.pattern!r}")
    return rounds


# =============================================================================================
# The network
# =============================================================================================

TERMINAL, LOCAL, GLOBAL = 0, 1, 2
_KIND_NAMES = {TERMINAL: "terminal", LOCAL: "local", GLOBAL: "global"}


class DragonflyNetwork:
    """The routers, channels and routes of a simulated dragonfly (see the module docstring).

    Channels are numbered: per node an injection channel (node -> router) and an ejection channel
    (router -> node), then each group's local channels, then the global channels; one extra
    "no channel" index (:attr:`none`) pads paths of different lengths and has no cost.
    """

    def __init__(self, system: SystemSpec):
        self.system = s = system
        G, a, cols = s.groups, s.routers_per_group, s.cols
        self.topology = build_topology(Preset(
            name="interference", groups=G, rows=s.rows, cols=s.cols, nodes_per_router=s.nodes_per_router,
            io_groups=0, io_routers_per_group=0, groups_per_island=s.groups_per_island))
        t = self.topology.table
        group = t["group"].str[1:].astype(int).to_numpy()
        self.node_router = group * a + t["row"].to_numpy() * cols + t["col"].to_numpy()
        self.node_index = {n: i for i, n in enumerate(t["node"])}
        self.num_nodes = len(t)
        self.num_routers = G * a
        self.router_names: list[str] = [""] * self.num_routers
        for name, idx in zip(t["router"], self.node_router):
            self.router_names[idx] = name
        self.router_index = {n: i for i, n in enumerate(self.router_names)}

        # Local channels of one group: ordered router pairs (u, v) sharing a row or a column
        # (1d: one row, so all pairs); local_offset[u, v] numbers them, -1 where no channel.
        u, v = np.meshgrid(np.arange(a), np.arange(a), indexing="ij")
        adjacent = (u != v) & ((u // cols == v // cols) | (u % cols == v % cols))
        self.local_offset = np.full((a, a), -1)
        self.local_offset[adjacent] = np.arange(adjacent.sum())
        self.locals_per_group = int(adjacent.sum())
        # Local route u -> v: along u's row to column(v), then along the column (1d: direct).
        via = (u // cols) * cols + v % cols
        first = np.where((via == u) | (via == v), self.local_offset[u, v], self.local_offset[u, via])
        second = np.where((via == u) | (via == v), -1, self.local_offset[via, v])
        self.local_route = np.stack([first, second], axis=-1)  # (a, a, 2) channel offsets, -1 none
        self.local_route[u == v] = -1

        N = self.num_nodes
        self.local_base = 2 * N
        self.global_base = self.local_base + G * self.locals_per_group
        # Global channels: the k-th of K parallel links from group g to g+d uses port k(G-1)+(d-1).
        h = s.global_links_per_router
        self.parallel_links = K = (a * h) // (G - 1)
        g_idx, d_idx, k_idx = np.meshgrid(np.arange(G), np.arange(1, G), np.arange(K), indexing="ij")
        port = k_idx * (G - 1) + (d_idx - 1)
        other = (g_idx + d_idx) % G
        back_port = k_idx * (G - 1) + (G - d_idx - 1)
        self.global_exit = np.full((G, G, K), -1)   # router (index) holding the link g -> g2
        self.global_entry = np.full((G, G, K), -1)  # router it lands on in g2
        self.global_channel = np.full((G, G, K), -1)
        self.global_exit[g_idx, other, k_idx] = g_idx * a + port // h
        self.global_entry[g_idx, other, k_idx] = other * a + back_port // h
        self.global_channel[g_idx, other, k_idx] = (self.global_base + (g_idx * (G - 1) + d_idx - 1) * K + k_idx)
        self.num_channels = self.global_base + G * (G - 1) * K
        self.none = self.num_channels  # padding index

        kind = np.empty(self.num_channels + 1, dtype=np.int8)
        kind[: self.local_base] = TERMINAL
        kind[self.local_base: self.global_base] = LOCAL
        kind[self.global_base:] = GLOBAL
        kind[self.none] = -1
        self.kind = kind
        bw = np.empty(self.num_channels + 1)
        bw[kind == TERMINAL], bw[kind == LOCAL], bw[kind == GLOBAL] = (
            s.terminal_gib_s * GIB, s.local_gib_s * GIB, s.global_gib_s * GIB)
        bw[self.none] = np.inf
        self.bandwidth = bw  # bytes/s
        # Channel endpoints, for describing routes (node channels use -1 for the node side).
        self.channel_src = np.full(self.num_channels + 1, -1)
        self.channel_dst = np.full(self.num_channels + 1, -1)
        self.channel_src[N: 2 * N] = self.channel_dst[:N] = self.node_router
        uu, vv = np.nonzero(adjacent)
        for g in range(G):
            ids = self.local_base + g * self.locals_per_group + self.local_offset[uu, vv]
            self.channel_src[ids], self.channel_dst[ids] = g * a + uu, g * a + vv
        ok = self.global_channel >= 0
        self.channel_src[self.global_channel[ok]] = self.global_exit[ok]
        self.channel_dst[self.global_channel[ok]] = self.global_entry[ok]

    # --- routes -------------------------------------------------------------------------------
    def group_of_router(self, r):
        return np.asarray(r) // self.system.routers_per_group

    def local_channels(self, src, dst) -> np.ndarray:
        """(n, 2) local channels from router src to router dst of the same group (-1: none)."""
        a = self.system.routers_per_group
        src, dst = np.asarray(src), np.asarray(dst)
        off = self.local_route[src % a, dst % a]
        return np.where(off >= 0, self.local_base + (src // a)[..., None] * self.locals_per_group + off, -1)

    def minimal_paths(self, src, dst) -> np.ndarray:
        """(n, 5) network channels of the minimal route src router -> dst router (-1 padded)."""
        src, dst = np.atleast_1d(src), np.atleast_1d(dst)
        gs, gd = self.group_of_router(src), self.group_of_router(dst)
        same = gs == gd
        k = (src + dst) % self.parallel_links
        gd_safe = np.where(same, (gs + 1) % self.system.groups, gd)
        exit_, entry = self.global_exit[gs, gd_safe, k], self.global_entry[gs, gd_safe, k]
        inter = np.concatenate([self.local_channels(src, exit_), self.global_channel[gs, gd_safe, k][:, None],
                                self.local_channels(entry, dst)], axis=1)
        intra = np.concatenate([self.local_channels(src, dst), np.full((len(src), 3), -1)], axis=1)
        return np.where(same[:, None], intra, inter)

    def valiant_paths(self, src, dst, mid_group) -> np.ndarray:
        """(n, 8) channels of the route src -> (minimal) intermediate group -> (minimal) dst."""
        src, dst, mid = np.atleast_1d(src), np.atleast_1d(dst), np.atleast_1d(mid_group)
        gs, gd = self.group_of_router(src), self.group_of_router(dst)
        K = self.parallel_links
        k1 = (src + dst) % K
        x1, e1, c1 = self.global_exit[gs, mid, k1], self.global_entry[gs, mid, k1], self.global_channel[gs, mid, k1]
        k2 = (e1 + dst) % K
        x2, e2, c2 = self.global_exit[mid, gd, k2], self.global_entry[mid, gd, k2], self.global_channel[mid, gd, k2]
        return np.concatenate([self.local_channels(src, x1), c1[:, None], self.local_channels(e1, x2),
                               c2[:, None], self.local_channels(e2, dst)], axis=1)

    def route(self, src_router: str, dst_router: str, via_group: int | None = None) -> list[tuple[str, str, str]]:
        """A route by router names, as ``(kind, from router, to router)`` hops (for humans and tests)."""
        s, d = self.router_index[src_router], self.router_index[dst_router]
        path = self.minimal_paths([s], [d])[0] if via_group is None else self.valiant_paths([s], [d], [via_group])[0]
        return [(_KIND_NAMES[int(self.kind[c])], self.router_names[self.channel_src[c]],
                 self.router_names[self.channel_dst[c]]) for c in path if c >= 0]

    def phi(self, rho: np.ndarray) -> np.ndarray:
        """1 + queue: queue = rho/(1-rho) packets (M/M/1), capped at the buffer depth."""
        cap = self.system.queue_cap
        r = np.minimum(rho, cap / (1.0 + cap))
        return 1.0 + r / (1.0 - r)

    def describe(self) -> dict:
        s = self.system
        return {"group_shape": s.group_shape, "groups": s.groups, "routers_per_group": s.routers_per_group,
                "routers": self.num_routers, "nodes": self.num_nodes, "islands": len(self.topology.islands)
                if self.topology.has_islands else 0, "local_channels": int((self.kind == LOCAL).sum()),
                "global_channels": int((self.kind == GLOBAL).sum()), "parallel_global_links": self.parallel_links,
                "queue_cap_packets": s.queue_cap}


# =============================================================================================
# A job's traffic on the network
# =============================================================================================


class JobTraffic:
    """One job's messages per iteration on a placement: rounds, channels of both candidate paths.

    ``paths[m, 0]`` is message m's minimal path, ``paths[m, 1]`` its Valiant path (no network
    channel, never used, for intra-group messages or with fewer than 3 groups); both start with the
    injection channel, end with the ejection channel and are padded with ``network.none``.
    """

    def __init__(self, network: DragonflyNetwork, spec: JobSpec, placement: Placement, rng: np.random.Generator):
        self.network, self.spec, self.placement = network, spec, placement
        node_idx = np.array([network.node_index[n] for n in placement.nodes])
        src, dst, size, rnd, repeat = [], [], [], [], []
        for r, (s_rank, d_rank, b, rep) in enumerate(pattern_rounds(spec, rng)):
            src.append(node_idx[s_rank])
            dst.append(node_idx[d_rank])
            size.append(np.full(len(s_rank), b))
            rnd.append(np.full(len(s_rank), r))
            repeat.append(rep)
        self.src, self.dst = np.concatenate(src), np.concatenate(dst)
        self.bytes, self.round = np.concatenate(size), np.concatenate(rnd)
        self.repeat = np.array(repeat, dtype=float)
        self.round_start = np.searchsorted(self.round, np.arange(len(repeat)))
        self.compute_s = spec.compute_s

        sr, dr = network.node_router[self.src], network.node_router[self.dst]
        G = network.system.groups
        gs, gd = network.group_of_router(sr), network.group_of_router(dr)
        self.can_detour = (gs != gd) & (G >= 3)
        # Intermediate group: uniform among the groups other than source and destination.
        pick = rng.integers(0, max(G - 2, 1), len(sr))
        lo, hi = np.minimum(gs, gd), np.maximum(gs, gd)
        mid = pick + (pick >= lo) + (pick + (pick >= lo) >= hi)
        mid = np.where(self.can_detour, mid % G, (gs + 1) % G)
        minimal = network.minimal_paths(sr, dr)
        valiant = np.where(self.can_detour[:, None], network.valiant_paths(sr, dr, mid), -1)
        self.hops = np.stack([(minimal >= 0).sum(1), (valiant >= 0).sum(1)], axis=1)  # network hops
        # Injection channel, network channels (segments padded, so with gaps), ejection channel.
        paths = np.full((len(sr), 2, valiant.shape[1] + 2), -1)
        paths[:, :, 0] = self.src[:, None]
        paths[:, 0, 1: 1 + minimal.shape[1]] = minimal
        paths[:, 1, 1: 1 + valiant.shape[1]] = valiant
        paths[:, :, -1] = (network.num_nodes + self.dst)[:, None]
        self.paths = np.where(paths >= 0, paths, network.none)
        # Per-message constants of the latency model (per path): hop latencies and first-packet
        # serialisation; per channel: packet time (queue wait unit) and 1/bandwidth (body).
        sysm = network.system
        inv_bw = 1.0 / network.bandwidth[self.paths]                   # 0 on padding
        real = self.paths != network.none
        first_packet = np.minimum(self.bytes, sysm.packet_bytes)
        self.head0 = (real * sysm.hop_latency_ns * 1e-9).sum(-1) + first_packet[:, None] * inv_bw.sum(-1)
        self.wait_unit = sysm.packet_bytes * inv_bw
        self.inv_bw = inv_bw
        self.body = np.maximum(self.bytes - sysm.packet_bytes, 0.0)
        self.bytes_per_iteration = float((self.bytes * self.repeat[self.round]).sum())

    @property
    def name(self) -> str:
        return self.spec.name

    def router_matrix(self) -> np.ndarray:
        """Bytes per iteration from router to router (the job's router-level traffic matrix)."""
        net = self.network
        out = np.zeros((net.num_routers, net.num_routers))
        np.add.at(out, (net.node_router[self.src], net.node_router[self.dst]), self.bytes * self.repeat[self.round])
        return out

    def channel_bytes(self, weights: np.ndarray) -> np.ndarray:
        """Bytes per iteration on every channel (+ padding), for a split ``weights`` (M, 2) over the paths."""
        w = (weights * (self.bytes * self.repeat[self.round])[:, None])[:, :, None]
        return np.bincount(self.paths.ravel(), np.broadcast_to(w, self.paths.shape).ravel(),
                           minlength=self.network.num_channels + 1)

    def round_bytes(self, weights: np.ndarray) -> np.ndarray:
        """(rounds, channels + 1) bytes each round puts on each channel (one repeat of the round)."""
        C = self.network.num_channels + 1
        w = (weights * self.bytes[:, None])[:, :, None]
        idx = self.round[:, None, None] * C + self.paths
        return np.bincount(idx.ravel(), np.broadcast_to(w, self.paths.shape).ravel(),
                           minlength=len(self.repeat) * C).reshape(len(self.repeat), C)

    def own_round_load(self, weights: np.ndarray) -> np.ndarray:
        """(M, 2, H) seconds each path channel is busy with the message's round-mates (the other
        messages of its job and round): divided by the message's latency, the utilisation its own
        job adds while it is in flight."""
        own = self.round_bytes(weights)[self.round[:, None, None], self.paths]
        own = np.maximum(own - weights[:, :, None] * self.bytes[:, None, None], 0.0)
        return own / self.network.bandwidth[self.paths]

    def path_utilisation(self, weights: np.ndarray, background: np.ndarray, latency_s: np.ndarray) -> np.ndarray:
        """(M, 2, H) utilisation each message sees on its paths' channels: ``background``
        (channels + 1) plus its round-mates' bytes over its latency ``latency_s`` (M)."""
        return background[self.paths] + self.own_round_load(weights) / latency_s[:, None, None]

    def solve_rounds(self, weights: np.ndarray, background: np.ndarray, steps: int = 18):
        """Round durations and message latencies at a background utilisation (S, channels + 1).

        A round's messages start together; each one's latency L solves ``L = latency(background +
        round-mates' bytes / (B L))``: its round-mates' traffic on its channels is spread over its
        own lifetime (exact for the equal-size messages of a round sharing a channel fairly). L is
        bracketed by the latency without round-mates and the latency at that lower bound, and found
        by bisection on log L (18 halvings of a bracket of at most a factor 1 + cap: well under
        0.1 % error). The round lasts until its slowest message arrives.
        Returns ``(round_s (S, R), latency_s (S, M))``."""
        net = self.network
        alts = 2 if weights[:, 1].any() else 1   # minimal routing: skip the unused Valiant paths
        own = self.own_round_load(weights)[:, :alts]
        bg = background[:, self.paths[:, :alts]]                                             # (S, M, alts, H)
        head0, wait_unit, inv_bw, w = (self.head0[:, :alts], self.wait_unit[:, :alts], self.inv_bw[:, :alts],
                                       weights[:, :alts])

        def latency(L):
            phi = net.phi(bg + own[None] / L[:, :, None, None])
            lat = (head0[None] + ((phi - 1.0) * wait_unit[None]).sum(-1)
                   + self.body[None, :, None] * (phi * inv_bw[None]).max(-1))
            return (lat * w[None]).sum(-1)                                                   # (S, M)

        lo = latency(np.full((background.shape[0], len(self.bytes)), np.inf))
        hi = latency(lo)
        for _ in range(steps):
            mid = np.sqrt(lo * hi)
            slower = latency(mid) > mid
            lo, hi = np.where(slower, mid, lo), np.where(slower, hi, mid)
        return np.maximum.reduceat(hi, self.round_start, axis=1), hi

    def summarise(self, round_s: np.ndarray, latency_s: np.ndarray) -> dict[str, np.ndarray]:
        """Per-sample iteration figures from :meth:`solve_rounds`' output."""
        comm = round_s @ self.repeat
        w = self.repeat[self.round]
        return {"comm_time_s": comm, "total_time_s": comm + self.compute_s,
                "mean_latency_us": 1e6 * (latency_s @ w) / w.sum(), "max_latency_us": 1e6 * latency_s.max(1)}


# =============================================================================================
# Workloads
# =============================================================================================


@dataclass
class WorkloadResult:
    """A workload solved on the network: per job per-sample figures and the channel loads."""

    jobs: list[JobTraffic]
    routing: str
    weights: list[np.ndarray]            # per job (M, 2) traffic split minimal/Valiant
    iteration_s: np.ndarray              # per job mean iteration time
    utilisation: np.ndarray              # (jobs, channels + 1) time-averaged utilisation per job
    samples: list[dict[str, np.ndarray]]  # per job: comm_time_s, total_time_s, mean/max_latency_us

    @property
    def total_utilisation(self) -> np.ndarray:
        return self.utilisation.sum(0)[:-1]

    def channel_load(self) -> np.ndarray:
        """Bytes/s on every channel (time-averaged over all jobs)."""
        return self.total_utilisation * self.jobs[0].network.bandwidth[:-1]

    def valiant_share(self, j: int) -> float:
        t = self.jobs[j]
        b = t.bytes * t.repeat[t.round]
        return float((self.weights[j][:, 1] * b).sum() / b.sum())

    def others_utilisation(self, j: int) -> float:
        """Mean utilisation by other jobs on the network channels job j uses, weighted by j's bytes."""
        net = self.jobs[j].network
        mine = self.jobs[j].channel_bytes(self.weights[j])[:-1] * (net.kind[:-1] != TERMINAL)
        others = self.total_utilisation - self.utilisation[j, :-1]
        return float((mine * others).sum() / mine.sum()) if mine.sum() else 0.0

    def network_figures(self) -> dict[str, float]:
        net = self.jobs[0].network
        u, kind = self.total_utilisation, net.kind[:-1]
        load = self.channel_load()
        b = [t.bytes * t.repeat[t.round] for t in self.jobs]
        return {"local_utilisation_mean": float(u[kind == LOCAL].mean()),
                "local_utilisation_max": float(u[kind == LOCAL].max()),
                "global_utilisation_mean": float(u[kind == GLOBAL].mean()),
                "global_utilisation_max": float(u[kind == GLOBAL].max()),
                "global_traffic_share": float(load[kind == GLOBAL].sum() / max(load[kind != TERMINAL].sum(), 1e-300)),
                "valiant_share": float(sum((w[:, 1] * x).sum() for w, x in zip(self.weights, b))
                                       / sum(x.sum() for x in b))}


def simulate_workload(jobs: list[JobTraffic], routing: str, solver_rounds: int = 8, samples: int = 1,
                      phase: np.ndarray | None = None, fluctuation: np.ndarray | None = None) -> WorkloadResult:
    """Solve jobs sharing the network, then sample each job's iterations.

    ``phase`` (samples, jobs) uniform draws decide whether another job is in its communication
    phase in a sample (``phase < duty``); ``fluctuation`` (samples, jobs) standard normal draws
    scale its rate by a log-normal factor of mean 1. The same draws for two routings make them a
    paired comparison."""
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r}; expected one of {', '.join(ROUTINGS)}")
    net = jobs[0].network
    bw = net.bandwidth
    n = len(jobs)
    weights = [np.column_stack([np.ones(len(t.bytes)), np.zeros(len(t.bytes))]) for t in jobs]
    zero = np.zeros((1, net.num_channels + 1))
    solved = [t.solve_rounds(w, zero) for t, w in zip(jobs, weights)]
    iteration = np.array([t.compute_s + r[0] @ t.repeat for t, (r, _) in zip(jobs, solved)])

    def utilisation():
        u = np.array([t.channel_bytes(w) / bw / T for t, w, T in zip(jobs, weights, iteration)])
        u[:, -1] = 0.0
        return u

    for it in range(solver_rounds):
        util = utilisation()
        if routing == "adaptive":
            # UGAL: hops x (1 + queue on the path's busiest channel), the queue as a message meets it:
            # other jobs at their mean load, its own round-mates at their rate in flight. Successive
            # averages of the choices let them react to the congestion they cause without flapping.
            total = util.sum(0)
            for j, (t, w) in enumerate(zip(jobs, weights)):
                rho = t.path_utilisation(w, total - util[j], solved[j][1][0])
                cost = t.hops * net.phi(rho).max(-1)
                detour = t.can_detour & (cost[:, 1] < cost[:, 0])
                w[:, 1] += (detour - w[:, 1]) / (it + 2)
                w[:, 0] = 1.0 - w[:, 1]
            util = utilisation()
        total = util.sum(0)
        solved = [t.solve_rounds(w, (total - u)[None]) for t, w, u in zip(jobs, weights, util)]
        new = np.array([t.compute_s + r[0] @ t.repeat for t, (r, _) in zip(jobs, solved)])
        iteration = np.sqrt(iteration * new)  # damped: the fixed point is approached, not overshot
    util = utilisation()

    comm = np.array([T - t.compute_s for t, T in zip(jobs, iteration)])
    duty = np.clip(comm / iteration, 1e-9, 1.0)
    out = []
    for j, (t, w) in enumerate(zip(jobs, weights)):
        if n == 1 or phase is None:
            bg = (util.sum(0) - util[j])[None]
            res = t.summarise(*t.solve_rounds(w, bg))
            res = {k: np.repeat(v, samples) for k, v in res.items()}
        else:
            # Another job k is in its burst with probability duty_k, then at its burst rate.
            on = (phase < duty[None]) / duty[None]
            if fluctuation is not None:
                sigma = np.array([x.spec.fluctuation for x in jobs])
                on = on * np.exp(sigma[None] * fluctuation - sigma[None] ** 2 / 2)
            on[:, j] = 0.0
            res = t.summarise(*t.solve_rounds(w, on @ util))
        out.append(res)
    return WorkloadResult(jobs=jobs, routing=routing, weights=weights, iteration_s=iteration,
                          utilisation=util, samples=out)


# =============================================================================================
# Experiments
# =============================================================================================


@dataclass
class InterferenceResult:
    jobs: pd.DataFrame        # one row per policy, routing, repetition, job: alone/mixed figures, slowdowns
    samples: pd.DataFrame     # one row per policy, routing, repetition, job, workload, iteration
    network: pd.DataFrame     # one row per policy, routing, repetition: channel utilisation of the mixed workload
    summary: dict

    def write(self, out: str | Path) -> list[Path]:
        """CSV and Parquet of the three tables plus summary.json under ``out``."""
        import json

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in ("jobs", "samples", "network"):
            df = getattr(self, name)
            df.to_csv(out / f"{name}.csv", index=False)
            df.to_parquet(out / f"{name}.parquet", index=False)
            written += [out / f"{name}.csv", out / f"{name}.parquet"]
        (out / "summary.json").write_text(json.dumps(self.summary, indent=1) + "\n")
        return written + [out / "summary.json"]


#: Slowdown column -> (per-iteration sample column, jobs-table column stem, unit): each job's
#: slowdown is the mean of its mixed-workload samples over the mean of its samples alone.
SLOWDOWNS = {"slowdown_total": ("total_time_s", "total_time", "s"),
             "slowdown_comm": ("comm_time_s", "comm_time", "s"),
             "slowdown_latency": ("mean_latency_us", "latency", "us"),
             "slowdown_max_latency": ("max_latency_us", "max_latency", "us")}


def _rng(seed: int, *keys: int) -> np.random.Generator:
    return np.random.default_rng([seed, *keys])


def run_experiment(exp: Experiment, progress: bool = True) -> InterferenceResult:
    """Every policy x routing x repetition: each job alone and all jobs together.

    Placements, Valiant intermediates and burst phases depend on (seed, policy, repetition) only,
    so the routings of a repetition are compared on the same placement and the same phases."""
    if exp.system is None:
        raise ExperimentError(exp.source, "system", "missing: the simulated network (groups, group_shape, ...)")
    small = [j for j in exp.jobs if j.nodes < 2]
    if small:
        where = "victim" if small[0].role == "victim" else f"aggressors.{exp.aggressors.index(small[0])}"
        raise ExperimentError(exp.source, f"{where}.nodes", "the simulated network runs one rank per node: "
                                                            "simulated jobs need 2 nodes or more")
    t0 = time.monotonic()
    net = DragonflyNetwork(exp.system)
    specs = exp.jobs
    runs = len(exp.policies) * exp.repetitions * len(exp.routing)
    bar = Progress(f"interference {exp.name}", runs) if progress else None
    job_rows, sample_frames, net_rows = [], [], []
    for pi, policy in enumerate(exp.policies):
        for rep in range(exp.repetitions):
            requests = [(j.name, j.nodes, policy.victim if j.role == "victim" else policy.aggressors) for j in specs]
            try:
                placements = place_jobs(net.topology, requests, _rng(exp.seed, pi, rep, 0))
            except PlacementError as exc:
                raise PlacementError(f"{exp.source}: policy {policy.label!r}: {exc}") from None
            traffic = [JobTraffic(net, spec, p, _rng(exp.seed, pi, rep, 1, j))
                       for j, (spec, p) in enumerate(zip(specs, placements))]
            draws = _rng(exp.seed, pi, rep, 2)
            phase = draws.random((exp.samples, len(specs)))
            fluct = draws.standard_normal((exp.samples, len(specs)))
            for routing in exp.routing:
                mixed = simulate_workload(traffic, routing, exp.solver_rounds, exp.samples, phase, fluct)
                key = {"policy": policy.label, "routing": routing, "repetition": rep}
                net_rows.append({**key, "workload": "mixed", **mixed.network_figures()})
                for j, (spec, t, p) in enumerate(zip(specs, traffic, placements)):
                    alone = simulate_workload([t], routing, exp.solver_rounds, exp.samples)
                    a, m = alone.samples[0], mixed.samples[j]
                    feats = net.topology.placement(p.nodes)
                    row = {**key, "victim_policy": policy.victim, "aggressor_policy": policy.aggressors,
                           "job": spec.name, "role": spec.role, "test": spec.test, "pattern": spec.pattern,
                           "nodes": spec.nodes, "message_bytes": spec.message_bytes, "compute_s": spec.compute_s,
                           "num_routers": feats["num_routers"], "num_groups": feats["num_groups"],
                           "locality": feats["locality"], "locality_dfplus": feats["locality_dfplus"],
                           "node_list": p.nodelist}
                    for sample_col, stem, unit in SLOWDOWNS.values():
                        row[f"{stem}_alone_{unit}"] = float(a[sample_col].mean())
                        row[f"{stem}_mixed_{unit}"] = float(m[sample_col].mean())
                    for name, (sample_col, _, _) in SLOWDOWNS.items():
                        row[name] = float(m[sample_col].mean() / a[sample_col].mean())
                    row["latency_p95_mixed_us"] = float(np.percentile(m["mean_latency_us"], 95))
                    row["duty_mixed"] = float(1 - spec.compute_s / mixed.iteration_s[j])
                    row["others_utilisation"] = mixed.others_utilisation(j)
                    row["valiant_share_mixed"] = mixed.valiant_share(j)
                    job_rows.append(row)
                    for workload, res in (("alone", a), ("mixed", m)):
                        sample_frames.append(pd.DataFrame({**key, "job": spec.name, "role": spec.role,
                                                           "workload": workload,
                                                           "iteration": np.arange(exp.samples), **res}))
                if bar:
                    bar.step()
    jobs = pd.DataFrame(job_rows)
    samples = pd.concat(sample_frames, ignore_index=True)
    network = pd.DataFrame(net_rows)
    summary = {
        "experiment": exp.name, "source": exp.source, "seed": exp.seed, "repetitions": exp.repetitions,
        "samples": exp.samples, "system": {**asdict(exp.system), **net.describe()},
        "jobs": {j.name: {"role": j.role, "test": j.test, "pattern": j.pattern, "nodes": j.nodes,
                          "message_bytes": j.message_bytes, "compute_s": j.compute_s} for j in specs},
        "policies": {p.label: {"victim": p.victim, "aggressors": p.aggressors} for p in exp.policies},
        # Median over repetitions of each job's slowdowns, per policy and routing.
        "slowdowns": {job: {pol: {rt: {k: float(g[k].median()) for k in SLOWDOWNS}
                                  for rt, g in by_pol.groupby("routing", sort=False)}
                            for pol, by_pol in by_job.groupby("policy", sort=False)}
                      for job, by_job in jobs.groupby("job", sort=False)},
        "elapsed_s": round(time.monotonic() - t0, 2),
    }
    return InterferenceResult(jobs=jobs, samples=samples, network=network, summary=summary)


def simulate_experiment(path: str | Path, out: str | Path, overrides: dict[str, object] | None = None,
                        progress: bool = True) -> InterferenceResult:
    """``hpcvar interference simulate``: load, run, write tables and summary under ``out``."""
    exp = load_experiment(path, overrides)
    result = run_experiment(exp, progress)
    result.write(out)
    Path(out, "experiment.yaml").write_text(yaml.safe_dump(exp.document, sort_keys=False))
    return result


__all__ = [
    "PATTERNS", "PLACEMENT_POLICIES", "JOB_WIDE_POLICIES", "ROUTINGS", "SLOWDOWNS",
    "ExperimentError", "PlacementError", "JobSpec", "SystemSpec", "SlurmSpec", "PolicySpec", "Experiment",
    "Placement",
    "DragonflyNetwork", "JobTraffic", "WorkloadResult", "InterferenceResult",
    "parse_bytes", "apply_overrides", "load_experiment", "parse_experiment", "pattern_rounds",
    "place", "place_jobs", "place_random_nodes", "place_random_routers", "place_random_groups",
    "place_same_group", "place_same_island", "place_different_islands",
    "simulate_workload", "run_experiment", "simulate_experiment",
]
