"""miniVite stdout (github.com/ECP-ExaGraph/miniVite), releases 1.0 to 1.2 and later.

Every launch of miniVite runs one Louvain phase and prints, on rank 0, when its graph is ready
(after generating it, ``-n N``, or reading it, ``-f file``)::

    Time to generate distributed graph of <N> vertices (in s): <graph time>
    Time to read input file and create distributed graph (in s): <graph time>

then, after the phase, its result. Releases 1.0 and 1.1 (Table I's miniVite 1.0, ``format
version`` ``1.0``) print one line and a rule of asterisks::

    Modularity: <modularity>, Iterations: <louvain iterations>, Time (in s): <phase time>

Release 1.2 and later (format version ``1.2``) print a block::

    Average total time (in s), #Processes: <phase time>, <ranks>
    Modularity, #Iterations: <modularity>, <louvain iterations>
    MODS (final modularity * average time): <x>

What the times cover (main.cpp): the graph time is the mean over ranks of the time from the
barrier after ``MPI_Init`` to the barrier after the graph is built (a generated graph's
``Average time to generate <2N/ranks> random numbers using LCG`` line comes within it). The
phase time is the Louvain phase ``distLouvainMethod`` between two barriers: rank 0's wall time
(1.0) or its mean over ranks (1.2). Neither covers process start-up, ``MPI_Init`` or
``MPI_Finalize``.

The project repeats the launch (the paper's outer loop, ``-i 6``): one result per repetition,
each repetition one step. Step i runs from its graph-ready line to its result line (the
Louvain phase, what the phase time measures); ``reported_s`` is the phase time. Extra step
columns: ``modularity``, ``louvain_iterations``. In format 1.0 every result needs its own
graph-ready line before it (each launch prints one); format 1.2 also accepts results that
follow each other (a step then starts at the previous result). ``nranks``: 1.2 prints it; 1.0
prints it only implicitly, for generated graphs (``2N`` over the random-number count), else
None. A file that stops inside a repetition keeps the completed steps; one without any
result is a ParseError naming its last line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

from hpcvar.parsers.apps._core import AppOutput, Line, StepClock, TimedText, check_steps, integer, number, steps_frame, truncated
from hpcvar.parsers.errors import ParseError

_GENERATED = re.compile(r"Time to generate distributed graph of (\S+) vertices \(in s\): \S+\s*")
_READ = re.compile(r"Time to read input file and create distributed graph \(in s\): \S+\s*")
_LCG = re.compile(r"Average time to generate (\S+) random numbers using LCG \(in s\): \S+\s*")
# Format 1.0 (releases 1.0, 1.1): one result line.
_RESULT_10 = re.compile(r"Modularity: (\S+), Iterations: (\S+), Time \(in s\): (\S+)\s*")
# Format 1.2 (release 1.2 on): a result block.
_AVERAGE = re.compile(r"Average total time \(in s\), #Processes: (\S+), (\S+)\s*")
_MODULARITY = re.compile(r"Modularity, #Iterations: (\S+), (\S+)\s*")
_RULE = "-" * 55
_STARS = "*" * 70


class _Reader:
    def __init__(self, path: str | Path):
        self.path = path
        self.clock = StepClock(path)
        self.spans: list[tuple[Line, Line]] = []
        self.reported: list[float] = []
        self.modularity: list[float] = []
        self.iterations: list[int] = []
        self.nranks: int | None = None
        self.version: str | None = None
        self._random_numbers: int | None = None  # format 1.0: 2 * vertices / ranks

    def feed(self, line: Line) -> None:
        text = line.text
        if match := _LCG.fullmatch(text):
            self._random_numbers = integer(self.path, line, match[1], "random-number count")
        elif match := _GENERATED.fullmatch(text):
            self.clock.open(line)
            self._ranks_from_graph(line, integer(self.path, line, match[1], "vertex count"))
        elif _READ.fullmatch(text):
            self.clock.open(line)
        elif match := _RESULT_10.fullmatch(text):
            self._format(line, "1.0")
            self.spans.append(self.clock.mark(line, "'Modularity: ..., Iterations: ..., Time (in s)' line"))
            self.clock.close()  # the next result comes from the next launch, after its graph line
            self.modularity.append(number(self.path, line, match[1], "modularity"))
            self.iterations.append(integer(self.path, line, match[2], "Iterations"))
            self.reported.append(number(self.path, line, match[3], "Louvain phase time"))
        elif match := _AVERAGE.fullmatch(text):
            self._format(line, "1.2")
            self._expect_modularity(line)
            self.spans.append(self.clock.mark(line, "'Average total time' line"))
            self.clock.close()  # as for 1.0: the next result comes after the next launch's graph line
            self.reported.append(number(self.path, line, match[1], "average total time"))
            self._set_ranks(line, integer(self.path, line, match[2], "#Processes"))
        elif match := _MODULARITY.fullmatch(text):
            if self.version != "1.2" or len(self.modularity) != len(self.spans) - 1:
                raise ParseError(self.path, "'Modularity, #Iterations' line without an 'Average total time' "
                                            "line before it", line.no)
            self.modularity.append(number(self.path, line, match[1], "modularity"))
            self.iterations.append(integer(self.path, line, match[2], "#Iterations"))

    def _format(self, line: Line, version: str) -> None:
        if self.version not in (None, version):
            raise ParseError(self.path, f"a miniVite {version}-format result after {self.version}-format "
                                        "results: one file holds the output of one miniVite build", line.no)
        self.version = version

    def _ranks_from_graph(self, line: Line, vertices: int) -> None:
        # miniVite 1.0's generator splits N vertices evenly over the ranks and prints the count
        # of random numbers it drew per rank: 2 * N / ranks.
        count, self._random_numbers = self._random_numbers, None
        if count and (2 * vertices) % count == 0:
            self._set_ranks(line, 2 * vertices // count)

    def _set_ranks(self, line: Line, nranks: int) -> None:
        if self.nranks is not None and nranks != self.nranks:
            raise ParseError(self.path, f"this repetition ran on {nranks} ranks, the ones before it on "
                                        f"{self.nranks}: the repetitions of a run must be the same launch", line.no)
        self.nranks = nranks

    def _expect_modularity(self, at: Line) -> None:
        """Every 'Average total time' line is followed by its modularity line before the next."""
        if len(self.modularity) != len(self.spans):
            raise ParseError(self.path, f"the result block at line {self.spans[-1][1].no} has no "
                                        "'Modularity, #Iterations' line", at.no)

    def finish(self, last: Line) -> None:
        if not self.spans:
            raise ParseError(self.path, "truncated: no miniVite result line ('Modularity: ..., Iterations: ..., "
                                        "Time (in s): ...' or 'Average total time (in s), #Processes: ...')",
                             last.no)
        if self.version == "1.2":
            self._expect_modularity(last)
        if self.clock.opened is not None:
            raise truncated(self.path, f"truncated: the repetition whose graph was ready at line "
                                       f"{self.clock.opened.no} printed no result", last.no,
                            self.spans, self.reported, not math.isnan(last.ts))


def parse(path: str | Path, lines: Sequence[Line], timestamped: bool) -> AppOutput:
    reader = _Reader(path)
    for line in lines:
        reader.feed(line)
    reader.finish(lines[-1])
    steps = steps_frame(reader.spans, reader.reported, timestamped,
                        {"modularity": reader.modularity, "louvain_iterations": reader.iterations})
    checks = {"repetitions": len(reader.spans), "modularity": reader.modularity[-1],
              "louvain_iterations": reader.iterations[-1]}
    return AppOutput(app="minivite", version=reader.version, nranks=reader.nranks, timestamped=timestamped,
                     steps=steps, total_s=sum(reader.reported), checks=checks)


def _check_spans(steps: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Finite, ordered, non-overlapping steps: :func:`check_steps` without its contiguity (every
    miniVite repetition prints its own start line, so a gap before it has a line to carry it)."""
    spans = [check_steps([step])[0] for step in steps] if steps else check_steps(steps)
    for i in range(1, len(spans)):
        if round(spans[i][0], 6) < round(spans[i - 1][1], 6):
            raise ValueError(f"step {i + 1} starts at {spans[i][0]:.6f}, before step {i} ends at "
                             f"{spans[i - 1][1]:.6f}")
    return spans


