"""Shared machinery of the application-stdout readers and writers.

* :func:`load_lines` reads a file into :class:`Line` records, stripping the ``ts '%.s'`` prefix
  (``<epoch seconds>.<6 digits><space>``) that the project's ReFrame tests add to every line.
* :class:`StepClock` turns "loop starts here" and "step ends here" lines into step spans.
* :func:`steps_frame` builds the common ``steps`` DataFrame.
* :class:`TimedText` is the writer side: lines with epoch times, written the way ``ts`` prints.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hpcvar.parsers.errors import ParseError, TruncatedOutput

# ``ts '%.s'`` prints the epoch with exactly six decimals, then one space, then the line (which
# may be empty). Ten digits cover 2001-2286; nine and eleven are accepted to stay on the safe side.
_TS_LINE = re.compile(r"(\d{9,11}\.\d{6})(?: (.*))?")
_TS_PREFIX = re.compile(r"^\d{9,11}\.\d{6} ?", re.MULTILINE)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INT = re.compile(r"[+-]?\d+")

STEP_COLUMNS = ("step", "start", "end", "duration_s", "reported_s")


@dataclass(frozen=True, slots=True)
class Line:
    """One output line: 1-based number in the file, text without the ``ts`` prefix, epoch or NaN."""

    no: int
    text: str
    ts: float


@dataclass
class AppOutput:
    """What :func:`hpcvar.parsers.apps.read` returns for one application output file.

    ``steps`` has one row per step with columns ``step`` (1-based), ``start``/``end`` (epoch
    seconds from the ``ts`` prefixes, NaN without them), ``duration_s`` (``end - start`` when
    timestamped, else the app's own figure), ``reported_s`` (the app's own figure, NaN where the
    app prints none) and app-specific columns. ``table`` is set for OSU/IMB only (their
    ``steps`` is empty). ``checks`` holds the sanity figures (iterations, residuals, modularity...).
    """

    app: str
    version: str | None
    nranks: int | None
    timestamped: bool
    steps: pd.DataFrame
    total_s: float | None
    checks: dict[str, Any] = field(default_factory=dict)
    table: pd.DataFrame | None = None


def strip_ts(text: str) -> str:
    """``text`` with any ``ts '%.s'`` line prefixes removed (for sniffing a file's head)."""
    return _TS_PREFIX.sub("", text)


def load_lines(path: str | Path) -> tuple[list[Line], bool]:
    """All lines of ``path`` and whether they carry ``ts '%.s'`` timestamps.

    A file is timestamped when its first line has the prefix; then every line must have it and
    the times must never decrease (one stream piped through ``ts``).
    """
    raw = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    if not any(text.strip() for text in raw):
        raise ParseError(path, "empty file: expected application output", 1)
    if _TS_LINE.fullmatch(raw[0]) is None:
        return [Line(no, text, math.nan) for no, text in enumerate(raw, 1)], False
    lines = []
    previous = -math.inf
    for no, text in enumerate(raw, 1):
        match = _TS_LINE.fullmatch(text)
        if match is None:
            raise ParseError(path, "expected a `ts '%.s'` prefix '<epoch>.<6 digits> ' as on line 1", no)
        ts = float(match[1])
        if ts < previous:
            raise ParseError(path, f"timestamp {match[1]} goes backwards (previous line: {previous:.6f})", no)
        previous = ts
        lines.append(Line(no, match[2] or "", ts))
    return lines, True


def number(path: str | Path, line: Line, text: str, what: str) -> float:
    """``text`` as a float; a ParseError naming ``what`` otherwise (no ``nan``/``inf``/``1_0``)."""
    if _FLOAT.fullmatch(text) is None:
        raise ParseError(path, f"expected a number for {what}, got {text!r}", line.no)
    return float(text)


def integer(path: str | Path, line: Line, text: str, what: str) -> int:
    if _INT.fullmatch(text) is None:
        raise ParseError(path, f"expected an integer for {what}, got {text!r}", line.no)
    return int(text)


class StepClock:
    """Pairs each step-marker line with the line its step starts at.

    A step starts at the later of the loop-start line (:meth:`open`) and the previous step's
    marker, so consecutive steps share their boundary line: the app prints one line per step.
    """

    def __init__(self, path: str | Path):
        self._path = path
        self._start: Line | None = None

    def open(self, line: Line) -> None:
        self._start = line

    @property
    def opened(self) -> Line | None:
        """The line the step in progress started at, None between loops."""
        return self._start

    def close(self) -> None:
        """The loop ended: a marker before the next :meth:`open` is out of place."""
        self._start = None

    def mark(self, line: Line, what: str) -> tuple[Line, Line]:
        if self._start is None:
            raise ParseError(self._path, f"{what} outside a time-step loop (no loop-start line before it)", line.no)
        span = (self._start, line)
        self._start = line
        return span


def steps_frame(spans: Sequence[tuple[Line, Line]], reported: Sequence[float], timestamped: bool,
                extra: dict[str, Sequence] | None = None) -> pd.DataFrame:
    """The common steps table; ``extra`` adds app-specific columns (same length as ``spans``)."""
    start = np.array([first.ts for first, _ in spans], dtype="float64")
    end = np.array([last.ts for _, last in spans], dtype="float64")
    reported_s = np.asarray(reported, dtype="float64")
    frame = pd.DataFrame({
        "step": np.arange(1, len(spans) + 1, dtype="int64"),
        "start": start,
        "end": end,
        "duration_s": end - start if timestamped else reported_s,
        "reported_s": reported_s,
    })
    for name, values in (extra or {}).items():
        frame[name] = list(values)
    return frame


def check_steps(steps: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Writer input check: finite, ordered and contiguous (step i+1 starts where step i ends).

    The writable apps print one line per step boundary, so a gap between steps has no line
    that could carry it.
    """
    spans = [(float(a), float(b)) for a, b in steps]
    if not spans:
        raise ValueError("need at least one step")
    for i, (a, b) in enumerate(spans):
        if not (math.isfinite(a) and math.isfinite(b)) or b < a:
            raise ValueError(f"step {i + 1}: need finite start <= end, got ({a}, {b})")
        if i and round(a, 6) != round(spans[i - 1][1], 6):
            raise ValueError(f"step {i + 1} starts at {a:.6f} but step {i} ends at {spans[i - 1][1]:.6f}: "
                             "steps must be contiguous")
    return spans


class TimedText:
    """Output lines with their epoch times, written like ``app | ts '%.s'`` would."""

    def __init__(self) -> None:
        self._rows: list[tuple[float, str]] = []

    def at(self, t: float, *texts: str) -> None:
        """Lines printed together at time ``t``."""
        self._rows.extend((t, text) for text in texts)

    def spread(self, t0: float, t1: float, texts: Sequence[str]) -> None:
        """Lines printed at evenly spaced times strictly between ``t0`` and ``t1``."""
        n = len(texts)
        self._rows.extend((t0 + (t1 - t0) * (k + 1) / (n + 1), text) for k, text in enumerate(texts))

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text("".join(f"{t:.6f} {text}\n" for t, text in self._rows))
        return path


def truncated(path: str | Path, message: str, line: int, spans: Sequence[tuple[Line, Line]],
              reported: Sequence[float], timestamped: bool) -> TruncatedOutput:
    """The error for an output that ends mid-run, carrying the steps completed before the cut
    (plain numbers, NaN as None, for the quarantine's JSON lines)."""
    frame = steps_frame(spans, reported, timestamped)
    completed = [{key: (None if isinstance(value, float) and math.isnan(value) else value)
                  for key, value in zip(STEP_COLUMNS, (int(r.step), float(r.start), float(r.end),
                                                       float(r.duration_s), float(r.reported_s)))}
                 for r in frame.itertuples()]
    return TruncatedOutput(path, message, line, completed)
