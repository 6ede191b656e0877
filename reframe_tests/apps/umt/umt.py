"""UMT (LLNL's deterministic radiation transport proxy) on 128 nodes.

Table I used UMT 2.0 with the ``custom_8k.cmg 4 2 4 4 4 0.04`` deck; current UMT (the pinned
version in reframe_tests/apps/sources.yaml) replaced that driver with ``test_driver``, so the
test runs its built-in benchmark problem on a per-rank-decomposed mesh (``-B local -d X,Y,Z``)
for ``cycles`` time steps. A step is one ``TIME STEP n`` report (hpcvar's UMT parser).
"""

import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, run_after, variable

_SUITE = str(Path(__file__).resolve().parents[2])
if _SUITE not in sys.path:  # append: ReFrame pops the entry it appended by position
    sys.path.append(_SUITE)
from common.app import AppRun  # noqa: E402
from common.mixins import REPO, node_counts  # noqa: E402
from common.sources import BuildFromSources, FetchSources  # noqa: E402


class fetch_umt(FetchSources):
    app = "umt"


class build_umt(BuildFromSources):
    app = "umt"
    sources = fixture(fetch_umt, scope="session")


class UMTBase(AppRun):
    descr = "UMT: radiation transport on an unstructured mesh, per-time-step reports"
    app_name = "umt"
    num_nodes = parameter(node_counts("umt", [128]))
    cycles = variable(int, value=7)
    #: Zones per rank along x, y, z (``-B local``: the mesh grows with the rank count).
    local_zones = variable(str, value="10,10,10")
    benchmark_problem = variable(int, value=1)
    tags = {"app", "umt", "campaign"}

    @run_after("init")
    def _steps(self):
        self.expected_steps = self.cycles

    def command(self):
        return "test_driver", ["-c", str(self.cycles), "-B", "local", "-d", self.local_zones,
                               "-b", str(self.benchmark_problem)]

    def physically_sane(self, out):
        steps = out.steps
        # Every step's sweep converged in a bounded number of flux iterations and time advanced.
        return [sn.assert_found(r"Test driver finished time steps", self.timed_output),
                sn.assert_true(bool((steps["flux_iters"] > 0).all()), msg="a step did no flux iteration"),
                sn.assert_true(bool((steps["dtrad"] > 0).all()), msg="radiation time step not positive")]


@rfm.simple_test
class UMT(UMTBase):
    build = fixture(build_umt, scope="environment")


@rfm.simple_test
class UMTContainer(UMTBase):
    image = str(REPO / "containers" / "umt.sif")
