"""A dragonfly in a box: several Slurm nodes on this machine, wired as a small dragonfly.

``hpcvar dev slurm up --nodes N --groups G`` (:mod:`hpcvar.dev.slurm`) uses this module to build
the network before it starts one ``slurmd`` per node. Every node is a network namespace with its
own hostname (a UTS namespace kept in a file) and, for every command run in it, its own mount
namespace with the node's ``/tmp``, the cluster's ``/etc/hosts`` and a ``/sys`` of its own network
namespace, the host's cgroup hierarchy mounted in it (:func:`node_exec_script`). Two networks (docs/testbed.md has a drawing):

* **management** (``10.78.0.0/24``, unshaped): one bridge in namespace ``hpcvar-mgmt``, a port per
  node and one for this host (``hpcvmgmt``, ``10.78.0.1``: the head, where slurmctld, slurmdbd,
  MariaDB and munge run as for the single-node cluster). Slurm, PMIx and MPI's out-of-band
  traffic use it, through the node names.
* **data** (``10.77.<g>.0/24`` per group): per group a router, a namespace ``hpcvar-r<g>`` with a
  bridge (``10.77.<g>.1``) for the group's node links, and one global link (a veth pair) between
  every pair of groups, with static routes. Node links and global links are shaped with ``tbf``
  on both ends (and ``netem`` delay when asked). MPI uses it (``btl_tcp_if_include``).

Routing across groups: ``minimal`` (the direct global link), or with three groups or more
``valiant``: traffic leaving a group goes through an intermediate group chosen per flow (Linux
multipath routes hashed on the 5-tuple, one next hop per other group), transit traffic takes the
direct link to its destination. :func:`set_routing` switches it on a running testbed.

Everything is named with the prefix ``hpcvar-`` (namespaces) or ``hpcv`` (the one host interface),
so :func:`teardown` finds what a crashed or half-finished ``up`` left behind without any record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path

NS_PREFIX = "hpcvar-"
MGMT_NS = f"{NS_PREFIX}mgmt"
HOST_IF = "hpcvmgmt"          # the head's port on the management network, in this host's namespace
HOST_PEER = "head"            # its other end, on the management bridge
MGMT_NET = "10.78.0"
DATA_NET = "10.77"
LINK_NET = "10.76"
HEAD_IP = f"{MGMT_NET}.1"
RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$")
ROUTINGS = ("minimal", "valiant")


def node_local_reason(path: str | Path) -> str | None:
    """Why ``path`` is not the same file on every node of the testbed, or None: each node has a
    /tmp of its own (:func:`node_exec_script`), so a job started from, or reading, a path under
    it finds the node's empty /tmp instead (slurmstepd only logs "couldn't chdir")."""
    resolved = Path(path).resolve()
    if resolved == Path("/tmp") or Path("/tmp") in resolved.parents:
        return (f"{resolved} is under /tmp, and every testbed node has a /tmp of its own: the nodes' jobs would "
                "not see it; use a directory every node sees (e.g. under /var/tmp or your home)")
    return None


class TestbedError(RuntimeError):
    """The testbed could not be built or taken down; the message names the command and why."""


