"""``hpcvar containers build``: the images of ``containers/images.yaml``, built here with
Charliecloud from the package registry.

Two stages per image (the definition's header says why):

1. the **builder**, one for all images: ``mmdebstrap`` of the distribution with the base and
   builder packages; each image's build script (:func:`~hpcvar.containers.definition.build_script`)
   runs in it under ``ch-run``, with a copy of the repository files it needs, its install prefix
   and its sources bound in (and the source mirror, read-only, for Table I's codes);
2. the **image**: ``mmdebstrap`` of the distribution with the base packages and the packages the
   build found its programs load, the install prefix copied in, checked (every executable finds
   its libraries), then ``ch-convert`` to a single SquashFS file.

Outputs go to the store (:mod:`hpcvar.containers.store`): the image directory, the ``.sqfs`` and
the record with both sha256 digests, written last. A stage is rebuilt only when its key changed:
the sha256 of everything that goes into it (the definition, the build script, the copied files,
the source pins and the package versions the registry offers now, resolved by apt against the
definition's distribution).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from hpcvar.containers import definition as dfn
from hpcvar.containers.store import SQUASHFS, ImageError, file_sha256, read_record, record_path, tree_sha256
from hpcvar.util.fileio import atomic_write_json

#: Bumped when this module changes what it puts into an image: every key changes with it.
BUILD_FORMAT = 1
#: What mmdebstrap leaves out of every root file system (documentation, manuals, translations;
#: the copyright files stay).
DPKG_EXCLUDES = ("path-exclude=/usr/share/man/*", "path-exclude=/usr/share/locale/*",
                 "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright")
KEYRINGS = {"debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
            "ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageBuildError(ImageError):
    """A build step failed: the message names the step, the log and its last lines."""


def apt_sources(dist: dfn.Distribution) -> list[str]:
    """The distribution's apt lines: the release, its updates and its security archive."""
    if dist.name == "debian":
        security = "http://security.debian.org/debian-security"
        components = "main"
    else:
        security = dist.mirror
        components = "main universe"
    return [f"deb {dist.mirror} {dist.release} {components}",
            f"deb {dist.mirror} {dist.release}-updates {components}",
            f"deb {security} {dist.release}-security {components}"]


