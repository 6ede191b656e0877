"""The sampling loop: read every source at a fixed rate, append to the node's CSV, stop cleanly.

The file is written incrementally: the header and metadata first, then one block of rows per
sample, each block written with a single ``write`` and flushed, so a job killed at any moment
leaves a readable file (at worst a truncated last line, which the reader reports). SIGTERM or
SIGINT (or ``duration`` elapsing) ends the loop: one last sample is taken so the file covers the
moment of the stop, an ``# end:`` trailer line records why and how much CPU the sampler used,
and :func:`run` returns 0.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hpcvar import __version__
from hpcvar.sampler.layout import COLUMNS, MAGIC, UNITS
from hpcvar.sampler.sources import DEFAULT_CXI_COUNTERS, SOURCE_NAMES, make_sources


def hostname() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


def output_path(pattern: str | Path) -> Path:
    """``--out`` with ``{hostname}`` replaced by this node's short host name."""
    return Path(str(pattern).replace("{hostname}", hostname()))


class Sampler:
    """One node's sampler; :meth:`run` loops until a signal, ``duration`` or :meth:`stop`."""

    def __init__(self, out: str | Path, interval: float = 1.0, sources: Sequence[str] = SOURCE_NAMES,
                 sysfs_root: str | Path = "/sys", duration: float | None = None,
                 cxi_counters: Sequence[str] = DEFAULT_CXI_COUNTERS, proc_root: str | Path = "/proc"):
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        if duration is not None and duration < 0:
            raise ValueError(f"duration must be >= 0 seconds, got {duration}")
        self.out = output_path(out)
        self.interval = float(interval)
        self.duration = duration
        self.sysfs_root = Path(sysfs_root)
        self.sources = make_sources(list(sources), sysfs_root, cxi_counters, proc_root)
        self.samples = 0
        self.rows = 0
        self._stop_reason: str | None = None

    def stop(self, reason: str = "stop") -> None:
        self._stop_reason = reason

    def _header(self, start: float, probes) -> str:
        present = [p.source for p in probes if p.present]
        absent = [p.source for p in probes if not p.present]
        lines = [MAGIC,
                 f"# hostname: {hostname()}",
                 f"# hpcvar_version: {__version__}",
                 f"# interval_s: {self.interval:g}",
                 f"# start_epoch: {start:.6f}",
                 f"# sysfs_root: {self.sysfs_root}",
                 f"# sources_present: {','.join(present)}",
                 f"# sources_absent: {','.join(absent)}"]
        lines += [f"# source {p.source}: {'present' if p.present else 'absent'}: {p.detail}" for p in probes]
        lines += [f"# units: {UNITS}", ",".join(COLUMNS)]
        return "\n".join(lines) + "\n"

    def _sample(self) -> str:
        now = time.time()
        parts = []
        for source in self.sources:
            for epoch, device, counter, value in source.read(now):
                parts.append(f"{epoch:.6f},{source.name},{device},{counter},{value}\n")
        self.samples += 1
        self.rows += len(parts)
        return "".join(parts)

    def run(self) -> int:
        """Sample until SIGTERM/SIGINT, ``duration`` or :meth:`stop`; returns the exit code (0)."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        handlers = {}

        def on_signal(signum, frame):
            self._stop_reason = signal.Signals(signum).name

        main_thread = _in_main_thread()
        if main_thread:
            previous_fd = signal.set_wakeup_fd(wake_w)
            for sig in (signal.SIGTERM, signal.SIGINT):
                handlers[sig] = signal.signal(sig, on_signal)
        cpu0 = time.process_time()
        start = time.time()
        t0 = time.monotonic()
        try:
            probes = [s.probe() for s in self.sources]
            with open(self.out, "w", buffering=1 << 16) as fh:
                fh.write(self._header(start, probes))
                fh.flush()
                fh.write(self._sample())
                fh.flush()
                end = t0 + self.duration if self.duration is not None else float("inf")
                k = 0
                while not self._stop_reason:
                    # Next tick on the fixed grid t0 + k * interval (ticks missed while busy are skipped).
                    k = max(k + 1, int((time.monotonic() - t0) / self.interval) + 1)
                    if not self._wait(wake_r, min(t0 + k * self.interval, end)):
                        break  # a signal or stop(): the last sample follows
                    if time.monotonic() >= end:
                        self._stop_reason = "duration"
                        break
                    fh.write(self._sample())
                    fh.flush()
                # One last sample at the moment of the stop, so the file covers it.
                fh.write(self._sample())
                cpu = time.process_time() - cpu0
                errors = sum(s.read_errors for s in self.sources)
                fh.write(f"# end: epoch={time.time():.6f} samples={self.samples} rows={self.rows} "
                         f"reason={self._stop_reason} cpu_s={cpu:.6f} read_errors={errors}\n")
                fh.flush()
        finally:
            for s in self.sources:
                s.close()
            if main_thread:
                for sig, old in handlers.items():
                    signal.signal(sig, old)
                signal.set_wakeup_fd(previous_fd)
            os.close(wake_r)
            os.close(wake_w)
        return 0

    def _wait(self, wake_r: int, deadline: float) -> bool:
        """Sleep until ``deadline`` (monotonic) or a signal; True when the deadline was reached."""
        while not self._stop_reason:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            ready, _, _ = select.select([wake_r], [], [], remaining)
            if ready:
                os.read(wake_r, 512)
        return False


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def run(out: str | Path, interval: float = 1.0, sources: Sequence[str] = SOURCE_NAMES,
        sysfs_root: str | Path = "/sys", duration: float | None = None,
        cxi_counters: Sequence[str] = DEFAULT_CXI_COUNTERS, proc_root: str | Path = "/proc") -> int:
    """Run a sampler in this process (the ``hpcvar sample`` command)."""
    return Sampler(out, interval, sources, sysfs_root, duration, cxi_counters, proc_root).run()


def spawn(out: str | Path, interval: float = 1.0, sources: Sequence[str] = SOURCE_NAMES,
          sysfs_root: str | Path = "/sys", duration: float | None = None,
          cxi_counters: Sequence[str] | None = None, proc_root: str | Path = "/proc", **popen) -> subprocess.Popen:
    """Start ``hpcvar sample`` in the background (how a local launcher runs it beside a job).

    Stop it with ``proc.send_signal(signal.SIGTERM); proc.wait()``: the file is then complete.
    """
    cmd = [sys.executable, "-m", "hpcvar", "sample", "--out", str(out), "--interval", str(interval),
           "--sources", ",".join(sources), "--sysfs-root", str(sysfs_root), "--proc-root", str(proc_root)]
    if duration is not None:
        cmd += ["--duration", str(duration)]
    if cxi_counters is not None:
        cmd += ["--cxi-counters", ",".join(cxi_counters)]
    return subprocess.Popen(cmd, **popen)
