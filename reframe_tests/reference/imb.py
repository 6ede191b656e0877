"""The Intel MPI Benchmarks (IMB-MPI1, pinned in reframe_tests/apps/sources.yaml, built from the
source mirror) on the same ranks, collectives and message sizes as the suite's ``Collectives``
test: an independent reference for its figures (benchmarks/bench_imb_reference.py compares them).

Not a campaign dataset (no ``dataset``): IMB reports one mean per (collective, size, run), not
every iteration, so it cannot feed the latency tables; it checks the suite's own benchmark.
Sanity reads IMB's tables with hpcvar's IMB parser: every (collective, size) measured, on every
rank, with ``t_min <= t_avg <= t_max``. Figures of merit: IMB's ``t_avg`` and ``t_max`` (us).
"""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import fixture, parameter, run_before, sanity_function, variable

from ..common.mixins import node_counts
from ..common.sources import PinnedSources, from_sources


#: The suite's collective names -> IMB's benchmark names.
IMB_NAMES = {"bcast": "Bcast", "reduce": "Reduce", "alltoall": "Alltoall", "allreduce": "Allreduce"}


build_imb = from_sources("imb", descr="Build IMB-MPI1 from pinned sources")


@rfm.simple_test
class IMBCollectives(rfm.RunOnlyRegressionTest, PinnedSources):
    descr = "IMB-MPI1 Bcast/Reduce/Alltoall/Allreduce: the independent reference of Collectives"
    valid_systems = ["+mpi"]
    valid_prog_environs = ["+mpi"]
    num_nodes = parameter(node_counts("microbenchmarks", [1]))
    tasks_per_node = variable(int, value=2)
    #: As Collectives' defaults, so both measure the same thing.
    sizes = variable(typ.List[int], value=[8, 1024, 65536])
    collectives = variable(typ.List[str], value=["bcast", "reduce", "alltoall", "allreduce"])
    iterations = variable(int, value=200)
    build = fixture(build_imb, scope="environment")
    sourcesdir = None
    time_limit = "10m"
    tags = {"microbenchmark", "reference", "regression"}

    @run_before("run")
    def _command(self):
        self.num_tasks_per_node = self.tasks_per_node
        self.num_tasks = self.num_nodes * self.tasks_per_node
        unknown = sorted(set(self.collectives) - set(IMB_NAMES))
        if unknown:
            raise ValueError(f"collectives {unknown} have no IMB benchmark (known: {sorted(IMB_NAMES)})")
        # -msglen: exactly the suite's sizes; -iter_policy off: every size gets `iterations`
        # repetitions (IMB otherwise cuts them for large messages); -npmin: only the full rank
        # count (IMB otherwise also runs 2, 4, ... ranks).
        self.prerun_cmds = [f"printf '%s\\n' {' '.join(map(str, self.sizes))} > msglen.txt"]
        self.executable = str(Path(self.build.install_prefix) / "bin" / "IMB-MPI1")
        self.executable_opts = [*(IMB_NAMES[c] for c in self.collectives), "-msglen", "msglen.txt",
                                "-iter", str(self.iterations), "-iter_policy", "off",
                                "-npmin", str(self.num_tasks)]

    def table(self):
        from hpcvar.parsers import apps

        return apps.read(Path(self.stagedir) / self.stdout.evaluate()).table

    @sanity_function
    def validate(self):
        table = self.table()
        wide = table.pivot_table(index=["benchmark", "size_bytes"], columns="metric", values="value")
        expected = {(IMB_NAMES[c], s) for c in self.collectives for s in self.sizes}
        return sn.all([
            sn.assert_found(r"All processes entering MPI_Finalize", self.stdout),
            sn.assert_eq(set(wide.index), expected, msg="IMB measured {0}, expected {1}"),
            sn.assert_true(bool((table["processes"] == self.num_tasks).all()), msg="not on every rank"),
            sn.assert_true(bool(((wide["t_min"] <= wide["t_avg"]) & (wide["t_avg"] <= wide["t_max"])).all()),
                           msg="t_min <= t_avg <= t_max does not hold"),
        ])

    @run_before("performance")
    def _perf_variables(self):
        for c in self.collectives:
            for s in self.sizes:
                for metric in ("t_avg", "t_max"):
                    self.perf_variables[f"{c}_{s}B_{metric}"] = sn.make_performance_function(
                        sn.defer(self._value(IMB_NAMES[c], s, metric)), "us")

    def _value(self, benchmark: str, size: int, metric: str) -> float:
        t = self.table()
        row = t[(t["benchmark"] == benchmark) & (t["size_bytes"] == size) & (t["metric"] == metric)]
        return float(row["value"].iloc[0])
