"""The interference experiment file: what to run, where and how often.

An experiment file (``config/experiments/interference.yaml`` is the commented example) names a
victim job and aggressor jobs (:class:`JobSpec`: traffic pattern, node count, the ReFrame test that
plays it for real), the placement policies to compare (:class:`PolicySpec`, names from
:data:`hpcvar.experiments.placement.PLACEMENT_POLICIES`), the routing algorithms, repetitions and a
seed; a ``system:`` section for the simulated network (:class:`SystemSpec`) and a ``slurm:`` section
for the real cluster (:class:`SlurmSpec`). :func:`load_experiment` reads and validates it into an
:class:`Experiment`; every error (:class:`ExperimentError`) names the file, the key and, when it
comes from the file, the line.

The same :class:`Experiment` drives both the what-if on the simulated dragonfly
(:mod:`hpcvar.simulate.interference`, which reads ``system:`` and ``routing:``) and the real Slurm
experiment (:mod:`hpcvar.campaign.interference`, which reads ``slurm:``); the job and policy part is
common to both.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hpcvar.defaults import REFRAME_CONFIG
from hpcvar.experiments.placement import JOB_WIDE_POLICIES, PLACEMENT_POLICIES
from hpcvar.parsers.errors import ParseError

#: Traffic patterns a job can have (n: the job's nodes, one rank each), with what an iteration sends
#: (:func:`hpcvar.simulate.interference.pattern_rounds` builds them on the simulated network).
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
_JOB_KEYS = {"name", "test", "pattern", "nodes", "message_bytes", "compute_s", "fluctuation", "options", "user"}

#: Routing algorithms of the simulated network (``routing:``).
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
    user: str | None = None        # the Unix user the job runs as (real experiments, as root: sbatch --uid)
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

    reframe_config: str = REFRAME_CONFIG
    system: str = "generic-slurm"            # ReFrame system (its partition's access sets partition/account)
    checks: tuple[str, ...] = ("reframe_tests",)
    topology: str | None = None              # node -> router -> group map; None: sinfo's nodes, flat
    partition: str | None = None             # where sinfo looks for free nodes (None: every partition)
    free_states: tuple[str, ...] = ("idle",)  # node states a placement may use
    share_nodes: bool = False                # too few free nodes: let jobs share them (toy clusters)
    aggressor_duration_s: float | None = None  # None: 1.5 x the victim's time alone + 30 s
    settle_s: float = 5.0                    # wait after the aggressors run before starting the victim
    options: tuple[str, ...] = ()            # ReFrame arguments for every job
    ldms: str | None = None                  # LDMS store of the system's router counters (import --ldms)


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
    user = d.get("user")
    if user is not None and (not isinstance(user, str) or not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user)):
        ck.fail((*path, "user"), f"expected a Unix user name, got {user!r}")
    return JobSpec(name=name, role=role, pattern=pattern, nodes=nodes, message_bytes=message_bytes,
                   compute_s=compute_s, fluctuation=ck.number(d, "fluctuation", path, 0.0), test=test,
                   options=tuple(options), user=user, **extra)


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
    for key in ("topology", "partition", "ldms"):
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


__all__ = [
    "PATTERNS", "ROUTINGS", "ExperimentError", "JobSpec", "SystemSpec", "SlurmSpec", "PolicySpec", "Experiment",
    "parse_bytes", "apply_overrides", "load_experiment", "parse_experiment",
]
