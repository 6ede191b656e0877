"""Per-node counter sampler (hpcvar sample), its file format, and per-step deltas.

The sampler runs for real, as a subprocess: against a fake sysfs tree whose counters the test
changes while it runs (with a 64-bit wrap and a reset), and against this machine's
/sys/class/net with loopback traffic the test generates.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpcvar.parsers import apps, counters, detect, inspect, node_counters
from hpcvar.parsers.errors import ParseError
from hpcvar.sampler import spawn

TOP = 2**64


# ------------------------------------------------------------------------------ helpers


class FakeSysfs:
    """A sysfs-like tree; values are rewritten in place (fixed width) like a kernel attribute."""

    def __init__(self, root: Path):
        self.root = root
        self.files: dict[str, Path] = {}

    def add(self, rel: str, value: int, stamp: float | None = None) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b" " * 48 + b"\n")
        self.files[rel] = path
        self.set(rel, value, stamp)

    def set(self, rel: str, value: int, stamp: float | None = None) -> None:
        text = f"{value}" if stamp is None else f"{value}@{int(stamp)}.{int(round(stamp % 1 * 1e9)):09d}"
        fd = os.open(self.files[rel], os.O_WRONLY)
        try:
            os.pwrite(fd, f"{text:>48}\n".encode(), 0)  # one write, same length: never half-read
        finally:
            os.close(fd)


def wait_for_rows(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and "\nepoch,source,device,counter,value\n" in path.read_text() \
                and not path.read_text().endswith("epoch,source,device,counter,value\n"):
            return
        time.sleep(0.05)
    raise AssertionError(f"sampler wrote no rows to {path} within {timeout} s")


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=20)


def series(frame: pd.DataFrame, source: str, device: str, counter: str) -> pd.DataFrame:
    sel = frame[(frame.source == source) & (frame.device == device) & (frame.counter == counter)]
    return sel.sort_values("epoch")


# ------------------------------------------------------------------- fake tree, real process


def test_sampler_on_fake_sysfs_with_wrap_and_reset(tmp_path):
    fake = FakeSysfs(tmp_path / "sys")
    fake.add("class/net/hsn0/statistics/rx_bytes", 1000)
    fake.add("class/net/hsn0/statistics/tx_bytes", TOP - 1000)  # about to wrap
    fake.add("class/net/hsn0/statistics/rx_packets", 1000)      # will be reset
    fake.add("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data", 0)
    fake.add("class/infiniband/mlx5_0/ports/1/counters/port_xmit_wait", 7)
    t_cxi = time.time()
    fake.add("class/cxi/cxi0/device/telemetry/hni_rx_paused_0", 0, stamp=t_cxi)
    fake.add("class/cxi/cxi0/device/telemetry/not_selected_counter", 0, stamp=t_cxi)
    out = tmp_path / "node.{hostname}.csv"
    proc = spawn(out, interval=0.05, sysfs_root=tmp_path / "sys", sources=["net", "infiniband", "cxi"])
    written = next(tmp_path.glob("node.*.csv"), None)
    deadline = time.monotonic() + 20
    while written is None and time.monotonic() < deadline:
        time.sleep(0.05)
        written = next(tmp_path.glob("node.*.csv"), None)
    wait_for_rows(written)

    # Each state is held for 4+ sampling intervals, so the sampler sees every one of them.
    rx = [1000, 2000, 3500, 5000]
    tx = [TOP - 1000, TOP - 10, 5, 105]
    pk = [1000, 2000, 3000, 50, 150]
    stamps = []
    for k in range(1, 5):
        fake.set("class/net/hsn0/statistics/rx_bytes", rx[min(k, 3)])
        fake.set("class/net/hsn0/statistics/tx_bytes", tx[min(k, 3)])
        fake.set("class/net/hsn0/statistics/rx_packets", pk[k])
        fake.set("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data", 100 * k)
        stamps.append(time.time())
        fake.set("class/cxi/cxi0/device/telemetry/hni_rx_paused_0", 10 * k, stamp=stamps[-1])
        time.sleep(0.25)
    assert stop(proc) == 0

    frame = node_counters.read(written)
    meta, end = frame.attrs["meta"], frame.attrs["end"]
    assert frame.attrs["complete"] and frame.attrs["truncated"] is None
    assert end["reason"] == "SIGTERM" and int(end["samples"]) >= 16 and end["read_errors"] == "0"
    assert meta["sources_present"] == "net,infiniband,cxi" and meta["sources_absent"] == ""
    assert meta["interval_s"] == "0.05" and meta["sysfs_root"] == str(tmp_path / "sys")
    assert "not_selected_counter" not in set(frame.counter)
    # Every sampled value is one the test wrote, in the order written; all states were seen.
    for counter, values in (("rx_bytes", rx), ("tx_bytes", tx), ("rx_packets", pk)):
        seen = series(frame, "net", "hsn0", counter)["value"].tolist()
        assert [v for i, v in enumerate(seen) if i == 0 or v != seen[i - 1]] == values, counter
    # cxi rows carry the NIC's timestamps, not the sampler's.
    cxi = series(frame, "cxi", "cxi0", "hni_rx_paused_0")
    assert np.allclose(sorted(set(cxi["epoch"])), [t_cxi, *stamps], rtol=0, atol=2e-6)

    # One step over the whole run: the wrap counts as +990 then +15+100, the reset from 0.
    net = frame[frame.source == "net"]
    t = net["epoch"]
    steps = pd.DataFrame({"step": [1], "start": [t.min()], "end": [t.max()]})
    d = node_counters.step_deltas(frame, steps)
    assert d.loc[0, "net.rx_bytes"] == 4000
    assert d.loc[0, "net.tx_bytes"] == 1105
    assert d.loc[0, "net.rx_packets"] == (3000 - 1000) + 150
    assert d.loc[0, "infiniband.port_xmit_data_bytes"] == 4 * 400  # 4-byte words -> bytes
    assert d.loc[0, "infiniband.port_xmit_wait"] == 0
    assert d.attrs["wraps"] == 1
    (reset,) = d.attrs["resets"]
    assert reset.metrics == ("net/hsn0/rx_packets",)

    # Collation turns the samples into per-step counters itself (the import only copies the
    # files): the long table counters.csv would hold, in whole counts, for steps the samples cover.
    from hpcvar.collate import sampled_step_counters

    spans = frame.groupby(["source", "device", "counter"])["epoch"].agg(["min", "max"])
    t0, t1 = spans["min"].max(), spans["max"].min()  # what every series covers
    three = pd.DataFrame({"step": [1, 2, 3], "start": [t0, t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3],
                          "end": [t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3, t1]})
    node_counters.write_step_counters(tmp_path / "counters.csv", node_counters.step_deltas(frame, three))
    got = sampled_step_counters([written], three)
    assert got.equals(counters.read(tmp_path / "counters.csv"))
    assert set(got["counter"]) >= {"net.rx_bytes", "net.tx_bytes", "cxi.hni_rx_paused_0"} and len(got) == 3 * got["counter"].nunique()
    late = three.assign(end=three["end"] + (t1 - t0))  # the last steps end after the last sample
    with pytest.raises(ValueError, match="not covered by every node's samples"):
        sampled_step_counters([written], late)


def test_sampler_sees_loopback_traffic(tmp_path):
    """Real /sys/class/net: bytes sent over a loopback TCP connection show up in lo's rx_bytes."""
    if not Path("/sys/class/net/lo/statistics/rx_bytes").exists():
        pytest.skip("no /sys/class/net/lo on this machine")
    out = tmp_path / "lo.csv"
    proc = spawn(out, interval=0.1, sources=["net"])
    wait_for_rows(out)
    sent = 8 * 2**20
    server = socket.create_server(("127.0.0.1", 0))
    received = []

    def sink():
        conn, _ = server.accept()
        with conn:
            total = 0
            while chunk := conn.recv(1 << 16):
                total += len(chunk)
            received.append(total)

    thread = threading.Thread(target=sink)
    thread.start()
    t_start = time.time()
    with socket.create_connection(server.getsockname()) as client:
        client.sendall(b"x" * sent)
    thread.join(timeout=20)
    server.close()
    time.sleep(0.35)
    assert stop(proc) == 0
    assert received == [sent]

    frame = node_counters.read(out)
    lo = series(frame, "net", "lo", "rx_bytes")
    assert lo["epoch"].min() < t_start
    assert int(lo["value"].iloc[-1]) - int(lo["value"].iloc[0]) >= sent
    steps = pd.DataFrame({"step": [1], "start": [lo["epoch"].min()], "end": [lo["epoch"].max()]})
    d = node_counters.step_deltas(frame, steps, exclude_devices=())
    assert d.loc[0, "net.rx_bytes"] >= sent
    assert d.loc[0, "net.tx_bytes"] >= sent
    assert frame.attrs["end"]["reason"] == "SIGTERM"
    cpu_per_sample = float(frame.attrs["end"]["cpu_s"]) / int(frame.attrs["end"]["samples"])
    assert cpu_per_sample < 0.05  # a sanity bound, not a benchmark (see benchmarks/bench_sampler.py)