def write(out: TimedText, steps: Sequence[tuple[float, float]], *, nranks: int,
          reported_s: Sequence[float] | None = None, vertices: int | None = None, graph_s: float = 1.27803,
          modularity: float = 0.741677, louvain_iterations: int = 9) -> None:
    """miniVite 1.0 launched once per step (the project's repetition loop), as it prints.

    Step i is repetition i's Louvain phase: its launch's lines up to the graph-ready line at the
    step's start, its result line at the step's end. Steps may leave gaps (the time between one
    launch's result and the next launch's graph, as in a real run) or be contiguous (the
    simulator models no time between repetitions). ``reported_s`` (default: the step
    durations) is the printed phase time, ``graph_s`` the printed graph time (not modelled).
    ``vertices=None`` reads the graph from a file (Table I's ``-f nlpkkt240.bin``: the output
    names no rank count); ``vertices=N`` generates a random geometric graph (``-n N``: miniVite
    requires a power-of-two rank count dividing N, and its output then implies the rank count).
    Defaults: the first repetition of the real toy capture (tests/captured/minivite/).
    """
    spans = _check_spans(steps)
    phases = [end - start for start, end in spans] if reported_s is None else [float(r) for r in reported_s]
    if len(phases) != len(spans):
        raise ValueError(f"reported_s has {len(phases)} values for {len(spans)} steps")
    if vertices is None:
        prologue = [f"Time to read input file and create distributed graph (in s): {graph_s:.6g}"]
    else:
        if nranks < 1 or nranks & (nranks - 1) or vertices < 2 or vertices % nranks:
            raise ValueError(f"miniVite generates graphs on a power-of-two rank count dividing the vertex count; "
                             f"got {nranks} ranks for {vertices} vertices")
        # GenerateRGG: connection radius d = (sqrt(ln n / (pi n)) + sqrt(2.0736 / n)) / 2; about
        # n * pi * d^2 neighbours per vertex.
        d = (math.sqrt(math.log(vertices) / (math.pi * vertices)) + math.sqrt(2.0736 / vertices)) / 2
        edges = round(vertices * vertices * math.pi * d * d)
        prologue = [f"Average time to generate {2 * vertices // nranks} random numbers using LCG (in s): 0.000334941",
                    _STARS, f"Generated Random Geometric Graph with d: {d:.6g}", f"Number of vertices: {vertices}",
                    f"Number of edges: {edges}", f"Average degree: {edges // vertices}",
                    f"Time to generate distributed graph of {vertices} vertices (in s): {graph_s:.6g}"]
    for (start, end), phase in zip(spans, phases):
        out.at(start, *prologue)
        out.at(end, f"Modularity: {modularity:.6g}, Iterations: {louvain_iterations}, Time (in s): {phase:.6g}",
               _STARS)
