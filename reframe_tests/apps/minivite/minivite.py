"""miniVite 1.0 (Table I: ``-f <graph> -t 1E-02 -i 6``) on 128 nodes, repeated as the paper's outer loop.

The paper added an outer loop that repeats the whole Louvain phase six times; upstream miniVite
runs it once, so the job launches it ``repetitions`` times in a row, with the same launch line
(same ranks, same graph), and each repetition is one step (hpcvar's miniVite parser: graph-ready
line to result line, ``reported_s`` = miniVite's printed Louvain-phase time). The graph is
``nlpkkt240.bin`` (SuiteSparse nlpkkt240 converted to miniVite's binary format; set
``-S graph=/path/to/nlpkkt240.bin``); with ``-S graph=`` empty miniVite generates a random
geometric graph of ``-S vertices=N`` vertices instead (``-n N``), which needs no input file.

Toy-sized (``HPCVAR_RFM_SIZE=toy``: 1 node, 2 ranks) the graph is generated with 40000 vertices:
each repetition takes about 1-2.5 s here (graph generation, O(N^2) in miniVite 1.0, about 1-2 s,
then the Louvain phase, the step, about 0.05-0.5 s depending on the machine's other load), six
repetitions about 10-15 s. Small-sized (``HPCVAR_RFM_SIZE=small``) 160000 vertices: a Louvain
phase of about 0.26 s at 2 testbed nodes (4 ranks), after about 13 s of graph generation per
repetition (84 s a run); a phase of a second would need about 600000 vertices, whose O(N^2)
generation takes minutes per repetition. Generated graphs are the same on every launch with the
same rank count (miniVite seeds its generator with a constant).
"""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, run_after, run_before, variable

from ...common.app import AppRun
from ...common.mixins import node_counts, sized
from ...common.sources import from_sources


build_minivite = from_sources("minivite")


class MiniViteBase(AppRun):
    descr = "miniVite: one Louvain phase on a large graph, repeated (outer loop) per step"
    app_name = "minivite"
    num_nodes = parameter(node_counts("minivite", [128]))
    #: Graph file (``-f``); empty: generate a random geometric graph of ``vertices`` (``-n``).
    graph = variable(str, value=sized("nlpkkt240.bin", ""))
    #: Vertices of the generated graph (a multiple of the rank count; the rank count must be a
    #: power of two). Toy-sized 40000, small 160000 (see the module doc).
    vertices = variable(int, value=sized(1_000_000, 40_000, small=160_000))
    threshold = variable(str, value="1E-02")
    #: Table I's ``-i 6``: the outer repetitions (one step each).
    repetitions = variable(int, value=6)
    #: OpenMP threads per rank: MPI only, one rank per core (the ranks fill the node).
    omp_threads = variable(int, value=1)
    tags = {"app", "minivite", "campaign"}

    @run_after("init")
    def _steps(self):
        self.expected_steps = self.repetitions

    @run_after("setup")
    def _threads(self):
        self.env_vars.setdefault("OMP_NUM_THREADS", str(self.omp_threads))

    def command(self):
        graph = ["-f", self.graph] if self.graph else ["-n", str(self.vertices)]
        return "miniVite", [*graph, "-t", self.threshold]

    @run_before("run")
    def _repeat(self):
        # Repetitions 1..N are one launch line inside a shell loop: ReFrame emits that line
        # between prerun_cmds and postrun_cmds only in its run phase, after this hook, when it
        # has set the job's task count (and, for containers, the launch command). Building a
        # copy of the line here would read the task count before it is set (`mpirun -np 1`:
        # another rank count, and so another generated graph). The loop wraps the app only:
        # it opens after every other set-up command and closes before every tear-down one.
        if self.repetitions < 1:
            raise ValueError(f"repetitions={self.repetitions}: need at least one")
        self.prerun_cmds = [*self.prerun_cmds, f"for hpcvar_rep in $(seq 1 {self.repetitions}); do"]
        self.postrun_cmds = ["done", *self.postrun_cmds]

    def physically_sane(self, out):
        mod = out.steps["modularity"]
        # Louvain on a graph with community structure: modularity in (0, 1], the same graph and
        # threshold every repetition, so the same modularity (to the printed precision).
        return [sn.assert_true(bool(((mod > 0) & (mod <= 1)).all()), msg="modularity outside (0, 1]"),
                sn.assert_eq(int(mod.nunique()), 1, msg="repetitions disagree on the modularity: {0} values")]


@rfm.simple_test
class MiniVite(MiniViteBase):
    build = fixture(build_minivite, scope="environment")
