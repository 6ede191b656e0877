"""Counter sources of the per-node sampler: which files each reads and how.

Every source discovers its counter files once, under a configurable sysfs root (``/sys`` on a
real node, a fake tree in tests), keeps each file open and re-reads it with ``pread(fd, n, 0)``:
sysfs regenerates an attribute's text on every read at offset 0, so one sample costs one
system call per counter and no open/close.

* ``net``: ``<root>/class/net/<iface>/statistics/<counter>`` (Linux interface statistics, in
  bytes and packets), the counters of :data:`NET_COUNTERS`.
* ``infiniband``: ``<root>/class/infiniband/<hca>/ports/<port>/counters/<counter>``, every file
  (``port_xmit_data``/``port_rcv_data`` count 4-byte words, ``port_xmit_wait`` ticks during
  which the port had data to send but no credits: the stall analogue). The device is
  ``<hca>/<port>``.
* ``cxi``: HPE Slingshot Cassini NIC telemetry ``<root>/class/cxi/cxi<N>/device/telemetry/<name>``,
  each file holding ``<value>@<seconds>.<nanoseconds>`` (the layout libfabric's CXI provider reads
  with ``fscanf(f, "%ld@%ld.%ld", ...)`` in ``prov/cxi/src/cxip_telemetry.c``). The NIC's own
  timestamp becomes the row's epoch. The Cassini exposes hundreds of counters; the default
  selection (:data:`DEFAULT_CXI_COUNTERS`, shell patterns) holds the groups the Perlmutter
  variability study correlated with run time; ``"*"`` reads them all.
* ``psi``: Linux pressure stall information ``<proc root>/pressure/{cpu,io,memory}``: the
  cumulative microseconds during which some task (``some``) or every task (``full``) waited for
  that resource, as counters ``cpu_some_us``, ``cpu_full_us``, ... of device ``pressure``. CPU
  pressure is how much the node's CPUs, not the network, held the job back.

A source that is absent on the node says why (:class:`Probe`); the sampler runs with the rest.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: Interface statistics the ``net`` source reads (of the ~23 in ``statistics/``).
NET_COUNTERS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets",
                "rx_errors", "tx_errors", "rx_dropped", "tx_dropped")

#: Default Cassini telemetry selection: the counter groups of the Cray MPICH CXI counter summary
#: that the Perlmutter/Frontier variability study (hpcgroup/perf-variability-ipdps26) analysed.
DEFAULT_CXI_COUNTERS = ("atu_cache_*", "lpe_net_match_*", "lpe_rndzv_puts*", "hni_rx_paused_*",
                        "hni_tx_paused_*", "parbs_tarb_pi_*", "pct_*timeouts")

SOURCE_NAMES = ("net", "infiniband", "cxi", "psi")
#: Resources of the ``psi`` source (files under ``<proc root>/pressure/``).
PSI_RESOURCES = ("cpu", "io", "memory")
_READ_BYTES = 64


@dataclass(frozen=True)
class Probe:
    """Whether a source is usable on this node: its devices and counters, or why not."""

    source: str
    present: bool
    detail: str


@dataclass
class _Counter:
    device: str
    counter: str
    path: Path
    fd: int | None = None


class FileSource:
    """A source made of one small text file per counter; subclasses say which files."""

    name = ""
    #: Bytes read per file: a counter value, or the few lines of a pressure file.
    read_bytes = _READ_BYTES

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.counters: list[_Counter] = []
        self.read_errors = 0

    def discover(self) -> list[_Counter]:
        raise NotImplementedError

    def absent_reason(self) -> str:
        return f"no counter files under {self.root}"

    def probe(self) -> Probe:
        try:
            found = self.discover()
        except OSError as exc:
            return Probe(self.name, False, f"cannot list counters: {exc}")
        readable = []
        for c in found:
            try:
                c.fd = os.open(c.path, os.O_RDONLY)
            except OSError:
                continue
            readable.append(c)
        self.counters = readable
        if not readable:
            return Probe(self.name, False, self.absent_reason())
        devices = sorted({c.device for c in readable})
        return Probe(self.name, True, f"devices={','.join(devices)} counters={len(readable)}")

    def parse(self, raw: bytes, now: float) -> tuple[float, int]:
        return now, int(raw)

    def rows(self, raw: bytes, c: _Counter, now: float) -> list[tuple[float, str, str, int]]:
        """What one file's bytes hold: (epoch, device, counter, value) rows (one, for most sources)."""
        epoch, value = self.parse(raw, now)
        if value < 0:
            raise ValueError(f"{c.path}: negative value {value}")
        return [(epoch, c.device, c.counter, value)]

    def read(self, now: float) -> list[tuple[float, str, str, int]]:
        """(epoch, device, counter, value) of every counter that could be read now."""
        out = []
        for c in self.counters:
            try:
                if c.fd is None:
                    c.fd = os.open(c.path, os.O_RDONLY)
                out += self.rows(os.pread(c.fd, self.read_bytes, 0), c, now)
            except (OSError, ValueError, KeyError):
                # A vanished device, or a value caught mid-update: skip it this time.
                self.read_errors += 1
                self._close(c)
        return out

    @staticmethod
    def _close(c: _Counter) -> None:
        if c.fd is not None:
            try:
                os.close(c.fd)
            except OSError:
                pass
            c.fd = None

    def close(self) -> None:
        for c in self.counters:
            self._close(c)


