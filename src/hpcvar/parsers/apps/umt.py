"""UMT stdout (Teton ``test_driver``, github.com/LLNL/UMT).

The driver prints ``Test driver starting time steps``, then after every time step an
``End of Radiation Step Report`` block whose ``TIME STEP n`` line is the step marker, with the
cycle's run time ``RADTR = <cycle min> <accumulated min>``; after the loop
``Test driver finished time steps`` and ``Total wall time for run: <s> seconds.``.

Step n runs from the ``TIME STEP n-1`` line (step 1: the ``starting time steps`` line) to the
``TIME STEP n`` line. ``reported_s`` is RADTR's cycle time in seconds (printed in minutes).
Extra step columns: ``flux_iters``, ``dtrad`` (the radiation time step).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, StepClock, TimedText, check_steps, integer, number, steps_frame
from hpcvar.parsers.errors import ParseError

STARTING = "Test driver starting time steps"
FINISHED = "Test driver finished time steps"
_REPORT = re.compile(r"\s*>+\s+End of Radiation Step Report\s+<+\s*")
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
    dtrad: float
    radtr_min: float = math.nan
    flux_iters: int | None = None


class _Reader:
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
        self.steps.append(_Step(span, number_, number(self.path, line, match[3], "dtrad")))

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


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _Reader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    steps = steps_frame([s.span for s in reader.steps], [s.radtr_min * 60.0 for s in reader.steps], timestamped,
                        {"flux_iters": [s.flux_iters for s in reader.steps], "dtrad": [s.dtrad for s in reader.steps]})
    if reader.wall_s is not None:
        total_s = reader.wall_s
    elif timestamped:
        total_s = steps["end"].iloc[-1] - steps["start"].iloc[0]
    else:
        total_s = None
    checks = {"time_steps": len(reader.steps), "flux_iters": reader.flux_total, "result_check": reader.result}
    return AppOutput(app="umt", version=None, nranks=reader.nranks, timestamped=timestamped, steps=steps,
                     total_s=total_s, checks=checks)


# --- writer: test_driver on the UMT SP#1 benchmark problem ---------------------------------------

_RULE = "=" * 65


def _report(number_: int, dtrad: float, cycle_min: float, accumulated_min: float, flux_iters: int) -> list[str]:
    return [
        " ", " >>>>>>>>>>>>>>>     End of Radiation Step Report    <<<<<<<<<<<<<<<",
        f" TIME STEP {number_:8d}  timerad = {number_ * dtrad:18.10f}  dtrad = {dtrad:18.10E}", " ",
        f" FluxIters = {flux_iters:12d}", " ", " *****************     Threading     ****************",
        " # threads per rank, cpu        =     1", " *****************     Run Time     *****************",
        "                     Cycle (min)     Accumulated (min)",
        f" RADTR          = {cycle_min:14.8f} {accumulated_min:18.8f}", "  ",
        " *****************   Convergence    *****************", "     Controlled by =  Intensity ", "  ",
        " *****************  Time Step Vote  *****************", f"     For Cycle     = {number_ + 1:7d}", "  ",
        "Teton driver: CPU MEM USE (rank 0): 1777.0MB",
    ]


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int,
          reported_s: Sequence[float] | None = None, flux_iters: int = 3, dtrad: float = 1e-3) -> None:
    """UMT SP#1 run: one report block per step, printed at the step's end; ``reported_s`` (the
    RADTR cycle time, default: the step durations) is printed in minutes."""
    spans = check_steps(steps)
    cycles = [end - start for start, end in spans] if reported_s is None else [float(r) for r in reported_s]
    if len(cycles) != len(spans):
        raise ValueError(f"reported_s has {len(cycles)} values for {len(spans)} steps")
    t0, t_end = spans[0][0], spans[-1][1]
    out.at(t0, f"Teton driver: number of MPI ranks: {nranks}",
           "Teton driver: Running predefined benchmark problem UMT SP#1",
           "Teton driver: Using older GTA kernel, version 1.", "Teton: setting verbosity to 1", _RULE, _RULE, STARTING,
           _RULE, "Iteration control: relative tolerance set to 1e-07.", _RULE, "")
    accumulated = 0.0
    for number_, ((_, end), cycle_s) in enumerate(zip(spans, cycles), 1):
        accumulated += cycle_s / 60.0
        out.at(end, *_report(number_, dtrad, cycle_s / 60.0, accumulated, flux_iters))
    out.at(t_end, "", _RULE, _RULE, FINISHED, _RULE,
           f"Total number of flux solver iterations for run: {flux_iters * len(spans)}",
           f"Total wall time for run: {t_end - t0:g} seconds.", _RULE, "",
           "RESULT CHECK PASSED: Energy check (this is relative to total energy) 1.0e-13 within tolerance of +/- 1e-09")
