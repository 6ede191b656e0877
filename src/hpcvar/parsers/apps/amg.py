"""AMG stdout: ``amg2023`` (github.com/LLNL/AMG2023) and ``amg2013`` (the AMG2013 line as released
in github.com/LLNL/AMG, "CORAL-2 AMG"; its driver prints ``solver ID =`` where AMG2023 prints
``Problem ID =``). A file may hold several runs, each starting ``Running with these driver
parameters:`` (the LANL sample has problem 1 then problem 2).

hypre prints a timing block (``=====`` / ``<title>:`` / ``=====`` / ``wall clock time = ...``)
when a phase *ends*, so a title line's timestamp is the end of that phase. What a step is:

* time steps, when the output shows them: AMG2013 ``-problem 2 -printstats`` prints
  ``Solver: AMG-GMRES`` at the start of each of its ``No. of Time Steps``; step i runs from its
  ``Solver:`` line to the next one (the last to the ``Cumulative ... Solve Time:`` title).
  ``iterations`` sums the step's ``GMRES Iterations``; no per-step time is printed.
* otherwise one step per solve block (``Problem N: AMG-PCG Solve Time:``): from the title of the
  timing block printed before it (the setup block, or ``IJ Vector Setup`` when no setup block
  is printed) to the solve title; ``reported_s`` is the solve's ``wall clock time``.

Extra step columns: ``problem``, ``iterations``, ``final_residual``. ``checks`` carries the printed
``Figure of Merit`` (``fom``); a file holding several problems gets ``problems`` and per-problem
``problem_N_solve_s``, ``_iterations``, ``_setup_s`` and ``_fom`` instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, TimedText, check_steps, integer, number, steps_frame
from hpcvar.parsers.errors import ParseError

RUN_HEADER = "Running with these driver parameters:"
_FLAVOUR = re.compile(r"\s*(Problem ID|solver ID)\s*=\s*(\d+)\s*")
_FLAVOUR_APP = {"Problem ID": "amg2023", "solver ID": "amg2013"}
_RULE = re.compile(r"={20,}\s*")
_SOLVE_TITLE = re.compile(r"Problem (\d+): (?:Cumulative )?AMG-\w+ Solve Time:\s*")
_SETUP_TITLE = re.compile(r"Problem \d+: AMG Setup Time:\s*")
_WALL = re.compile(r"\s*wall clock time\s*=\s*(\S+)\s+seconds\s*")
_ITERATIONS = re.compile(r"(?:Iterations|Cum\. No\. of Iterations) = (\S+)\s*")
_RESIDUAL = re.compile(r"Final Relative Residual Norm = (\S+)\s*")
_TIME_STEPS = re.compile(r"No\. of Time Steps = (\S+)\s*")
_GRID = re.compile(r"\s*\(Px, Py, Pz\) = \((\d+), (\d+), (\d+)\)\s*")
_SOLVER = re.compile(r"Solver: AMG-\w+\s*")
_STEP_ITERATIONS = re.compile(r"(?:GMRES|PCG) Iterations = (\S+)\s*")
_STEP_RESIDUAL = re.compile(r"Final (?:GMRES|PCG) Relative Residual Norm = (\S+)\s*")
# "Figure of Merit (FOM): nnz_AP / (Setup Phase Time + 3 * Solve Phase Time) 6.481247e+08" (AMG2023),
# "Figure of Merit (FOM_1): 9.020203e+07" (AMG2013): the figure is the last number on the line.
_FOM = re.compile(r"Figure of Merit \(FOM\w*\):.*?(\S+)\s*")


@dataclass
class _Solve:
    problem: int
    title: Line
    start: Line
    wall_s: float | None = None
    iterations: int | None = None
    residual: float | None = None
    time_steps: int | None = None


@dataclass
class _TimeStep:
    opened: Line
    iterations: int = 0
    residual: float = math.nan


@dataclass
class _Run:
    header: Line
    app: str | None = None
    nranks: int | None = None
    setup_s: float = 0.0
    solves: list[_Solve] = field(default_factory=list)
    time_steps: list[_TimeStep] = field(default_factory=list)
    last_title: Line | None = None
    in_setup_block: bool = False
    fom: float | None = None


def _titles(lines: Sequence[Line]) -> set[int]:
    """Indexes of timing-block titles: lines between two ``=====`` rules."""
    return {i for i in range(1, len(lines) - 1)
            if _RULE.fullmatch(lines[i - 1].text) and _RULE.fullmatch(lines[i + 1].text)}


class _Reader:
    def __init__(self, path: str | Path, lines: Sequence[Line]):
        self.path = path
        self.lines = lines
        self.runs: list[_Run] = []

    def parse(self) -> list[_Run]:
        titles = _titles(self.lines)
        for i, line in enumerate(self.lines):
            if line.text.strip() == RUN_HEADER:
                self._finish(line)
                self.runs.append(_Run(line))
            elif self.runs:
                if i in titles:
                    self._title(self.runs[-1], line)
                else:
                    self._line(self.runs[-1], line)
        if not self.runs:
            raise ParseError(self.path, f"no {RUN_HEADER!r} line: not AMG output", 1)
        self._finish(self.lines[-1])
        return self.runs

    def _title(self, run: _Run, line: Line) -> None:
        match = _SOLVE_TITLE.fullmatch(line.text)
        run.in_setup_block = _SETUP_TITLE.fullmatch(line.text) is not None
        if match:
            if run.last_title is None:
                raise ParseError(self.path, "solve-time block before any other timing block", line.no)
            run.solves.append(_Solve(int(match[1]), line, run.last_title))
        run.last_title = line

    def _line(self, run: _Run, line: Line) -> None:
        text = line.text
        solve = run.solves[-1] if run.solves else None
        if match := _FLAVOUR.fullmatch(text):
            run.app = _FLAVOUR_APP[match[1]]
        elif match := _GRID.fullmatch(text):
            run.nranks = math.prod(int(g) for g in match.groups())
        elif match := _WALL.fullmatch(text):
            wall = number(self.path, line, match[1], "wall clock time")
            if run.in_setup_block:
                run.setup_s += wall
            elif solve is not None and solve.wall_s is None:
                solve.wall_s = wall
        elif _SOLVER.fullmatch(text):
            run.time_steps.append(_TimeStep(line))
        elif (match := _STEP_ITERATIONS.fullmatch(text)) and run.time_steps:
            run.time_steps[-1].iterations += integer(self.path, line, match[1], "solver iterations")
        elif (match := _STEP_RESIDUAL.fullmatch(text)) and run.time_steps:
            run.time_steps[-1].residual = number(self.path, line, match[1], "residual norm")
        elif match := _FOM.fullmatch(text):
            run.fom = number(self.path, line, match[1], "figure of merit")
        elif solve is not None:
            self._solve_figure(solve, line)

    def _solve_figure(self, solve: _Solve, line: Line) -> None:
        if match := _ITERATIONS.fullmatch(line.text):
            solve.iterations = integer(self.path, line, match[1], "iterations")
        elif match := _RESIDUAL.fullmatch(line.text):
            solve.residual = number(self.path, line, match[1], "final relative residual norm")
        elif match := _TIME_STEPS.fullmatch(line.text):
            solve.time_steps = integer(self.path, line, match[1], "number of time steps")

    def _finish(self, at: Line) -> None:
        """Validate the run in progress; ``at`` is where the next run starts or the last line."""
        if not self.runs:
            return
        run = self.runs[-1]
        if run.app is None:
            raise ParseError(self.path, "expected 'Problem ID =' or 'solver ID =' after the run header", run.header.no)
        if not run.solves:
            raise ParseError(self.path, f"truncated: the run started at line {run.header.no} has no "
                                        "'Problem N: ... Solve Time:' block", at.no)
        solve = run.solves[-1]
        missing = [name for name, value in (("wall clock time", solve.wall_s), ("Iterations", solve.iterations),
                                            ("Final Relative Residual Norm", solve.residual)) if value is None]
        if missing:
            raise ParseError(self.path, f"truncated: the solve block at line {solve.title.no} has no "
                                        f"{', '.join(missing)}", at.no)
        if run.time_steps and solve.time_steps is not None and len(run.time_steps) != solve.time_steps:
            raise ParseError(self.path, f"expected {solve.time_steps} 'Solver:' time-step lines "
                                        f"(No. of Time Steps), found {len(run.time_steps)}", solve.title.no)


def _run_steps(run: _Run) -> list[tuple[tuple[Line, Line], float, int, int, float]]:
    """(span, reported_s, problem, iterations, final_residual) per step of one run."""
    solve = run.solves[-1]
    if run.time_steps and solve.time_steps:
        ends = [step.opened for step in run.time_steps[1:]] + [solve.title]
        return [((step.opened, end), math.nan, solve.problem, step.iterations, step.residual)
                for step, end in zip(run.time_steps, ends)]
    return [((s.start, s.title), s.wall_s, s.problem, s.iterations, s.residual) for s in run.solves]


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    runs = _Reader(path, lines).parse()
    apps = {run.app for run in runs}
    if len(apps) > 1:
        raise ParseError(path, f"runs of different AMG versions in one file: {sorted(apps)}", runs[-1].header.no)
    rows = [row for run in runs for row in _run_steps(run)]
    spans, reported, problems, iterations, residuals = (list(col) for col in zip(*rows))
    steps = steps_frame(spans, reported, timestamped,
                        {"problem": problems, "iterations": iterations, "final_residual": residuals})
    solves = [solve for run in runs for solve in run.solves]
    time_steps = [solve.time_steps for solve in solves if solve.time_steps is not None]
    checks = {
        "solves": len(solves),
        "iterations": sum(solve.iterations for solve in solves),
        "final_residual": solves[-1].residual,
        "setup_s": sum(run.setup_s for run in runs),
        "time_steps": sum(time_steps) if time_steps else None,
    }
    problems = sorted({solve.problem for solve in solves})
    if len(problems) == 1:
        checks["fom"] = runs[-1].fom
    else:
        # One file, several benchmark problems (AMG2023's published runs: problem 1 with GMRES, then
        # problem 2 with PCG): figures per problem; their solves are not time steps of one run.
        checks["problems"] = ",".join(map(str, problems))
        for problem in problems:
            mine = [run for run in runs if run.solves[-1].problem == problem]
            of = [solve for run in mine for solve in run.solves if solve.problem == problem]
            checks |= {f"problem_{problem}_solve_s": sum(solve.wall_s for solve in of),
                       f"problem_{problem}_iterations": sum(solve.iterations for solve in of),
                       f"problem_{problem}_setup_s": sum(run.setup_s for run in mine),
                       f"problem_{problem}_fom": mine[-1].fom if mine else None}
    nranks = {run.nranks for run in runs} - {None}
    return AppOutput(app=runs[0].app, version=None, nranks=max(nranks) if nranks else None,
                     timestamped=timestamped, steps=steps, total_s=sum(solve.wall_s for solve in solves),
                     checks=checks)


# --- writer: AMG2013 (github.com/LLNL/AMG) ``amg -problem 2 -printstats`` -------------------------

_BLOCK_RULE = "=" * 45
_SETUP_PARAMETERS = (
    "BoomerAMG SETUP PARAMETERS:", "", " Max levels = 25", " Num levels = 4", "",
    " Strength Threshold = 0.250000", " Interpolation Truncation Factor = 0.000000",
    " Maximum Row Sum Threshold for Dependency Weakening = 0.900000", "", " Coarsening Type = PMIS ", "",
    " No. of levels of aggressive coarsening: 1", "", " Interpolation on agg. levels= multipass interpolation",
    " measures are determined locally", "", "", " No global partition option chosen.", "",
    " Interpolation = extended+i interpolation", "", "", "BoomerAMG SOLVER PARAMETERS:", "",
    "  Maximum number of cycles:         1 ", "  Stopping Tolerance:               0.000000e+00 ",
    "  Cycle type (1 = V, 2 = W, etc.):  1", "", "",
)


def _grid(nranks: int) -> tuple[int, int, int]:
    """The most cube-like Px*Py*Pz = nranks (what a user passes to ``-P``)."""
    best = (nranks, 1, 1)
    for px in range(1, nranks + 1):
        if nranks % px:
            continue
        for py in range(1, nranks // px + 1):
            if (nranks // px) % py == 0:
                triple = tuple(sorted((px, py, nranks // px // py), reverse=True))
                if max(triple) - min(triple) < max(best) - min(best):
                    best = triple
    return best


def _timing_block(title: str, phase: str, wall_s: float) -> list[str]:
    return [_BLOCK_RULE, title, _BLOCK_RULE, f"{phase}:", f"  wall clock time = {wall_s:.6f} seconds",
            "  wall MFLOPS     = 0.000000", f"  cpu clock time  = {wall_s:.6f} seconds", "  cpu MFLOPS      = 0.000000",
            ""]


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int, n: int = 25,
          gmres_iterations: Sequence[int] = (16, 6, 5, 4, 3)) -> None:
    """AMG2013 ``-problem 2 -n n n n -printstats``: one ``Solver:`` block per time step, each with
    ``len(gmres_iterations)`` GMRES solves; ``read`` gives back one step per (start, end)."""
    spans = check_steps(steps)
    px, py, pz = _grid(nranks)
    t0, t_end = spans[0][0], spans[-1][1]
    out.at(t0, RUN_HEADER, "  solver ID    = 3", "", "  Laplacian_27pt:",
           f"    (Nx, Ny, Nz) = ({px * n}, {py * n}, {pz * n})", f"    (Px, Py, Pz) = ({px}, {py}, {pz})", "")
    out.at(t0, *_timing_block("Generate Matrix:", "Spatial Operator", 0.0),
           "  RHS vector has unit components", "  Initial guess is 0")
    out.at(t0, *_timing_block("IJ Vector Setup:", "RHS and Initial Guess", 0.0))
    residual = 1e-8
    for start, end in spans:
        out.at(start, "Solver: AMG-GMRES")
        body = ["HYPRE_GMRESGetPrecond got good precond", "", "",
                f" Num MPI tasks = {nranks}  Num OpenMP threads = 1", "", "", *_SETUP_PARAMETERS]
        for k, iterations in enumerate(gmres_iterations):
            residual = 5e-9 / 100.0 ** k
            body += ["", f"GMRES Iterations = {iterations}", f"Final GMRES Relative Residual Norm = {residual:e}", ""]
        out.spread(start, end, body)
    total_iterations = len(spans) * sum(gmres_iterations)
    out.at(t_end, *_timing_block("Problem 2: Cumulative AMG-GMRES Solve Time:", "GMRES Solve", t_end - t0), "",
           f"No. of Time Steps = {len(spans)}", f"Cum. No. of Iterations = {total_iterations}",
           f"Final Relative Residual Norm = {residual:e}", "", "",
           "nnz AP * (Iterations + time_steps) / Total Time: ", "",
           f"Figure of Merit (FOM_2): {1e8:e}", "", "")