def _dirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


class NetSource(FileSource):
    name = "net"

    def __init__(self, root: str | Path, counters: Sequence[str] = NET_COUNTERS):
        super().__init__(root)
        self.wanted = tuple(counters)

    def absent_reason(self) -> str:
        base = self.root / "class" / "net"
        return f"no {base}" if not base.is_dir() else f"no readable interface statistics under {base}"

    def discover(self) -> list[_Counter]:
        found = []
        for iface in _dirs(self.root / "class" / "net"):
            stats = iface / "statistics"
            for name in self.wanted:
                if (stats / name).is_file():
                    found.append(_Counter(iface.name, name, stats / name))
        return found


class InfinibandSource(FileSource):
    name = "infiniband"

    def absent_reason(self) -> str:
        base = self.root / "class" / "infiniband"
        return f"no {base}" if not base.is_dir() else f"no port counters under {base}"

    def discover(self) -> list[_Counter]:
        found = []
        for hca in _dirs(self.root / "class" / "infiniband"):
            for port in _dirs(hca / "ports"):
                counters = port / "counters"
                if counters.is_dir():
                    found += [_Counter(f"{hca.name}/{port.name}", f.name, f)
                              for f in sorted(counters.iterdir()) if f.is_file()]
        return found


class CxiSource(FileSource):
    name = "cxi"

    def __init__(self, root: str | Path, patterns: Sequence[str] = DEFAULT_CXI_COUNTERS):
        super().__init__(root)
        self.patterns = tuple(patterns)

    def absent_reason(self) -> str:
        base = self.root / "class" / "cxi"
        if not base.is_dir():
            return f"no {base} (not a Slingshot/Cassini node)"
        return f"no telemetry file under {base}/cxi*/device/telemetry matches {','.join(self.patterns)}"

    def discover(self) -> list[_Counter]:
        found = []
        for nic in _dirs(self.root / "class" / "cxi"):
            if not nic.name.startswith("cxi"):
                continue
            telemetry = nic / "device" / "telemetry"
            if not telemetry.is_dir():
                continue
            for f in sorted(telemetry.iterdir()):
                if f.is_file() and any(fnmatch.fnmatchcase(f.name, p) for p in self.patterns):
                    found.append(_Counter(nic.name, f.name, f))
        return found

    def parse(self, raw: bytes, now: float) -> tuple[float, int]:
        """``<value>@<sec>.<nsec>``: the value and the NIC's timestamp as epoch seconds."""
        value, sep, stamp = raw.strip().partition(b"@")
        if not sep:
            raise ValueError(f"expected '<value>@<sec>.<nsec>', got {raw[:40]!r}")
        sec, dot, nsec = stamp.partition(b".")
        epoch = int(sec) + (int(nsec.ljust(9, b"0")[:9]) / 1e9 if dot else 0.0)
        return epoch, int(value)


class PsiSource(FileSource):
    """One file per resource holding two totals (``some`` and ``full``): two counters per file."""

    name = "psi"
    read_bytes = 256

    def absent_reason(self) -> str:
        base = self.root / "pressure"
        return f"no {base} (kernel without pressure stall information)"

    def discover(self) -> list[_Counter]:
        return [_Counter("pressure", resource, self.root / "pressure" / resource) for resource in PSI_RESOURCES
                if (self.root / "pressure" / resource).is_file()]

    def rows(self, raw: bytes, c: _Counter, now: float) -> list[tuple[float, str, str, int]]:
        """``some avg10=... total=N`` and ``full ...`` lines: the cumulative stall time (us) of each."""
        out = []
        for line in raw.decode().splitlines():
            kind, _, fields = line.partition(" ")
            total = dict(f.split("=", 1) for f in fields.split())["total"]
            out.append((now, c.device, f"{c.counter}_{kind}_us", int(total)))
        return out


def make_sources(names: Sequence[str], sysfs_root: str | Path = "/sys",
                 cxi_counters: Sequence[str] = DEFAULT_CXI_COUNTERS, proc_root: str | Path = "/proc") -> list:
    unknown = [n for n in names if n not in SOURCE_NAMES]
    if unknown:
        raise ValueError(f"unknown source(s) {unknown}; choose from {', '.join(SOURCE_NAMES)}")
    build = {"net": lambda: NetSource(sysfs_root), "infiniband": lambda: InfinibandSource(sysfs_root),
             "cxi": lambda: CxiSource(sysfs_root, cxi_counters), "psi": lambda: PsiSource(proc_root)}
    return [build[n]() for n in dict.fromkeys(names)]
