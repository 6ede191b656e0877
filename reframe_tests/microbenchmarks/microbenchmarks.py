"""The project's MPI microbenchmarks (src/, see README.md) as ReFrame tests.

Built once per programming environment by a fixture; each benchmark runs on ``num_nodes`` nodes
(1 by default, ``HPCVAR_RFM_NODES="microbenchmarks:2,8"`` on a cluster) with ``tasks_per_node``
ranks (2 by default: the local system has 2 cores). Sanity reads the benchmark's own CSV files
with hpcvar's parser and checks every announced measurement is there; figures of merit are the
medians the programs print, one performance variable per (collective, size) or phase.
"""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import fixture, parameter, run_after, run_before, sanity_function, variable

from ..common.mixins import CampaignRun, CounterSampler, node_counts


class build_microbenchmarks(rfm.CompileOnlyRegressionTest):
    descr = "Build hpcvar's MPI microbenchmarks (warning-free)"
    valid_systems = ["+mpi"]
    valid_prog_environs = ["+mpi"]
    build_system = "Make"
    sourcesdir = "src"

    @sanity_function
    def built(self):
        return sn.all([sn.assert_not_found(r"warning:", self.stderr),
                       *(sn.assert_true(Path(self.stagedir, b).exists(), msg=f"{b} was not built")
                         for b in ("hpcvar-collectives", "hpcvar-overtime", "hpcvar-confidence",
                                   "hpcvar-aggressor"))])


class MicrobenchmarkRun(rfm.RunOnlyRegressionTest, CampaignRun, CounterSampler):
    valid_systems = ["+mpi"]
    valid_prog_environs = ["+mpi"]
    num_nodes = parameter(node_counts("microbenchmarks", [1]))
    tasks_per_node = 2
    sample_interval = 0.5
    time_limit = "10m"
    bench = fixture(build_microbenchmarks, scope="environment")
    tags = {"microbenchmark", "campaign", "regression"}
    program = variable(str)
    sourcesdir = None  # the binaries come from the build fixture

    @run_after("init")
    def _name_dataset(self):
        self.dataset = f"{self.program.removeprefix('hpcvar-')}-{self.num_nodes}"

    @run_before("run")
    def _executable(self):
        self.executable = str(Path(self.bench.stagedir) / self.program)

    def output(self, name: str) -> Path:
        return Path(self.stagedir) / name

    def done(self):
        return sn.assert_found(rf"^{self.program}: done", self.stdout)


@rfm.simple_test
class Collectives(MicrobenchmarkRun):
    descr = "MPI_Bcast/Reduce/Alltoall/Allreduce latency, every iteration recorded"
    program = "hpcvar-collectives"
    sizes = variable(typ.List[int], value=[8, 1024, 65536])
    collectives = variable(typ.List[str], value=["bcast", "reduce", "alltoall", "allreduce"])
    iterations = variable(int, value=200)
    warmup = variable(int, value=10)

    @run_before("run")
    def _options(self):
        self.executable_opts = ["-s", ",".join(map(str, self.sizes)), "-c", ",".join(self.collectives),
                                "-i", str(self.iterations), "-w", str(self.warmup), "-o", "collectives.csv"]
        self.keep_files += ["collectives.csv"]

    @run_before("performance")
    def _perf_variables(self):
        for c in self.collectives:
            for s in self.sizes:
                self.perf_variables[f"{c}_{s}B_median"] = sn.make_performance_function(sn.extractsingle(
                    rf"^hpcvar-collectives: {c} size={s} iterations=\d+ \S+ median_us=(\S+)", self.stdout, 1, float),
                    "us")

    @sanity_function
    def validate(self):
        from hpcvar.parsers import microbenchmarks

        table = microbenchmarks.read_collectives(self.output("collectives.csv"))
        per_cell = table.groupby(["collective", "size_bytes"]).size()
        return sn.all([self.done(),
                       sn.assert_eq(len(per_cell), len(self.collectives) * len(self.sizes)),
                       sn.assert_true(bool((per_cell == self.iterations).all()),
                                      msg="a (collective, size) lacks iterations"),
                       # A collective cannot finish on the slowest rank before the fastest one.
                       sn.assert_true(bool(((table["max_us"] >= table["min_us"]) & (table["min_us"] > 0)).all()),
                                      msg="per-iteration times not positive or max < min")])


