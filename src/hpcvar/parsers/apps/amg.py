"""AMG stdout: ``amg2023`` (github.com/LLNL/AMG2023) and ``amg2013`` (AMG 1.1, the AMG2013 line as
released in github.com/LLNL/AMG, "CORAL-2 AMG"; its driver prints ``solver ID =`` where AMG2023
prints ``Problem ID =``). A file may hold several runs, each starting ``Running with these driver
parameters:`` (the LANL sample has problem 1 then problem 2).

hypre prints a timing block (``=====`` / ``<title>:`` / ``=====`` / ``<phase>:`` / ``wall clock
time = ...``) when a phase *ends*: the title is printed right after the timer stops, the wall
clock time (the maximum over ranks, an MPI_Allreduce) after it, so a title line's timestamp is the
end of that phase. What a step is:

* time steps, when the output shows them: AMG 1.1 ``-problem 2 -printstats`` prints
  ``Solver: AMG-GMRES`` at the start of each of its ``No. of Time Steps`` (6, hard-coded in
  test/amg.c); step i runs from its ``Solver:`` line to the next one (the last to the
  ``Cumulative ... Solve Time:`` title). ``iterations`` sums the step's ``GMRES Iterations`` (one
  GMRES solve to tolerance and four fixed-iteration ones); ``final_residual`` is the step's last.
  AMG 1.1 prints no per-step time (``reported_s`` is NaN): its one timer spans the whole loop
  (started after a barrier just before the first step's ``Solver:`` line, stopped after a
  barrier just after the last step), so the steps' durations add up to the cumulative block's
  wall clock time (``total_s``).
* otherwise one step per solve block (``Problem N: AMG-PCG Solve Time:``): from the title of the
  timing block printed before it (the setup block, or ``IJ Vector Setup`` when no setup block
  is printed) to the solve title; ``reported_s`` is the solve's ``wall clock time``. AMG2023
  (``-problem 1``: AMG-GMRES, ``-problem 2``: AMG-PCG) times setup and solve separately, each
  between two barriers; between the setup title and the solve's timer start it only prints.
  Its ``Solver: AMG-PCG`` line (``-printstats``) is not a time step.

Extra step columns: ``problem``, ``iterations``, ``final_residual``. ``checks`` carries the printed
``Figure of Merit`` (``fom``); a file holding several problems gets ``problems`` and per-problem
``problem_N_solve_s``, ``_iterations``, ``_setup_s`` and ``_fom`` instead.

Truncated output (a run that died) raises :class:`ParseError` naming the file and the last line:
a run without its final solve block, or whose solve block lacks its wall clock time, iterations
or residual, has no trustworthy steps (AMG 1.1's time steps are only closed by that block).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, TimedText, check_steps, integer, number, steps_frame, truncated
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
        elif _SOLVER.fullmatch(text) and run.app == "amg2013":
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
            raise self._truncated(run, f"truncated: the run started at line {run.header.no} has no "
                                       "'Problem N: ... Solve Time:' block", at)
        solve = run.solves[-1]
        missing = [name for name, value in (("wall clock time", solve.wall_s), ("Iterations", solve.iterations),
                                            ("Final Relative Residual Norm", solve.residual)) if value is None]
        if missing:
            raise self._truncated(run, f"truncated: the solve block at line {solve.title.no} has no "
                                       f"{', '.join(missing)}", at)
        if run.time_steps and solve.time_steps is not None and len(run.time_steps) != solve.time_steps:
            raise ParseError(self.path, f"expected {solve.time_steps} 'Solver:' time-step lines "
                                        f"(No. of Time Steps), found {len(run.time_steps)}", solve.title.no)


    def _truncated(self, run: _Run, message: str, at: Line):
        """AMG 1.1 cut mid-run: its time steps up to the last that the next one's start closed
        (AMG2023's single solve has none before its block is complete)."""
        starts = [step.opened for step in run.time_steps] if run.app == "amg2013" else []
        spans = list(zip(starts, starts[1:]))
        return truncated(self.path, message, at.no, spans, [math.nan] * len(spans), not math.isnan(at.ts))


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


# --- writer: AMG 1.1 (github.com/LLNL/AMG, tag 1.1) ``amg -problem 2 -printstats`` -------------
# Line for line what test/amg.c and hypre's par_stats.c (hypre_BoomerAMGSetupStats,
# hypre_BoomerAMGWriteSolverParams) print, checked against the real capture in
# tests/captured/amg2013/. The AMG hierarchy's figures (levels, rows, nonzeros, weights) come from
# a simple model of PMIS coarsening with one level of aggressive coarsening on the 27-point
# operator, formatted with hypre's own printf formats.

_BLOCK_RULE = "=" * 45
_SETUP_PARAMETERS = (
    " Strength Threshold = 0.250000", " Interpolation Truncation Factor = 0.000000",
    " Maximum Row Sum Threshold for Dependency Weakening = 0.900000", "", " Coarsening Type = PMIS ", "",
    " No. of levels of aggressive coarsening: 1", "", " Interpolation on agg. levels= multipass interpolation",
    " measures are determined locally", "", "", " No global partition option chosen.", "",
    " Interpolation = extended+i interpolation", "",
)
_OPERATOR_HEADER = (
    "Operator Matrix Information:", "",
    "            nonzero         entries per row        row sums",
    "lev   rows  entries  sparse  min  max   avg       min         max",
    "=" * 67,
)
_INTERPOLATION_HEADER = (
    "Interpolation Matrix Information:",
    "                 entries/row    min     max         row sums",
    "lev  rows cols    min max     weight   weight     min       max ",
    "=" * 65,
)


def _solver_parameters(coarse_relax: int) -> list[str]:
    return ["BoomerAMG SOLVER PARAMETERS:", "",
            "  Maximum number of cycles:         1 ", "  Stopping Tolerance:               0.000000e+00 ",
            "  Cycle type (1 = V, 2 = W, etc.):  1", "",
            "  Relaxation Parameters:",
            "   Visiting Grid:                     down   up  coarse",
            "            Number of sweeps:            2    2     1 ",
            f"   Type 0=Jac, 3=hGS, 6=hSGS, 9=GE:     18   18   {coarse_relax:3d} ",
            "   Point types, partial sweeps (1=C, -1=F):",
            "                  Pre-CG relaxation (down):   0   0",
            "                   Post-CG relaxation (up):   0   0",
            "                             Coarsest grid:   0", ""]


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


def _hierarchy(nx: int, ny: int, nz: int) -> list[tuple[int, int]]:
    """(rows, nonzeros) per AMG level: the 27-point operator on the global grid, then aggressive
    coarsening (about 68x fewer rows), then about 4.7x per level until at most 20 rows (the
    ratios and the stopping point of the real 2-rank runs at -n 16 and -n 24)."""
    rows = nx * ny * nz
    levels = [(rows, (3 * nx - 2) * (3 * ny - 2) * (3 * nz - 2))]
    ratio, per_row = 68.0, 20.4
    while rows > 20:
        rows = max(1, math.ceil(rows / ratio))
        levels.append((rows, min(rows * rows, round(rows * per_row))))
        ratio, per_row = 4.7, 42.0
    return levels


def _setup_stats(levels: list[tuple[int, int]], step: int) -> list[str]:
    """The operator and interpolation tables and complexities of one BoomerAMG setup."""
    out = list(_OPERATOR_HEADER)
    for level, (rows, nnz) in enumerate(levels):
        avg = nnz / rows
        if level == 0:  # the 27-point stencil; the driver lowers the diagonal 0.1 per time step
            low, high, rmin, rmax = 8, 27, 0.5 - 0.1 * step, 19.5 - 0.1 * step
        else:
            low, high = max(1, min(rows, round(0.3 * avg))), min(rows, round(1.6 * avg))
            rmin, rmax = 20.0 * level * (1 + 0.02 * step), 250.0 * level * (1 + 0.01 * step)
        out.append(f"{level:2d} {rows:7d} {float(nnz):8.0f}  {nnz / rows / rows:0.3f}  {low:4d} {high:4d}"
                   f"  {avg:4.1f}  {rmin:10.3e}  {rmax:10.3e}")
    out += ["", "", *_INTERPOLATION_HEADER]
    interp_nnz = 0
    for level, ((rows, _), (coarse, _)) in enumerate(zip(levels, levels[1:])):
        interp_nnz += round(2.2 * rows)
        out.append(f"{level:2d} {rows:5d} x {coarse:<5d} {1:3d} {10 if level == 0 else 8:3d}"
                   f"  {2.8e-3 * (1 + 0.01 * step) / (level + 1):10.3e} {0.98 / (level + 1):9.3e}"
                   f" {0.2 / (level + 1):9.3e} {1.0:9.3e}")
    rows0, nnz0 = levels[0]
    total_nnz = sum(nnz for _, nnz in levels)
    out += ["", "", f"     Complexity:    grid = {sum(rows for rows, _ in levels) / rows0:f}",
            f"                operator = {total_nnz / nnz0:f}",
            f"                memory = {(total_nnz + interp_nnz) / nnz0:f}", "", "", "", ""]
    return out


def _timing_block(title: str, phase: str, wall_s: float, cpu_s: float) -> list[str]:
    return [_BLOCK_RULE, title, _BLOCK_RULE, f"{phase}:", f"  wall clock time = {wall_s:.6f} seconds",
            "  wall MFLOPS     = 0.000000", f"  cpu clock time  = {cpu_s:.6f} seconds", "  cpu MFLOPS      = 0.000000",
            ""]


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int, n: int = 32,
          gmres_iterations: Sequence[int] = (16, 6, 5, 4, 3)) -> None:
    """AMG 1.1 ``-P Px Py Pz -n n n n -problem 2 -printstats``: one ``Solver:`` block per time step
    (BoomerAMG setup statistics, then ``len(gmres_iterations)`` GMRES solves: the driver's first
    solve to tolerance and its four fixed-iteration solves); ``read`` gives back one step per
    (start, end). AMG 1.1 prints no per-step time: the cumulative block's wall clock time is the
    sum of the steps."""
    spans = check_steps(steps)
    px, py, pz = _grid(nranks)
    levels = _hierarchy(px * n, py * n, pz * n)
    t0, t_end = spans[0][0], spans[-1][1]
    out.at(t0, RUN_HEADER, "  solver ID    = 3", "", "  Laplacian_27pt:",
           f"    (Nx, Ny, Nz) = ({px * n}, {py * n}, {pz * n})", f"    (Px, Py, Pz) = ({px}, {py}, {pz})", "")
    out.at(t0, *_timing_block("Generate Matrix:", "Spatial Operator", 0.0, 0.0),
           "  RHS vector has unit components", "  Initial guess is 0")
    out.at(t0, *_timing_block("IJ Vector Setup:", "RHS and Initial Guess", 0.0, 0.0))
    residual = 1e-8
    for step, (start, end) in enumerate(spans):
        out.at(start, "Solver: AMG-GMRES")
        body = ["HYPRE_GMRESGetPrecond got good precond", "", "",
                f" Num MPI tasks = {nranks}  Num OpenMP threads = 1", "", "", "BoomerAMG SETUP PARAMETERS:", "",
                " Max levels = 25", f" Num levels = {len(levels)}", "", *_SETUP_PARAMETERS,
                *_setup_stats(levels, step), *_solver_parameters(9 if levels[-1][0] <= 9 else 18)]
        for k, iterations in enumerate(gmres_iterations):
            residual = 5e-9 / 100.0 ** k * (1 + 0.3 * step)
            body += ["", f"GMRES Iterations = {iterations}", f"Final GMRES Relative Residual Norm = {residual:e}", ""]
        out.spread(start, end, body)
    total_iterations = len(spans) * sum(gmres_iterations)
    wall = t_end - t0
    out.at(t_end, *_timing_block("Problem 2: Cumulative AMG-GMRES Solve Time:", "GMRES Solve", wall, wall), "",
           f"No. of Time Steps = {len(spans)}", f"Cum. No. of Iterations = {total_iterations}",
           f"Final Relative Residual Norm = {residual:e}", "", "",
           "nnz AP * (Iterations + time_steps) / Total Time: ", "",
           f"Figure of Merit (FOM_2): {1e8:e}", "", "")
