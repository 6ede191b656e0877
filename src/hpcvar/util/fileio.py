"""Atomic file writes: write beside the target, then rename over it.

A reader (collate, Snakemake, the report, a second import) sees either the old file or the whole
new one, never a half-written one. The temporary file is ``.<name>.tmp`` in the target's
directory (hidden, so ``*.csv``-style globs never pick it up; the same file system, so the
rename is atomic); it is removed when writing fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def temp_path(path: str | Path) -> Path:
    """The temporary name :func:`atomic_path` writes ``path`` under: ``.<name>.tmp`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s content to; renamed to ``path`` when the block ends.

    For writers that take a path (``to_csv``, ``pq.write_table``, ``shutil.copyfile``)::

        with atomic_path(out / "compare.csv") as tmp:
            frame.to_csv(tmp, index=False)
    """
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_json(path: str | Path, obj: Any, *, default: Callable[[Any], Any] | None = None) -> None:
    """``obj`` as JSON indented by one space (the project's JSON files), written atomically."""
    atomic_write_text(path, json.dumps(obj, indent=1, default=default))
