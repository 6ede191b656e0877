"""MILC 7.8 ``su3_rmd`` (ks_imp_dyn) at fixed node counts, 4x4x4x4 sites per rank (Table I).

The input deck is written by the test: the global lattice is 4 x the 4-D process grid, a fresh
start, 80 trajectories measured every trajectory (the paper's 80 steps, the first 20 faster as the
solver settles). A step is one ``PLAQ:`` interval (hpcvar's MILC parser).
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
from hpcvar.grids import factor  # noqa: E402
from common.mixins import REPO, node_counts  # noqa: E402
from common.sources import BuildFromSources, FetchSources  # noqa: E402

DECK = """prompt 0
nflavors1 4
nflavors2 4
nx {nx}
ny {ny}
nz {nz}
nt {nt}
iseed {seed}

warms 0
trajecs {trajecs}
traj_between_meas 1
beta 7.00
mass1 0.1
mass2 0.1
u0   0.8441
microcanonical_time_step 0.02
steps_per_trajectory 4
max_cg_iterations 300
max_cg_restarts 5
error_per_site .000005
error_for_propagator .000002
npbp_reps 1
prec_pbp 1
fresh
forget
"""


class fetch_milc(FetchSources):
    app = "milc"


class build_milc(BuildFromSources):
    app = "milc"
    sources = fixture(fetch_milc, scope="session")


class MILCBase(AppRun):
    descr = "MILC su3_rmd: lattice QCD, 4^4 sites per rank, per-trajectory steps"
    app_name = "milc"
    num_nodes = parameter(node_counts("milc", [128, 512]))
    sites_per_rank = variable(int, value=4)
    trajectories = variable(int, value=80)
    seed = variable(int, value=5682304)
    tags = {"app", "milc", "campaign"}

    @run_before("run")
    def _deck(self):
        grid = factor(self.num_nodes * self.tasks_per_node, 4)
        nx, ny, nz, nt = (self.sites_per_rank * g for g in grid)
        Path(self.stagedir, "su3_rmd.in").write_text(
            DECK.format(nx=nx, ny=ny, nz=nz, nt=nt, seed=self.seed, trajecs=self.trajectories))

    @run_after("init")
    def _steps(self):
        self.expected_steps = self.trajectories

    def command(self):
        return "su3_rmd", ["su3_rmd.in"]

    def physically_sane(self, out):
        plaq = out.steps[["plaq_ss", "plaq_st"]]
        # Plaquettes are averages of SU(3) traces normalised to 3: finite and within (0, 3].
        return [sn.assert_found(r"RUNNING COMPLETED", self.timed_output),
                sn.assert_true(bool(((plaq > 0) & (plaq <= 3)).all().all()),
                               msg="plaquette outside (0, 3]: the lattice blew up")]


@rfm.simple_test
class MILC(MILCBase):
    build = fixture(build_milc, scope="environment")


@rfm.simple_test
class MILCContainer(MILCBase):
    image = str(REPO / "containers" / "milc.sif")
