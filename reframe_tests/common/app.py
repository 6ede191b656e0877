"""The run test every application shares: fixed node count, launch bare-metal (from the build
fixture) or in a container image (``-S image=...``, :mod:`.containers`), timestamped output,
counters, physically meaningful sanity from hpcvar's own output parsers, and the per-step
figures of merit."""

import random
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, performance_function, run_before, sanity_function, variable

from reframe.core.logging import getlogger

from .containers import ContainerRun
from .mixins import TOY, CampaignRun, CounterSampler, TimestampedOutput
from .sources import PinnedSources, build_mpip, source_unavailable

#: Why runs cannot be profiled with mpiP here (HPCVAR_OFFLINE=1 without mpiP in the mirror), or None.
MPIP_UNAVAILABLE = source_unavailable("mpip")


class AppRun(rfm.RunOnlyRegressionTest, CampaignRun, TimestampedOutput, CounterSampler, ContainerRun,
             PinnedSources):
    #: Dataset prefix (``amg``, ``milc``, ...); the dataset is ``<app_name>-<num_nodes>``.
    app_name = variable(str)
    #: Fraction of runs profiled with mpiP (preloaded; its report ``<exe>.<n>.<pid>.<k>.mpiP``
    #: is kept in the run directory and collated into ``mpi_profile``): 0 never, 1 always, as
    #: the simulator's ``mpip_fraction``. Bare-metal runs only (the images carry no mpiP).
    mpip = variable(float, value=0.0)
    if MPIP_UNAVAILABLE is None:
        # A fixture whose fetch cannot succeed would skip every application test, profiled or not.
        mpip_build = fixture(build_mpip, scope="environment")
    # Applications run on compute nodes (toy-sized also here: `+local` partitions).
    valid_systems = ["+mpi"] if TOY else ["+mpi +remote"]
    valid_prog_environs = ["+mpi"]
    exclusive_access = True
    time_limit = "30m"

    def command(self) -> tuple[str, list[str]]:
        """The executable (name inside the install prefix or image) and its arguments."""
        raise NotImplementedError

    def physically_sane(self, out) -> list:
        """App-specific sanity assertions on the parsed output (hpcvar.parsers.apps.AppOutput)."""
        raise NotImplementedError

    #: The application's own arguments (the run's ``input`` in the dataset).
    app_input = variable(str, value="", loggable=True)
    #: Time steps a run must have.
    expected_steps = variable(int)

    @run_before("run")
    def _launch(self):
        exe, args = self.command()
        self.app_input = " ".join(args)
        # Line-buffered stdout, so `ts` stamps each line when the app prints it and not when a
        # pipe buffer fills (under srun and mpirun stdout is a pipe). gfortran ignores stdbuf:
        # it reads its own variable (the environment passes into the image too).
        self.env_vars.setdefault("GFORTRAN_UNBUFFERED_PRECONNECTED", "y")
        if self.image:
            if self.mpip > 0:
                getlogger().warning(f"{self.display_name}: not profiled (-S mpip={self.mpip}): the images carry "
                                    "no mpiP; run bare metal to profile")
            self.run_in_image(exe, args, wrapper=["stdbuf", "-oL", "-eL"])
        else:
            self.executable = "stdbuf"
            self.executable_opts = ["-oL", "-eL", str(Path(self.build.install_prefix) / "bin" / exe), *args]
            if not 0.0 <= self.mpip <= 1.0:
                raise ValueError(f"mpip={self.mpip}: expected a fraction of runs in [0, 1]")
            if self.mpip > 0 and MPIP_UNAVAILABLE is not None:
                getlogger().warning(f"{self.display_name}: not profiled (-S mpip={self.mpip}): {MPIP_UNAVAILABLE}")
            elif random.random() < self.mpip:
                # Preloaded into the ranks only (stdbuf adds its own library in front); the
                # report goes to the working directory of the ranks: the stage directory.
                self.executable = "env"
                self.executable_opts = [f"LD_PRELOAD={self.mpip_build.library}",
                                        "stdbuf", *self.executable_opts]
                self.keep_files += ["*.mpiP"]

    def parsed(self):
        from hpcvar.parsers import apps

        return apps.read(Path(self.stagedir) / self.timed_output)

    @sanity_function
    def validate(self):
        out = self.parsed()
        return sn.all([sn.assert_eq(len(out.steps), self.expected_steps,
                                    msg=f"expected {self.expected_steps} time steps, found {{0}}"),
                       *self.physically_sane(out)])

    @run_before("performance")
    def _provenance(self):
        # A container run's provenance (the image's digest, the build inside it) was set at launch.
        if not self.is_dry_run() and not self.image:
            self.software = self.build.provenance()

    @performance_function("s")
    def total_time(self):
        return float(self.parsed().steps["duration_s"].sum())

    @performance_function("s")
    def mean_step_time(self):
        return float(self.parsed().steps["duration_s"].mean())

    @performance_function("s")
    def max_step_time(self):
        return float(self.parsed().steps["duration_s"].max())
