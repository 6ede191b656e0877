"""The testbed's router counters: every link end of every group router, sampled on an interval and
written as an LDMS ``store_csv`` store (``hpcvar dev slurm up --nodes ...`` starts it).

Per router (LDMS ``ProducerName`` = the router's name in the topology map, ``component_id`` =
its group number) and per link end the router transmits on (``name#dev`` columns, the device
named after the router or node at the far end: ``GL_TX_BYTES#r1``, ``NL_TX_BYTES#n02``), the
cumulative values (counter names: :mod:`hpcvar.system.linkcounters`), all from the link's ``tbf`` queue:

* ``TX_BYTES``, ``TX_PKTS``: bytes and packets it passed on;
* ``DROPS``, ``OVERLIMITS``: packets dropped, and times a packet had to wait for tokens (both
  grow with the traffic beyond the rate);
* ``QUEUED_US``: microseconds during which the queue held a packet, and ``BACKLOG_BMS``: the
  queue's backlog integrated over time (byte-milliseconds). The kernel keeps no such totals: the
  backlog is polled every ``poll`` seconds (0.1) and integrated (trapezoids). They play the part
  of the Aries stall counters (cycles a tile had data to send and could not).

``GL_`` columns are global links (router to router), ``NL_`` node links (router to node): the
parts of Aries' router tiles and processor tiles. The queues are read over netlink in each
router's namespace (pyroute2; a qdisc dump costs about a millisecond), a row per router is
written every ``interval`` seconds (0.5).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import numpy as np
from pyroute2 import NetNS

from hpcvar.dev.testbed import TestbedSpec
from hpcvar.parsers.ldms import StoreCsvWriter
from hpcvar.system.linkcounters import LINK_METRICS

STORE_NAME = "links"


def store_files(store_dir: Path) -> list[Path]:
    """The store's files in the order written, one per start of the sampler (``links.<epoch>``)."""
    files = [p for p in Path(store_dir).glob(f"{STORE_NAME}.*") if p.suffix != ".HEADER"]
    return sorted(files, key=lambda p: (len(p.name), p.name))


def link_class(spec: TestbedSpec, device: str) -> str:
    """``GL`` for a global link end (named after a router), ``NL`` for a node link end."""
    return "NL" if device in spec.node_names else "GL"


class RouterQueues:
    """The tbf queues of one router namespace, read over netlink."""

    def __init__(self, namespace: str):
        self.ns = NetNS(namespace, flags=0)  # flags=0: attach, never create a namespace
        self.devices = {link["index"]: link.get_attr("IFLA_IFNAME") for link in self.ns.get_links()}

    def read(self) -> dict[str, dict[str, int]]:
        """Per link end: bytes, packets, drops, overlimits and the backlog (bytes, now)."""
        out = {}
        for qdisc in self.ns.get_qdiscs():
            if qdisc.get_attr("TCA_KIND") != "tbf":
                continue
            stats = qdisc.get_attr("TCA_STATS2")
            basic, queue = stats.get_attr("TCA_STATS_BASIC"), stats.get_attr("TCA_STATS_QUEUE")
            out[self.devices.get(qdisc["index"], str(qdisc["index"]))] = {
                "bytes": basic["bytes"], "packets": basic["packets"], "drops": queue["drops"],
                "overlimits": queue["overlimits"], "backlog": queue["backlog"]}
        return out

    def close(self) -> None:
        self.ns.close()


