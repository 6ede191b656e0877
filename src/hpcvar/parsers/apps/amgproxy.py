"""hpcvar-amgproxy stdout: the project's own AMG time-stepping proxy on hypre
(reframe_tests/apps/amgproxy/src/amgproxy.c; its header comment shows the whole output).

Not one of Table I's codes: the real solver CI and sites without a source mirror build from the
package registries. Its output follows AMG's ``Running with these driver parameters:`` header,
then one line per time step::

    Time stepping: 6 steps
    Step 1: assembly 0.005919 s, setup 0.071686 s, solve 0.026061 s, step 0.103666 s, PCG iterations 7, relative residual 1.073761e-09, norm 6.397966e+02
    ...
    Time stepping done: 6 steps, 0.815165 s

``Time stepping:`` is printed right before the first step's timer starts and each ``Step i:``
line right after step i's timer stops, the next step's timer starting right after it: step i
runs from the previous step line (the first from ``Time stepping:``) to its own. ``reported_s``
is the program's own ``step`` time (assembly, setup, solve and the solution's norm, timed between
barriers: the slowest rank's). Extra step columns: ``assembly_s``, ``setup_s``, ``solve_s``,
``iterations`` (PCG), ``final_residual`` (relative), ``norm`` (the solution's 2-norm, which the
implicit heat-equation step must lower). ``checks``: the driver parameters, totals and the
Figure of Merit (``fom``).

An output without ``Time stepping done:`` is a run cut mid-way (:class:`TruncatedOutput`, with the
steps completed before the cut); a step line out of order or with a field that is not a number
is a :class:`ParseError` naming the line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from hpcvar.parsers.apps._core import (AppOutput, Line, StepClock, TimedText, check_steps, integer, number,
                                       steps_frame, truncated)
from hpcvar.parsers.errors import ParseError
from hpcvar.util.grids import factor

PROGRAM = "hpcvar-amgproxy"
#: The first line: program, version and the hypre it was built against.
BANNER = re.compile(rf"{PROGRAM} (\S+) \(hypre (\S+)\)\s*")
_GRID = re.compile(r"\s*\(Px, Py, Pz\) = \((\d+), (\d+), (\d+)\)\s*")
_BOX = re.compile(r"\s*\(nx, ny, nz\) = \((\d+), (\d+), (\d+)\)\s*")
_PARAMETER = re.compile(r"\s+(stencil|time steps|dt|tolerance|max iterations) = (\S+)\s*")
_LOOP = re.compile(r"Time stepping: (\S+) steps\s*")
_STEP = re.compile(r"Step (\S+): assembly (\S+) s, setup (\S+) s, solve (\S+) s, step (\S+) s, "
                   r"PCG iterations (\S+), relative residual (\S+), norm (\S+)\s*")
_DONE = re.compile(r"Time stepping done: (\S+) steps, (\S+) s\s*")
_FOM = re.compile(r"Figure of Merit \(FOM\): .* = (\S+)\s*")
_STEP_FIELDS = ("assembly_s", "setup_s", "solve_s", "reported_s", "iterations", "final_residual", "norm")


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    # Lines before the banner are not the program's (a preloaded mpiP's greeting, MPI warnings).
    first = next((i for i, line in enumerate(lines) if BANNER.fullmatch(line.text)), None)
    if first is None:
        raise ParseError(path, f"no banner '{PROGRAM} <version> (hypre <version>)': not hpcvar-amgproxy output", 1)
    banner = BANNER.fullmatch(lines[first].text)
    lines = lines[first:]
    checks: dict = {"hypre": banner[2]}
    nranks = None
    clock = StepClock(path)
    spans: list[tuple[Line, Line]] = []
    rows: list[dict] = []
    done: Line | None = None
    total_s = math.nan
    for line in lines[1:]:
        text = line.text
        if match := _GRID.fullmatch(text):
            nranks = math.prod(int(g) for g in match.groups())
        elif match := _BOX.fullmatch(text):
            checks["box"] = "x".join(match.groups())
        elif match := _PARAMETER.fullmatch(text):
            key = match[1].replace(" ", "_")
            value = match[2].removesuffix("-point")
            checks[key] = (integer(path, line, value, match[1]) if key in ("stencil", "time_steps", "max_iterations")
                           else number(path, line, value, match[1]))
        elif match := _LOOP.fullmatch(text):
            if clock.opened is not None or spans:
                raise ParseError(path, "a second 'Time stepping:' line in one run", line.no)
            integer(path, line, match[1], "the number of time steps")
            clock.open(line)
        elif match := _STEP.fullmatch(text):
            step = integer(path, line, match[1], "the step number")
            if step != len(spans) + 1:
                raise ParseError(path, f"expected step {len(spans) + 1}, found step {step}", line.no)
            spans.append(clock.mark(line, "a step line"))
            values = match.groups()[1:]
            rows.append({name: (integer(path, line, v, "PCG iterations") if name == "iterations"
                                else number(path, line, v, name)) for name, v in zip(_STEP_FIELDS, values)})
        elif match := _DONE.fullmatch(text):
            count = integer(path, line, match[1], "the number of time steps")
            if count != len(spans):
                raise ParseError(path, f"'Time stepping done' says {count} steps, the output has {len(spans)}",
                                 line.no)
            total_s = number(path, line, match[2], "the total time")
            clock.close()
            done = line
        elif match := _FOM.fullmatch(text):
            checks["fom"] = number(path, line, match[1], "the figure of merit")
    reported = [row["reported_s"] for row in rows]
    if done is None:
        raise truncated(path, f"truncated: no 'Time stepping done' line after {len(spans)} steps",
                        lines[-1].no, spans, reported, timestamped)
    expected = checks.get("time_steps")
    if expected is not None and expected != len(spans):
        raise ParseError(path, f"the driver parameters ask for {expected} time steps, the output has {len(spans)}",
                         done.no)
    extra = {name: [row[name] for row in rows] for name in _STEP_FIELDS if name != "reported_s"}
    steps = steps_frame(spans, reported, timestamped, extra)
    checks |= {"iterations": int(sum(extra["iterations"])),
               "final_residual": max(extra["final_residual"]) if rows else math.nan,
               "assembly_s": float(sum(extra["assembly_s"])), "setup_s": float(sum(extra["setup_s"])),
               "solve_s": float(sum(extra["solve_s"]))}
    return AppOutput(app="amgproxy", version=banner[1], nranks=nranks, timestamped=timestamped, steps=steps,
                     total_s=total_s, checks=checks)


# --- writer: what the program prints (reframe_tests/apps/amgproxy/src/amgproxy.c) ----------------

#: Share of a step in assembly, setup and solve (toy runs on 2 ranks of this machine: 27-point
#: stencil, 32^3 per rank; the rest of a step is the norm and freeing the solver).
PHASES = (0.08, 0.64, 0.27)


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int, n: int = 32, stencil: int = 27,
          reported_s: Sequence[float] | None = None, iterations: Sequence[int] | None = None,
          version: str = "1.0", hypre: str = "2.26.0", tolerance: float = 1e-8) -> None:
    """``hpcvar-amgproxy -n n n n -stencil S -steps len(steps)`` on ``nranks`` ranks; step i's
    line at the end of ``steps[i]``. ``reported_s``: the program's own step times (default: the
    spans); ``iterations``: PCG iterations per step (default 7, as the toy runs)."""
    spans = check_steps(steps)
    reported = list(reported_s) if reported_s is not None else [b - a for a, b in spans]
    its = list(iterations) if iterations is not None else [7] * len(spans)
    if len(reported) != len(spans) or len(its) != len(spans):
        raise ValueError("reported_s and iterations need one value per step")
    px, py, pz = factor(nranks, 3)
    unknowns = nranks * n ** 3
    t0 = spans[0][0]
    out.at(t0, f"{PROGRAM} {version} (hypre {hypre})", "Running with these driver parameters:",
           f"  (Px, Py, Pz) = ({px}, {py}, {pz})", f"  (nx, ny, nz) = ({n}, {n}, {n})", f"  stencil = {stencil}-point",
           f"  time steps = {len(spans)}", "  dt = 10", f"  tolerance = {tolerance:g}", "  max iterations = 200",
           f"Global grid: {px * n} x {py * n} x {pz * n} = {unknowns} unknowns, {nranks} ranks",
           f"Time stepping: {len(spans)} steps")
    norm = 100.0 * math.sqrt(unknowns / 8.0)
    totals = [0.0, 0.0, 0.0]
    for k, ((_, end), step_s, iters) in enumerate(zip(spans, reported, its), 1):
        phases = [share * step_s for share in PHASES]
        totals = [t + p for t, p in zip(totals, phases)]
        norm *= 0.2
        residual = tolerance * (0.1 + 0.05 * (k % 5))
        out.at(end, f"Step {k}: assembly {phases[0]:.6f} s, setup {phases[1]:.6f} s, solve {phases[2]:.6f} s, "
                    f"step {step_s:.6f} s, PCG iterations {iters}, relative residual {residual:.6e}, norm {norm:.6e}")
    t_end = spans[-1][1]
    out.at(t_end, f"Time stepping done: {len(spans)} steps, {sum(reported):.6f} s",
           f"  assembly {totals[0]:.6f} s, setup {totals[1]:.6f} s, solve {totals[2]:.6f} s, "
           f"PCG iterations {sum(its)}",
           f"Figure of Merit (FOM): unknowns x steps / (setup + solve) = "
           f"{unknowns * len(spans) / max(totals[1] + totals[2], 1e-6):.6e}")  # a real run takes time