@dataclass(frozen=True)
class TestbedSpec:
    """The shape of the emulated cluster: nodes, groups, link rates and delays, routing."""

    nodes: int
    groups: int
    global_rate: str = "50mbit"
    node_rate: str = "200mbit"
    global_delay_ms: float = 0.0
    node_delay_ms: float = 0.0
    routing: str = "minimal"
    burst: str = "32kbit"
    queue_latency_ms: float = 50.0

    def __post_init__(self):
        if self.groups < 2:
            raise TestbedError(f"--groups {self.groups}: a dragonfly needs two groups or more")
        if self.nodes < self.groups:
            raise TestbedError(f"--nodes {self.nodes} < --groups {self.groups}: every group needs a node")
        if self.nodes > 99 or self.groups > 16:
            raise TestbedError("at most 99 nodes and 16 groups")
        for name in ("global_rate", "node_rate", "burst"):
            if not RATE_RE.match(getattr(self, name)):
                raise TestbedError(f"{name.replace('_', '-')} {getattr(self, name)!r}: expected a tc rate such as "
                                   "50mbit or 1gbit")
        if self.routing not in ROUTINGS:
            raise TestbedError(f"routing {self.routing!r}: expected one of {', '.join(ROUTINGS)}")
        if self.routing == "valiant" and self.groups < 3:
            raise TestbedError("valiant routing needs an intermediate group: three groups or more")
        if min(self.global_delay_ms, self.node_delay_ms) < 0:
            raise TestbedError("delays must not be negative")

    # --- names and addresses ------------------------------------------------------------------
    @property
    def node_names(self) -> list[str]:
        return [f"n{i:02d}" for i in range(1, self.nodes + 1)]

    def group_of(self, node: str) -> int:
        """Nodes fill the groups in order, the first groups taking one more when N % G != 0."""
        i = self.node_names.index(node)
        base, extra = divmod(self.nodes, self.groups)
        bounds, start = [], 0
        for g in range(self.groups):
            start += base + (g < extra)
            bounds.append(start)
        return next(g for g, end in enumerate(bounds) if i < end)

    def nodes_of(self, group: int) -> list[str]:
        return [n for n in self.node_names if self.group_of(n) == group]

    def index(self, node: str) -> int:
        return self.node_names.index(node) + 1

    def mgmt_ip(self, node: str) -> str:
        return f"{MGMT_NET}.{10 + self.index(node)}"

    def data_ip(self, node: str) -> str:
        return f"{DATA_NET}.{self.group_of(node)}.{10 + self.index(node)}"

    @staticmethod
    def router(group: int) -> str:
        return f"r{group}"

    @staticmethod
    def group_name(group: int) -> str:
        return f"g{group}"

    @staticmethod
    def node_ns(node: str) -> str:
        return f"{NS_PREFIX}{node}"

    @staticmethod
    def router_ns(group: int) -> str:
        return f"{NS_PREFIX}r{group}"

    @property
    def global_links(self) -> list[tuple[int, int]]:
        return list(combinations(range(self.groups), 2))

    def link_ips(self, a: int, b: int) -> tuple[str, str]:
        """Point-to-point addresses of the global link between groups a < b."""
        k = self.global_links.index((min(a, b), max(a, b)))
        lo, hi = f"{LINK_NET}.{k}.1", f"{LINK_NET}.{k}.2"
        return (lo, hi) if a < b else (hi, lo)

    def as_dict(self) -> dict:
        return asdict(self)


# --- the topology map -------------------------------------------------------------------------

def topology_map(spec: TestbedSpec) -> dict:
    """hpcvar's topology map of the wiring (``Topology.from_file`` reads its ``groups``): one
    router per group; ``links`` lists every link with its kind, ends, rate and delay, named as the
    link sampler names its devices."""
    groups = {spec.group_name(g): {"routers": {spec.router(g): {"nodes": _hostlist(spec.nodes_of(g))}}}
              for g in range(spec.groups)}
    links = [{"name": f"{spec.router(a)}-{spec.router(b)}", "kind": "global", "ends": [spec.router(a), spec.router(b)],
              "rate": spec.global_rate, "delay_ms": spec.global_delay_ms} for a, b in spec.global_links]
    links += [{"name": f"{spec.router(spec.group_of(n))}-{n}", "kind": "node", "ends": [spec.router(spec.group_of(n)), n],
               "rate": spec.node_rate, "delay_ms": spec.node_delay_ms} for n in spec.node_names]
    return {"system": "testbed", "routing": spec.routing, "groups": groups, "links": links}


def slurm_topology_conf(spec: TestbedSpec) -> str:
    """Slurm's ``topology/tree``: a leaf switch per group (its router), all below one top switch,
    so ``--switches=1`` keeps a job in one group."""
    lines = ["# Generated by `hpcvar dev slurm up --nodes/--groups` (src/hpcvar/dev/testbed.py)."]
    lines += [f"SwitchName={spec.router(g)} Nodes={_hostlist(spec.nodes_of(g))}" for g in range(spec.groups)]
    lines.append(f"SwitchName=top Switches={_hostlist([spec.router(g) for g in range(spec.groups)])}")
    return "\n".join(lines) + "\n"


def hosts_file(spec: TestbedSpec, head: str) -> str:
    """The ``/etc/hosts`` every node sees: node names and the head on the management network."""
    lines = ["127.0.0.1\tlocalhost", f"{HEAD_IP}\t{head}"]
    lines += [f"{spec.mgmt_ip(n)}\t{n}" for n in spec.node_names]
    return "\n".join(lines) + "\n"


def _hostlist(names: list[str]) -> str:
    import hostlist

    return hostlist.collect_hostlist(names)


# --- running commands -------------------------------------------------------------------------

