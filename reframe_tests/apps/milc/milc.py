"""MILC 7.8.1 ``su3_rmd`` (ks_imp_dyn) at fixed node counts, 4x4x4x4 sites per rank (Table I).

The input deck is written by the test: the global lattice is 4 x the 4-D process grid, a fresh
start, 80 trajectories measured every trajectory (the paper's 80 steps, the first 20 faster as the
solver settles). A step is one ``PLAQ:`` interval (hpcvar's MILC parser).

Toy-sized (``HPCVAR_RFM_SIZE=toy``: 1 node, 2 ranks) the same deck runs 1 warm-up and 4 measured
trajectories on 6^4 sites per rank (12x6x6x6 globally): 0.65-0.85 s per trajectory on an idle
2-core machine (4^4 gives 0.13 s, short against the launcher's output forwarding), about 5 s in
all. MILC 7.8.1 prints no per-trajectory time (only the whole loop's ``Time = ... seconds``), so
steps are timed from the ``ts`` stamps of the ``PLAQ:`` lines.
"""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, run_after, run_before, variable

from hpcvar.util.grids import factor

from ...common.app import AppRun
from ...common.mixins import node_counts, sized
from ...common.sources import from_sources


#: su3_rmd's input, in the order its reader asks for the values (setup.c of ks_imp_dyn): the
#: lattice and seed first, then the run. Values not set by the test: two flavour sets of 4
#: staggered flavours of mass 0.1 at gauge coupling beta 7.0 (a quenched-like, heavy-quark
#: setting that thermalises in a few trajectories and keeps every CG solve short), tadpole factor
#: u0 0.8441, 4 molecular-dynamics steps of 0.02 per trajectory, CG to 5e-6 (updates) and 2e-6
#: (measurements) per site with at most 300 iterations and 5 restarts, one stochastic
#: psi-bar-psi estimate per measurement, a fresh (unit) start and no saved lattice.
SU3_RMD_LATTICE = ("prompt", "nflavors1", "nflavors2", "nx", "ny", "nz", "nt", "iseed")
SU3_RMD_RUN = (("warms", None), ("trajecs", None), ("traj_between_meas", "1"), ("beta", "7.00"),
               ("mass1", "0.1"), ("mass2", "0.1"), ("u0", "  0.8441"), ("microcanonical_time_step", "0.02"),
               ("steps_per_trajectory", "4"), ("max_cg_iterations", "300"), ("max_cg_restarts", "5"),
               ("error_per_site", ".000005"), ("error_for_propagator", ".000002"), ("npbp_reps", "1"),
               ("prec_pbp", "1"))


def su3_rmd_deck(nx: int, ny: int, nz: int, nt: int, seed: int, warms: int, trajecs: int) -> str:
    """The deck for a ``nx`` x ``ny`` x ``nz`` x ``nt`` lattice: ``warms`` unmeasured and
    ``trajecs`` measured trajectories, fresh start, final lattice forgotten."""
    lattice = dict(zip(SU3_RMD_LATTICE, (0, 4, 4, nx, ny, nz, nt, seed)))
    run = {key: value if value is not None else {"warms": warms, "trajecs": trajecs}[key] for key, value in SU3_RMD_RUN}
    lines = [f"{key} {value}" for key, value in lattice.items()]
    lines += ["", *(f"{key} {value}" for key, value in run.items()), "fresh", "forget"]
    return "\n".join(lines) + "\n"


build_milc = from_sources("milc")


class MILCBase(AppRun):
    descr = "MILC su3_rmd: lattice QCD, 4^4 sites per rank, per-trajectory steps"
    app_name = "milc"
    num_nodes = parameter(node_counts("milc", [128, 512]))
    #: Lattice sites per rank along each axis: Table I's 4; toy-sized 6 (see the module doc).
    sites_per_rank = variable(int, value=sized(4, 6))
    #: Measured trajectories (the steps): Table I's 80; toy-sized 4.
    trajectories = variable(int, value=sized(80, 4))
    #: Unmeasured trajectories before them (MILC's ``warms``): none in Table I's runs; toy-sized 1.
    warmups = variable(int, value=sized(0, 1))
    seed = variable(int, value=5682304)
    tags = {"app", "milc", "campaign"}

    @run_before("run")
    def _deck(self):
        grid = factor(self.num_nodes * self.tasks_per_node, 4)
        nx, ny, nz, nt = (self.sites_per_rank * g for g in grid)
        Path(self.stagedir, "su3_rmd.in").write_text(
            su3_rmd_deck(nx, ny, nz, nt, seed=self.seed, warms=self.warmups, trajecs=self.trajectories))

    @run_after("init")
    def _steps(self):
        self.expected_steps = self.trajectories

    def command(self):
        return "su3_rmd", ["su3_rmd.in"]

    def physically_sane(self, out):
        plaq = out.steps[["plaq_ss", "plaq_st"]]
        solves = int(out.steps["cg_solves"].sum())
        return [
            sn.assert_found(r"RUNNING COMPLETED", self.timed_output),
            # Plaquettes are averages of SU(3) traces normalised to 3: within (0, 3), and below
            # the fresh (unit) start's 3.0 once the gauge field has moved at all.
            sn.assert_true(bool(((plaq > 0) & (plaq < 3)).all().all()),
                           msg="plaquette outside (0, 3): the lattice blew up or never moved"),
            # Every conjugate-gradient solve (molecular dynamics and measurements) converged to
            # the requested residual within max_cg_iterations: MILC prints ' NOT converged'
            # otherwise. Each step holds 2 solves per microcanonical step at least.
            sn.assert_eq(out.checks["cg_not_converged"], 0, msg="{0} CG solves did not converge"),
            sn.assert_ge(solves, 2 * 4 * len(out.steps), msg="only {0} CG solves reported"),
            sn.assert_lt(int(out.steps["cg_max_iters"].max()), 300,
                         msg="a CG solve needed {0} iterations (max_cg_iterations 300)"),
        ]


@rfm.simple_test
class MILC(MILCBase):
    build = fixture(build_milc, scope="environment")
