"""miniVite stdout (github.com/ECP-ExaGraph/miniVite; also with ``-DDEBUG_PRINTF`` rank-prefixed lines).

miniVite prints ``Time to generate distributed graph of N vertices (in s): t`` (or ``Time to read
input file and create distributed graph``) when the graph is ready, runs Louvain, then prints::

    Average total time (in s), #Processes: <s>, <ranks>
    Modularity, #Iterations: <modularity>, <louvain iterations>
    MODS (final modularity * average time): <x>

The project runs miniVite with an outer repetition loop: every repetition prints that block.
Step i runs from the previous ``Average total time`` line (step 1, or after a regenerated graph:
the graph-ready line) to its own ``Average total time`` line; ``reported_s`` is that line's
average total time. Extra step columns: ``modularity``, ``louvain_iterations``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, StepClock, TimedText, check_steps, integer, number, steps_frame
from hpcvar.parsers.errors import ParseError

_GRAPH_READY = re.compile(r"Time to (?:generate distributed graph of \d+ vertices|read input file and create "
                          r"distributed graph) \(in s\): \S+\s*")
_AVERAGE = re.compile(r"Average total time \(in s\), #Processes: (\S+), (\S+)\s*")
_MODULARITY = re.compile(r"Modularity, #Iterations: (\S+), (\S+)\s*")
_RULE = "-" * 55


class _Reader:
    def __init__(self, path: str | Path):
        self.path = path
        self.clock = StepClock(path)
        self.spans: list[tuple[Line, Line]] = []
        self.reported: list[float] = []
        self.modularity: list[float] = []
        self.iterations: list[int] = []
        self.nranks: int | None = None

    def feed(self, line: Line) -> None:
        if _GRAPH_READY.fullmatch(line.text):
            self.clock.open(line)
        elif match := _AVERAGE.fullmatch(line.text):
            self._expect_modularity(line)
            self.spans.append(self.clock.mark(line, "'Average total time' line"))
            self.reported.append(number(self.path, line, match[1], "average total time"))
            self.nranks = integer(self.path, line, match[2], "#Processes")
        elif match := _MODULARITY.fullmatch(line.text):
            if len(self.modularity) != len(self.spans) - 1:
                raise ParseError(self.path, "'Modularity, #Iterations' line without an 'Average total time' "
                                            "line before it", line.no)
            self.modularity.append(number(self.path, line, match[1], "modularity"))
            self.iterations.append(integer(self.path, line, match[2], "#Iterations"))

    def _expect_modularity(self, at: Line) -> None:
        """Every 'Average total time' line is followed by its modularity line before the next."""
        if len(self.modularity) != len(self.spans):
            raise ParseError(self.path, f"the result block at line {self.spans[-1][1].no} has no "
                                        "'Modularity, #Iterations' line", at.no)

    def finish(self, last: Line) -> None:
        if not self.spans:
            raise ParseError(self.path, "truncated: no 'Average total time (in s), #Processes' result line", last.no)
        self._expect_modularity(last)


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _Reader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    steps = steps_frame(reader.spans, reader.reported, timestamped,
                        {"modularity": reader.modularity, "louvain_iterations": reader.iterations})
    checks = {"repetitions": len(reader.spans), "modularity": reader.modularity[-1],
              "louvain_iterations": reader.iterations[-1]}
    return AppOutput(app="minivite", version=None, nranks=reader.nranks, timestamped=timestamped, steps=steps,
                     total_s=sum(reader.reported), checks=checks)


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int,
          reported_s: Sequence[float] | None = None, vertices: int = 100000, modularity: float = 0.739367,
          louvain_iterations: int = 19) -> None:
    """``miniVite -n vertices`` with the project's repetition loop: one result block per step at
    the step's end; ``reported_s`` (default: the step durations) is the printed average time."""
    spans = check_steps(steps)
    averages = [end - start for start, end in spans] if reported_s is None else [float(r) for r in reported_s]
    if len(averages) != len(spans):
        raise ValueError(f"reported_s has {len(averages)} values for {len(spans)} steps")
    t0 = spans[0][0]
    out.at(t0, f"Average time to generate {vertices // nranks} random numbers using LCG (in s): 0.000701777", "",
           _RULE, "Graph edge distribution characteristics", _RULE, f"Number of vertices: {vertices}",
           f"Number of edges: {vertices * 9}", _RULE,
           f"Time to generate distributed graph of {vertices} vertices (in s): 8.65526")
    for (_, end), average in zip(spans, averages):
        out.at(end, _RULE, "64-bit datatype", _RULE, f"Average total time (in s), #Processes: {average:.6g}, {nranks}",
               f"Modularity, #Iterations: {modularity:.6g}, {louvain_iterations}",
               f"MODS (final modularity * average time): {modularity * average:.6g}", _RULE)
