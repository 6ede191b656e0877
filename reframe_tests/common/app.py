"""The run test every application shares: fixed node count, launch bare-metal (from the build
fixture) or in an Apptainer image, timestamped output, counters, physically meaningful sanity
from hpcvar's own output parsers, and the per-step figures of merit."""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import performance_function, run_after, run_before, sanity_function, variable

from common.mixins import CampaignRun, CounterSampler, TimestampedOutput


class AppRun(rfm.RunOnlyRegressionTest, CampaignRun, TimestampedOutput, CounterSampler):
    #: Dataset prefix (``amg``, ``milc``, ...); the dataset is ``<app_name>-<num_nodes>``.
    app_name = variable(str)
    #: Apptainer image (.sif) to run in; empty: the bare-metal build of the fixture.
    image = variable(str, value="")
    #: srun options of container runs: the image's MPI wires up through Slurm's PMIx.
    container_launcher_options = variable(typ.List[str], value=["--mpi=pmix"])
    valid_prog_environs = ["+mpi"]
    exclusive_access = True
    time_limit = "30m"

    def command(self) -> tuple[str, list[str]]:
        """The executable (name inside the install prefix or image) and its arguments."""
        raise NotImplementedError

    def physically_sane(self, out) -> list:
        """App-specific sanity assertions on the parsed output (hpcvar.parsers.apps.AppOutput)."""
        raise NotImplementedError

    #: Time steps a run must have.
    expected_steps = variable(int)

    @run_after("init")
    def _where(self):
        # Applications run on compute nodes; in a container only where Apptainer is configured.
        self.valid_systems = ["+mpi +remote +apptainer"] if self.image else ["+mpi +remote"]

    @run_before("run")
    def _launch(self):
        exe, args = self.command()
        if self.image:
            self.container_platform = "Apptainer"
            self.container_platform.image = self.image
            self.container_platform.command = " ".join([exe, *args])
            # The image digest is the provenance of a container run.
            self.prerun_cmds += [f"sha256sum {self.image} > image.sha256"]
            if self.job.launcher.registered_name == "srun":
                self.job.launcher.options += self.container_launcher_options
        else:
            self.executable = str(Path(self.build.install_prefix) / "bin" / exe)
            self.executable_opts = args

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
