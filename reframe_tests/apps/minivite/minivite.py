"""miniVite (Table I: ``-f <graph> -t 1E-02 -i 6``) on 128 nodes, repeated as the paper's outer loop.

The paper added an outer loop that repeats the whole Louvain phase six times; upstream miniVite
runs it once, so the job launches it ``repetitions`` times in a row and each repetition is one
step (hpcvar's miniVite parser: graph-ready line to ``Average total time``). The graph is
``nlpkkt240.bin`` (SuiteSparse nlpkkt240 converted to miniVite's binary format; set
``-S graph=/path/to/nlpkkt240.bin``); with ``-S graph=`` empty miniVite generates a random
geometric graph of ``-S vertices=N`` instead (``-n N``), which needs no input file.
"""

import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, run_after, run_before, variable

_SUITE = str(Path(__file__).resolve().parents[2])
if _SUITE not in sys.path:  # append: ReFrame pops the entry it appended by position
    sys.path.append(_SUITE)
from common.app import AppRun  # noqa: E402
from common.mixins import REPO, node_counts  # noqa: E402
from common.sources import BuildFromSources, FetchSources  # noqa: E402


class fetch_minivite(FetchSources):
    app = "minivite"


class build_minivite(BuildFromSources):
    app = "minivite"
    sources = fixture(fetch_minivite, scope="session")


class MiniViteBase(AppRun):
    descr = "miniVite: one Louvain phase on a large graph, repeated (outer loop) per step"
    app_name = "minivite"
    num_nodes = parameter(node_counts("minivite", [128]))
    graph = variable(str, value="nlpkkt240.bin")
    vertices = variable(int, value=1_000_000)
    threshold = variable(str, value="1E-02")
    #: Table I's ``-i 6``: the outer repetitions (one step each).
    repetitions = variable(int, value=6)
    tags = {"app", "minivite", "campaign"}

    @run_after("init")
    def _steps(self):
        self.expected_steps = self.repetitions

    def command(self):
        graph = ["-f", self.graph] if self.graph else ["-n", str(self.vertices)]
        return "miniVite", [*graph, "-t", self.threshold]

    @run_before("run")
    def _repeat(self):
        # Repetitions 2..N: the same launch line again, inside the same allocation.
        runner = self.job.launcher.run_command(self.job)
        if self.image:
            launch = f"{runner} {self.container_platform.launch_command(self.stagedir)}"
        else:
            launch = " ".join([runner, self.executable, *self.executable_opts])
        self.postrun_cmds = [launch] * (self.repetitions - 1) + self.postrun_cmds

    def physically_sane(self, out):
        mod = out.steps["modularity"]
        # Louvain on a graph with community structure: modularity in (0, 1], the same graph and
        # threshold every repetition, so the same modularity (to the printed precision).
        return [sn.assert_true(bool(((mod > 0) & (mod <= 1)).all()), msg="modularity outside (0, 1]"),
                sn.assert_lt(float(mod.max() - mod.min()), 1e-3,
                             msg="repetitions disagree on the modularity: {0}")]


@rfm.simple_test
class MiniVite(MiniViteBase):
    build = fixture(build_minivite, scope="environment")


@rfm.simple_test
class MiniViteContainer(MiniViteBase):
    image = str(REPO / "containers" / "minivite.sif")
