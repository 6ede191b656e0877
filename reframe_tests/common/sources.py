"""The fixture chain of the application tests: fetch (once per session) -> build (once per
programming environment) -> run. Source pins live in reframe_tests/apps/sources.yaml and the
build logic in reframe_tests/apps/build/<app>.sh, which the Apptainer recipes in containers/
run too, so bare-metal and container builds are the same build.

Sources come from the source mirror when it has them (``HPCVAR_SOURCE_MIRROR``, see fetch.sh).
Builds go into the stage directory, or, with ``HPCVAR_BUILD_CACHE=DIR`` (``-S build_cache=DIR``),
into ``DIR/<app>-<environ>-<hash of the source provenance>``, shared by every ReFrame session
that builds the same sources with the same environment (several rounds of a campaign, the
``local`` and ``local-slurm`` runs of CI): the first builds under a lock, the others reuse it.
The suite's own codes (the AMG proxy, the microbenchmarks) are cached the same way
(:meth:`BareMetalBuild.build_once`), keyed by the hash of their sources (:func:`own_sources_key`).
The tools the application tests use (mpiP) have their fixtures here too.
"""

import functools
import hashlib
import os
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import yaml
from reframe.core.builtins import fixture, run_after, run_before, sanity_function, variable
from reframe.core.meta import make_test

BUILD_DIR = Path(__file__).resolve().parents[1] / "apps" / "build"
SOURCES_YAML = BUILD_DIR.parent / "sources.yaml"

#: ``HPCVAR_OFFLINE=1``: no network, sources come from the source mirror only (fetch.sh refuses
#: upstream fetches). Tests whose sources are not in the mirror are skipped when they are loaded,
#: saying why, instead of failing in their fetch fixture; runs are not profiled when mpiP is not
#: there. For machines without internet (this project's CI, air-gapped sites).
OFFLINE = os.environ.get("HPCVAR_OFFLINE", "0").strip() not in ("", "0")
NO_MIRROR = ("no source mirror: set HPCVAR_SOURCE_MIRROR (fill one with reframe_tests/apps/build/fetch.sh "
             "--mirror DIR where there is internet)")


@functools.cache
def _pins() -> dict:
    return yaml.safe_load(SOURCES_YAML.read_text())


def source_unavailable(app: str, mirror: str | None = None) -> str | None:
    """Why the pinned sources of ``app`` (and of its dependencies) cannot be fetched here, or None.

    Only under :data:`OFFLINE`: the archives must then be in the source mirror (``mirror``, by
    default ``HPCVAR_SOURCE_MIRROR``). A mirror that is named but does not exist is an error.
    """
    if not OFFLINE:
        return None
    mirror = os.environ.get("HPCVAR_SOURCE_MIRROR", "") if mirror is None else mirror
    if not mirror:
        return f"{app}: {NO_MIRROR}"
    if not Path(mirror).is_dir():
        raise ValueError(f"HPCVAR_SOURCE_MIRROR={mirror}: no such directory")
    entry = _pins()[app]
    archives = [entry["mirror"], *(dep["mirror"] for dep in (entry.get("deps") or {}).values())]
    missing = [a for a in archives if not (Path(mirror) / a).is_file()]
    if missing:
        return f"{app}: {', '.join(missing)} not in the source mirror {mirror} (HPCVAR_OFFLINE=1: no upstream fetch)"
    return None


def own_sources_key(source_dir: Path, *more: Path | str) -> str:
    """What names a build of the suite's own code in the build cache: the hash of its sources
    (``Makefile``, ``*.c``, ``*.h`` of ``source_dir``, as its build script hashes them for the
    provenance) and of ``more`` (the build script; files are read, other values taken as text:
    a library's include directory, ...), so a changed source, script or library builds anew."""
    h = hashlib.sha256()
    files = sorted(f for pattern in ("Makefile", "*.c", "*.h") for f in source_dir.glob(pattern))
    for item in (*files, *more):
        path = Path(item) if isinstance(item, Path) else None
        h.update(str(item).encode() + b"\0")
        h.update(path.read_bytes() if path is not None and path.is_file() else b"")
    return h.hexdigest()[:12]


class BareMetalBuild(rfm.RegressionTestPlugin):
    """For the fixtures that fetch and build what bare-metal runs use. ``-S image=...`` sets
    ``image`` in the fixtures too (ReFrame sets a variable in every test that has it): when the
    code has an image (containers/images.yaml), the runs use it, which holds its own build, so the
    fixture does nothing but say so. Codes without one (IMB, mpiP) are built as usual."""

    image = variable(str, value="")
    #: Shared install tree (``HPCVAR_BUILD_CACHE``; ``-S build_cache=DIR``); empty: build into the
    #: stage directory.
    build_cache = variable(str, value=os.environ.get("HPCVAR_BUILD_CACHE", ""))

    def code_name(self) -> str:
        """The code this fixture builds, as the image definitions name it."""
        return self.app

    def cached_prefix(self, key: str) -> str:
        """Where the build installs: ``install/`` in the stage directory, or with a build cache
        ``DIR/<code>-<environ>-<key>``, ``key`` naming what was built (its sources' hash)."""
        if not self.build_cache:
            return str(Path(self.stagedir) / "install")
        return str(Path(self.build_cache).resolve() / f"{self.code_name()}-{self.current_environ.name}-{key}")

    def build_once(self, build: str, built: str) -> list[str]:
        """The build's commands: ``build`` itself without a cache; with one, under the prefix's
        lock, and only when the shell test ``built`` says the prefix does not hold it yet (what was
        left by a build that did not finish is removed first), so concurrent sessions wait for the
        one that builds and later ones reuse it."""
        prefix = self.install_prefix
        if not self.build_cache:
            return [build]
        return [f"mkdir -p {Path(prefix).parent}",
                f"flock {prefix}.lock sh -c 'if {built}; then echo \"[hpcvar-build {self.code_name()}] reusing {prefix}\"; "
                f"else rm -rf {prefix} && {build}; fi'"]

    def in_image(self) -> bool:
        from .containers import definitions

        return bool(self.image) and self.code_name() in definitions().images

    def bare_metal_only(self, commands: list[str]) -> list[str]:
        if self.in_image():
            return [f"echo '{self.unique_name}: nothing to do, the runs use the image {self.image}'"]
        return commands


