"""What-if interference experiments on a simulated dragonfly: the network model and its runner.

An experiment (:func:`hpcvar.experiments.spec.load_experiment`) names a victim, aggressors,
placement policies (:mod:`hpcvar.experiments.placement`), routing algorithms, repetitions and a
seed; its ``system:`` section describes the simulated network. This module evaluates it:

1. **Traffic patterns** (:func:`pattern_rounds`): a job's iteration as rounds of messages, for each
   pattern of :data:`hpcvar.experiments.spec.PATTERNS`.
2. **A flow-level dragonfly model** (:class:`DragonflyNetwork`, :class:`JobTraffic`,
   :func:`simulate_workload`): routes, channel loads, message latencies and iteration times of
   jobs sharing the network.
3. **The experiment loop** (:func:`run_experiment`, :func:`simulate_experiment`): victim slowdown
   (total time, communication time, message latency) of each policy x routing x repetition
   against the victim alone, and the same for every aggressor.

The real Slurm experiment (:mod:`hpcvar.campaign.interference`) runs the same file with the same
placement policies and needs nothing from this module.

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
sits at the cap: such numbers are bounds, not predictions. Defaults
(:class:`~hpcvar.experiments.spec.SystemSpec`): the bandwidths of the Union study's systems
(terminal 16, local 4.69, global 5.25 GiB/s), and CODES' usual 4 KiB packets, 64 KiB
virtual-channel buffers and 90 ns router delay.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from hpcvar.experiments.placement import Placement, PlacementError, place_jobs, seeded_rng
from hpcvar.experiments.spec import ROUTINGS, Experiment, ExperimentError, JobSpec, SystemSpec, load_experiment
from hpcvar.results import clean
from hpcvar.results.interference import InterferenceResult, Job, Policy, Slowdowns, System
from hpcvar.simulate.presets import Preset
from hpcvar.simulate.system import build_topology
from hpcvar.util.grids import factor
from hpcvar.util.progress import Progress

GIB = 2.0 ** 30


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

    def phi(self, rho: np.ndarray, out: np.ndarray | None = None, work: np.ndarray | None = None) -> np.ndarray:
        """1 + queue: queue = rho/(1-rho) packets (M/M/1), capped at the buffer depth. With ``out``
        and ``work`` (arrays of rho's shape; ``out`` may be rho itself) the same arithmetic in
        place, into ``out``."""
        cap = self.system.queue_cap
        if out is None:
            r = np.minimum(rho, cap / (1.0 + cap))
            return 1.0 + r / (1.0 - r)
        r = np.minimum(rho, cap / (1.0 + cap), out=out)
        np.subtract(1.0, r, out=work)
        np.divide(r, work, out=out)
        return np.add(1.0, out, out=out)

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

        # Two work arrays of bg's shape for every evaluation: at 32 samples of 512 messages
        # (the interference experiment's), fresh temporaries cost more than the arithmetic.
        phi, work = np.empty(bg.shape), np.empty(bg.shape)

        def latency(L):
            np.divide(own[None], L[:, :, None, None], out=phi)
            net.phi(np.add(bg, phi, out=phi), out=phi, work=work)
            queued = np.multiply(np.subtract(phi, 1.0, out=work), wait_unit[None], out=work).sum(-1)
            lat = head0[None] + queued + self.body[None, :, None] * np.multiply(phi, inv_bw[None], out=work).max(-1)
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
class SimulatedExperiment:
    """An experiment's tables and its summary (what ``hpcvar interference simulate`` writes)."""

    jobs: pd.DataFrame        # one row per policy, routing, repetition, job: alone/mixed figures, slowdowns
    samples: pd.DataFrame     # one row per policy, routing, repetition, job, workload, iteration
    network: pd.DataFrame     # one row per policy, routing, repetition: channel utilisation of the mixed workload
    summary: InterferenceResult

    def write(self, out: str | Path) -> list[Path]:
        """CSV and Parquet of the three tables plus summary.json under ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in ("jobs", "samples", "network"):
            df = getattr(self, name)
            df.to_csv(out / InterferenceResult.table(name, "csv"), index=False)
            df.to_parquet(out / InterferenceResult.table(name, "parquet"), index=False)
            written += [out / InterferenceResult.table(name, "csv"), out / InterferenceResult.table(name, "parquet")]
        return written + [self.summary.write(out)]


#: Slowdown column -> (per-iteration sample column, jobs-table column stem, unit): each job's
#: slowdown is the mean of its mixed-workload samples over the mean of its samples alone.
SLOWDOWNS = {"slowdown_total": ("total_time_s", "total_time", "s"),
             "slowdown_comm": ("comm_time_s", "comm_time", "s"),
             "slowdown_latency": ("mean_latency_us", "latency", "us"),
             "slowdown_max_latency": ("max_latency_us", "max_latency", "us")}


def run_experiment(exp: Experiment, progress: bool = True) -> SimulatedExperiment:
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
                placements = place_jobs(net.topology, requests, seeded_rng(exp.seed, pi, rep, 0))
            except PlacementError as exc:
                raise PlacementError(f"{exp.source}: policy {policy.label!r}: {exc}") from None
            traffic = [JobTraffic(net, spec, p, seeded_rng(exp.seed, pi, rep, 1, j))
                       for j, (spec, p) in enumerate(zip(specs, placements))]
            draws = seeded_rng(exp.seed, pi, rep, 2)
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
    summary = InterferenceResult(
        experiment=exp.name, source=exp.source, seed=exp.seed, repetitions=exp.repetitions, samples=exp.samples,
        system=System(**{**asdict(exp.system), **net.describe()}),
        jobs={j.name: Job(role=j.role, test=j.test, pattern=j.pattern, nodes=j.nodes, message_bytes=j.message_bytes,
                          compute_s=j.compute_s) for j in specs},
        policies={p.label: Policy(victim=p.victim, aggressors=p.aggressors) for p in exp.policies},
        # Median over repetitions of each job's slowdowns, per policy and routing (null where NaN).
        slowdowns={job: {pol: {rt: Slowdowns(**clean({k: float(g[k].median()) for k in SLOWDOWNS}))
                               for rt, g in by_pol.groupby("routing", sort=False)}
                         for pol, by_pol in by_job.groupby("policy", sort=False)}
                   for job, by_job in jobs.groupby("job", sort=False)},
        elapsed_s=round(time.monotonic() - t0, 2))
    return SimulatedExperiment(jobs, samples, network, summary)


def simulate_experiment(path: str | Path, out: str | Path, overrides: dict[str, object] | None = None,
                        progress: bool = True) -> SimulatedExperiment:
    """``hpcvar interference simulate``: load, run, write tables and summary under ``out``."""
    exp = load_experiment(path, overrides)
    result = run_experiment(exp, progress)
    result.write(out)
    Path(out, "experiment.yaml").write_text(yaml.safe_dump(exp.document, sort_keys=False))
    return result


__all__ = [
    "SLOWDOWNS", "DragonflyNetwork", "JobTraffic", "WorkloadResult", "SimulatedExperiment",
    "pattern_rounds", "simulate_workload", "run_experiment", "simulate_experiment",
]
