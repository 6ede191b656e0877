"""UMT 2.0 (LLNL/UMT v2.0, UMT2015 for APEX) on 128 nodes, as Table I.

Table I ran ``SuOlsonTest custom_8k.cmg 4 2 4 4 4 0.04``: a .cmg mesh deck with one block per
rank (8,192 ranks on 128 nodes x 64), 4 energy groups, product quadrature (type 2) of order 4
with 4 polar and 4 azimuthal angles. The deck is not in the UMT 2.0 tarball; the test writes it
into the stage directory in the format of the decks the tarball ships (benchmarks/*.cmg): the
rank grid from ``hpcvar.util.grids.factor`` (8,192 -> 32 x 16 x 16; ``custom_8k.cmg``) with
``zones_per_rank`` zones per block (3 x 6 x 8 as all shipped decks), 10% of the hexes
subdivided, seed 10. Toy-sized (HPCVAR_RFM_SIZE=toy) the same input runs on 2 ranks
(``custom_2.cmg``, 2 x 1 x 1 blocks): same per-rank work, seconds per run.

SuOlsonTest's time loop is fixed in the v2.0 source: goal time 0.000334 (Su-Olson tau = 0.1),
first step 3e-6, then 6e-5, the last one cut: 7 radiation cycles; the 7th argument (0.04) is
not read by v2.0 and is passed as Table I did. A step is one ``CYCLE n`` block, its own timer
the block's ``RADTR`` cycle time (hpcvar's UMT parser).
"""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, run_before, variable

from hpcvar.util.grids import factor

from ...common.app import AppRun
from ...common.mixins import node_counts
from ...common.sources import from_sources


build_umt = from_sources("umt")


def cmg_deck(grid, zones) -> str:
    """A UMT .cmg deck with one block per rank on a ``grid`` (px, py, pz) of blocks and ``zones``
    (zx, zy, zz) zones per block: the layout of UMT 2.0's benchmarks/grid*MPI_3x6x8.cmg (the
    boundary faces the Su-Olson problem needs, 10% of the hexes subdivided, seed 10)."""
    px, py, pz = grid
    zx, zy, zz = zones
    return "\n".join([
        "#processor block decomposition", f"sms({px},{py},{pz})",
        "#Always specify blocks in block base numbering", f"blk(on,0:{px - 1},0:{py - 1},0:{pz - 1})", "",
        "# tag boundary faces",
        f'tag("xMinFaces",face,(0:0,0:{py},0:{pz}))', f'tag("xMaxFaces",face,({px}:{px},0:{py},0:{pz}))',
        f'tag("yMinFaces",face,(0:{px},0:0,0:{pz}))', f'tag("yMaxFaces",face,(0:{px},{py}:{py},0:{pz}))',
        f'tag("zMinFaces",face,(0:{px},0:{py},0:0))', f'tag("zMaxFaces",face,(0:{px},0:{py},{pz}:{pz}))', "",
        "# define number of zones in each axis", f"numzones({zx},{zy},{zz})", "",
        "#Hex subdivisions", f"sub(10%,0:{px - 1}, 0:{py - 1}, 0:{pz - 1},(7,0,0,0)) #7 hex", "seed(10)", "",
    ]) + "\n"


def deck_name(nranks: int) -> str:
    """``custom_8k.cmg`` for 8,192 ranks (Table I), ``custom_<n>.cmg`` otherwise."""
    return f"custom_{nranks // 1024}k.cmg" if nranks % 1024 == 0 else f"custom_{nranks}.cmg"


class UMTBase(AppRun):
    descr = "UMT 2.0: Su-Olson radiation transport (SuOlsonTest) on a .cmg mesh, per-cycle reports"
    app_name = "umt"
    num_nodes = parameter(node_counts("umt", [128]))
    #: Mesh deck: empty (default) writes custom_<ranks>.cmg for the job's rank count into the
    #: stage directory; otherwise a deck path (e.g. <prefix>/share/umt/grid16MPI_3x6x8.cmg
    #: for 16 ranks), which must have one block per rank.
    deck = variable(str, value="")
    #: Zones per rank along x, y, z in the generated deck (the shipped decks' 3 x 6 x 8).
    #: Toy-sized runs keep Table I's arguments and per-rank work: only the rank count (and so
    #: the deck, custom_2.cmg) shrinks, which gives cycles of about a second on 2 ranks.
    zones_per_rank = variable(str, value="3,6,8")
    #: SuOlsonTest's arguments after the deck: groups, quadrature type, order, polar and
    #: azimuthal angles, time limit (Table I: 4 2 4 4 4 0.04; v2.0 ignores the last one).
    solver_args = variable(str, value="4 2 4 4 4 0.04")
    #: MPI only, as in the paper (64 ranks per node); UMT 2.0 is built with OpenMP.
    omp_threads = variable(int, value=1)
    #: SuOlsonTest's fixed goal time and time steps give 7 radiation cycles.
    expected_steps = 7
    tags = {"app", "umt", "campaign"}

    def _deck_file(self) -> str:
        return self.deck or deck_name(self.num_nodes * self.tasks_per_node)

    @run_before("run")
    def _write_deck(self):
        self.env_vars["OMP_NUM_THREADS"] = str(self.omp_threads)
        if self.deck:
            return
        grid = factor(self.num_nodes * self.tasks_per_node, 3)
        zones = [int(z) for z in self.zones_per_rank.split(",")]
        Path(self.stagedir, self._deck_file()).write_text(cmg_deck(grid, zones))
        self.keep_files += [self._deck_file()]

    def command(self):
        return "SuOlsonTest", [self._deck_file(), *self.solver_args.split()]

    def physically_sane(self, out):
        steps, checks = out.steps, out.checks
        analytic = checks.get("analytic", [])
        return [
            # The run finished its time loop at SuOlsonTest's goal time.
            sn.assert_found(r"SuOlson Test version \S+ completed at time=", self.timed_output),
            sn.assert_true(checks.get("completed_time", 0.0) >= checks.get("goal_time", float("inf")) * (1 - 1e-9),
                           msg="the time loop stopped before the goal time"),
            # Every cycle's transport sweep did flux iterations, and time advanced every cycle.
            sn.assert_true(bool((steps["flux_iters"] > 0).all()), msg="a cycle did no flux iteration"),
            sn.assert_true(bool((steps["dtrad"] > 0).all()), msg="a cycle did not advance the radiation time"),
            # The Su-Olson source heats the medium: the peak radiation temperature rises.
            sn.assert_true(bool(steps["tr_max"].iloc[-1] > steps["tr_max"].iloc[0] > 0),
                           msg="the peak radiation temperature did not rise"),
            # Material energy at the analytic points is of the analytic solution's magnitude.
            sn.assert_gt(len(analytic), 0, msg="no Su-Olson analytic check point printed"),
            sn.assert_true(all(error < max(p[2] for p in analytic) for *_, error in analytic),
                           msg="the material energy misses the Su-Olson analytic solution by more than its size"),
        ]


@rfm.simple_test
class UMT(UMTBase):
    build = fixture(build_umt, scope="environment")