class PinnedSources(rfm.RegressionTestPlugin):
    """For tests whose ``build`` fixture builds pinned sources (:class:`BuildFromSources`):
    under ``HPCVAR_OFFLINE=1`` without those sources in the mirror the test is skipped when it
    is loaded, saying why (``reframe -v`` shows the reason), instead of failing in its fetch
    fixture. Container runs (``image``) and builds of the suite's own code need no sources."""

    @run_after("init")
    def _skip_without_sources(self):
        if getattr(self, "image", ""):
            return
        app = getattr(type(self)._rfm_fixture_space["build"].cls, "app", None)
        reason = source_unavailable(app) if app else None
        self.skip_if(reason is not None, reason)


class FetchSources(rfm.RunOnlyRegressionTest, BareMetalBuild):
    """Fetch the pinned upstream sources of ``app``: from the source mirror when it has the
    archive (offline, sha256-checked), else from upstream (network: run it on a login node)."""

    app = variable(str)
    #: Directory of source archives (``HPCVAR_SOURCE_MIRROR``; ``-S source_mirror=DIR`` overrides).
    source_mirror = variable(str, value=os.environ.get("HPCVAR_SOURCE_MIRROR", ""))
    descr = "Fetch pinned application sources"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    local = True
    sourcesdir = str(BUILD_DIR)
    executable = "bash"

    @run_before("run")
    def _command(self):
        if self.in_image():
            self.executable, self.executable_opts = "echo", self.bare_metal_only([])
            return
        self.executable_opts = ["fetch.sh", self.app, "src"]
        # The stage directory holds a copy of build/; the pins stay in the repository.
        self.env_vars["HPCVAR_SOURCES"] = str(SOURCES_YAML)
        if self.source_mirror:
            self.env_vars["HPCVAR_SOURCE_MIRROR"] = str(Path(self.source_mirror).resolve())

    @sanity_function
    def fetched(self):
        if self.in_image():
            return sn.assert_true(True)
        # fetch.sh writes `<app> <version> <url> <commit>` once the checkout is complete.
        return sn.assert_found(rf"^{self.app} \S+ \S+ \S+", "src/.hpcvar-source")

    @property
    def source_dir(self) -> str:
        return str(Path(self.stagedir) / "src")


class BuildFromSources(rfm.CompileOnlyRegressionTest, BareMetalBuild):
    """Build ``app`` from the fetched tree with the shared build script into ``install/``."""

    app = variable(str)
    descr = "Build an application from pinned sources"
    valid_systems = ["*"]
    valid_prog_environs = ["+mpi"]
    build_system = "CustomBuild"
    sourcesdir = str(BUILD_DIR)
    build_jobs = variable(int, value=min(8, os.cpu_count() or 1))

    @run_before("compile")
    def _commands(self):
        src = self.sources.source_dir
        env = self.current_environ
        prefix = self.install_prefix
        build = (f"bash {self.app}.sh {src} {prefix} && cp {src}/.hpcvar-source {prefix}/.hpcvar-source")
        # A complete install of the same sources: its .hpcvar-source (copied last) is the fetch's.
        self.build_system.commands = self.bare_metal_only([
            f"export MPICC={env.cc} MPICXX={env.cxx} MPIF90={env.ftn or 'mpif90'} MAKE_JOBS={self.build_jobs}",
            *self.build_once(build, f"cmp -s {src}/.hpcvar-source {prefix}/.hpcvar-source"),
        ])

    @sanity_function
    def built(self):
        if self.in_image():
            return sn.assert_true(True)
        return sn.assert_true(Path(self.install_prefix, ".hpcvar-source").exists())

    @property
    def install_prefix(self) -> str:
        if not self.build_cache:
            return self.cached_prefix("")
        source = Path(self.sources.source_dir, ".hpcvar-source")
        # --dry-run fetches nothing: the job scripts then name a prefix that was never built.
        return self.cached_prefix(hashlib.sha256(source.read_bytes()).hexdigest()[:12] if source.exists()
                                  else "not-fetched")

    def provenance(self) -> str:
        """``<app> <version> <git url> <commit>`` as fetch.sh recorded it (a mirror fetch
        appends ``mirror:<archive> sha256:<hex>``)."""
        return Path(self.install_prefix, ".hpcvar-source").read_text().strip()


def from_sources(app: str, **body) -> type[BuildFromSources]:
    """The build fixture of ``app`` (``build_<app>``, one per programming environment) on its
    fetch fixture (``fetch_<app>``, one per session): the pair of classes every application and
    tool built from pinned sources uses, made by ReFrame's ``make_test`` as a ``class``
    statement would; ``body``: more class attributes of the build (its ``descr``, ...)."""
    fetch = make_test(f"fetch_{app}", (FetchSources,), {"app": app})
    return make_test(f"build_{app}", (BuildFromSources,),
                     {"app": app, "sources": fixture(fetch, scope="session"), **body})


#: mpiP's shared library (``install/lib/libmpiP.so``), preloaded into profiled runs.
build_mpip = from_sources("mpip", descr="Build the mpiP profiler from pinned sources",
                          library=property(lambda self: str(Path(self.install_prefix) / "lib" / "libmpiP.so")))
