"""UMT stdout: UMT 2.0's ``SuOlsonTest`` (the suite's UMT) and current UMT's Teton ``test_driver``.

**UMT 2.0** (github.com/LLNL/UMT tag v2.0, UMT2015 for APEX; Table I's
``SuOlsonTest custom_8k.cmg 4 2 4 4 4 0.04``). Rank 0 prints a header
(`` Executing UMT2013 Number of ranks =N``, the deck, groups, quadrature), then
`` Starting time advance...`` and, after every radiation cycle, a block printed when the cycle's
timer has stopped (``dumpEdit`` in Teton/TetonUtils.cc)::

    CYCLE 3 timerad = 0.000123
    TempIters = 4 FluxIters = 4 GTAIters = 0
    TrMax =     0.43263702366764 in Zone 223 on Node 0
    TeMax =     0.14207129501805 in Zone 223 on Node 0
    Recommended time step for next rad cycle = 6e-05
    ********** Run Time Statistics **********
    RADTR              = 1.027582             0.777443755

``RADTR`` is the cycle's own wall time in seconds (``advance()``: gettimeofday around the
cycle's relink, sweep set-up, opacities, ``radtr`` and energy update) and the accumulated
angle-loop time. Before the last cycle `` SuOlson setting last step's dt=...``; after the loop
`` SuOlson Test version 1.0 completed at time= T  goalTime= G``, the Su-Olson analytic check
(one `` z= ... tInterpolated= ... tExact= ... error=`` line per analytic point inside the mesh:
checks ``analytic`` (the (z, computed, exact, error) tuples), ``analytic_points`` and
``analytic_max_error``), ``numUnknowns``,
``cumulativeIterationCount= N cumulativeWorkTime=W s.`` and ``figure of merit``.
The goal time is fixed in SuOlsonTest.cc (0.000334, tau = 0.1 of the Su-Olson benchmark, 7
cycles); the 7th command-line argument (Table I's ``0.04``) is not read by v2.0.

Step n runs from the ``CYCLE n-1`` line (step 1: ``Starting time advance...``) to the
``CYCLE n`` line: the first line printed after cycle n's timer stopped. ``reported_s`` is
RADTR's cycle time. Extra step columns: ``flux_iters``, ``temp_iters``, ``gta_iters``,
``timerad`` (radiation time at the cycle's end), ``dtrad`` (the time the cycle advanced:
``timerad`` minus the previous one), ``tr_max``/``te_max`` (peak radiation and material
temperatures, keV). ``total_s`` is ``cumulativeWorkTime`` (the sum of the cycle times).
A run is complete with the ``completed at time=`` line; output that stops before it (a killed
run) is a ParseError naming the file and its last line, as is a cycle block without its
``FluxIters`` or ``RADTR`` line, a skipped cycle number, or a ``cumulativeIterationCount``
that is not the sum of the cycles' ``FluxIters``.

**Current UMT** (``test_driver``, kept for published outputs of it): ``Test driver starting
time steps``, then per step an ``End of Radiation Step Report`` block whose ``TIME STEP n``
line is the step marker, with ``RADTR = <cycle min> <accumulated min>``; after the loop
``Test driver finished time steps`` and ``Total wall time for run: <s> seconds.``.
``reported_s`` is RADTR's cycle time in seconds (printed in minutes). Extra step columns:
``flux_iters``, ``dtrad``, ``timerad``.

:func:`write` (the simulator's writer) writes UMT 2.0's format.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, StepClock, TimedText, check_steps, integer, number, steps_frame, truncated
from hpcvar.parsers.errors import ParseError

# --- UMT 2.0 SuOlsonTest ---------------------------------------------------------------------------

HEADER = " Executing UMT2013 Number of ranks ="
LOOP_START = "Starting time advance..."
_RANKS20 = re.compile(r"\s*Executing UMT2013 Number of ranks =\s*(\d+)\s*")
_THREADS = re.compile(r"\s*and number of OMP threads\s*=\s*(\d+)\s*")
_DECK = re.compile(r"\s*gridFileName: (.*?)\s*")
_GROUPS = re.compile(r"\s*setting the number of groups=\s*(\d+)\s*")
_QUAD = re.compile(r"\s*Running with (Product|Level Symmetric) Quadrature\s*")
_POLAR = re.compile(r"\s*setting number of polar angles\s*=\s*(\d+)\s*")
_AZIMUTHAL = re.compile(r"\s*setting number of azimuthal angles\s*=\s*(\d+)\s*")
_ORDER = re.compile(r"\s*setting quadrature Order\s*=\s*(\d+)\s*")
_CYCLE = re.compile(r"CYCLE (\S+) timerad = (\S+)\s*")
_ITERS = re.compile(r"TempIters = (\S+) FluxIters = (\S+) GTAIters = (\S+)\s*")
_TMAX = re.compile(r"(Tr|Te)Max =\s+(\S+) in Zone (\S+) on Node (\S+)\s*")
_DT_NEXT = re.compile(r"Recommended time step for next rad cycle = (\S+)\s*")
_RADTR20 = re.compile(r"RADTR\s+=\s+(\S+)\s+(\S+)\s*")
_LAST_DT = re.compile(r"\s*SuOlson setting last step's dt=(\S+)\s*")
_COMPLETED = re.compile(r"\s*SuOlson Test version (\S+) completed at time= (\S+)\s+goalTime= (\S+)\s*")
_ERROR_CHECK = re.compile(r"\s*z=\s*(\S+) tInterpolated=\s*(\S+) tExact=\s*(\S+) error=\s*(\S+)\s*")
_UNKNOWNS = re.compile(r"numUnknowns = (\S+)\s*")
_CUMULATIVE = re.compile(r"cumulativeIterationCount= (\S+) cumulativeWorkTime=(\S+) s\.\s*")
_FOM = re.compile(r"figure of merit = (\S+)\s*")


@dataclass
class _Cycle:
    span: tuple[Line, Line]
    number: int
    timerad: float
    temp_iters: int | None = None
    flux_iters: int | None = None
    gta_iters: int | None = None
    tr_max: float = math.nan
    te_max: float = math.nan
    radtr_s: float = math.nan


class _SuOlsonReader:
    def __init__(self, path: str | Path):
        self.path = path
        self.clock = StepClock(path)
        self.cycles: list[_Cycle] = []
        self.started: Line | None = None
        self.completed: Line | None = None
        self.checks: dict = {}
        self.nranks: int | None = None

    def feed(self, line: Line) -> None:
        text, path = line.text, self.path
        if text.strip() == LOOP_START:
            self.started = line
            self.clock.open(line)
        elif match := _CYCLE.fullmatch(text):
            self._cycle(line, match)
        elif match := _ITERS.fullmatch(text):
            cycle = self._current(line, "TempIters/FluxIters")
            cycle.temp_iters, cycle.flux_iters, cycle.gta_iters = (
                integer(path, line, match[k], what) for k, what in ((1, "TempIters"), (2, "FluxIters"),
                                                                    (3, "GTAIters")))
        elif match := _TMAX.fullmatch(text):
            value = number(path, line, match[2], f"{match[1]}Max")
            setattr(self._current(line, f"{match[1]}Max"), f"{match[1].lower()}_max", value)
        elif match := _RADTR20.fullmatch(text):
            self._current(line, "RADTR").radtr_s = number(path, line, match[1], "RADTR cycle seconds")
        elif match := _LAST_DT.fullmatch(text):
            self.checks["last_dt"] = number(path, line, match[1], "last step's dt")
        elif match := _COMPLETED.fullmatch(text):
            self._close_block(line)
            self.completed = line
            self.clock.close()
            self.checks["driver_version"] = match[1]
            self.checks["completed_time"] = number(path, line, match[2], "completion time")
            self.checks["goal_time"] = number(path, line, match[3], "goal time")
        elif match := _ERROR_CHECK.fullmatch(text):
            # One line per point of the Su-Olson analytic solution inside the mesh (z, material
            # energy interpolated from the run, exact, |difference|).
            point = tuple(number(path, line, match[k], what) for k, what in (
                (1, "z"), (2, "tInterpolated"), (3, "tExact"), (4, "error")))
            self.checks.setdefault("analytic", []).append(point)
            self.checks["analytic_points"] = len(self.checks["analytic"])
            self.checks["analytic_max_error"] = max(p[3] for p in self.checks["analytic"])
        elif match := _CUMULATIVE.fullmatch(text):
            self.checks["flux_iters"] = integer(path, line, match[1], "cumulativeIterationCount")
            self.checks["work_time_s"] = number(path, line, match[2], "cumulativeWorkTime")
            self._check_total(line)
        elif match := _UNKNOWNS.fullmatch(text):
            self.checks["num_unknowns"] = number(path, line, match[1], "numUnknowns")
        elif match := _FOM.fullmatch(text):
            # numUnknowns / cumulativeWorkTime * iterations: "inf" when the cycles took 0 us.
            fom = match[1]
            self.checks["figure_of_merit"] = math.inf if fom == "inf" else number(path, line, fom, "figure of merit")
        elif match := _RANKS20.fullmatch(text):
            self.nranks = int(match[1])
        elif match := _THREADS.fullmatch(text):
            self.checks["omp_threads"] = int(match[1])
        elif match := _DECK.fullmatch(text):
            self.checks["deck"] = match[1]
        elif match := _GROUPS.fullmatch(text):
            self.checks["groups"] = int(match[1])
        elif match := _QUAD.fullmatch(text):
            self.checks["quadrature"] = match[1].lower()
        elif match := _POLAR.fullmatch(text):
            self.checks["polar"] = int(match[1])
        elif match := _AZIMUTHAL.fullmatch(text):
            self.checks["azimuthal"] = int(match[1])
        elif match := _ORDER.fullmatch(text):
            self.checks["order"] = int(match[1])

    def _current(self, line: Line, what: str) -> _Cycle:
        if not self.cycles or self.completed is not None:
            raise ParseError(self.path, f"{what} line outside a CYCLE report block", line.no)
        return self.cycles[-1]

    def _cycle(self, line: Line, match: re.Match) -> None:
        self._close_block(line)
        number_ = integer(self.path, line, match[1], "CYCLE number")
        if number_ != len(self.cycles) + 1:
            raise ParseError(self.path, f"expected CYCLE {len(self.cycles) + 1}, found CYCLE {number_}", line.no)
        span = self.clock.mark(line, "CYCLE line")
        self.cycles.append(_Cycle(span, number_, number(self.path, line, match[2], "timerad")))

    def _close_block(self, at: Line) -> None:
        """The previous cycle's block must be complete before the next one (or the end) starts."""
        if not self.cycles:
            return
        cycle = self.cycles[-1]
        for missing, what in ((cycle.flux_iters is None, "'FluxIters ='"), (math.isnan(cycle.radtr_s), "'RADTR ='")):
            if missing:
                raise ParseError(self.path, f"the CYCLE {cycle.number} block (line {cycle.span[1].no}) has no "
                                            f"{what} line", at.no)

    def _check_total(self, line: Line) -> None:
        total = sum(c.flux_iters or 0 for c in self.cycles)
        if self.checks["flux_iters"] != total:
            raise ParseError(self.path, f"cumulativeIterationCount= {self.checks['flux_iters']} is not the sum of the "
                                        f"{len(self.cycles)} cycles' FluxIters ({total})", line.no)

    def finish(self, last: Line) -> None:
        if self.started is None:
            raise ParseError(self.path, f"no '{LOOP_START}' line: the run did not reach its time loop", last.no)
        if self.completed is None:
            where = f"after CYCLE {len(self.cycles)}" if self.cycles else "before the first CYCLE"
            # A cycle is complete once its report block has its timer (RADTR) and iterations.
            done = [c for c in self.cycles if c.flux_iters is not None and not math.isnan(c.radtr_s)]
            raise truncated(self.path, f"truncated: output ends {where}; expected 'SuOlson Test version ... "
                                       "completed at time='", last.no,
                            [c.span for c in done], [c.radtr_s for c in done], not math.isnan(last.ts))
        if not self.cycles:
            raise ParseError(self.path, "no CYCLE report between the start and the end of the time loop",
                             self.completed.no)


