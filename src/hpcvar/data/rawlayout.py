"""The raw campaign layout: the contract of ``docs/raw-layout.md``, owned here.

Everything that writes a raw campaign directory (the simulator, ``hpcvar import-reframe``) and
what reads it (``hpcvar collate``) goes through this module for the files they share:

* ``system.yaml``: :func:`write_system`, :func:`read_system`, and :class:`SystemInfo` (collate's
  validated view of it);
* a run's ``manifest.json``: :func:`write_manifest` (written last and atomically: a run directory
  without one is still being written, :func:`is_complete`) and :func:`read_manifest` (checked
  against the files' :func:`sha256`).

Files are written atomically (:mod:`hpcvar.util.fileio`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import yaml

from hpcvar.parsers.errors import ParseError
from hpcvar.util.fileio import atomic_write_json, atomic_write_text

#: A run directory's manifest: its presence marks the run complete.
MANIFEST = "manifest.json"
#: The raw directory's description of the system (name, time zone, topology, LDMS store).
SYSTEM_FILE = "system.yaml"
#: Keys every manifest has (collate needs them).
MANIFEST_KEYS = ("run_id", "app", "dataset", "num_nodes", "job_id", "files")
#: The raw directory's run directories: ``runs/<run_id>/``.
RUNS_DIR = "runs"
#: A run's application output (what the parsers of ``hpcvar.parsers.apps`` read).
STDOUT = "stdout.txt"
#: A failed run's job standard error (the suite's ``rfm_job.err``): what MPI, the launcher or the
#: container runtime said when it stopped (``hpcvar import-reframe`` keeps it; collation quotes it).
STDERR = "stderr.txt"
#: A run's ``sacct`` output over its job's window (every user's jobs: the neighbourhood).
SACCT = "sacct.txt"
#: A run's per-step job counters (``hpcvar.parsers.counters``): what AriesNCL-style collection or
#: the simulator writes. Runs of the suite have node samples instead, which collation turns into
#: per-step counters itself.
COUNTERS = "counters.csv"
#: The per-node counter sampler's files (``hpcvar sample``; ``hpcvar.parsers.node_counters``), one
#: per node of the job, named by host; the suite writes them beside the job's output.
NODE_COUNTERS = "node-counters-{hostname}.csv"
NODE_COUNTERS_GLOB = "node-counters-*.csv"
#: A run's own window of the LDMS store (system-wide counters), a directory.
RUN_LDMS_DIR = "ldms"
#: The raw directory's ReFrame perflogs: ``perflogs/<system>/<partition>/<Test>.log``.
PERFLOGS_DIR = "perflogs"
#: The node -> router -> group map a raw directory's ``system.yaml`` names by default.
TOPOLOGY = "topology.csv"
#: mpiP reports in a run directory end so.
MPIP_SUFFIX = ".mpiP"
#: What was planted, for the checks to score against: the simulator's causes (in the raw
#: directory, ``hpcvar.simulate.truth``) or a testbed campaign's planted workload (in its results
#: directory, ``hpcvar.campaign.background``). Collation never reads it.
TRUTH = "truth.json"
#: Beside the simulator's truth: its oracle forecaster's k-step sums (the forecast scores it as a model).
TRUTH_ORACLE = "truth_oracle.parquet"
#: The suite's timestamped copy of a job's standard output in its ReFrame output directory
#: (``reframe_tests/common/mixins.py``), which the import copies to ``STDOUT``.
APP_OUTPUT = "app.out"


def sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes: the manifest's checksums."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --- runs/<run_id>/manifest.json ---------------------------------------------------------------

def is_complete(run_dir: Path) -> bool:
    """A run directory is complete once its manifest exists (it is written last)."""
    return (run_dir / MANIFEST).exists()


def write_manifest(run_dir: Path, meta: dict, files: Iterable[str] | None = None) -> None:
    """The manifest is written last (and atomically): a run directory without one is incomplete.

    ``files`` (paths relative to ``run_dir``) are checksummed into the manifest's ``files``;
    by default every entry of ``run_dir`` but the manifest, in name order. ``files`` goes after
    ``meta``'s keys, or where ``meta`` already has a ``files`` key (its value is replaced).
    """
    if files is None:
        files = [p.name for p in sorted(run_dir.iterdir()) if p.name != MANIFEST]
    checksums = {name: sha256(run_dir / name) for name in files}
    atomic_write_json(run_dir / MANIFEST, {**meta, "files": checksums}, default=str)


def read_manifest(run_dir: Path) -> dict:
    """A complete run's manifest, checked: valid JSON, the keys collate needs, and every listed
    file present with its recorded checksum. Raises :class:`ParseError` otherwise."""
    path = run_dir / MANIFEST
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ParseError(path, f"invalid JSON: {exc.msg}", exc.lineno) from exc
    for key in MANIFEST_KEYS:
        if key not in meta:
            raise ParseError(path, f"manifest lacks {key!r}")
    for name, digest in meta["files"].items():
        f = run_dir / name
        if not f.exists():
            raise ParseError(f, "listed in manifest.json but missing")
        if sha256(f) != digest:
            raise ParseError(f, "checksum differs from manifest.json: the file changed after the run")
    return meta


# --- system.yaml -------------------------------------------------------------------------------

def write_system(raw: Path, doc: dict) -> None:
    """``raw/system.yaml`` from ``doc`` (keys in ``doc``'s order)."""
    atomic_write_text(raw / SYSTEM_FILE, yaml.safe_dump(doc, sort_keys=False))


def read_system(raw: Path):
    """``raw/system.yaml`` as written (unchecked; :class:`SystemInfo` checks it)."""
    return yaml.safe_load((raw / SYSTEM_FILE).read_text())


class SystemInfo:
    """``system.yaml`` of a raw campaign directory."""

    def __init__(self, raw: Path):
        path = raw / SYSTEM_FILE
        if not path.exists():
            raise ParseError(path, "missing: every raw campaign directory needs a system.yaml "
                                   "(system, timezone, topology[, ldms])")
        doc = read_system(raw) or {}
        for key in ("system", "topology"):
            if key not in doc:
                raise ParseError(path, f"missing key {key!r}")
        self.name = str(doc["system"])
        self.timezone = str(doc.get("timezone", "UTC"))
        self.topology = raw / doc["topology"]
        self.ldms = raw / doc["ldms"] if doc.get("ldms") else None
        self.io_routers = doc.get("io_routers", [])
