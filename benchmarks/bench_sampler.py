"""Overhead of the per-node counter sampler (``hpcvar sample``) on the job beside it.

Runs two workloads that keep every core busy, each without a sampler and with one sampling this
machine's /sys at 1 s and at 0.1 s (runs interleaved, configurations rotated, median wall time
per configuration), and prints the relative overhead (target: under 1%):

  cpu       one process per core, a fixed amount of pure-Python arithmetic each
  loopback  TCP sender/receiver pairs over 127.0.0.1 moving a fixed number of bytes

Then the sampler's own cost: CPU time per sample in-process (the read-and-format loop alone) and
for the whole sampler process (startup and imports included, from the child's rusage).

    python benchmarks/bench_sampler.py               # ~2-3 minutes on 2 cores
    python benchmarks/bench_sampler.py --repeats 3 --seconds 1   # quick check
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

try:
    from hpcvar.parsers import node_counters
    from hpcvar.sampler import Sampler, spawn
except ImportError:  # run from a source checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from hpcvar.parsers import node_counters
    from hpcvar.sampler import Sampler, spawn

CORES = os.cpu_count() or 1
CHUNK = 1 << 16


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def _receive(port_queue, nbytes: int) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port_queue.put(server.getsockname()[1])
    conn, _ = server.accept()
    got = 0
    with conn:
        while got < nbytes:
            chunk = conn.recv(CHUNK)
            if not chunk:
                break
            got += len(chunk)
    server.close()


def _send(port: int, nbytes: int) -> None:
    payload = b"x" * CHUNK
    with socket.create_connection(("127.0.0.1", port)) as s:
        sent = 0
        while sent < nbytes:
            s.sendall(payload)
            sent += CHUNK


def workload_cpu(work: int) -> float:
    start = time.perf_counter()
    procs = [mp.Process(target=_spin, args=(work,)) for _ in range(CORES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return time.perf_counter() - start


def workload_loopback(nbytes: int) -> float:
    start = time.perf_counter()
    pairs = max(CORES // 2, 1)
    procs = []
    for _ in range(pairs):
        q = mp.Queue()
        r = mp.Process(target=_receive, args=(q, nbytes))
        r.start()
        port = q.get()
        procs += [r, mp.Process(target=_send, args=(port, nbytes))]
        procs[-1].start()
    for p in procs:
        p.join()
    return time.perf_counter() - start


def calibrate(seconds: float) -> tuple[int, int]:
    """Work sizes that take about ``seconds`` each."""
    n = 200_000
    while (t := workload_cpu(n)) < 0.2:
        n *= 4
    work = int(n * seconds / t)
    b = 64 << 20
    while (t := workload_loopback(b)) < 0.2:
        b *= 4
    return work, int(b * seconds / t) // CHUNK * CHUNK


def start_sampler(out: Path, interval: float):
    proc = spawn(out, interval=interval, stdout=None)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if out.exists() and out.read_text().count("\n") > 20:
            return proc
        time.sleep(0.05)
    raise RuntimeError("sampler did not start")


def stop_sampler(proc) -> tuple[float, int]:
    """SIGTERM it; (CPU seconds of the whole process from its rusage, exit status)."""
    proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, proc.returncode


def in_process_cost(samples: int) -> tuple[float, int, list[str]]:
    """CPU seconds per sample of the read-and-format loop alone, counters per sample, sources."""
    with tempfile.TemporaryDirectory() as tmp:
        sampler = Sampler(Path(tmp) / "x.csv", interval=1.0)
        present = [p.source for p in (s.probe() for s in sampler.sources) if p.present]
        sampler._sample()
        start = time.process_time()
        for _ in range(samples):
            sampler._sample()
        cpu = time.process_time() - start
        rows = sampler.rows
        for s in sampler.sources:
            s.close()
    return cpu / samples, rows // (samples + 1), present


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs per workload and configuration")
    parser.add_argument("--seconds", type=float, default=3.0, help="target duration of one workload run")
    parser.add_argument("--intervals", default="1,0.1", help="sampling intervals to test (seconds)")
    args = parser.parse_args()
    intervals = [float(x) for x in args.intervals.split(",")]

    cpu_per_sample, counters_per_sample, present = in_process_cost(2000)
    print(f"{CORES} cores; sampler reads {counters_per_sample} counters per sample "
          f"(sources present: {','.join(present) or 'none'})")
    print(f"in-process cost: {cpu_per_sample * 1e6:.0f} us CPU per sample "
          f"({cpu_per_sample * 1e6 / max(counters_per_sample, 1):.1f} us per counter); "
          + ", ".join(f"{100 * cpu_per_sample / i:.3f}% of one core at {i:g} s" for i in intervals))

    work, nbytes = calibrate(args.seconds)
    print(f"workloads: cpu = {CORES} x {work} iterations, loopback = {max(CORES // 2, 1)} pair(s) x "
          f"{nbytes / 2**20:.0f} MiB; {args.repeats} repeats, interleaved")
    configs = [None, *intervals]
    times: dict[tuple[str, float | None], list[float]] = {}
    sampler_cpu: dict[float, list[tuple[float, int, float]]] = {i: [] for i in intervals}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            order = configs[rep % len(configs):] + configs[:rep % len(configs)]
            for name, run, size in (("cpu", workload_cpu, work), ("loopback", workload_loopback, nbytes)):
                for interval in order:
                    proc = None
                    if interval is not None:
                        out = Path(tmp) / f"s.{name}.{interval}.{rep}.csv"
                        proc = start_sampler(out, interval)
                    elapsed = run(size)
                    if proc is not None:
                        cpu, code = stop_sampler(proc)
                        end = node_counters.read(out).attrs["end"]
                        assert code == 0 and end is not None
                        sampler_cpu[interval].append((cpu, int(end["samples"]), float(end["cpu_s"]), elapsed))
                    times.setdefault((name, interval), []).append(elapsed)

    print(f"\n{'workload':<10}{'sampler':>10}{'median s':>10}{'min s':>9}{'overhead (median)':>19}"
          f"{'overhead (min)':>16}")
    for name in ("cpu", "loopback"):
        base = times[(name, None)]
        for interval in configs:
            t = times[(name, interval)]
            label = "none" if interval is None else f"{interval:g} s"
            over = "" if interval is None else f"{100 * (statistics.median(t) / statistics.median(base) - 1):+.2f}%"
            over_min = "" if interval is None else f"{100 * (min(t) / min(base) - 1):+.2f}%"
            print(f"{name:<10}{label:>10}{statistics.median(t):>10.3f}{min(t):>9.3f}{over:>19}{over_min:>16}")
    spread = {name: 100 * (max(times[(name, None)]) / min(times[(name, None)]) - 1) for name in ("cpu", "loopback")}
    print("run-to-run spread without a sampler (max/min - 1): "
          + ", ".join(f"{k} {v:.2f}%" for k, v in spread.items()))
    print("\nsampler process, per run (its CPU time is what it can take from the job: a noise-free bound):")
    for interval, rows in sampler_cpu.items():
        total = sum(r[0] for r in rows)
        loop = sum(r[2] for r in rows)
        n = sum(r[1] for r in rows)
        wall = sum(r[3] for r in rows)
        print(f"  {interval:g} s: {n / len(rows):.0f} samples/run, loop CPU {1e6 * loop / n:.0f} us/sample "
              f"= {100 * loop / wall / CORES:.3f}% of the node's CPU during the runs; whole process "
              f"(startup + imports included) {total / len(rows):.3f} s CPU/run = "
              f"{100 * total / wall / CORES:.3f}% of the node's CPU")


if __name__ == "__main__":
    main()
