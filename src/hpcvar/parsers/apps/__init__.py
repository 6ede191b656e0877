"""Application stdout: per-step timing of AMG, MILC, UMT, miniVite and hpcvar's AMG proxy, and OSU/IMB tables.

Owns the standard output of the campaign's applications, plain or with every line prefixed by
moreutils ``ts '%.s'`` (``<epoch seconds>.<6 digits> <line>``: the project's ReFrame tests pipe
app output through it). Apps: ``amg2013`` | ``amg2023`` | ``milc`` | ``umt`` | ``minivite`` |
``amgproxy`` | ``osu`` | ``imb``; which lines are step boundaries is documented in each app module
(:mod:`.amg`, :mod:`.milc`, :mod:`.umt`, :mod:`.minivite`, :mod:`.amgproxy`, :mod:`.microbench`).

Per-step times come from two sources: the ``ts`` epochs of the step-marker lines (``start``,
``end``, ``duration_s``: they tie steps to monitoring data) and the app's own printed figure
(``reported_s``). Without timestamps ``start``/``end`` are NaN and ``duration_s`` is the app's
figure.

API: :func:`sniff`, :func:`detect_app`, :func:`read` -> :class:`AppOutput`, :func:`describe`,
and the simulator's writer :func:`write_timestamped` (apps ``amg2013``, ``milc``, ``umt``,
``minivite``, ``amgproxy``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from hpcvar.parsers.apps import amg, amgproxy, microbench, milc, minivite, umt
from hpcvar.parsers.apps._core import AppOutput, Line, TimedText, load_lines, strip_ts
from hpcvar.parsers.errors import ParseError

__all__ = ["APPS", "WRITABLE_APPS", "AppOutput", "describe", "detect_app", "read", "sniff", "write_timestamped"]

KIND = "app_stdout"
APPS = ("amg2013", "amg2023", "milc", "umt", "minivite", "amgproxy", "osu", "imb")

# First match wins; each pattern is a line only that app prints (checked against every sample).
_SIGNATURES: tuple[tuple[str, re.Pattern], ...] = (
    ("amgproxy", re.compile(rf"^{amgproxy.BANNER.pattern}$", re.MULTILINE)),
    ("amg2023", re.compile(rf"^{re.escape(amg.RUN_HEADER)}\s*\n\s*Problem ID\s*=", re.MULTILINE)),
    ("amg2013", re.compile(rf"^{re.escape(amg.RUN_HEADER)}\s*\n\s*solver ID\s*=", re.MULTILINE)),
    ("milc", re.compile(r"^MIMD version \S", re.MULTILINE)),
    ("umt", re.compile(rf"^(?:{re.escape(umt.HEADER)}|CYCLE 1 timerad = |Teton driver: |{umt.STARTING})",
                       re.MULTILINE)),
    ("minivite", re.compile(r"^(?:Time to (?:generate|read input file and create) distributed graph|"
                            r"Modularity: \S+, Iterations: \S+, Time \(in s\): |"
                            r"Average total time \(in s\), #Processes:)", re.MULTILINE)),
    ("osu", re.compile(r"^# OSU .+ Test v?\d", re.MULTILINE)),
    ("imb", re.compile(r"^#\s+Intel ?\(R\) MPI Benchmarks ", re.MULTILINE)),
)

_PARSERS: dict[str, Callable[[str | Path, Sequence[Line], bool], AppOutput]] = {
    "amg2013": amg.parse, "amg2023": amg.parse, "milc": milc.parse, "umt": umt.parse,
    "minivite": minivite.parse, "amgproxy": amgproxy.parse, "osu": microbench.parse_osu,
    "imb": microbench.parse_imb,
}
_WRITERS = {"amg2013": amg.write, "milc": milc.write, "umt": umt.write, "minivite": minivite.write,
            "amgproxy": amgproxy.write}
WRITABLE_APPS = tuple(_WRITERS)


def detect_app(head: str) -> str | None:
    """The app whose output ``head`` (plain or ``ts``-prefixed text) is, or None."""
    text = strip_ts(head)
    return next((app for app, signature in _SIGNATURES if signature.search(text)), None)


def sniff(head: str, name: str) -> bool:
    """True if ``head`` looks like the stdout of one of :data:`APPS`."""
    return detect_app(head) is not None


def read(path: str | Path) -> AppOutput:
    """Parse one application output file (app detected from its content)."""
    lines, timestamped = load_lines(path)
    app = detect_app("\n".join(line.text for line in lines))
    if app is None:
        raise ParseError(path, "unknown application output: expected AMG2013/AMG2023, MILC, UMT, miniVite, "
                               "hpcvar-amgproxy, OSU or IMB stdout", 1)
    return _PARSERS[app](path, lines, timestamped)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat()


def _time_span(out: AppOutput) -> list[str] | None:
    if not out.timestamped:
        return None
    if out.table is not None:
        start, end = out.table["ts"].min(), out.table["ts"].max()
    else:
        start, end = out.steps["start"].min(), out.steps["end"].max()
    return [_iso(start), _iso(end)]


def describe(path: str | Path) -> dict:
    """Summary for ``hpcvar inspect``."""
    out = read(path)
    records = len(out.table) if out.table is not None else len(out.steps)
    figures: dict = {"app": out.app, "nranks": out.nranks, "timestamped": out.timestamped}
    if out.table is None:
        figures |= {"steps": len(out.steps), "total_s": out.total_s,
                    "mean_step_s": float(out.steps["duration_s"].mean()) if records else None}
    figures |= {name: value for name, value in out.checks.items() if isinstance(value, (int, float, str))}
    if "problem" in out.steps and out.steps["problem"].nunique() > 1:
        figures["mean_step_s"] = None  # the solves of different problems are no steps of one run
        figures["note"] = (f"{out.steps['problem'].nunique()} different problems in one file: see the "
                           "problem_N_ figures; one run per problem for a dataset")
    figures = {name: None if isinstance(value, float) and math.isnan(value) else value
               for name, value in figures.items()}
    return {"kind": KIND, "format_version": out.version, "records": records, "time_span": _time_span(out),
            "figures": figures}


def write_timestamped(path: str | Path, app: str, steps: Sequence[tuple[float, float]], *, nranks: int,
                      version: str | None = None, **extra) -> Path:
    """Write realistic ``app | ts '%.s'`` stdout whose steps :func:`read` returns exactly.

    ``steps`` are contiguous ``(start_epoch, end_epoch)`` pairs (each app prints one line per
    step boundary, so step i+1 must start where step i ends; miniVite, relaunched per step,
    prints a start line per step and also takes steps with gaps); times are written to the
    microsecond. ``version`` is for ``milc`` and ``amgproxy`` only (the others print none). ``extra`` goes to
    the app's writer: ``reported_s`` (umt, minivite, amgproxy: the app's own per-step figure,
    default the durations), ``n``/``stencil``/``iterations`` (amgproxy), ``n``/``gmres_iterations`` (amg2013), ``nx`` (milc), ``flux_iters``/``dtrad``/
    ``goal_time``/``deck``/``groups``/``polar``/``azimuthal`` (umt: UMT 2.0 SuOlsonTest output),
    ``vertices`` (None: Table I's graph file)/``graph_s``/``modularity``/``louvain_iterations``
    (minivite: miniVite 1.0 output).
    """
    if app not in _WRITERS:
        raise ValueError(f"no writer for {app!r}; writable apps: {', '.join(WRITABLE_APPS)}")
    if version is not None:
        if app not in ("milc", "amgproxy"):
            raise ValueError(f"{app} output carries no version string")
        extra["version"] = version
    out = TimedText()
    _WRITERS[app](out, steps, nranks=nranks, **extra)
    return out.write(path)
