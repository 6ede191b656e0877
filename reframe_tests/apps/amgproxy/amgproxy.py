"""AMGProxy: hpcvar's own algebraic-multigrid time-stepping proxy (src/amgproxy.c) on hypre.

Not one of Table I's codes: it is the real solver every machine can build from its package
registries (Debian: ``libhypre-dev``, hypre 2.26), so CI and an air-gapped site without a source
mirror still run an application through the same run test, parser, collation and campaign as
AMG, MILC, miniVite and UMT. Each time step assembles a 3-D Laplacian (``stencil`` 7 or 27 points)
on every rank's box, sets up BoomerAMG and solves with AMG-preconditioned PCG; the program prints
each step's assembly, setup and solve time and its PCG iterations (see the source's header).

Input: ``-n 32 32 32`` per rank and 20 time steps (AMG's Table I box and the paper's twenty AMG
time steps); toy-sized (``HPCVAR_RFM_SIZE=toy``) the same box and 6 steps (about 0.2 s each on
2 ranks here, long against the few milliseconds ``ts`` adds). Sanity: the right number of steps,
every solve converged to the tolerance, and the solution's norm falls every step (the heat
equation's implicit step is a contraction).
"""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, run_before, sanity_function, variable

from hpcvar.util.grids import factor

from ...common.app import AppRun
from ...common.mixins import node_counts, sized
from ...common.sources import BUILD_DIR, BareMetalBuild, own_sources_key


SRC = Path(__file__).resolve().parent / "src"


class build_amgproxy(rfm.CompileOnlyRegressionTest, BareMetalBuild):
    """Build hpcvar-amgproxy against the system's hypre (``-S hypre_include=DIR``,
    ``-S hypre_libdir=DIR`` for another one) into ``install/bin``, with the build script the
    amgproxy image runs too (``reframe_tests/apps/build/amgproxy.sh``)."""

    descr = "Build hpcvar's AMG proxy (hypre from the package registry)"
    valid_systems = ["+mpi"]
    valid_prog_environs = ["+mpi"]
    build_system = "CustomBuild"
    sourcesdir = str(SRC)
    hypre_include = variable(str, value="/usr/include/hypre")
    hypre_libdir = variable(str, value="")

    def code_name(self) -> str:
        return "amgproxy"

    @property
    def install_prefix(self) -> str:
        """The stage directory's ``install/``, or the build cache's entry for these sources,
        this build script and this hypre (``HPCVAR_BUILD_CACHE``: every round of a campaign
        reuses the one build)."""
        hypre = Path(self.hypre_include, "HYPRE_config.h")
        return self.cached_prefix(own_sources_key(SRC, BUILD_DIR / "amgproxy.sh", hypre, self.hypre_libdir))

    @run_before("compile")
    def _commands(self):
        env = f"MPICC={self.current_environ.cc} HYPRE_INCLUDE={self.hypre_include}"
        if self.hypre_libdir:
            env += f" HYPRE_LIBDIR={self.hypre_libdir}"
        # A complete install (the script writes .hpcvar-source last) of the same sources.
        self.build_system.commands = self.bare_metal_only(self.build_once(
            f"{env} bash {BUILD_DIR / 'amgproxy.sh'} . {self.install_prefix}",
            f"test -f {self.install_prefix}/.hpcvar-source"))

    @sanity_function
    def built(self):
        if self.in_image():
            return sn.assert_true(True)
        return sn.all([sn.assert_not_found(r"warning:", self.stderr),
                       sn.assert_true(Path(self.install_prefix, "bin", "hpcvar-amgproxy").exists()),
                       sn.assert_true(Path(self.install_prefix, ".hpcvar-source").exists())])

    def provenance(self) -> str:
        return Path(self.install_prefix, ".hpcvar-source").read_text().strip()


@rfm.simple_test
class AMGProxy(AppRun):
    descr = "hpcvar's AMG time-stepping proxy on hypre: per-step assembly, setup and solve times"
    app_name = "amgproxy"
    num_nodes = parameter(node_counts("amgproxy", [128, 512]))
    build = fixture(build_amgproxy, scope="environment")
    #: Local box per rank (``-n``).
    local_size = variable(str, value=sized("32 32 32", "32 32 32"))
    stencil = variable(int, value=27)
    #: Time steps (``-steps``).
    expected_steps = sized(20, 6)
    tolerance = variable(float, value=1e-8)
    tags = {"app", "amgproxy", "campaign"}

    def command(self):
        px, py, pz = factor(self.num_nodes * self.tasks_per_node, 3)
        return "hpcvar-amgproxy", ["-P", str(px), str(py), str(pz), "-n", *self.local_size.split(),
                                   "-stencil", str(self.stencil), "-steps", str(self.expected_steps),
                                   "-tol", f"{self.tolerance:g}"]

    def physically_sane(self, out):
        steps = out.steps
        norms = steps["norm"].to_list()
        return [sn.assert_lt(float(steps["final_residual"].max()), self.tolerance,
                             msg="a step did not converge: relative residual {0} >= {1}"),
                sn.assert_true(all(b < a for a, b in zip(norms, norms[1:])),
                               msg=f"the solution's norm did not fall every step: {norms}")]
