"""Readers (and matching writers) for every raw file a campaign produces, one module per format.

Each format module exposes ``sniff(head, name)``, ``read(path)`` and ``describe(path)``; this
package adds :func:`detect` (which format is this file?) and :func:`inspect` (parse it and say
what was found, or the clear error) for ``hpcvar inspect``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from hpcvar.parsers.errors import ParseError

#: The format modules, sniffed in this order; the first whose ``sniff`` says yes reads the file.
#: Imported when a file is detected, not with the package: importing one module of the package
#: (``hpcvar.parsers.errors``, needed by the raw layout the ReFrame suite imports) must not import
#: pandas through every format's reader.
FORMAT_NAMES = ("counters", "node_counters", "microbenchmarks", "ldms", "mpip", "reframe", "sacct", "apps",
                "cxi_summary")
HEAD_BYTES = 8192


def formats() -> tuple[ModuleType, ...]:
    """The format modules, in :data:`FORMAT_NAMES`' order."""
    return tuple(importlib.import_module(f"hpcvar.parsers.{name}") for name in FORMAT_NAMES)


def head_of(path: str | Path) -> str:
    with open(path, "rb") as fh:
        return fh.read(HEAD_BYTES).decode("utf-8", errors="replace")


def detect(path: str | Path) -> ModuleType | None:
    head = head_of(path)
    name = Path(path).name
    return next((m for m in formats() if m.sniff(head, name)), None)


def inspect(path: str | Path) -> dict:
    """What hpcvar finds in one file: ``describe()`` of its format, or the error."""
    path = Path(path)
    try:
        module = detect(path)
    except OSError as exc:
        return {"file": str(path), "ok": False, "error": str(exc)}
    if module is None:
        return {"file": str(path), "ok": False,
                "error": "not a format hpcvar reads (sacct -P/fixed-width, LDMS store_csv, mpiP, ReFrame "
                         "perflog/JSON report, AMG/MILC/UMT/miniVite/OSU/IMB output, hpcvar counters.csv, "
                         "hpcvar node counters, Cray MPICH CXI counter summary, "
                         "hpcvar microbenchmark CSV)"}
    try:
        return {"file": str(path), "ok": True, **module.describe(path)}
    except ParseError as exc:
        return {"file": str(path), "ok": False, "kind": module.__name__.rsplit(".", 1)[-1], **exc.as_dict(),
                "error": str(exc)}


__all__ = ["FORMAT_NAMES", "ParseError", "detect", "formats", "inspect"]
