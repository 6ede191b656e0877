"""The project's MPI microbenchmarks (src/, see README.md) as ReFrame tests.

Built once per programming environment by a fixture, with the build script the microbenchmarks
image runs too (``reframe_tests/apps/build/microbenchmarks.sh``); ``-S image=auto`` runs them in
that image instead (:mod:`..common.containers`). Each benchmark runs on ``num_nodes`` nodes
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

from ..common.containers import ContainerRun
from ..common.mixins import CampaignRun, CounterSampler, node_counts
from ..common.sources import BUILD_DIR, BareMetalBuild, own_sources_key

SRC = Path(__file__).resolve().parent / "src"
PROGRAMS = ("hpcvar-collectives", "hpcvar-overtime", "hpcvar-confidence", "hpcvar-aggressor")


class build_microbenchmarks(rfm.CompileOnlyRegressionTest, BareMetalBuild):
    descr = "Build hpcvar's MPI microbenchmarks (warning-free)"
    valid_systems = ["+mpi"]
    valid_prog_environs = ["+mpi"]
    build_system = "CustomBuild"
    sourcesdir = "src"

    @run_before("compile")
    def _commands(self):
        env = self.current_environ
        # A complete install (the script writes .hpcvar-source last) of the same sources.
        self.build_system.commands = self.bare_metal_only(self.build_once(
            f"MPICC={env.cc} bash {BUILD_DIR / 'microbenchmarks.sh'} . {self.install_prefix}",
            f"test -f {self.install_prefix}/.hpcvar-source"))

    @sanity_function
    def built(self):
        if self.in_image():
            return sn.assert_true(True)
        return sn.all([sn.assert_not_found(r"warning:", self.stderr),
                       sn.assert_true(Path(self.install_prefix, ".hpcvar-source").exists()),
                       *(sn.assert_true(Path(self.install_prefix, "bin", b).exists(), msg=f"{b} was not built")
                         for b in PROGRAMS)])

    def code_name(self) -> str:
        return "microbenchmarks"

    @property
    def install_prefix(self) -> str:
        """The stage directory's ``install/``, or the build cache's entry for these sources and
        this build script (``HPCVAR_BUILD_CACHE``: every round of a campaign reuses the one build)."""
        return self.cached_prefix(own_sources_key(SRC, BUILD_DIR / "microbenchmarks.sh"))

    def provenance(self) -> str:
        return Path(self.install_prefix, ".hpcvar-source").read_text().strip()


class MicrobenchmarkRun(rfm.RunOnlyRegressionTest, CampaignRun, CounterSampler, ContainerRun):
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
        self.executable = str(Path(self.bench.install_prefix) / "bin" / self.program)

    @run_before("run", always_last=True)
    def _in_image(self):
        # After the benchmark's own hook has set its options.
        if self.image:
            self.run_in_image(self.program, self.executable_opts)

    @run_before("performance")
    def _provenance(self):
        if not self.is_dry_run() and not self.image:
            self.software = self.bench.provenance()

    def output(self, name: str) -> Path:
        return Path(self.stagedir) / name

    def done(self):
        return sn.assert_found(rf"^{self.program}: done", self.stdout)

    def placed_as_asked(self, meta: dict) -> list:
        """The program ran on the ranks and nodes the test asked for (as the output's own header
        says): a launch that starts the wrong number of ranks, or all of them on one node, fails."""
        hosts = meta.get("hosts") or []
        return [sn.assert_eq(meta["nranks"], self.num_tasks, msg="ran on {0} ranks, the test asked for {1}"),
                sn.assert_eq(len(set(hosts)), self.num_nodes, msg="ran on {0} nodes, the test asked for {1}")]


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
        return sn.all([self.done(), *self.placed_as_asked(table.attrs["meta"]),
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