def _parse_suolson(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _SuOlsonReader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    cycles = reader.cycles
    timerad = [c.timerad for c in cycles]
    steps = steps_frame([c.span for c in cycles], [c.radtr_s for c in cycles], timestamped, {
        "flux_iters": [c.flux_iters for c in cycles], "temp_iters": [c.temp_iters for c in cycles],
        "gta_iters": [c.gta_iters for c in cycles], "timerad": timerad,
        "dtrad": [t - p for t, p in zip(timerad, [0.0, *timerad[:-1]])],
        "tr_max": [c.tr_max for c in cycles], "te_max": [c.te_max for c in cycles]})
    checks = {"time_steps": len(cycles), **reader.checks}
    return AppOutput(app="umt", version=None, nranks=reader.nranks, timestamped=timestamped, steps=steps,
                     total_s=checks.get("work_time_s"), checks=checks)


# --- current UMT test_driver -----------------------------------------------------------------------

STARTING = "Test driver starting time steps"
FINISHED = "Test driver finished time steps"
_TIME_STEP = re.compile(r"\s*TIME STEP\s+(\S+)\s+timerad =\s+(\S+)\s+dtrad =\s+(\S+)\s*")
_RADTR = re.compile(r"\s*RADTR\s*=\s*(\S+)\s+(\S+)\s*")
_FLUX_ITERS = re.compile(r"\s*FluxIters =\s+(\S+)\s*")
_RANKS = re.compile(r"Teton driver: number of MPI ranks: (\d+)\s*")
_WALL = re.compile(r"Total wall time for run: (\S+) seconds\.?\s*")
_TOTAL_FLUX = re.compile(r"Total number of flux solver iterations for run: (\S+)\s*")
_CHECK = re.compile(r"RESULT CHECK (PASSED|FAILED)")


@dataclass
class _Step:
    span: tuple[Line, Line]
    number: int
    timerad: float
    dtrad: float
    radtr_min: float = math.nan
    flux_iters: int | None = None


class _DriverReader:
    def __init__(self, path: str | Path):
        self.path = path
        self.clock = StepClock(path)
        self.steps: list[_Step] = []
        self.started: Line | None = None
        self.finished: Line | None = None
        self.nranks: int | None = None
        self.wall_s: float | None = None
        self.flux_total: int | None = None
        self.result: str | None = None

    def feed(self, line: Line) -> None:
        text = line.text
        if text.strip() == STARTING:
            self.started = line
            self.clock.open(line)
        elif match := _TIME_STEP.fullmatch(text):
            self._time_step(line, match)
        elif text.strip() == FINISHED:
            self._close_block(line)
            self.finished = line
            self.clock.close()
        elif match := _RADTR.fullmatch(text):
            self._current(line, "RADTR").radtr_min = number(self.path, line, match[1], "RADTR cycle minutes")
        elif match := _FLUX_ITERS.fullmatch(text):
            self._current(line, "FluxIters").flux_iters = integer(self.path, line, match[1], "FluxIters")
        elif match := _RANKS.fullmatch(text):
            self.nranks = int(match[1])
        elif match := _WALL.fullmatch(text):
            self.wall_s = number(self.path, line, match[1], "total wall time")
        elif match := _TOTAL_FLUX.fullmatch(text):
            self.flux_total = integer(self.path, line, match[1], "total flux iterations")
        elif match := _CHECK.match(text):
            self.result = match[1]

    def _current(self, line: Line, what: str) -> _Step:
        if not self.steps or self.finished is not None:
            raise ParseError(self.path, f"{what} line outside a TIME STEP report block", line.no)
        return self.steps[-1]

    def _time_step(self, line: Line, match: re.Match) -> None:
        self._close_block(line)
        number_ = integer(self.path, line, match[1], "TIME STEP number")
        if number_ != len(self.steps) + 1:
            raise ParseError(self.path, f"expected TIME STEP {len(self.steps) + 1}, found {number_}", line.no)
        span = self.clock.mark(line, "TIME STEP line")
        self.steps.append(_Step(span, number_, number(self.path, line, match[2], "timerad"),
                                number(self.path, line, match[3], "dtrad")))

    def _close_block(self, at: Line) -> None:
        """The previous step's report must be complete before the next one (or the end) starts."""
        if self.steps and math.isnan(self.steps[-1].radtr_min):
            step = self.steps[-1]
            raise ParseError(self.path, f"the TIME STEP {step.number} report (line {step.span[1].no}) "
                                        "has no 'RADTR =' run-time line", at.no)

    def finish(self, last: Line) -> None:
        if self.started is None:
            raise ParseError(self.path, f"no '{STARTING}' line", last.no)
        if self.finished is None:
            where = f"inside the TIME STEP {len(self.steps)} report" if self.steps else "before the first TIME STEP"
            raise ParseError(self.path, f"truncated: output ends {where}; expected '{FINISHED}'", last.no)
        if not self.steps:
            raise ParseError(self.path, "no TIME STEP report between the start and the end of the loop",
                             self.finished.no)


def _parse_test_driver(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _DriverReader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    steps = steps_frame([s.span for s in reader.steps], [s.radtr_min * 60.0 for s in reader.steps], timestamped,
                        {"flux_iters": [s.flux_iters for s in reader.steps], "dtrad": [s.dtrad for s in reader.steps],
                         "timerad": [s.timerad for s in reader.steps]})
    if reader.wall_s is not None:
        total_s = reader.wall_s
    elif timestamped:
        total_s = steps["end"].iloc[-1] - steps["start"].iloc[0]
    else:
        total_s = None
    checks = {"time_steps": len(reader.steps), "flux_iters": reader.flux_total, "result_check": reader.result}
    return AppOutput(app="umt", version=None, nranks=reader.nranks, timestamped=timestamped, steps=steps,
                     total_s=total_s, checks=checks)


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    """UMT 2.0 (SuOlsonTest) output, or current UMT's test_driver output."""
    if any(_RANKS20.fullmatch(line.text) or _CYCLE.fullmatch(line.text) for line in lines):
        return _parse_suolson(path, lines, timestamped)
    return _parse_test_driver(path, lines, timestamped)


# --- writer: UMT 2.0 SuOlsonTest ---------------------------------------------------------------------

#: SuOlsonTest.cc's fixed goal time, its first radiation time step (Teton dtrad at set-up) and the
#: step the time-step control settles on (dtrmn); with them the loop takes 7 cycles.
GOAL_TIME = 0.000334
FIRST_DT = 3.0e-6
DTRAD = 6.0e-5
# Per cycle of the real 2-rank run (tests/captured/umt/): FluxIters (= TempIters), TrMax, TeMax.
_REAL_CYCLES = ((3, 0.0031622776601684, 0.0031622776601684), (3, 0.36459219888304, 0.0075234781903888),
                (4, 0.43263702366764, 0.14207129501805), (4, 0.47777562466285, 0.18768963632409),
                (4, 0.51233663377169, 0.22394098347579), (4, 0.54062877590405, 0.25504588498863),
                (3, 0.55355895859809, 0.27044832348429))
_UNKNOWNS_PER_RANK = 1.91693e6 / 2  # numUnknowns per rank of the 2-rank run (3x6x8 zones per rank)
_STATS = ["********** Run Time Statistics **********", "                  Cycle Advance             Accumulated ",
          "                     Time (sec)         Angle Loop Time (sec)"]


def _g(value: float, digits: int) -> str:
    """``value`` as a C++ ostream prints it with ``precision(digits)`` (printf ``%.{digits}g``)."""
    return f"{value:.{digits}g}"


def _block(number_: int, timerad: float, iters: int, tr_max: float, te_max: float, node: int, dt_next: float,
           cycle_s: float, angle_s: float) -> list[str]:
    return [f"CYCLE {number_} timerad = {_g(timerad, 14)}", " ",
            f"TempIters = {iters} FluxIters = {iters} GTAIters = 0",
            f"TrMax =     {_g(tr_max, 14)} in Zone 223 on Node {node}",
            f"TeMax =     {_g(te_max, 14)} in Zone 223 on Node {node}",
            f"Recommended time step for next rad cycle = {_g(dt_next, 14)}", " ", " ", *_STATS,
            f"RADTR              = {_g(cycle_s, 14)}             {_g(angle_s, 14)}", " "]


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int,
          reported_s: Sequence[float] | None = None, flux_iters: int | Sequence[int] | None = None,
          dtrad: float = DTRAD, goal_time: float | None = None, deck: str = "custom_8k.cmg", groups: int = 4,
          polar: int = 4, azimuthal: int = 4) -> None:
    """UMT 2.0 ``SuOlsonTest <deck> <groups> 2 <order> <polar> <azimuthal>`` output: the header
    and ``Starting time advance...`` at the first step's start, one CYCLE block per step at the
    step's end, the summary at the last step's end.

    ``reported_s``: RADTR's cycle times (default: the step durations). ``flux_iters``: per cycle
    or one value for all (default: the real run's 3, 3, 4, 4, 4, 4, 3, then 4). Radiation time:
    the first cycle advances 3e-6, the others ``dtrad``, the last is cut to ``goal_time``
    (default: SuOlsonTest's 0.000334 when the steps reach it exactly in their last cycle, as 7
    steps do; otherwise the time the last full cycle reaches).
    """
    spans = check_steps(steps)
    n = len(spans)
    cycles = [end - start for start, end in spans] if reported_s is None else [float(r) for r in reported_s]
    if len(cycles) != n:
        raise ValueError(f"reported_s has {len(cycles)} values for {n} steps")
    if flux_iters is None:
        iters = [_REAL_CYCLES[k][0] if k < len(_REAL_CYCLES) else 4 for k in range(n)]
    elif isinstance(flux_iters, int):
        iters = [flux_iters] * n
    else:
        iters = [int(i) for i in flux_iters]
        if len(iters) != n:
            raise ValueError(f"flux_iters has {len(iters)} values for {n} steps")
    # Radiation times as SuOlsonTest's loop makes them: the last dt is cut to reach the goal.
    before_last = FIRST_DT + (n - 2) * dtrad if n > 1 else 0.0
    full_last = FIRST_DT if n == 1 else dtrad
    if goal_time is None:
        goal_time = GOAL_TIME if before_last < GOAL_TIME <= before_last + full_last else before_last + full_last
    elif not before_last < goal_time <= before_last + full_last:
        raise ValueError(f"goal_time {goal_time} is not reached in exactly {n} cycles of dtrad {dtrad}")
    timerad = [FIRST_DT + k * dtrad for k in range(n - 1)] + [goal_time]
    t0, t_end = spans[0][0], spans[-1][1]
    node = 0 if nranks == 1 else 1
    out.at(t0, f"{HEADER}{nranks}", " and number of OMP threads  =1", f" gridFileName: {deck}",
           f" setting the number of groups={groups}", " Running with Product Quadrature ",
           f" setting number of polar angles     = {polar}", f" setting number of azimuthal angles = {azimuthal}",
           " Building mesh...", " Mesh complete.", " Initializing Teton object...", "    done.", f" {LOOP_START}")
    if n == 1:
        out.at(t0, f" SuOlson setting last step's dt={_g(goal_time, 6)}")
    angle = 0.0
    for k, ((_, end), cycle_s, count) in enumerate(zip(spans, cycles, iters)):
        _, tr_max, te_max = _REAL_CYCLES[min(k, len(_REAL_CYCLES) - 1)]
        angle += 0.35 * cycle_s  # the angle loop (sweeps) takes about a third of a cycle
        out.at(end, *_block(k + 1, timerad[k], count, tr_max, te_max, node if k == 0 else 0, dtrad, cycle_s, angle))
        if k == n - 2:
            out.at(end, f" SuOlson setting last step's dt={_g(goal_time - timerad[k], 14)}")
    work = sum(cycles)
    unknowns = _UNKNOWNS_PER_RANK * nranks
    # cout keeps dumpEdit's precision(14) until the analytic check sets 6.
    out.at(t_end, f" SuOlson Test version 1.0 completed at time= {_g(goal_time, 14)}  goalTime= {_g(goal_time, 14)}",
           " Computing error check along x=0.0833333, y=     0.25",
           " z=     0.1 tInterpolated=  0.00533343 tExact=    0.00468 error=0.000653428",
           f"numUnknowns = {_g(unknowns, 6)}",
           f"cumulativeIterationCount= {sum(iters)} cumulativeWorkTime={_g(work, 6)} s.",
           f"figure of merit = {_g(unknowns / work * sum(iters), 6) if work > 0 else 'inf'}")
