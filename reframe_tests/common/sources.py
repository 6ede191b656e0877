"""The fixture chain of the application tests: fetch (once per session) -> build (once per
programming environment) -> run. Source pins live in reframe_tests/apps/sources.yaml and the
build logic in reframe_tests/apps/build/<app>.sh, which the Apptainer recipes in containers/
run too, so bare-metal and container builds are the same build."""

from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_before, sanity_function, variable

BUILD_DIR = Path(__file__).resolve().parents[1] / "apps" / "build"


class FetchSources(rfm.RunOnlyRegressionTest):
    """Clone the pinned upstream sources of ``app`` (needs network: run it on a login node)."""

    app = variable(str)
    descr = "Fetch pinned application sources"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    local = True
    sourcesdir = str(BUILD_DIR)
    executable = "bash"

    @run_before("run")
    def _command(self):
        self.executable_opts = ["fetch.sh", self.app, "src"]
        # The stage directory holds a copy of build/; the pins stay in the repository.
        self.env_vars["HPCVAR_SOURCES"] = str(BUILD_DIR.parent / "sources.yaml")

    @sanity_function
    def fetched(self):
        # fetch.sh writes `<app> <version> <url> <commit>` once the checkout is complete.
        return sn.assert_found(rf"^{self.app} \S+ \S+ \S+", "src/.hpcvar-source")

    @property
    def source_dir(self) -> str:
        return str(Path(self.stagedir) / "src")


class BuildFromSources(rfm.CompileOnlyRegressionTest):
    """Build ``app`` from the fetched tree with the shared build script into ``install/``."""

    app = variable(str)
    descr = "Build an application from pinned sources"
    valid_systems = ["*"]
    valid_prog_environs = ["+mpi"]
    build_system = "CustomBuild"
    sourcesdir = str(BUILD_DIR)
    build_jobs = variable(int, value=8)

    @run_before("compile")
    def _commands(self):
        src = self.sources.source_dir
        self.build_system.commands = [
            f"export MPICC={self.current_environ.cc} MPICXX={self.current_environ.cxx} MAKE_JOBS={self.build_jobs}",
            f"bash {self.app}.sh {src} {self.install_prefix}",
            f"cp {src}/.hpcvar-source {self.install_prefix}/",
        ]

    @sanity_function
    def built(self):
        return sn.assert_true(Path(self.install_prefix, ".hpcvar-source").exists())

    @property
    def install_prefix(self) -> str:
        return str(Path(self.stagedir) / "install")

    def provenance(self) -> str:
        """``<app> <version> <git url> <commit>`` as fetch.sh recorded it."""
        return Path(self.install_prefix, ".hpcvar-source").read_text().strip()