def _run(cmd: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise TestbedError(f"`{cmd[0]}` not found: install iproute2 and util-linux") from exc
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"`{' '.join(cmd)}` did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        raise TestbedError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *(["-n", ns] if ns else []), *args], check=check)


def _tc(*args: str, ns: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["tc", "-n", ns, *args], check=check)


def _sysctl(ns: str, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    _run(["ip", "netns", "exec", ns, "sh", "-c", f"[ ! -e {path} ] || echo {value} > {path}"])


def check_privileges() -> None:
    """Root with network and mount namespaces; else an error naming what is missing."""
    if os.geteuid() != 0:
        raise TestbedError("the multi-node cluster needs root: network namespaces, veth pairs, bridges and tc "
                           "(CAP_NET_ADMIN) and mount and UTS namespaces (CAP_SYS_ADMIN)")
    for tool in ("ip", "tc", "nsenter", "unshare", "mount", "umount"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise TestbedError(f"`{tool}` not found: install iproute2 and util-linux")
    probe = f"{NS_PREFIX}probe"
    proc = _run(["ip", "netns", "add", probe], check=False)
    if proc.returncode != 0 and "File exists" not in proc.stderr:
        raise TestbedError(f"cannot create a network namespace (`ip netns add` failed: {proc.stderr.strip()}): "
                           "this needs CAP_NET_ADMIN and CAP_SYS_ADMIN, which this container or user lacks")
    _run(["ip", "netns", "del", probe], check=False)


# --- building ---------------------------------------------------------------------------------

def _veth(a: str, ns_a: str | None, b: str, ns_b: str) -> None:
    """A veth pair ``a`` (in ``ns_a``; None: this host) -- ``b`` (in ``ns_b``), both up."""
    _ip("link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b, ns=ns_a)
    _ip("link", "set", a, "up", ns=ns_a)
    _ip("link", "set", b, "up", ns=ns_b)


def shape(ns: str, dev: str, rate: str, delay_ms: float, spec: TestbedSpec) -> None:
    """Egress shaping of one link end: ``tbf`` (the queue whose backlog and overlimits the link
    sampler reads), under a ``netem`` delay when the link has one. Replaces what is there."""
    _tc("qdisc", "del", "dev", dev, "root", ns=ns, check=False)
    tbf = ["tbf", "rate", rate, "burst", spec.burst, "latency", f"{spec.queue_latency_ms:g}ms"]
    if delay_ms > 0:
        _tc("qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", f"{delay_ms:g}ms", ns=ns)
        _tc("qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *tbf, ns=ns)
    else:
        _tc("qdisc", "add", "dev", dev, "root", "handle", "10:", *tbf, ns=ns)


def build(spec: TestbedSpec, state: Path, head: str) -> None:
    """Namespaces, bridges, links, addresses, shaping, routes, hostnames and node directories.
    Call :func:`teardown` first: this builds from nothing."""
    state = Path(state)
    if max(spec.global_delay_ms, spec.node_delay_ms) > 0:
        _require_netem()
    # Management network.
    _ip("netns", "add", MGMT_NS)
    _ip("link", "set", "lo", "up", ns=MGMT_NS)
    _ip("link", "add", "br0", "type", "bridge", ns=MGMT_NS)
    _ip("link", "set", "br0", "up", ns=MGMT_NS)
    _sysctl(MGMT_NS, "net.bridge.bridge-nf-call-iptables", "0")
    _veth(HOST_IF, None, HOST_PEER, MGMT_NS)
    _ip("link", "set", HOST_PEER, "master", "br0", ns=MGMT_NS)
    _ip("addr", "add", f"{HEAD_IP}/24", "dev", HOST_IF)
    # Group routers.
    for g in range(spec.groups):
        ns = spec.router_ns(g)
        _ip("netns", "add", ns)
        _ip("link", "set", "lo", "up", ns=ns)
        _ip("link", "add", "br0", "type", "bridge", ns=ns)
        _ip("addr", "add", f"{DATA_NET}.{g}.1/24", "dev", "br0", ns=ns)
        _ip("link", "set", "br0", "up", ns=ns)
        _sysctl(ns, "net.ipv4.ip_forward", "1")
        _sysctl(ns, "net.ipv4.fib_multipath_hash_policy", "1")  # per flow: hash on the 5-tuple
        for conf in ("all", "default"):  # Valiant routes are asymmetric: no reverse-path filter
            _sysctl(ns, f"net.ipv4.conf.{conf}.rp_filter", "0")
        _sysctl(ns, "net.bridge.bridge-nf-call-iptables", "0")
    # Global links, both ends shaped, with a route to the far group over each.
    for a, b in spec.global_links:
        ra, rb = spec.router_ns(a), spec.router_ns(b)
        da, db = spec.router(b), spec.router(a)  # each end is named after the router it leads to
        _ip("link", "add", da, "type", "veth", "peer", "name", db, "netns", rb, ns=ra)
        ip_a, ip_b = spec.link_ips(a, b)
        _ip("addr", "add", f"{ip_a}/30", "dev", da, ns=ra)
        _ip("addr", "add", f"{ip_b}/30", "dev", db, ns=rb)
        _ip("link", "set", da, "up", ns=ra)
        _ip("link", "set", db, "up", ns=rb)
        shape(ra, da, spec.global_rate, spec.global_delay_ms, spec)
        shape(rb, db, spec.global_rate, spec.global_delay_ms, spec)
    set_routing(spec, spec.routing)
    # Nodes: a namespace, a hostname, a management and a data link, a /tmp of their own.
    (state / "uts").mkdir(parents=True, exist_ok=True)
    for node in spec.node_names:
        ns, g = spec.node_ns(node), spec.group_of(node)
        _ip("netns", "add", ns)
        _ip("link", "set", "lo", "up", ns=ns)
        _veth("mgmt0", ns, node, MGMT_NS)
        _ip("link", "set", node, "master", "br0", ns=MGMT_NS)
        _ip("addr", "add", f"{spec.mgmt_ip(node)}/24", "dev", "mgmt0", ns=ns)
        _veth("data0", ns, node, spec.router_ns(g))
        _ip("link", "set", node, "master", "br0", ns=spec.router_ns(g))
        _ip("addr", "add", f"{spec.data_ip(node)}/24", "dev", "data0", ns=ns)
        _ip("route", "add", f"{DATA_NET}.0.0/16", "via", f"{DATA_NET}.{g}.1", "dev", "data0", ns=ns)
        shape(ns, "data0", spec.node_rate, spec.node_delay_ms, spec)
        shape(spec.router_ns(g), node, spec.node_rate, spec.node_delay_ms, spec)
        uts = state / "uts" / node
        uts.touch()
        _run(["unshare", f"--uts={uts}", "hostname", node])
        tmp = state / "nodes" / node / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        (state / "nodes" / node / "cgroup").mkdir(exist_ok=True)  # where the host's cgroups are kept
        (state / "spool" / f"slurmd-{node}").mkdir(parents=True, exist_ok=True)
    (state / "etc").mkdir(parents=True, exist_ok=True)
    (state / "etc" / "hosts").write_text(hosts_file(spec, head))
    (state / "etc" / "testbed.json").write_text(json.dumps(spec.as_dict(), indent=1) + "\n")


def global_rate(spec: TestbedSpec) -> str:
    """The rate the global links are shaped to now (tc's own notation, e.g. 50Mbit)."""
    a, b = spec.global_links[0]
    out = _tc("-j", "qdisc", "show", "dev", spec.router(b), ns=spec.router_ns(a))
    for qdisc in json.loads(out.stdout or "[]"):
        if qdisc.get("kind") == "tbf":
            return f"{int(qdisc['options']['rate']) * 8 // 1_000_000}mbit"
    raise TestbedError(f"no tbf queue on the global link {spec.router(a)}-{spec.router(b)}")


def set_global_rate(spec: TestbedSpec, rate: str) -> None:
    """Shape every global link end to ``rate`` (a planted upgrade of the fabric); node links stay."""
    if not RATE_RE.match(rate):
        raise TestbedError(f"rate {rate!r}: expected a tc rate such as 35mbit")
    for a, b in spec.global_links:
        shape(spec.router_ns(a), spec.router(b), rate, spec.global_delay_ms, spec)
        shape(spec.router_ns(b), spec.router(a), rate, spec.global_delay_ms, spec)


def _require_netem() -> None:
    probe = f"{NS_PREFIX}netem"
    _run(["ip", "netns", "add", probe], check=False)
    try:
        _ip("link", "add", "x0", "type", "veth", "peer", "name", "x1", ns=probe)
        if _tc("qdisc", "add", "dev", "x0", "root", "netem", "delay", "1ms", ns=probe, check=False).returncode:
            raise TestbedError("link delays need the netem queueing discipline, which this kernel lacks "
                               "(sch_netem); leave the delays at 0")
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def set_routing(spec: TestbedSpec, routing: str) -> None:
    """Minimal or Valiant routes between the group routers (see the module doc)."""
    if routing not in ROUTINGS or (routing == "valiant" and spec.groups < 3):
        raise TestbedError(f"routing {routing!r} is not possible with {spec.groups} groups")
    for g in range(spec.groups):
        ns = spec.router_ns(g)
        _ip("rule", "del", "iif", "br0", "lookup", "100", ns=ns, check=False)
        _ip("route", "flush", "table", "100", ns=ns, check=False)
        for h in range(spec.groups):
            if h == g:
                continue
            direct = spec.link_ips(h, g)[0]  # the far end of the link g -> h
            _ip("route", "replace", f"{DATA_NET}.{h}.0/24", "via", direct, "dev", spec.router(h), ns=ns)
            if routing == "valiant":
                hops = []
                for i in range(spec.groups):
                    if i not in (g, h):
                        hops += ["nexthop", "via", spec.link_ips(i, g)[0], "dev", spec.router(i)]
                _ip("route", "replace", f"{DATA_NET}.{h}.0/24", "table", "100", *hops, ns=ns)
        if routing == "valiant":
            # Traffic from the group's own nodes takes an intermediate group; transit traffic the
            # direct link (main table), so no packet makes more than two global hops.
            _ip("rule", "add", "iif", "br0", "lookup", "100", "priority", "100", ns=ns)


def node_exec_script(state: Path) -> str:
    """``node-exec NODE CMD...``: run CMD inside a node: its network and UTS namespaces and a mount
    namespace of its own in which the cluster's hosts file, the node's /tmp and a /sys of the
    node's network namespace are mounted (Slurm's PMIx plugin needs a /tmp per node)."""
    return f"""#!/bin/sh
# Generated by `hpcvar dev slurm up` (src/hpcvar/dev/testbed.py). Usage: node-exec NODE CMD [ARG...]
set -eu
node=$1; shift
state={state}
[ -e "/run/netns/{NS_PREFIX}$node" ] || {{ echo "node-exec: no node $node (is the testbed up?)" >&2; exit 2; }}
exec nsenter --net="/run/netns/{NS_PREFIX}$node" --uts="$state/uts/$node" -- \\
  unshare --mount --propagation private -- sh -c '
    mount --bind "$0/etc/hosts" /etc/hosts &&
    mount --rbind "$0/nodes/$1/tmp" /tmp &&
    mount --rbind /sys/fs/cgroup "$0/nodes/$1/cgroup" &&
    mount -t sysfs sysfs /sys &&
    mount --rbind "$0/nodes/$1/cgroup" /sys/fs/cgroup &&
    shift && exec "$@"' "$state" "$node" "$@"
"""


# --- state of a running testbed ---------------------------------------------------------------

def load_spec(state: Path) -> TestbedSpec | None:
    path = Path(state) / "etc" / "testbed.json"
    try:
        return TestbedSpec(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def namespaces() -> list[str]:
    """Our network namespaces that exist now."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(NS_PREFIX)]


def is_built(spec: TestbedSpec) -> bool:
    have = set(namespaces())
    want = {MGMT_NS, *(spec.router_ns(g) for g in range(spec.groups)), *(spec.node_ns(n) for n in spec.node_names)}
    return want <= have and Path(f"/sys/class/net/{HOST_IF}").exists()


def links_down(spec: TestbedSpec) -> list[str]:
    """Links of the data network that are administratively down (a fault test's doing)."""
    down = []
    for g in range(spec.groups):
        for link in json.loads(_ip("-j", "link", "show", ns=spec.router_ns(g)).stdout or "[]"):
            if link["ifname"] != "lo" and "UP" not in link.get("flags", []):
                down.append(f"{spec.router(g)}:{link['ifname']}")
    return down


def bring_links_up(spec: TestbedSpec) -> list[str]:
    """Set every data link up again (both ends); returns those that were down."""
    down = links_down(spec)
    for item in down:
        router, dev = item.split(":")
        _ip("link", "set", dev, "up", ns=spec.router_ns(int(router[1:])))
    for node in spec.node_names:
        _ip("link", "set", "data0", "up", ns=spec.node_ns(node), check=False)
    return down


# --- taking it down ---------------------------------------------------------------------------

def _kill_namespace_processes(ns: str) -> int:
    pids = [int(p) for p in _run(["ip", "netns", "pids", ns], check=False).stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists()]
        time.sleep(0.1)
    return len(pids)


def teardown(state: Path) -> list[str]:
    """Remove every namespace, link and mount of a testbed, whatever state it is in (also after a
    crash or a half-finished ``up``); returns what was removed."""
    state = Path(state)
    removed = []
    for ns in namespaces():
        _kill_namespace_processes(ns)
    for ns in namespaces():
        _ip("netns", "del", ns, check=False)
        removed.append(f"netns {ns}")
    if Path(f"/sys/class/net/{HOST_IF}").exists():
        _ip("link", "del", HOST_IF, check=False)
        removed.append(f"link {HOST_IF}")
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(str(state / "uts") + "/")), reverse=True):
        _run(["umount", "-l", mount], check=False)
        removed.append(f"mount {mount}")
    shutil.rmtree(state / "uts", ignore_errors=True)
    return removed