class Packages:
    """The versions the registry offers now for a list of packages and everything they depend on
    (``apt-get --simulate`` against an empty system, with the definition's distribution, in an
    apt state of the store's own: the host's apt configuration is not used)."""

    def __init__(self, dist: dfn.Distribution, state: Path):
        self.dist, self.state = dist, state
        self._updated = False

    def _options(self) -> list[str]:
        s = self.state
        return ["-o", f"Dir::Etc::SourceList={s / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/nonexistent",
                "-o", f"Dir::State::Lists={s / 'lists'}", "-o", "Dir::State::status=/dev/null",
                "-o", f"Dir::Cache={s / 'cache'}", "-o", "Debug::NoLocking=1", "-o", "APT::Get::List-Cleanup=0"]

    def update(self) -> None:
        if self._updated:
            return
        for sub in ("lists/partial", "cache/archives/partial"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        keyring = KEYRINGS[self.dist.name]
        signed = f"[signed-by={keyring}] " if Path(keyring).is_file() else ""
        (self.state / "sources.list").write_text("".join(f"{line[:4]}{signed}{line[4:]}\n"
                                                         for line in apt_sources(self.dist)))
        out = subprocess.run(["apt-get", *self._options(), "-qq", "update"], capture_output=True, text=True)
        if out.returncode != 0:
            raise ImageBuildError(f"apt-get update for {self.dist} ({self.dist.mirror}) failed: "
                                  f"{out.stderr.strip()[-800:]}")
        self._updated = True

    def closure(self, packages: list[str] | tuple[str, ...]) -> dict[str, str]:
        """package -> version of ``packages`` and all they pull in (no recommends, as mmdebstrap)."""
        self.update()
        out = subprocess.run(["apt-get", *self._options(), "-s", "-qq", "install", "--no-install-recommends",
                              *packages], capture_output=True, text=True)
        if out.returncode != 0:
            raise ImageBuildError(f"the packages {' '.join(packages)} cannot be installed on {self.dist}: "
                                  f"{out.stdout.strip()[-600:]} {out.stderr.strip()[-600:]}")
        found = {}
        for line in out.stdout.splitlines():
            # Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64])
            if line.startswith("Inst "):
                parts = line.split()
                found[parts[1]] = parts[2].lstrip("(")
        return dict(sorted(found.items()))


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _files_digest(root: Path, paths) -> dict[str, str]:
    """sha256 of every copied repository path (a folder by its tree)."""
    return {rel: tree_sha256(root / rel) if (root / rel).is_dir() else file_sha256(root / rel) for rel in paths}


class Builder:
    """Builds images of ``defs`` into ``store``; ``log`` gets one line per step."""

    def __init__(self, defs: dfn.Definitions, store: Path, *, mirror: Path | None = None, force: bool = False,
                 jobs: int | None = None, log=None):
        self.defs, self.store, self.force = defs, Path(store), force
        self.mirror = Path(mirror).resolve() if mirror else None
        self.jobs = jobs or os.cpu_count() or 1
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.work = self.store / ".build"
        self.packages = Packages(defs.distribution, self.work / "apt")
        self.env = {**os.environ, "USER": os.environ.get("USER") or _user()}

    # --- the steps' plumbing ----------------------------------------------------------------

    def _run(self, cmd: list[str], logfile: Path, step: str) -> None:
        with open(logfile, "a") as fh:
            fh.write(f"\n$ {' '.join(cmd)}\n")
            fh.flush()
            out = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-25:])
            raise ImageBuildError(f"{step} failed (exit {out.returncode}); the whole log is {logfile}:\n{tail}")

    def _mmdebstrap(self, packages: list[str], target: Path, logfile: Path, step: str) -> None:
        if target.exists():
            shutil.rmtree(target)
        cmd = ["mmdebstrap", "--variant=apt", f"--include={','.join(packages)}",
               *(f"--dpkgopt={o}" for o in DPKG_EXCLUDES), "--aptopt=Acquire::Retries \"3\"",
               self.defs.distribution.release, str(target), *apt_sources(self.defs.distribution)]
        self._run(cmd, logfile, step)

    def _step(self, what: str, t0: float) -> None:
        self.log(f"containers: {what} ({time.monotonic() - t0:.0f} s)")

    # --- stage 1: the builder ---------------------------------------------------------------

    def builder(self) -> Path:
        """The builder's root file system, built unless its key is unchanged."""
        d = self.defs
        packages = [*d.base, *d.builder]
        key = _digest({"format": BUILD_FORMAT, "distribution": asdict(d.distribution), "packages": packages,
                       "versions": self.packages.closure(packages)})
        root, rec = self.work / "builder", self.work / "builder.json"
        old = read_record(rec)
        if not self.force and old and old.get("key") == key and root.is_dir():
            self.log(f"containers: builder up to date ({d.distribution}, {len(packages)} packages)")
            return root
        t0 = time.monotonic()
        self.log(f"containers: builder: mmdebstrap {d.distribution} with {len(packages)} packages "
                 "(about half a minute)")
        rec.unlink(missing_ok=True)
        self._mmdebstrap(packages, root, self.work / "builder.log", "the builder's mmdebstrap")
        for mount in (dfn.BUILD_DIR, dfn.SRC_ROOT, dfn.APPS_ROOT, dfn.MIRROR_DIR):
            (root / mount.lstrip("/")).mkdir(parents=True, exist_ok=True)
        atomic_write_json(rec, {"key": key, "built": _now(), "packages": packages})
        self._step("builder ready", t0)
        return root

    # --- stage 2: an image --------------------------------------------------------------------

    def key(self, image: dfn.Image, builder_key: str) -> str:
        import yaml

        pins = None
        if image.source:
            pins = yaml.safe_load((self.defs.root / dfn.SOURCES_FILES[0]).read_text())[image.source]
        return _digest({"format": BUILD_FORMAT, "builder": builder_key, "image": asdict(image),
                        "distribution": asdict(self.defs.distribution), "base": self.defs.base,
                        "script": dfn.build_script(image), "check": dfn.check_script(image),
                        "files": _files_digest(self.defs.root, image.copied_files()), "pins": pins,
                        "base_versions": self.packages.closure(list(self.defs.base))})

    def up_to_date(self, name: str, key: str) -> dict | None:
        """The record of ``name`` if it was built from ``key`` and both outputs still have its digests."""
        rec = read_record(record_path(self.store, name))
        if self.force or not rec or rec.get("key") != key:
            return None
        directory, sqfs = self.store / name, self.store / f"{name}{SQUASHFS}"
        if not (directory.is_dir() and sqfs.is_file()):
            return None
        if file_sha256(sqfs) != rec.get("squashfs_sha256") or tree_sha256(directory) != rec.get("directory_sha256"):
            self.log(f"containers: {name}: its files changed since the build; building it again")
            return None
        return rec

    def build(self, name: str) -> dict:
        """Build image ``name`` (unless up to date); its record."""
        image = self.defs.image(name)
        if image.source and self.mirror is None:
            self.log(f"containers: {name}: no source mirror (--mirror or HPCVAR_SOURCE_MIRROR): fetch.sh fetches "
                     f"{image.source} from upstream, which needs internet")
        self.store.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(exist_ok=True)
        with open(self.work / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per store
            builder = self.builder()
            builder_key = read_record(self.work / "builder.json")["key"]
            key = self.key(image, builder_key)
            rec = self.up_to_date(name, key)
            if rec is not None:
                self.log(f"containers: {name} up to date ({self.store / name}{SQUASHFS} sha256 "
                         f"{rec['squashfs_sha256'][:12]})")
                return rec
            return self._build(image, builder, key)

    def _build(self, image: dfn.Image, builder: Path, key: str) -> dict:
        name, t0 = image.name, time.monotonic()
        stage = self.work / name
        if stage.exists():
            shutil.rmtree(stage)
        (stage / "src").mkdir(parents=True)
        (stage / "prefix").mkdir()
        logfile = stage / "build.log"
        logfile.write_text(f"# hpcvar containers build {name}, {_now()}\n")
        # The repository files the build needs: a copy (make builds in its source folder).
        for rel in image.copied_files():
            src, dst = self.defs.root / rel, stage / "build" / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
        (stage / "build" / ".hpcvar-build.sh").write_text(dfn.build_script(image))
        for mount in (image.src, image.prefix):
            (builder / mount.lstrip("/")).mkdir(parents=True, exist_ok=True)
        envfile = stage / "build.env"
        envfile.write_text(f"PATH={PATH}\nHOME=/tmp\nLANG=C.UTF-8\nMAKE_JOBS={self.jobs}\n")
        binds = [f"--bind={stage / 'build'}:{dfn.BUILD_DIR}", f"--bind={stage / 'src'}:{image.src}",
                 f"--bind={stage / 'prefix'}:{image.prefix}"]
        if self.mirror:
            binds.append(f"--bind={self.mirror}:{dfn.MIRROR_DIR}")
        self.log(f"containers: {name}: [1/4] build in the builder ({', '.join(image.build)})")
        self._run(["ch-run", "--unset-env=*", f"--set-env={envfile}", *binds, f"--cd={dfn.BUILD_DIR}", str(builder),
                   "--", "sh", f"{dfn.BUILD_DIR}/.hpcvar-build.sh"], logfile, f"the build of {name} in the builder")
        runtime = (stage / "prefix" / "share" / "hpcvar" / "runtime-packages.txt").read_text().split()
        software = (stage / "prefix" / ".hpcvar-source").read_text().strip()
        self._step(f"{name}: built; its programs load libraries of {len(runtime)} packages", t0)

        rootfs = stage / "rootfs"
        packages = [*self.defs.base, *(p for p in runtime if p not in self.defs.base)]
        self.log(f"containers: {name}: [2/4] the image: mmdebstrap {self.defs.distribution} with {len(packages)} "
                 "packages (about half a minute)")
        self._mmdebstrap(packages, rootfs, logfile, f"the mmdebstrap of {name}'s image")
        shutil.copytree(stage / "prefix", rootfs / image.prefix.lstrip("/"), symlinks=True)
        (rootfs / dfn.WORKDIR.lstrip("/")).mkdir()
        (rootfs / "ch").mkdir(exist_ok=True)
        (rootfs / "ch" / "environment").write_text(
            f"PATH={image.prefix}/bin:{PATH}\nHPCVAR_IMAGE={name}\nHPCVAR_SOURCE_FILE={image.prefix}/.hpcvar-source\n")
        installed = _installed(rootfs)
        info = {"name": name, "description": image.description, "tests": list(image.tests),
                "executables": list(image.executables), "software": software, "distribution": str(self.defs.distribution),
                "packages": installed, "built": _now(), "key": key}
        (rootfs / dfn.IMAGE_INFO.lstrip("/")).write_text(json.dumps(info, indent=1) + "\n")
        self.log(f"containers: {name}: [3/4] check: every executable finds its libraries")
        self._run(["ch-run", str(rootfs), "--", "sh", "-c", dfn.check_script(image)], logfile,
                  f"the check of {name}'s image")

        # Into the store: the directory, then the single-file image, then the record.
        self.log(f"containers: {name}: [4/4] SquashFS (ch-convert) and digests")
        directory, sqfs = self.store / name, self.store / f"{name}{SQUASHFS}"
        record_path(self.store, name).unlink(missing_ok=True)  # a half-replaced image has no record
        if directory.exists():
            shutil.rmtree(directory)
        rootfs.rename(directory)
        tmp_sqfs = stage / f"{name}{SQUASHFS}"
        self._run(["ch-convert", "-i", "dir", "-o", "squash", str(directory), str(tmp_sqfs)], logfile,
                  f"ch-convert of {name}")
        os.replace(tmp_sqfs, sqfs)
        record = {**info, "directory": name, "directory_sha256": tree_sha256(directory),
                  "directory_bytes": _du(directory), "squashfs": sqfs.name, "squashfs_sha256": file_sha256(sqfs),
                  "squashfs_bytes": sqfs.stat().st_size, "runtime_packages": runtime,
                  "builder": _versions(), "build_s": round(time.monotonic() - t0, 1)}
        shutil.copy2(logfile, self.store / f".{name}.build.log")
        shutil.rmtree(stage)
        atomic_write_json(record_path(self.store, name), record)
        self._step(f"{name}: {sqfs} ({record['squashfs_bytes'] / 1e6:.0f} MB, sha256 "
                   f"{record['squashfs_sha256'][:12]}), {directory} ({record['directory_bytes'] / 1e6:.0f} MB)", t0)
        return record


def _installed(rootfs: Path) -> dict[str, str]:
    out = subprocess.run(["dpkg-query", f"--admindir={rootfs / 'var/lib/dpkg'}", "-W", "-f", "${Package}\t${Version}\n"],
                         capture_output=True, text=True, check=True)
    return dict(sorted(line.split("\t", 1) for line in out.stdout.splitlines() if line))


def _du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def _versions() -> dict[str, str]:
    """The build tools' versions, for the record."""
    found = {}
    for tool, args in (("ch-run", ["--version"]), ("mmdebstrap", ["--version"])):
        out = subprocess.run([tool, *args], capture_output=True, text=True)
        found[tool] = (out.stdout or out.stderr).strip().splitlines()[0] if out.returncode == 0 else "?"
    return found


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def mirror_from_env() -> Path | None:
    value = os.environ.get("HPCVAR_SOURCE_MIRROR", "").strip()
    return Path(value) if value else None