def test_sigint_and_duration_end_cleanly(tmp_path):
    fake = FakeSysfs(tmp_path / "sys")
    fake.add("class/net/eth0/statistics/rx_bytes", 1)
    a = tmp_path / "a.csv"
    proc = spawn(a, interval=0.05, sysfs_root=tmp_path / "sys", sources=["net"])
    wait_for_rows(a)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 0
    assert node_counters.read(a).attrs["end"]["reason"] == "SIGINT"

    b = tmp_path / "b.csv"
    done = subprocess.run([sys.executable, "-m", "hpcvar", "sample", "--out", str(b), "--interval", "0.1",
                           "--duration", "0.5", "--sources", "net", "--sysfs-root", str(tmp_path / "sys")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    frame = node_counters.read(b)
    assert frame.attrs["end"]["reason"] == "duration"
    assert 5 <= int(frame.attrs["end"]["samples"]) <= 8
    span = frame["epoch"].max() - frame["epoch"].min()
    assert 0.4 <= span <= 2.0


def test_absent_sources_are_recorded_not_errors(tmp_path):
    empty = tmp_path / "empty-sys"
    empty.mkdir()
    out = tmp_path / "x.csv"
    done = subprocess.run([sys.executable, "-m", "hpcvar", "sample", "--out", str(out), "--duration", "0",
                           "--sysfs-root", str(empty), "--proc-root", str(empty)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    frame = node_counters.read(out)
    meta = frame.attrs["meta"]
    assert meta["sources_present"] == "" and meta["sources_absent"] == "net,infiniband,cxi,psi"
    assert "kernel without pressure stall information" in meta["source psi"]
    assert meta["source net"].startswith("absent: no ") and "class/net" in meta["source net"]
    assert meta["source cxi"].startswith("absent: no ") and "not a Slingshot/Cassini node" in meta["source cxi"]
    assert len(frame) == 0 and frame.attrs["complete"]
    info = inspect(out)
    assert info["ok"] and info["kind"] == "node_counters" and info["records"] == 0

    bad = subprocess.run([sys.executable, "-m", "hpcvar", "sample", "--out", str(out), "--sources", "net,gpu",
                          "--duration", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown source(s) ['gpu']" in bad.stderr


# ------------------------------------------------------------------------------ the reader


def _complete_file(tmp_path: Path) -> Path:
    fake = FakeSysfs(tmp_path / "sys")
    for name in ("rx_bytes", "tx_bytes"):
        fake.add(f"class/net/eth0/statistics/{name}", 12345)
    out = tmp_path / "full.csv"
    done = subprocess.run([sys.executable, "-m", "hpcvar", "sample", "--out", str(out), "--interval", "0.05",
                           "--duration", "0.3", "--sources", "net", "--sysfs-root", str(tmp_path / "sys")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return out


def test_truncated_last_line_is_reported(tmp_path):
    full = _complete_file(tmp_path)
    lines = full.read_text().splitlines(keepends=True)
    rows = sum(1 for line in lines if line[0].isdigit())
    cut = tmp_path / "cut.csv"
    # Killed mid-write: no trailer, and the last row stops after 'value' began.
    body = [line for line in lines if not line.startswith("# end:")]
    cut.write_text("".join(body[:-1]) + body[-1][:-3])
    frame = node_counters.read(cut)
    assert len(frame) == rows - 1
    assert frame.attrs["truncated"] == {"line": len(body), "text": body[-1][:-3]}
    assert not frame.attrs["complete"]
    with pytest.raises(ParseError, match="truncated last line") as err:
        node_counters.read(cut, strict=True)
    assert err.value.line == len(body)
    info = node_counters.describe(cut)
    assert info["figures"]["truncated_last_line"] == f"line {len(body)} dropped (no newline: cut off)"
    assert info["figures"]["complete"] is False
    out = subprocess.run([sys.executable, "-m", "hpcvar", "inspect", str(cut)], capture_output=True, text=True)
    assert out.returncode == 0 and "truncated_last_line: line" in out.stdout

    full_info = node_counters.describe(full)
    assert full_info["figures"]["complete"] is True and "truncated_last_line" not in full_info["figures"]
    assert full_info["records"] == rows and detect(full) is node_counters


def test_killed_sampler_leaves_a_readable_file(tmp_path):
    fake = FakeSysfs(tmp_path / "sys")
    fake.add("class/net/eth0/statistics/rx_bytes", 5)
    out = tmp_path / "killed.csv"
    proc = spawn(out, interval=0.05, sysfs_root=tmp_path / "sys", sources=["net"])
    wait_for_rows(out)
    time.sleep(0.2)
    proc.kill()
    proc.wait(timeout=20)
    frame = node_counters.read(out)
    assert len(frame) >= 2 and not frame.attrs["complete"] and frame.attrs["end"] is None


def test_malformed_rows_name_their_line(tmp_path):
    full = _complete_file(tmp_path)
    lines = full.read_text().splitlines(keepends=True)
    i = next(i for i, line in enumerate(lines) if line[0].isdigit()) + 1
    bad = tmp_path / "bad.csv"
    bad.write_text("".join(lines[:i] + ["1795000000.0,net,eth0,rx_bytes,-3\n"] + lines[i:]))
    with pytest.raises(ParseError, match="non-negative integer value") as err:
        node_counters.read(bad)
    assert err.value.line == i + 1
    wrong = tmp_path / "wrong.csv"
    wrong.write_text(node_counters.MAGIC + "\n# hostname: h\nepoch,node,value\n")
    with pytest.raises(ParseError, match="expected header") as err:
        node_counters.read(wrong)
    assert err.value.line == 3
    out = subprocess.run([sys.executable, "-m", "hpcvar", "inspect", "--json", str(bad)],
                         capture_output=True, text=True)
    (r,) = json.loads(out.stdout)
    assert not r["ok"] and r["kind"] == "node_counters" and r["line"] == i + 1


# ------------------------------------------------------------------------------ step deltas


def _samples(node: str, rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["epoch", "source", "device", "counter", "value"])
    frame["value"] = frame["value"].astype(np.uint64)
    frame.insert(1, "node", node)
    return frame


def test_step_deltas_exact_values(tmp_path):
    # node a: rx_bytes +100/s; tx_bytes wraps between t=10 and t=20; port_xmit_data in words.
    a = _samples("a", [
        *[(t, "net", "hsn0", "rx_bytes", 1000 + 100 * t) for t in (0, 10, 20, 30)],
        (0, "net", "hsn0", "tx_bytes", TOP - 300), (10, "net", "hsn0", "tx_bytes", TOP - 100),
        (20, "net", "hsn0", "tx_bytes", 100), (30, "net", "hsn0", "tx_bytes", 400),
        *[(t, "infiniband", "mlx5_0/1", "port_xmit_data", 10 * t) for t in (0, 10, 20, 30)],
        *[(t, "net", "lo", "rx_bytes", 7 * t) for t in (0, 10, 20, 30)],  # loopback: left out
    ])
    # node b: rx_bytes resets (node's counters restart) between t=10 and t=20.
    b = _samples("b", [(0, "net", "hsn0", "rx_bytes", 500), (10, "net", "hsn0", "rx_bytes", 1500),
                       (20, "net", "hsn0", "rx_bytes", 200), (30, "net", "hsn0", "rx_bytes", 1200)])
    steps = pd.DataFrame({"step": [1, 2, 3], "start": [0.0, 5.0, 15.0], "end": [5.0, 15.0, 30.0]})
    d = node_counters.step_deltas([a, b], steps)
    assert list(d.columns) == ["step", "infiniband.port_xmit_data_bytes", "net.rx_bytes", "net.tx_bytes"]
    # a: 100/s -> 500, 1000, 1500; b: 100/s before the reset, 200 over (10, 20], 100/s after.
    assert d["net.rx_bytes"].tolist() == [500 + 500, 1000 + (500 + 100), 1500 + (100 + 1000)]
    # tx: +200 over (0,10], +200 over (10,20] across the wrap, +300 over (20,30].
    assert d["net.tx_bytes"].tolist() == [100, 200, 100 + 300]
    assert d["infiniband.port_xmit_data_bytes"].tolist() == [4 * 50, 4 * 100, 4 * 150]
    assert d.attrs["wraps"] == 1
    (reset,) = d.attrs["resets"]
    assert (reset.producer, reset.time, reset.t_prev, reset.metrics) == ("b", 20.0, 10.0, ("net/hsn0/rx_bytes",))
    assert d.attrs["uncovered"] == []

    path = tmp_path / "counters.csv"
    node_counters.write_step_counters(path, d, comment="from hpcvar sample")
    wide = counters.read_wide(path)
    assert wide.columns.tolist() == d.columns.tolist()
    assert wide.drop(columns="step").to_numpy().tolist() == d.drop(columns="step").to_numpy().tolist()

    late = pd.DataFrame({"step": [1, 2], "start": [20.0, 30.0], "end": [30.0, 31.0]})
    u = node_counters.step_deltas([a, b], late)
    assert np.isnan(u.loc[1, "net.rx_bytes"]) and u.loc[0, "net.rx_bytes"] == 1000 + 1000
    assert {x["node"] for x in u.attrs["uncovered"]} == {"a", "b"}
    with pytest.raises(ValueError, match=r"steps \[2\] are not covered"):
        node_counters.write_step_counters(tmp_path / "x.csv", u)


def test_step_deltas_from_timestamped_app_output(tmp_path):
    """Steps come from `ts '%.s'`-stamped stdout exactly as collate reads them."""
    t0 = 1_700_000_000.0
    spans = [(t0 + 2, t0 + 4), (t0 + 4, t0 + 9), (t0 + 9, t0 + 10)]
    stdout = apps.write_timestamped(tmp_path / "stdout.txt", "milc", spans, nranks=64)
    steps = apps.read(stdout).steps
    node = _samples("nid001", [(t0 + s, "cxi", "cxi0", "hni_rx_paused_0", 40 * s) for s in range(0, 12)])
    d = node_counters.step_deltas(node, steps)
    assert d["step"].tolist() == [1, 2, 3]
    assert d["cxi.hni_rx_paused_0"].tolist() == [80, 200, 40]


def test_pressure_stall_totals_become_counters(tmp_path):
    """psi: both totals of every resource file, as the kernel writes them (``some ... total=N``
    then ``full ... total=N``), counted in microseconds; the file is re-read, not re-opened."""
    proc_root = tmp_path / "proc"
    (proc_root / "pressure").mkdir(parents=True)
    cpu = proc_root / "pressure" / "cpu"

    def write(some: int, full: int) -> None:
        cpu.write_text(f"some avg10=0.50 avg60=1.47 avg300=19.31 total={some}\n"
                       f"full avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n")
    write(1_000_000, 0)
    out = tmp_path / "node.csv"
    proc = spawn(out, interval=0.05, sources=["psi"], proc_root=proc_root)
    wait_for_rows(out)
    write(1_250_000, 40)
    time.sleep(0.4)
    assert stop(proc) == 0
    frame = node_counters.read(out)
    assert frame.attrs["meta"]["sources_present"] == "psi"
    some = series(frame, "psi", "pressure", "cpu_some_us")["value"].tolist()
    full = series(frame, "psi", "pressure", "cpu_full_us")["value"].tolist()
    assert some[0] == 1_000_000 and some[-1] == 1_250_000 and full[-1] == 40
    assert set(frame.loc[frame.source == "psi", "counter"]) == {"cpu_some_us", "cpu_full_us"}
