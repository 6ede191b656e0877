"""MILC stdout (``su3_rmd`` of ks_imp_dyn and ``su3_rhmd_hisq`` of ks_imp_rhmc: same control loop).

For every input parameter set ("segment": the Cori sample has two) MILC echoes the parameters
(``trajecs N``, ``traj_between_meas M``), runs the warmups, prints ``WARMUPS COMPLETED``, then
for each trajectory runs ``update()`` and, every M-th trajectory, ``g_measure()`` which prints
one ``PLAQ:`` line, then the fermion measurements (``PBP:``/``FACTION:``). After the loop:
``RUNNING COMPLETED`` and the segment time (``Time = <s> seconds``, or ``<NAME>_TIME <s> secs`` in
the NERSC benchmark build).

A step is one ``PLAQ:`` interval: step 1 runs from ``WARMUPS COMPLETED`` to the first ``PLAQ:``,
step i from ``PLAQ:`` i-1 to ``PLAQ:`` i (so it holds the measurements of trajectory i-1 and
the update of trajectory i). ``PLAQ:`` is the only line printed exactly once per measured
trajectory in every build; with ``traj_between_meas`` M > 1 a step covers M trajectories
(column ``trajectories``). MILC prints no per-trajectory time: ``reported_s`` is NaN.

Extra step columns: ``segment``, ``trajectories``, ``plaq_ss``, ``plaq_st`` (the two plaquettes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, StepClock, TimedText, check_steps, integer, number, steps_frame
from hpcvar.parsers.errors import ParseError

_VERSION = re.compile(r"MIMD version (\S+)")
_MACHINE = re.compile(r"Machine = .*, with (\d+) (?:nodes|processors|ranks)\s*")
_PARAM = re.compile(r"(trajecs|traj_between_meas) (\S+)\s*")
_PLAQ = re.compile(r"PLAQ:\s+(\S+)\s+(\S+)\s*")
_SEGMENT_TIME = re.compile(r"(?:Time = (\S+) seconds|[A-Z]+_TIME\s+(\S+) secs)\s*")
_TOTAL_ITERS = re.compile(r"total_iters = (\S+)\s*")
WARMUPS = "WARMUPS COMPLETED"
COMPLETED = "RUNNING COMPLETED"


@dataclass
class _Segment:
    opened: Line
    trajecs: int
    between: int
    plaqs: list[tuple[tuple[Line, Line], float, float]] = field(default_factory=list)
    time_s: float | None = None
    completed: Line | None = None


class _Reader:
    def __init__(self, path: str | Path):
        self.path = path
        self.clock = StepClock(path)
        self.segments: list[_Segment] = []
        self.params = {"trajecs": None, "traj_between_meas": 1}
        self.version: str | None = None
        self.nranks: int | None = None
        self.total_iters: int | None = None

    def feed(self, line: Line) -> None:
        text = line.text
        segment = self.segments[-1] if self.segments else None
        if self.version is None and (match := _VERSION.match(text)):
            self.version = match[1]
        elif self.nranks is None and (match := _MACHINE.fullmatch(text)):
            self.nranks = int(match[1])
        elif match := _PARAM.fullmatch(text):
            self.params[match[1]] = integer(self.path, line, match[2], match[1])
        elif text.strip() == WARMUPS:
            self._open(line)
        elif match := _PLAQ.fullmatch(text):
            span = self.clock.mark(line, "PLAQ: line")
            segment.plaqs.append((span, number(self.path, line, match[1], "plaquette"),
                                  number(self.path, line, match[2], "plaquette")))
        elif text.strip() == COMPLETED:
            self._complete(line)
        elif segment is not None and (match := _SEGMENT_TIME.fullmatch(text)):
            segment.time_s = number(self.path, line, match[1] or match[2], "segment time")
        elif match := _TOTAL_ITERS.fullmatch(text):
            self.total_iters = integer(self.path, line, match[1], "total_iters")

    def _open(self, line: Line) -> None:
        if self.segments and self.segments[-1].completed is None:
            raise ParseError(self.path, f"{WARMUPS} again before {COMPLETED} of the loop started at line "
                                        f"{self.segments[-1].opened.no}", line.no)
        if self.params["trajecs"] is None:
            raise ParseError(self.path, f"{WARMUPS} before the 'trajecs N' parameter line", line.no)
        self.segments.append(_Segment(line, self.params["trajecs"], self.params["traj_between_meas"]))
        self.clock.open(line)

    def _complete(self, line: Line) -> None:
        segment = self.segments[-1] if self.segments else None
        if segment is None or segment.completed is not None:
            raise ParseError(self.path, f"{COMPLETED} without a preceding {WARMUPS}", line.no)
        expected = segment.trajecs // segment.between
        if len(segment.plaqs) != expected:
            raise ParseError(self.path, f"expected {expected} PLAQ: lines (trajecs {segment.trajecs} / "
                                        f"traj_between_meas {segment.between}), found {len(segment.plaqs)}", line.no)
        segment.completed = line
        self.clock.close()

    def finish(self, last: Line) -> None:
        if not self.segments:
            raise ParseError(self.path, f"no '{WARMUPS}' line: the trajectory loop never started", last.no)
        if self.segments[-1].completed is None:
            raise ParseError(self.path, f"truncated: the trajectory loop started at line {self.segments[-1].opened.no} "
                                        f"has no '{COMPLETED}'", last.no)


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _Reader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    rows = [(span, k, seg.between, ss, st) for k, seg in enumerate(reader.segments, 1) for span, ss, st in seg.plaqs]
    spans, segments, between, plaq_ss, plaq_st = (list(col) for col in zip(*rows))
    steps = steps_frame(spans, [math.nan] * len(spans), timestamped,
                        {"segment": segments, "trajectories": between, "plaq_ss": plaq_ss, "plaq_st": plaq_st})
    times = [seg.time_s for seg in reader.segments]
    if None not in times:
        total_s = sum(times)
    elif timestamped:
        total_s = steps["end"].iloc[-1] - steps["start"].iloc[0]
    else:
        total_s = None
    checks = {
        "segments": len(reader.segments),
        "trajectories": sum(seg.trajecs for seg in reader.segments),
        "measurements": len(spans),
        "total_iters": reader.total_iters,
    }
    return AppOutput(app="milc", version=reader.version, nranks=reader.nranks, timestamped=timestamped,
                     steps=steps, total_s=total_s, checks=checks)


# --- writer: su3_rmd (ks_imp_dyn), one parameter set, a measurement every trajectory -------------

_HEADER = ("SU3 with improved KS action", "Microcanonical simulation with refreshing", "R algorithm")
_OPTIONS = ("Options selected...", "Generic single precision", "C_GLOBAL_INLINE", "DBLSTORE_FN", "D_FN_GATHER13",
            "FEWSUMS", "type 0 for no prompts, 1 for prompts, or 2 for proofreading")
_LATTICE = ("nflavors1 4", "nflavors2 4", "nx {nx}", "ny {nx}", "nz {nx}", "nt {nx}", "iseed 5682304",
            "LAYOUT = Hypercubes, options = hyper_prime,", "Made lattice", "Made nn gathers", "Made 3nn gathers",
            "Finished setup", "", "")
_RUN_PARAMS = ("warms 0", "trajecs {n}", "traj_between_meas 1", "beta 7", "mass1 0.1", "mass2 0.1", "u0 0.8441",
               "microcanonical_time_step 0.02", "steps_per_trajectory 4", "max_cg_iterations 300",
               "max_cg_restarts 5", "error_per_site 5e-06", "error_for_propagator 2e-06", "npbp_reps 1",
               "prec_pbp 1", "fresh ", "forget ", "unit gauge configuration loaded",
               "CHECK PLAQ: 3.000000e+00 3.000000e+00", "Unitarity checked.  Max deviation 0.00e+00",
               "Symanzik 1x1 + 1x2 + 1x1x1 action")
_CG = " OK converged final_rsq= 1.5e-11 (cf 2.5e-11) rel = 1 (cf 0) restarts = 1 iters= 38"
_CG_ITERS_PER_STEP = 8 * 38 + 2 * 41


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int, version: str = "7.7.13",
          nx: int = 8) -> None:
    """su3_rmd on an ``nx``^4 lattice, ``trajecs`` = number of steps, measuring every trajectory;
    ``read`` gives back one step per (start, end) with ``WARMUPS COMPLETED`` at the first start."""
    spans = check_steps(steps)
    t0, t_end = spans[0][0], spans[-1][1]
    out.at(t0, *_HEADER, f"MIMD version {version}", f"Machine = MPI (portable), with {nranks} processors",
           *_OPTIONS, *(line.format(nx=nx) for line in _LATTICE), *(line.format(n=len(spans)) for line in _RUN_PARAMS),
           WARMUPS)
    for i, (start, end) in enumerate(spans):
        out.spread(start, end, [_CG] * 8)
        plaq = 1.80 - 0.001 * i
        out.at(end, f"PLAQ:\t{plaq:.6f}\t{plaq - 0.002:.6f}", f"P_LOOP:\t{1.3 - 0.01 * i:e}\t{-3.8e-3:e}",
               f"GACTION: {5.2 + 0.01 * i:e}", _CG, _CG,
               "PBP: mass 1.000000e-01     4.789262e-02  1.628757e-01  -2.902848e-02  -2.902852e-02 ( 1 of 1 )",
               "FACTION: mass = 1.000000e-01,  1.402318e+00 ( 1 of 1 )")
    out.at(t_end, COMPLETED, f"average cg iters for step= {_CG_ITERS_PER_STEP:e}", f"Time = {t_end - t0:e} seconds",
           f"total_iters = {_CG_ITERS_PER_STEP * len(spans)}", "", "", "exit: end of input")
