"""The image store: where built images live, their digests, and which image a run means.

Layout of a store (default ``results/images``, ``HPCVAR_IMAGES`` or ``--store``)::

    <name>/          the image directory (a root file system: what ``ch-run DIR`` runs)
    <name>.sqfs      the single-file image (SquashFS, ``ch-convert``): what runs, and what a site
                     turns into a SIF (``apptainer build <name>.sif <name>.sqfs``)
    <name>.json      the record, written last: both digests, the inputs' key, the packages, the
                     build's provenance and the executables
    .build/          work space of builds (builder stages, logs)

:func:`resolve` turns what a user names (``-S image=...``: a name, ``auto``, a path, a path with
``@sha256:<hex>``) into the file that runs and its digest, checked against the record; every
failure is an :class:`ImageError` naming the path and the command that builds the image.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from hpcvar.data.rawlayout import sha256 as file_sha256  # a file's digest, as run manifests record them

#: Default image store, relative to the project directory; ``HPCVAR_IMAGES`` overrides it.
STORE = "results/images"
SQUASHFS = ".sqfs"
RECORD = ".json"
_DIGEST = re.compile(r"^(?P<path>.+)@sha256:(?P<hex>[0-9a-f]{64})$")


class ImageError(RuntimeError):
    """An image that cannot be used: missing, changed since its build, or not what the test needs."""


def store_dir(store: str | Path | None = None, root: str | Path | None = None) -> Path:
    """The store: ``store`` if given, else ``HPCVAR_IMAGES``, else :data:`STORE`; relative paths
    are taken from ``root`` (default: the current directory)."""
    path = Path(store or os.environ.get("HPCVAR_IMAGES") or STORE)
    return path if path.is_absolute() else Path(root or Path.cwd()) / path


def build_command(name: str, store: Path | None = None) -> str:
    """The command that (re)builds image ``name`` into ``store``."""
    default = store is None or store.resolve() == store_dir().resolve()
    return f"hpcvar containers build {name}" + ("" if default else f" --store {store}")


# --- digests ------------------------------------------------------------------------------------

def tree_sha256(root: str | Path) -> str:
    """The digest of an image directory: sha256 over every entry in name order, each as its path,
    type, permission bits and content (a file's sha256, a link's target). Owners and times are
    left out (SquashFS images are all-root; copies keep neither)."""
    root = Path(root)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            path = Path(dirpath, name)
            st = path.lstat()
            rel = path.relative_to(root).as_posix()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                entry = f"l {mode:o} {rel} -> {os.readlink(path)}"
            elif stat.S_ISDIR(st.st_mode):
                entry = f"d {mode:o} {rel}"
            elif stat.S_ISREG(st.st_mode):
                entry = f"f {mode:o} {rel} {file_sha256(path)}"
            else:  # device nodes, fifos: mmdebstrap leaves none, but say what is there
                entry = f"o {st.st_mode:o} {rel}"
            h.update(entry.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()


# --- records ------------------------------------------------------------------------------------

def record_path(store: Path, name: str) -> Path:
    return store / f"{name}{RECORD}"


def read_record(path: Path) -> dict | None:
    """A record, or None when there is none; a record that is not JSON is an error naming it."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ImageError(f"{path}: not a readable image record ({exc.msg}, line {exc.lineno}); "
                         "rebuild the image") from None


# --- which image a run means -------------------------------------------------------------------

@dataclass(frozen=True)
class Resolved:
    """The image a run uses: what runs, with which runtime, its digest and where it came from."""

    name: str
    path: Path            # the file or directory the runtime is given
    runtime: str          # "charliecloud" or "apptainer"
    digest: str           # sha256 hex of ``path`` (file) or its tree (directory)
    record: dict | None   # the build's record, when the image came from a store
    checked: str          # what the digest was checked against ("the record ...", "the given digest", "nothing")

    @property
    def container(self) -> str:
        """``<name>@sha256:<hex>``: the perflog's and the runs table's ``container``."""
        return f"{self.name}@sha256:{self.digest}"

    @property
    def software(self) -> str | None:
        """The build's provenance line inside the image (``.hpcvar-source``), if recorded."""
        return (self.record or {}).get("software")

    def require(self, executable: str) -> None:
        """Refuse an image whose record says it lacks ``executable`` (the test would fail later,
        on every node, with a less clear message)."""
        held = (self.record or {}).get("executables")
        if held is not None and executable not in held:
            raise ImageError(f"image {self.name} ({self.path}) has no {executable}: it holds {', '.join(held)}")