@rfm.simple_test
class Overtime(MicrobenchmarkRun):
    descr = "Overtime-style monitor: latency, bandwidth, allreduce phases alternating with idle phases"
    program = "hpcvar-overtime"
    cycles = variable(int, value=3)

    @run_before("run")
    def _options(self):
        self.executable_opts = ["-n", str(self.cycles), "-o", "overtime"]
        self.keep_files += ["overtime-*.csv"]

    @run_before("performance")
    def _perf_variables(self):
        for phase in ("latency", "bandwidth", "allreduce"):
            self.perf_variables[f"{phase}_median"] = sn.make_performance_function(sn.avg(sn.extractall(
                rf"^hpcvar-overtime: cycle=\d+ phase={phase} .* median_us=(\S+) ", self.stdout, 1, float)), "us")

    @sanity_function
    def validate(self):
        from hpcvar.parsers import microbenchmarks

        phases = microbenchmarks.read_overtime_phases(self.output("overtime-phases.csv"))
        busy = phases[phases["phase"] != "idle"]
        starts = phases["start_epoch_s"].to_numpy()
        return sn.all([self.done(),
                       sn.assert_eq(len(busy), 3 * self.cycles),
                       # Every busy phase is followed by an idle phase of (at least) its length.
                       sn.assert_eq(int((phases["phase"] == "idle").sum()), len(busy)),
                       sn.assert_true(bool((starts[1:] >= starts[:-1]).all()), msg="phase starts not in order")])


@rfm.simple_test
class Confidence(MicrobenchmarkRun):
    descr = "Confidence-style pairwise 1-byte latency distributions (log bins, per-pair minima)"
    program = "hpcvar-confidence"
    cycles = variable(int, value=10)
    trials = variable(int, value=200)

    @run_before("run")
    def _options(self):
        self.executable_opts = ["-n", str(self.cycles), "-t", str(self.trials), "-o", "confidence"]
        self.keep_files += ["confidence-*.csv"]

    @run_before("performance")
    def _perf_variables(self):
        for key in ("min_pairwise_us", "timer_min_us"):
            self.perf_variables[key.removesuffix("_us")] = sn.make_performance_function(sn.extractsingle(
                rf"^hpcvar-confidence: ranks=.* {key}=(\S+)", self.stdout, 1, float), "us")

    @sanity_function
    def validate(self):
        from hpcvar.parsers import microbenchmarks

        minima = microbenchmarks.read_confidence_minima(self.output("confidence-minima.csv"))
        ranks = self.num_tasks
        pairs = ranks * (ranks - 1) // 2
        per_cycle = minima.groupby("cycle").size()
        return sn.all([self.done(),
                       sn.assert_eq(len(per_cycle), self.cycles),
                       sn.assert_true(bool((per_cycle == pairs).all()), msg="a pair was not measured every cycle"),
                       sn.assert_true(bool((minima["min_pairwise_us"] > 0).all()),
                                      msg="timer cost not subtracted correctly: non-positive minimum")])


@rfm.simple_test
class Aggressor(MicrobenchmarkRun):
    """Not a campaign dataset: the traffic generator of interference experiments (`hpcvar
    interference run`), which runs it beside a victim for a fixed time. Campaign rounds select
    ``-t campaign`` and leave it out."""

    descr = "Interfering traffic: periodic allreduce bursts (ML training) or uniform-random messages"
    program = "hpcvar-aggressor"
    tags = {"microbenchmark", "interference"}
    pattern = variable(str, value="uniform-random")
    message_bytes = variable(int, value=65536)
    messages = variable(int, value=4)
    compute_s = variable(float, value=0.001)
    duration_s = variable(float, value=10.0)

    @run_before("run")
    def _options(self):
        self.executable_opts = ["-p", self.pattern, "-s", str(self.message_bytes), "-m", str(self.messages),
                                "-c", str(self.compute_s), "-d", str(self.duration_s), "-o", "aggressor.csv"]
        self.keep_files += ["aggressor.csv"]

    @run_before("performance")
    def _perf_variables(self):
        self.perf_variables["comm_median"] = sn.make_performance_function(sn.extractsingle(
            r"^hpcvar-aggressor: pattern=\S+ size=\d+ iterations=\d+ median_us=(\S+)", self.stdout, 1, float), "us")

    @sanity_function
    def validate(self):
        from hpcvar.parsers import microbenchmarks

        table = microbenchmarks.read_aggressor(self.output("aggressor.csv"))
        return sn.all([self.done(),
                       sn.assert_eq(table.attrs["meta"]["pattern"], self.pattern),
                       sn.assert_gt(len(table), 0, msg="no iteration finished"),
                       sn.assert_true(bool((table["comm_max_us"] >= table["comm_min_us"]).all()),
                                      msg="per-iteration max < min")])
