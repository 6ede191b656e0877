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
(column ``trajectories``).

MILC prints no per-trajectory time: ``reported_s`` is NaN. (7.8.1's ks_imp_dyn/control.c times
only the whole loop, warm-ups included: ``dtime`` from before the warm-ups to after the last
measurement, printed as ``Time = <s> seconds``; builds with the Makefile's CTIME flags add
component timers such as ``CONGRAD5: time = ...``, never a trajectory's.) The loop time is
``total_s`` and, per parameter set, ``checks["segment_time_s"]``. Timestamped, the same loop's
stamped span is ``checks["loop_stamped_s"]``: from the line before the loop's first solve (the last
that ``readin`` or the first update's set-up printed) to the ``Time =`` line, which MILC prints
right after stopping its timer; the stored steps are then checked against MILC's own timer through
it (the steps lack the warm-ups and the last measurement, which the timer holds).

Conjugate-gradient solves: MILC's default build (``-DCG_OK``) reports every solve as
`` OK converged final_rsq= ... iters= N`` (or `` NOT converged ...``, printed whatever the build);
CTIME builds print ``CONGRAD5: time = ... iters = N``. The solves a step's lines report give its
``cg_solves``, ``cg_iters`` and ``cg_max_iters`` (0 where the build reports none); ``checks`` has
``cg_not_converged`` over the whole file (warm-ups and measurements included).

Extra step columns: ``segment``, ``trajectories``, ``plaq_ss``, ``plaq_st`` (the two plaquettes),
``cg_solves``, ``cg_iters``, ``cg_max_iters``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, StepClock, TimedText, check_steps, integer, number, steps_frame, truncated
from hpcvar.parsers.errors import ParseError
from hpcvar.util.grids import factor

_VERSION = re.compile(r"MIMD version (\S+)")
_MACHINE = re.compile(r"Machine = .*, with (\d+) (?:nodes|processors|ranks)\s*")
_PARAM = re.compile(r"(warms|trajecs|traj_between_meas) (\S+)\s*")
_PLAQ = re.compile(r"PLAQ:\s+(\S+)\s+(\S+)\s*")
_SEGMENT_TIME = re.compile(r"(?:Time = (\S+) seconds|[A-Z]+_TIME\s+(\S+) secs)\s*")
_TOTAL_ITERS = re.compile(r"total_iters = (\S+)\s*")
# report_invert_status.c (``OK`` only with -DCG_OK, MILC's default) and d_congrad5*.c (-DCGTIME)
_CG = re.compile(r"\s*(?:(OK|NOT) converged final_rsq= .* iters= (\S+)|CONGRAD5: time = .* iters = (\S+) .*)\s*")
WARMUPS = "WARMUPS COMPLETED"
COMPLETED = "RUNNING COMPLETED"


@dataclass
class _Segment:
    opened: Line
    trajecs: int
    between: int
    warms: int
    plaqs: list[tuple[tuple[Line, Line], float, float, list[int]]] = field(default_factory=list)
    cg: list[int] = field(default_factory=list)  # iterations of the solves since the last PLAQ:
    time_s: float | None = None
    completed: Line | None = None
    loop_start: float = math.nan  # the stamp of the line before the loop's first solve
    loop_stamped_s: float | None = None


class _Reader:
    def __init__(self, path: str | Path):
        self.path = path
        self.clock = StepClock(path)
        self.segments: list[_Segment] = []
        self.params = {"trajecs": None, "traj_between_meas": 1, "warms": 0}
        self.not_converged = 0
        self.version: str | None = None
        self.nranks: int | None = None
        self.total_iters: int | None = None
        self.previous: Line | None = None
        self.loop_start: float | None = None  # of the loop not yet opened by WARMUPS COMPLETED

    def feed(self, line: Line) -> None:
        self._feed(line)
        self.previous = line

    def _feed(self, line: Line) -> None:
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
        elif match := _CG.fullmatch(text):
            self.not_converged += match[1] == "NOT"
            if (segment is None or segment.completed is not None) and self.loop_start is None:
                self.loop_start = self.previous.ts if self.previous is not None else math.nan
            if segment is not None and segment.completed is None:
                segment.cg.append(integer(self.path, line, match[2] or match[3], "CG iterations"))
        elif match := _PLAQ.fullmatch(text):
            span = self.clock.mark(line, "PLAQ: line")
            segment.plaqs.append((span, number(self.path, line, match[1], "plaquette"),
                                  number(self.path, line, match[2], "plaquette"), segment.cg))
            segment.cg = []
        elif text.strip() == COMPLETED:
            self._complete(line)
        elif segment is not None and (match := _SEGMENT_TIME.fullmatch(text)):
            segment.time_s = number(self.path, line, match[1] or match[2], "segment time")
            if not math.isnan(line.ts) and not math.isnan(segment.loop_start):
                segment.loop_stamped_s = line.ts - segment.loop_start
        elif match := _TOTAL_ITERS.fullmatch(text):
            self.total_iters = integer(self.path, line, match[1], "total_iters")

    def _open(self, line: Line) -> None:
        if self.segments and self.segments[-1].completed is None:
            raise ParseError(self.path, f"{WARMUPS} again before {COMPLETED} of the loop started at line "
                                        f"{self.segments[-1].opened.no}", line.no)
        if self.params["trajecs"] is None:
            raise ParseError(self.path, f"{WARMUPS} before the 'trajecs N' parameter line", line.no)
        # Without warm-ups the loop's first solve comes after this line: the loop began just before it.
        start = self.loop_start if self.loop_start is not None else (
            self.previous.ts if self.previous is not None else math.nan)
        self.segments.append(_Segment(line, self.params["trajecs"], self.params["traj_between_meas"],
                                      self.params["warms"], loop_start=start))
        self.loop_start = None
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
            spans = [span for seg in self.segments for span, *_ in seg.plaqs]
            raise truncated(self.path, f"truncated: the trajectory loop started at line "
                                       f"{self.segments[-1].opened.no} has no '{COMPLETED}'", last.no,
                            spans, [math.nan] * len(spans), not math.isnan(last.ts))


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _Reader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    rows = [(span, k, seg.between, ss, st, len(cg), sum(cg), max(cg, default=0))
            for k, seg in enumerate(reader.segments, 1) for span, ss, st, cg in seg.plaqs]
    spans, segments, between, plaq_ss, plaq_st, solves, iters, max_iters = (list(col) for col in zip(*rows))
    steps = steps_frame(spans, [math.nan] * len(spans), timestamped,
                        {"segment": segments, "trajectories": between, "plaq_ss": plaq_ss, "plaq_st": plaq_st,
                         "cg_solves": solves, "cg_iters": iters, "cg_max_iters": max_iters})
    times = [seg.time_s for seg in reader.segments]
    if None not in times:
        total_s = sum(times)
    elif timestamped:
        total_s = steps["end"].iloc[-1] - steps["start"].iloc[0]
    else:
        total_s = None
    checks = {
        "segments": len(reader.segments),
        "warmups": sum(seg.warms for seg in reader.segments),
        "trajectories": sum(seg.trajecs for seg in reader.segments),
        "measurements": len(spans),
        "total_iters": reader.total_iters,
        "cg_not_converged": reader.not_converged,
        "segment_time_s": times,
        "loop_stamped_s": [seg.loop_stamped_s for seg in reader.segments],
    }
    return AppOutput(app="milc", version=reader.version, nranks=reader.nranks, timestamped=timestamped,
                     steps=steps, total_s=total_s, checks=checks)


# --- writer: su3_rmd (ks_imp_dyn) 7.8.1, one parameter set, a measurement every trajectory ----------
# Line for line what the real su3_rmd prints for the test's deck (tests/captured/milc/: MILC 7.8.1,
# GNU/Open MPI build of reframe_tests/apps/build/milc.sh), with the lattice, rank count, trajectory
# count and the measured numbers filled in.

_HEADER = ("SU3 with improved KS action", "Microcanonical simulation with refreshing", "R algorithm")
_OPTIONS = ("Username = (null)", "Options selected...", "Generic single precision", "C_GLOBAL_INLINE",
            "DBLSTORE_FN", "D_FN_GATHER13", "FEWSUMS", "KS_MULTIFF=FNMAT", "VECLENGTH=4",
            "type 0 for no prompts, 1 for prompts, or 2 for proofreading", "nflavors1 4", "nflavors2 4")
_SETUP = ("WARNING!!: Resetting random seed", "Made lattice", "Made nn gathers", "Made 3nn gathers",
          "Finished setup", "", "")
_RUN_PARAMS = ("beta 7", "mass1 0.1", "mass2 0.1", "u0 0.8441", "microcanonical_time_step 0.02",
               "steps_per_trajectory 4", "max_cg_iterations 300", "max_cg_restarts 5", "error_per_site 5e-06",
               "error_for_propagator 2e-06", "npbp_reps 1", "prec_pbp 1", "fresh ", "forget ",
               "unit gauge configuration loaded", "CHECK PLAQ: 3.000000e+00 3.000000e+00",
               "CHECK NERSC LINKTR: 1.000000e+00 CKSUM: 80000000", "Unitarity checked.  Max deviation 0.00e+00",
               "Time to check unitarity = 9.584427e-05",
               '"O(a^2): couplings(pi)=0, Naik term, No O(a^2) errors, tadpole weights"',
               "path coefficients: npath  path_coeff  multiplicity",
               "                    0      6.250000e-01     8", "                    1      -5.847914e-02     8",
               "                    2      -8.771871e-02     48", "                    3      3.077829e-02     192",
               "                    4      -7.199551e-03     384", "                    5      -1.231132e-01     48",
               "Symanzik 1x1 + 1x2 + 1x1x1 action", "gauge_action: total_dyn_flavors = 8",
               "loop coefficients: nloop rep loop_coeff  multiplicity",
               "                    0 0      1.000000e+00     6", "                    1 0      -7.762509e-02     12",
               "                    2 0      -1.031171e-02     16")
# G_LOOP: the 6 plaquettes, 12 rectangles and 16 chairs of the Symanzik action (loop number,
# orientation, length, value, path).
_PATHS4 = ("0 1 7 6", "0 2 7 5", "0 3 7 4", "1 2 6 5", "1 3 6 4", "2 3 5 4")
_PATHS6 = (("0 0 1 7 7 6", "0 0 2 7 7 5", "0 0 3 7 7 4", "1 1 0 6 6 7", "1 1 2 6 6 5", "1 1 3 6 6 4",
            "2 2 0 5 5 7", "2 2 1 5 5 6", "2 2 3 5 5 4", "3 3 0 4 4 7", "3 3 1 4 4 6", "3 3 2 4 4 5"),
           ("0 1 2 7 6 5", "0 1 5 7 6 2", "0 6 2 7 1 5", "0 6 5 7 1 2", "0 1 3 7 6 4", "0 1 4 7 6 3",
            "0 6 3 7 1 4", "0 6 4 7 1 3", "0 2 3 7 5 4", "0 2 4 7 5 3", "0 5 3 7 2 4", "0 5 4 7 2 3",
            "1 2 3 6 5 4", "1 2 4 6 5 3", "1 5 3 6 2 4", "1 5 4 6 2 3"))
_MD_ITERS = 24  # CG iterations of a molecular-dynamics solve (2 per microcanonical step, 4 steps)
_MEAS_ITERS = (25, 8)  # the two solves of each of the two PBP measurements
_EXIT = "exit: Thu Nov 26 12:36:39 2026"


def _cg(iters: int, rsq: float, bound: str) -> str:
    return f" OK converged final_rsq= {rsq:.2g} (cf {bound}) rel = 1 (cf 0) restarts = 1 iters= {iters}"


def _measurement(i: int, plaq: float) -> list[str]:
    """What su3_rmd prints after ``PLAQ:`` when it measures trajectory ``i``."""
    lines = [f"P_LOOP:\t{plaq - 0.093:e}\t{1e-3 * (1 + i % 3):e}"]
    lines += [f"G_LOOP:  0  {k}  4   \t{plaq - 0.0005 * (k % 3):e}\t( {path}  )" for k, path in enumerate(_PATHS4)]
    for nloop, paths in enumerate(_PATHS6, 1):
        lines += [f"G_LOOP:  {nloop}  {k}  6   \t{plaq - 0.09 - 0.002 * (k % 4):e}\t( {path}  )"
                  for k, path in enumerate(paths)]
    lines.append(f"GACTION: {7.92e-01 + 0.1 * i:e}")
    for pbp, faction in ((3.744785e-02, 1.529784e00), (3.937976e-02, 1.482040e00)):
        lines += [_cg(_MEAS_ITERS[0], 2e-12, "4e-12"), _cg(_MEAS_ITERS[1], 2.6e-12, "4e-12"),
                  f"PBP: mass 1.000000e-01     {pbp:e}  {pbp + 0.02:e}  {-2.041488e-03:e}  {-2.041459e-03:e} "
                  "( 1 of 1 )",
                  f"FACTION: mass = 1.000000e-01,  {faction:e} ( 1 of 1 )"]
    return lines


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int, version: str = "7.8.1",
          sites_per_rank: int = 4) -> None:
    """su3_rmd as the ReFrame test runs it: ``sites_per_rank``^4 sites on each of ``nranks`` ranks
    (global lattice ``sites_per_rank`` x the 4-D rank grid), no warm-ups, ``trajecs`` = number of
    steps, measuring every trajectory; ``read`` gives back one step per (start, end) with
    ``WARMUPS COMPLETED`` at the first start and ``Time`` = the last end - the first start."""
    spans = check_steps(steps)
    t0, t_end = spans[0][0], spans[-1][1]
    dims = [sites_per_rank * g for g in factor(nranks, 4)]
    local = " x ".join([str(sites_per_rank)] * 4)
    out.at(t0, *_HEADER, f"MIMD version {version}", f"Machine = MPI (portable), with {nranks} nodes", "Host(0) = vm",
           *_OPTIONS, *(f"{axis} {n}" for axis, n in zip(("nx", "ny", "nz", "nt"), dims)), "iseed 5682304",
           "LAYOUT = Hypercubes, options = hyper_prime,", "automatic hyper_prime layout",
           f"ON EACH NODE (RANK) {local}", f"Mallocing {sites_per_rank ** 4 * 1.0e-3:.1f} MBytes per node for lattice",
           *_SETUP, "warms 0", f"trajecs {len(spans)}", "traj_between_meas 1", *_RUN_PARAMS, WARMUPS)
    md = 2 * 4
    for i, (start, end) in enumerate(spans):
        plaq = 2.817437 - 0.07 * i if i < 12 else 1.98 - 0.0004 * (i % 50)
        out.spread(start, end, [_cg(_MD_ITERS, 1.1e-11, "2.5e-11")] * md)
        out.at(end, f"PLAQ:\t{plaq:.6f}\t{plaq + 0.001:.6f}", *_measurement(i, plaq))
    per_traj = md * _MD_ITERS + 2 * sum(_MEAS_ITERS)
    out.at(t_end, COMPLETED, f"average cg iters for step= {2 * _MD_ITERS:e}", f"Time = {t_end - t0:e} seconds",
           f"total_iters = {per_traj * len(spans)}", "", "", "get_i(0): EOF on input.", _EXIT, "")