def runtime_of(path: Path) -> str:
    return "apptainer" if path.suffix == ".sif" else "charliecloud"


def resolve(spec: str, store: Path, *, default: str | None = None) -> Resolved:
    """The image ``spec`` names, its digest checked.

    ``spec``: ``auto`` (the image ``default``: the test's own), a name in ``store`` (its
    single-file image ``<name>.sqfs``), or a path (an image directory, a ``.sqfs``, an Apptainer
    ``.sif``), optionally ``PATH@sha256:<hex>`` to pin the digest. A store image's digest must
    equal its record's; a pinned path's the given one; a bare path's is only computed.
    """
    spec = spec.strip()
    if spec == "auto":
        if not default:
            raise ImageError("image=auto: this test has no image in containers/images.yaml")
        spec = default
    pinned = _DIGEST.match(spec)
    if pinned:
        spec = pinned["path"]
    if "/" not in spec and not spec.endswith((SQUASHFS, ".sif")):
        return _from_store(spec, store, pinned["hex"] if pinned else None)
    path = Path(spec).expanduser()
    if not path.exists():
        raise ImageError(f"image {spec}: no such file or directory")
    path = path.resolve()
    name = path.name.removesuffix(SQUASHFS).removesuffix(".sif")
    digest = tree_sha256(path) if path.is_dir() else file_sha256(path)
    record = read_record(path.parent / f"{name}{RECORD}")
    if pinned:
        if digest != pinned["hex"]:
            raise ImageError(f"image {path}: sha256 {digest}, not the {pinned['hex']} asked for")
        checked = "the given digest"
    elif record is not None:
        want = record.get("directory_sha256" if path.is_dir() else "squashfs_sha256")
        if digest != want:
            raise ImageError(_changed(path, digest, want, path.parent / f"{name}{RECORD}", name, path.parent))
        checked = f"its record {path.parent / (name + RECORD)}"
    else:
        checked = "nothing (no record beside it)"
    return Resolved(name=name, path=path, runtime=runtime_of(path), digest=digest, record=record, checked=checked)


def _from_store(name: str, store: Path, pinned: str | None) -> Resolved:
    sqfs = store / f"{name}{SQUASHFS}"
    rec_path = record_path(store, name)
    record = read_record(rec_path)
    if record is None or not sqfs.is_file():
        missing = sqfs if not sqfs.is_file() else rec_path
        raise ImageError(f"image {name}: {missing} not found (store {store}); build it with "
                         f"`{build_command(name, store)}`")
    digest = file_sha256(sqfs)
    want = pinned or record.get("squashfs_sha256")
    if digest != want:
        if pinned:
            raise ImageError(f"image {name} ({sqfs}): sha256 {digest}, not the {pinned} asked for")
        raise ImageError(_changed(sqfs, digest, want, rec_path, name, store))
    return Resolved(name=name, path=sqfs.resolve(), runtime="charliecloud", digest=digest, record=record,
                    checked=f"its record {rec_path}")


def _changed(path: Path, digest: str, want: str | None, rec: Path, name: str, store: Path) -> str:
    return (f"image {name}: {path} has sha256 {digest}, but its record {rec} says {want}: it changed since it "
            f"was built; rebuild it with `{build_command(name, store)}`")


def resolve_for_tests(spec: str, tests: list[str], defs, store: Path) -> list[Resolved]:
    """Every image a run of ``tests`` (ReFrame test names; empty: every test of the definitions)
    with ``-S image=spec`` uses, resolved and checked: the check a campaign round makes before
    anything is submitted. Raises :class:`ImageError` for the first that cannot be used."""
    if spec.strip() != "auto":
        return [resolve(spec, store)]
    names = (list(defs.images) if not tests else
             [i.name for t in tests if (i := defs.image_for_test(t)) is not None])
    if tests and not names:
        raise ImageError(f"image=auto: none of the tests {', '.join(tests)} has an image in {defs.path}")
    return [resolve(name, store) for name in dict.fromkeys(names)]
