"""A run's window of an LDMS store (:func:`slice_window`), for its raw directory."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hpcvar.parsers.errors import ParseError
from hpcvar.parsers.ldms.store import REORDER_WINDOW, TIME_MSEC, _Layout, _plan
from hpcvar.util.fileio import atomic_write_bytes


# --------------------------------------------------------------------------------- slicing


def _last_time(layout: _Layout) -> float:
    """Time of the file's last complete row (-inf if none): read from its tail, not the whole file."""
    size = layout.path.stat().st_size
    offset = max(0, size - max(64 * 1024, 4 * layout.row_bytes))
    with layout.path.open("rb") as fh:
        fh.seek(offset)
        lines = fh.read().split(b"\n")
    # The last piece is empty or a line still being written; the first may start mid-line.
    for raw in reversed(lines[1 if offset else 0:-1]):
        field = raw.split(b",", 1)[0]
        try:
            value = float(field)
        except ValueError:
            continue
        return value / 1000 if layout.time_column == TIME_MSEC else value
    return float("-inf")


def slice_window(paths: str | Path | Iterable[str | Path], start: float, end: float,
                 out_dir: str | Path) -> list[Path]:
    """Copy the rows of a store sampled in ``[start, end]`` (epoch seconds) into ``out_dir``.

    One output file per data file that has such rows, under the data file's own name, its header
    line first (an ``altheader`` file's header is put inline): the slice is itself a store_csv
    store that :func:`iter_deltas` reads. Rows are copied byte for byte, in their order. Files
    wholly before or after the window are skipped by their first and last rows; a last line
    without its newline (ldmsd still writing it) is not copied. Returns the files written.
    """
    plan = _plan(paths)
    out_dir = Path(out_dir)
    written = []
    for layout in plan.layouts:
        if layout.first_time() > end + REORDER_WINDOW or _last_time(layout) < start - REORDER_WINDOW:
            continue
        scale = 1000.0 if layout.time_column == TIME_MSEC else 1.0
        with layout.header_path.open("rb") as fh:
            header = fh.readline()
        kept = []
        with layout.path.open("rb") as src:
            for lineno, raw in enumerate(src, start=1):
                if lineno <= layout.skip_rows or not raw.endswith(b"\n"):
                    continue
                field = raw.split(b",", 1)[0]
                try:
                    t = float(field) / scale
                except ValueError:
                    text = field[:40].decode("utf-8", errors="replace")
                    raise ParseError(layout.path, f"{layout.time_column} {text!r} is not a number",
                                     line=lineno) from None
                if start <= t <= end:
                    kept.append(raw)
        if not kept:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        dst = out_dir / layout.path.name
        atomic_write_bytes(dst, header + b"".join(kept))
        written.append(dst)
    return written
