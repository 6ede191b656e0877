"""The run test every application shares: fixed node count, launch bare-metal (from the build
fixture) or in an Apptainer image, timestamped output, counters, physically meaningful sanity
from hpcvar's own output parsers, and the per-step figures of merit."""

import random
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import fixture, performance_function, run_after, run_before, sanity_function, variable

from reframe.core.logging import getlogger

from .mixins import TOY, CampaignRun, CounterSampler, TimestampedOutput
from .sources import PinnedSources, build_mpip, source_unavailable

#: Why runs cannot be profiled with mpiP here (HPCVAR_OFFLINE=1 without mpiP in the mirror), or None.
MPIP_UNAVAILABLE = source_unavailable("mpip")


class AppRun(rfm.RunOnlyRegressionTest, CampaignRun, TimestampedOutput, CounterSampler, PinnedSources):
    #: Dataset prefix (``amg``, ``milc``, ...); the dataset is ``<app_name>-<num_nodes>``.
    app_name = variable(str)
    #: Apptainer image (.sif) to run in; empty: the bare-metal build of the fixture.
    image = variable(str, value="")
    #: srun options of container runs: the image's MPI wires up through Slurm's PMIx.
    container_launcher_options = variable(typ.List[str], value=["--mpi=pmix"])
    #: Fraction of runs profiled with mpiP (preloaded; its report ``<exe>.<n>.<pid>.<k>.mpiP``
    #: is kept in the run directory and collated into ``mpi_profile``): 0 never, 1 always, as
    #: the simulator's ``mpip_fraction``. Bare-metal runs only.
    mpip = variable(float, value=0.0)
    if MPIP_UNAVAILABLE is None:
        # A fixture whose fetch cannot succeed would skip every application test, profiled or not.
        mpip_build = fixture(build_mpip, scope="environment")
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

    @run_after("init")
    def _where(self):
        # Applications run on compute nodes (toy-sized also here: `+local` partitions); in a
        # container only where Apptainer is configured.
        where = "+mpi" if TOY else "+mpi +remote"
        self.valid_systems = [f"{where} +apptainer"] if self.image else [where]

    @run_before("run")
    def _launch(self):
        exe, args = self.command()
        self.app_input = " ".join(args)
        if self.image:
            self.container_platform = "Apptainer"
            self.container_platform.image = self.image
            self.container_platform.command = " ".join([exe, *args])
            # The image digest is the provenance of a container run.
            self.prerun_cmds += [f"sha256sum {self.image} > image.sha256"]
            if self.job.launcher.registered_name == "srun":
                self.job.launcher.options += self.container_launcher_options
        else:
            # Line-buffered stdout, so `ts` stamps each line when the app prints it and not
            # when a pipe buffer fills (under srun and mpirun stdout is a pipe). gfortran
            # ignores stdbuf: it reads its own variable.
            self.executable = "stdbuf"
            self.executable_opts = ["-oL", "-eL", str(Path(self.build.install_prefix) / "bin" / exe), *args]
            self.env_vars.setdefault("GFORTRAN_UNBUFFERED_PRECONNECTED", "y")
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
        if self.is_dry_run():
            return
        if self.image:
            digest = Path(self.stagedir, "image.sha256").read_text().split()[0]
            self.container = f"{self.image}@sha256:{digest}"
        else:
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
