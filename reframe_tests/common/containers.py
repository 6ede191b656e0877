"""Running a test in a container image instead of bare metal, from the same test class.

* :class:`Charliecloud`: a ReFrame container platform (like ReFrame's own ``Apptainer`` and
  ``Sarus``) for Charliecloud's ``ch-run``: ``ch-run -b STAGEDIR:/rfm_workdir --cd /rfm_workdir
  IMAGE -- COMMAND``. Partitions that have it carry the feature ``charliecloud``; environment
  variables of ``container_platforms: [{type: Charliecloud, env_vars: ...}]`` apply to its runs.
* :class:`ContainerRun`: the variable ``image`` of every run test of the suite. Empty: bare metal.
  ``-S image=auto``: each test in its own image (``containers/images.yaml`` says which) from the
  image store (``HPCVAR_IMAGES``, default ``<repo>/results/images``); ``-S image=NAME``: that image
  of the store; ``-S image=PATH`` (an image directory, a ``.sqfs``; a ``.sif`` runs with
  Apptainer) with an optional ``@sha256:<hex>``. The image is resolved and its digest checked
  when the test is set up, before its job is submitted; a missing or changed image fails the
  test there with the command that builds it. Its ``<name>@sha256:<digest>`` goes to the perflog
  and the run report (``container``), from which collation fills the runs table.

How ranks start: under ``srun`` the host's Slurm starts one ``ch-run`` (or ``apptainer exec``)
per rank and the image's Open MPI wires up through Slurm's PMIx (``--mpi=pmix``): the hybrid
model. Under a launcher that is itself an MPI program (``mpirun`` on the ``local`` system) the
launcher runs inside the image: ``ch-run IMAGE -- mpirun -np N program``.
"""

import functools
from pathlib import Path

import reframe as rfm
import reframe.utility.typecheck as typ
from reframe.core.backends import getlauncher
from reframe.core.builtins import run_after, run_before, variable
from reframe.core.containers import ContainerPlatform

from hpcvar.containers import definition, runtime, store
from hpcvar.dev.testbed import node_local_reason

REPO = Path(__file__).resolve().parents[2]
#: Launchers through which the host's resource manager starts every rank (the hybrid model).
HOST_LAUNCHERS = ("srun",)


@functools.cache
def definitions() -> definition.Definitions:
    """The image definitions (containers/images.yaml), read once per ReFrame process."""
    return definition.load(REPO / definition.DEFINITIONS, root=REPO)


class Charliecloud(ContainerPlatform):
    """Charliecloud's ``ch-run`` as a ReFrame container platform.

    ``ch-run`` needs the bind targets to exist in the image (the suite's images have
    ``/rfm_workdir``) and refuses to start without ``$USER``, which the job script sets."""

    def emit_prepare_commands(self, stagedir):
        return ['export USER="${USER:-$(id -un)}"']

    def launch_command(self, stagedir):
        super().launch_command(stagedir)
        binds = list(self.mount_points)
        if self.mount_stagedir:
            binds.append((stagedir, self.mount_stagedir))
        opts = [f'-b "{src}:{dst}"' for src, dst in binds]
        if self.workdir:
            opts.append(f"--cd={self.workdir}")
        opts += self.options
        return " ".join(["ch-run", *opts, self.image, *(["--", self.command] if self.command else [])])


class ContainerRun(rfm.RegressionTestPlugin):
    """``image``: run in a container image (see the module's docstring); empty: bare metal."""

    #: Empty (bare metal), ``auto``, a store image's name, or a path (``@sha256:<hex>`` optional).
    image = variable(str, value="")
    #: The image store (``HPCVAR_IMAGES``; relative to the repository).
    image_store = variable(str, value=str(store.store_dir(root=REPO)))
    #: srun options of container runs: the image's MPI wires up through Slurm's PMIx.
    container_launcher_options = variable(typ.List[str], value=["--mpi=pmix"])

    @run_after("init")
    def _container_systems(self):
        if not self.image:
            return
        where = "apptainer" if self.image.split("@")[0].endswith(".sif") else "charliecloud"
        self.valid_systems = [f"{s} +{where}" for s in self.valid_systems]

    def image_definition(self) -> definition.Image | None:
        """This test's image in containers/images.yaml (what ``auto`` picks)."""
        return definitions().image_for_test(type(self).__name__)

    @run_after("setup")
    def _resolve_image(self):
        """Before the job is submitted: the image exists, has its recorded digest, (on this
        machine's partitions) this machine can run it, and (on the testbed) every node sees it."""
        self.resolved_image = None
        if not self.image:
            return
        own = self.image_definition()
        resolved = store.resolve(self.image, Path(self.image_store), default=own.name if own else None)
        # The runtime is checked where it will run: here, for the partitions of this machine.
        features = self.current_partition.features
        problems = runtime.problems(resolved.runtime, need_user=False) if "local" in features else []
        if "testbed" in features:
            problems += [r for r in (node_local_reason(resolved.path),) if r]
        if problems:
            raise store.ImageError(f"image {resolved.path}: " + "; ".join(problems))
        self.resolved_image = resolved

    def run_in_image(self, exe: str, args: list[str], wrapper: list[str] = ()):
        """Launch ``wrapper + [exe] + args`` in the image: ``exe`` is the program's name in the
        image's ``PREFIX/bin`` (the definition's install prefix)."""
        resolved = self.resolved_image
        resolved.require(exe)
        # Images built from the test's definition install it there, whatever their file is called.
        own = self.image_definition()
        prefix = own.prefix if own else f"{definition.APPS_ROOT}/{resolved.name}"
        command = " ".join([*wrapper, f"{prefix}/bin/{exe}", *args])
        launcher = self.job.launcher
        if launcher.registered_name not in HOST_LAUNCHERS:
            # An MPI launcher (mpirun) runs inside the image and starts the ranks there. ReFrame
            # gives the job its task counts only in the run phase, after this hook: give them now.
            self.job.num_tasks, self.job.num_tasks_per_node = self.num_tasks, self.num_tasks_per_node
            command = " ".join([*launcher.command(self.job), *launcher.options, command])
            self.job.launcher = getlauncher("local")()
        else:
            launcher.options += self.container_launcher_options
        if resolved.runtime == "charliecloud":
            self.container_platform = Charliecloud()
        else:
            self.container_platform = "Apptainer"
        self.container_platform.image = str(resolved.path)
        self.container_platform.command = command
        self.container = resolved.container
        self.software = resolved.software or ""