class LinkSampler:
    """Samples every router of ``spec`` into the LDMS store ``store_dir/links.<epoch>``."""

    def __init__(self, spec: TestbedSpec, store_dir: Path, interval: float = 0.5, poll: float = 0.1):
        self.spec, self.interval, self.poll = spec, interval, poll
        self.routers = {g: RouterQueues(spec.router_ns(g)) for g in range(spec.groups)}
        self.devices = {g: sorted(r.read()) for g, r in self.routers.items()}
        columns = [f"{link_class(spec, dev)}_{metric}#{dev}" for g in range(spec.groups) for dev in self.devices[g]
                   for metric in LINK_METRICS]
        self.columns = list(dict.fromkeys(columns))
        self.store_dir = Path(store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        # One file per start, named as LDMS names rollover files (<store>.<epoch>): a restart keeps
        # what was sampled before.
        path = self.store_dir / f"{STORE_NAME}.{int(time.time())}"
        while path.exists():  # a restart within the second: never write over the earlier run's rows
            time.sleep(0.2)
            path = self.store_dir / f"{STORE_NAME}.{int(time.time())}"
        self.writer = StoreCsvWriter(path, self.columns)
        self.integrals = {(g, dev): [0.0, 0.0] for g in range(spec.groups) for dev in self.devices[g]}  # us, B*ms
        self.backlog: dict[tuple[int, str], int] = {}
        self.last: dict[int, dict] = {}
        self.polled: float | None = None

    def take(self) -> None:
        """Read every queue; integrate the backlog since the previous read."""
        now = time.monotonic()
        dt = 0.0 if self.polled is None else now - self.polled
        self.polled = now
        for g, router in self.routers.items():
            stats = router.read()
            self.last[g] = stats
            for dev in self.devices[g]:
                backlog = stats.get(dev, {}).get("backlog", 0)
                before = self.backlog.get((g, dev), backlog)
                acc = self.integrals[(g, dev)]
                if backlog > 0 or before > 0:
                    acc[0] += dt * 1e6 * (0.5 if (backlog > 0) != (before > 0) else 1.0)
                acc[1] += dt * 1e3 * (backlog + before) / 2
                self.backlog[(g, dev)] = backlog

    def write(self) -> None:
        now = time.time()
        rows = []
        for g in range(self.spec.groups):
            values = {}
            for dev in self.devices[g]:
                s = self.last[g].get(dev, {"bytes": 0, "packets": 0, "drops": 0, "overlimits": 0})
                acc = self.integrals[(g, dev)]
                cls = link_class(self.spec, dev)
                values.update({f"{cls}_TX_BYTES#{dev}": s["bytes"], f"{cls}_TX_PKTS#{dev}": s["packets"],
                               f"{cls}_DROPS#{dev}": s["drops"], f"{cls}_OVERLIMITS#{dev}": s["overlimits"],
                               f"{cls}_QUEUED_US#{dev}": round(acc[0]), f"{cls}_BACKLOG_BMS#{dev}": round(acc[1])})
            rows.append([values.get(c, 0) for c in self.columns])
        groups = list(range(self.spec.groups))
        self.writer.write_rows(np.full(len(groups), now), np.array([self.spec.router(g) for g in groups], dtype=object),
                               np.array(groups), 0, np.array(rows, dtype=np.int64))
        self.writer.flush()

    def run(self, duration: float | None = None) -> None:
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        signal.signal(signal.SIGINT, lambda *_: stop.append(1))
        end = None if duration is None else time.monotonic() + duration
        polls = max(1, round(self.interval / self.poll))
        nxt, k = time.monotonic(), 0
        try:
            while not stop and (end is None or time.monotonic() < end):
                self.take()
                if k % polls == 0:
                    self.write()
                k += 1
                nxt += self.poll
                time.sleep(max(0.0, nxt - time.monotonic()))
        finally:
            self.writer.close()
            for router in self.routers.values():
                router.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    from hpcvar.dev.testbed import load_spec

    p = argparse.ArgumentParser(prog="python -m hpcvar.dev.linksampler",
                                description="Sample the testbed's link counters into an LDMS store_csv store.")
    p.add_argument("--state", required=True, help="the dev cluster's state directory")
    p.add_argument("--store", required=True, help="directory of the LDMS store")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between rows (default 0.5)")
    p.add_argument("--poll", type=float, default=0.1, help="seconds between reads of the queues (default 0.1)")
    p.add_argument("--duration", type=float)
    a = p.parse_args(argv)
    spec = load_spec(Path(a.state))
    if spec is None:
        print(f"linksampler: no testbed in {a.state}", file=sys.stderr)
        return 2
    LinkSampler(spec, Path(a.store), a.interval, a.poll).run(a.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
