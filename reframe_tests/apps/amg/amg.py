"""AMG (Table I: AMG 1.1 = AMG2013, and AMG2023) at fixed node counts.

Input as Table I: ``-P Px Py Pz -n 32 32 32 -problem 2`` (the process grid follows the rank
count: 32x16x16 on 128 nodes x 64 ranks, 32x32x32 on 512) with ``-printstats`` so every time step
prints its solver block (the step markers hpcvar's AMG parser uses).

Toy-sized (``HPCVAR_RFM_SIZE=toy``: 1 node, 2 ranks) the local size is chosen so a step is a few
tenths of a second, long against the few milliseconds `ts` and the launcher's output forwarding
add: AMG 1.1 ``-n 24 24 24`` (six time steps of about 0.2-1 s each), AMG2023 ``-n 40 40 40``
(its one PCG solve about 0.2-0.6 s; at Table I's 32^3 it is about 0.1 s).

AMG 1.1 and AMG2023 are separate datasets (``amg-N`` and ``amg2023-N``): their ``-problem 2`` are
different problems (AMG 1.1: six AMG-GMRES time steps on a 27-point operator; AMG2023: one
AMG-PCG solve on a 7-point Laplacian).
"""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, variable

from hpcvar.util.grids import factor

from ...common.app import AppRun
from ...common.mixins import node_counts, sized
from ...common.sources import from_sources


build_amg2013 = from_sources("amg2013")
build_amg2023 = from_sources("amg2023")


class AMGBase(AppRun):
    descr = "AMG: algebraic multigrid solver (hypre), Table I input, per-step solver times"
    app_name = "amg"
    num_nodes = parameter(node_counts("amg", [128, 512]))
    #: Local problem size per rank (``-n``): Table I's 32^3; toy-sized 24^3 (see the module doc);
    #: small, Table I's 32^3 again (on 2 ranks per node: about 0.9 s a step at 2 testbed nodes).
    local_size = variable(str, value=sized("32 32 32", "24 24 24", small="32 32 32"))
    problem = variable(int, value=2)
    #: AMG2013's problem 2 runs a fixed number of time steps (6 in LLNL's driver).
    expected_steps = 6
    #: Relative residual every solve must reach (both drivers' problem 2 solve to 1e-8; AMG 1.1's
    #: time steps end with fixed-iteration GMRES solves near machine precision).
    residual_bound = variable(float, value=1e-6)
    tags = {"app", "amg", "campaign"}

    def command(self):
        px, py, pz = factor(self.num_nodes * self.tasks_per_node, 3)
        return "amg", ["-P", str(px), str(py), str(pz), "-n", *self.local_size.split(),
                       "-problem", str(self.problem), "-printstats"]

    def physically_sane(self, out):
        residuals = out.steps["final_residual"].dropna()
        return [sn.assert_gt(len(residuals), 0, msg="no solver residuals printed"),
                sn.assert_lt(float(residuals.max()), self.residual_bound,
                             msg="a solve did not converge: residual {0} >= {1}")]


@rfm.simple_test
class AMG2013(AMGBase):
    build = fixture(build_amg2013, scope="environment")


class AMG2023Base(AMGBase):
    #: Its own dataset, amg2023-N: AMG2023 is not the AMG 1.1 of Table I.
    app_name = "amg2023"
    #: AMG2023's problem 2 is one AMG-PCG solve, not AMG 1.1's time-stepping loop: one step per run.
    expected_steps = 1
    #: Toy-sized 40^3 per rank: at 32^3 its one solve is about 0.1 s on 2 ranks; small, 66^3
    #: (about 0.9 s at 2 testbed nodes).
    local_size = sized("32 32 32", "40 40 40", small="66 66 66")


@rfm.simple_test
class AMG2023(AMG2023Base):
    build = fixture(build_amg2023, scope="environment")
