"""Slurm ``sacct`` output: one row per accounting line (job allocations and job steps).

Owns every text layout ``sacct`` prints:

* ``-P`` / ``--parsable2``: fields joined by ``|``, no trailing delimiter (``format_version``
  ``"parsable2"``);
* ``-p`` / ``--parsable``: the same with a trailing ``|`` on every line (``"parsable"``);
* ``--delimiter=X`` with either of the above: the delimiter is detected from the header line
  (``"delimiter=\\t"``, or ``"parsable delimiter=\\t"`` with a trailing delimiter);
* the default table: header, a line of dashes giving the column widths, fixed-width values
  (``"fixed-width"``).

The header line names the fields, in any order and any subset (``--format``); ``JobID`` is
required. Known fields are normalised (see :func:`read`); every other field is kept as a string
under its sacct name.

Quirks handled, because real dumps have them:

* **Delimiter inside a value.** ``sacct`` does not escape, so a job named ``a|b`` adds a field.
  The extra fields are given to a free-text column: ``JobName`` first, then ``Constraints``
  (``cpu-a|cpu-b`` is valid Slurm syntax), ``SubmitLine``, comments and ``WorkDir``. When several
  of these columns are present, the split chosen is the first (in that preference) for which every
  typed field (times, durations, counts, exit codes, job ids) still parses. No free-text column, or
  no consistent split: ``ParseError`` naming the line.
* **Multi-line values** (a ``SubmitLine`` holding a script, ``--format=ALL`` dumps). A physical
  line with fewer fields than the header, following a record that is itself still short,
  continues that record (joined with ``\\n``). A short record that is never completed, for example
  a truncated last line or a fragment, is a ``ParseError`` at its first line.
* **Fixed-width truncation.** Values longer than their column end in ``+`` (``16261988.ba+``).
  They are kept as printed and the row's ``truncated`` column lists the sacct field names that
  were cut; truncated times, durations, counts and host lists read as missing instead of failing.
  A truncated ``JobID`` that extends the preceding allocation's id (``16342389_10+`` after
  ``16342389_10``) is taken as a step of that allocation, because sacct prints steps right after
  their allocation; its ``step`` keeps the visible part plus ``+`` (``ba+``, or just ``+``).

The writer :func:`write` produces ``sacct -P`` text the way sacct prints it, and :func:`read`
returns exactly what was written.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import hostlist
import numpy as np
import pandas as pd

from hpcvar.parsers.errors import ParseError

KIND = "sacct"

# Every field name ``sacct --helpformat`` lists (Slurm 20-24); used to recognise a header.
SACCT_FIELDS = frozenset("""
Account AdminComment AllocCPUS AllocGRES AllocNodes AllocTRES AssocID AveCPU AveCPUFreq
AveDiskRead AveDiskWrite AvePages AveRSS AveVMSize BlockID Cluster Comment Constraints Container
ConsumedEnergy ConsumedEnergyRaw CPUTime CPUTimeRAW DBIndex DerivedExitCode Elapsed ElapsedRaw
Eligible End ExitCode Extra FailedNode Flags GID Group JobID JobIDRaw JobName Layout Licenses
MaxDiskRead MaxDiskReadNode MaxDiskReadTask MaxDiskWrite MaxDiskWriteNode MaxDiskWriteTask MaxPages
MaxPagesNode MaxPagesTask MaxRSS MaxRSSNode MaxRSSTask MaxVMSize MaxVMSizeNode MaxVMSizeTask
McsLabel MinCPU MinCPUNode MinCPUTask NCPUS NNodes NodeList NTasks Partition Planned PlannedCPU
PlannedCPURAW Priority QOS QOSRAW QOSREQ Reason ReqCPUFreq ReqCPUFreqGov ReqCPUFreqMax
ReqCPUFreqMin ReqCPUS ReqGRES ReqMem ReqNodes ReqTRES Reservation ReservationId Reserved ResvCPU
ResvCPURAW Start State StdErr StdIn StdOut Submit SubmitLine Suspended SystemComment SystemCPU
Timelimit TimelimitRaw TotalCPU TRESUsageInAve TRESUsageInMax TRESUsageInMaxNode
TRESUsageInMaxTask TRESUsageInMin TRESUsageInMinNode TRESUsageInMinTask TRESUsageInTot
TRESUsageOutAve TRESUsageOutMax TRESUsageOutMaxNode TRESUsageOutMaxTask TRESUsageOutMin
TRESUsageOutMinNode TRESUsageOutMinTask TRESUsageOutTot UID User UserCPU WCKey WCKeyID WorkDir
""".split())

# Columns whose text may contain the delimiter, in the order extra fields are offered to them.
FREE_TEXT_FIELDS = ("JobName", "Constraints", "SubmitLine", "Comment", "AdminComment",
                    "SystemComment", "WorkDir")

# sacct field -> normalised column, for the fields renamed as they are (converters below).
_RENAMED = {"JobIDRaw": "job_id_raw", "JobName": "job_name", "User": "user", "UID": "uid",
            "Account": "account", "Partition": "partition", "ExitCode": "exit_code",
            "Submit": "submit", "Start": "start", "End": "end", "Elapsed": "elapsed_s",
            "Timelimit": "timelimit_s", "NNodes": "node_count", "NCPUS": "ncpus"}
_TIMESTAMP_FIELDS = ("Submit", "Start", "End")
_DURATION_FIELDS = ("Elapsed", "Timelimit")
_INT_FIELDS = ("UID", "NNodes", "NCPUS")
# Columns derived from others: never written as sacct fields of their own.
_DERIVED = {"step", "line", "array_job_id", "array_task_id", "cancelled_by", "node_list_raw",
            "truncated"}

_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S"
_MISSING_TIMES = ("", "Unknown", "None")
# Sentinels sacct prints instead of a duration (steps have no time limit, UNLIMITED partitions).
_MISSING_DURATIONS = ("", "Unknown", "None", "INVALID", "UNLIMITED", "Partition_Limit")
_NO_NODES = ("", "None assigned", "None")

_DURATION_RE = re.compile(
    r"^(?:(?:(?P<d>\d+)-)?(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)$")
# JobID = job part [. step]; job part = base id, optionally _array-task or +het-offset.
_JOBID_RE = re.compile(
    r"^(?P<job>(?P<base>\d+)(?:_(?P<task>[^.\s]+)|\+[^.\s]*)?)(?:\.(?P<step>\S+))?$")
_CANCELLED_RE = r"^CANCELLED by (\d+)$"
_HEADER_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_FIXED_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\+?")

# Shapes of typed fields, used only to decide which free-text column owns extra delimiters.
_SHAPE_INT = re.compile(r"\d*")
_SHAPE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None|")
_SHAPE_DURATION = re.compile(r"(?:(?:\d+-)?\d+:)?\d+:\d+(?:\.\d+)?|" + "|".join(_MISSING_DURATIONS))
_SHAPE_EXIT = re.compile(r"(?:\d+:\d+)?")
_SHAPE_JOBID = re.compile(r"\S*")
_FIELD_SHAPES = {
    **dict.fromkeys(("AllocCPUS", "AllocNodes", "AssocID", "ConsumedEnergyRaw", "CPUTimeRAW",
                     "DBIndex", "ElapsedRaw", "GID", "NCPUS", "NNodes", "NTasks", "Priority",
                     "QOSRAW", "ReqCPUS", "ReqNodes", "ResvCPURAW", "UID", "WCKeyID"), _SHAPE_INT),
    **dict.fromkeys(("Submit", "Eligible", "Start", "End"), _SHAPE_TIME),
    **dict.fromkeys(("Elapsed", "CPUTime", "Timelimit", "Suspended", "TotalCPU", "UserCPU",
                     "SystemCPU", "AveCPU", "MinCPU"), _SHAPE_DURATION),
    **dict.fromkeys(("ExitCode", "DerivedExitCode"), _SHAPE_EXIT),
    **dict.fromkeys(("JobID", "JobIDRaw"), _SHAPE_JOBID),
}

# Default order of the fields :func:`write` emits: normalised column -> sacct field.
_WRITE_ORDER = (("job_id", "JobID"), ("job_id_raw", "JobIDRaw"), ("job_name", "JobName"),
                ("user", "User"), ("uid", "UID"), ("account", "Account"),
                ("partition", "Partition"), ("state", "State"), ("exit_code", "ExitCode"),
                ("submit", "Submit"), ("start", "Start"), ("end", "End"),
                ("elapsed_s", "Elapsed"), ("timelimit_s", "Timelimit"),
                ("node_count", "NNodes"), ("ncpus", "NCPUS"), ("node_list", "NodeList"),
                ("node_list_raw", "NodeList"))


@dataclass(frozen=True)
class _Layout:
    """How the file is laid out, as detected from its first two lines."""

    format_version: str
    names: list[str]
    delimiter: str | None = None  # None for fixed-width
    trailing: bool = False  # --parsable: every line ends with the delimiter
    spans: tuple[tuple[int, int], ...] = ()  # fixed-width column [start, end)


# ---------------------------------------------------------------------------------------------
# Durations


def parse_duration(text: str) -> float | None:
    """``[D-]HH:MM:SS``, ``HH:MM:SS.mmm`` or ``MM:SS[.mmm]`` -> seconds; sentinels -> None.

    Raises ``ValueError`` for anything else.
    """
    if text in _MISSING_DURATIONS:
        return None
    match = _DURATION_RE.match(text)
    if match is None:
        raise ValueError(f"not a sacct duration: {text!r} (expected [D-]HH:MM:SS or MM:SS.mmm)")
    days, hours, minutes, seconds = match.group("d", "h", "m", "s")
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def format_duration(seconds: float | None) -> str:
    """Seconds -> ``[D-]HH:MM:SS`` as sacct prints Elapsed (rounded to whole seconds); NaN -> ''."""
    if seconds is None or pd.isna(seconds):
        return ""
    if seconds < 0:
        raise ValueError(f"negative duration: {seconds}")
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def accounted_second(unix: float) -> int:
    """An instant (Unix seconds) as Slurm's accounting records it: sacct prints ``Start``, ``End``
    and ``Submit`` in whole seconds, truncated. A window of accounted times that begins at a
    fraction of a second (a ReFrame session's start, a campaign round's) opens at this second:
    a job that started within the window's first second reads as started before it otherwise."""
    return math.floor(unix)


# ---------------------------------------------------------------------------------------------
# Layout detection


def _escape(delimiter: str) -> str:
    return delimiter.encode("unicode_escape").decode("ascii")


def _delimited_layout(header: str) -> _Layout | None:
    """Names and delimiter of a parsable header, or None if it is not one.

    The names are identifiers, so whatever separates them is the delimiter; it must be the same
    string everywhere, and a copy after the last name means ``--parsable``.
    """
    names = _HEADER_NAME_RE.findall(header)
    separators = _HEADER_NAME_RE.split(header)
    if not names or separators[0] != "":
        return None
    inner = set(separators[1:-1])
    if len(inner) > 1:
        return None
    delimiter = inner.pop() if inner else (separators[-1] or "|")
    if separators[-1] not in ("", delimiter):
        return None
    trailing = separators[-1] == delimiter
    if delimiter == "|":
        version = "parsable" if trailing else "parsable2"
    else:
        version = ("parsable " if trailing else "") + f"delimiter={_escape(delimiter)}"
    return _Layout(version, names, delimiter, trailing)


def _fixed_layout(header: str, dashes: str) -> _Layout | None:
    """Column spans from the dashes line under a default-format header, or None."""
    if not re.fullmatch(r"-+(?: -+)* *", dashes):
        return None
    spans = tuple((m.start(), m.end()) for m in re.finditer(r"-+", dashes))
    names = [header[a:b].strip() for a, b in spans]
    if not all(_FIXED_NAME_RE.fullmatch(name) for name in names):
        return None
    return _Layout("fixed-width", names, spans=spans)


def _detect_layout(head_lines: list[str]) -> _Layout | None:
    header = head_lines[0]
    if len(head_lines) > 1 and head_lines[1].startswith("-"):
        return _fixed_layout(header, head_lines[1])
    return _delimited_layout(header)


def sniff(head: str, name: str) -> bool:
    """True if ``head`` starts with a sacct header: mostly known field names, with ``JobID`` or at
    least three of them (a dump without JobID is still sacct's: reading it says what is missing)."""
    layout = _detect_layout([line.removesuffix("\r") for line in head.split("\n", 2)[:2]])
    if layout is None:
        return False
    known = sum(field in SACCT_FIELDS for field in layout.names)
    return known * 2 >= len(layout.names) and ("JobID" in layout.names or known >= 3)


# ---------------------------------------------------------------------------------------------
# Splitting lines into fields


def _load_lines(path: Path) -> tuple[list[str], bool]:
    """Physical lines without trailing blank ones, and whether the last one ended in a newline.

    Lines are split on ``\\n`` only: a ``\\r`` inside a job name must not start a new line.
    """
    # bytes that are not UTF-8 (old job names) become U+FFFD rather than failing the whole dump
    text = path.read_bytes().decode("utf-8", errors="replace")
    if not text.strip():
        raise ParseError(path, "empty file: expected a sacct header line such as "
                               "'JobID|JobName|State'", 1)
    lines = text.split("\n")
    pieces = len(lines)
    if lines[0].endswith("\r"):  # CRLF file
        lines = [line.removesuffix("\r") for line in lines]
    while not lines[-1].strip():
        lines.pop()
    # split() leaves one piece after the last newline, so a dropped piece means a final newline
    return lines, len(lines) < pieces


def _compositions(total: int, bins: int) -> Iterator[tuple[int, ...]]:
    """Every split of ``total`` into ``bins`` non-negative parts, largest first bin first."""
    if bins == 1:
        yield (total,)
        return
    for first in range(total, -1, -1):
        for rest in _compositions(total - first, bins - 1):
            yield (first, *rest)


class _ExtraFields:
    """Re-joins the parts of a record that has more fields than the header."""

    def __init__(self, layout: _Layout):
        names = layout.names + ([""] if layout.trailing else [])
        self.n = len(names)
        self.delimiter = layout.delimiter
        self.free = [names.index(f) for f in FREE_TEXT_FIELDS if f in names]
        self.shapes = [(i, _FIELD_SHAPES[f]) for i, f in enumerate(names) if f in _FIELD_SHAPES]
        if layout.trailing:  # the pseudo-field after the trailing delimiter must stay empty
            self.shapes.append((self.n - 1, re.compile("")))

    def assign(self, parts: list[str]) -> list[str] | None:
        """The first split (in free-text preference order) where all typed fields parse."""
        for shares in _compositions(len(parts) - self.n, len(self.free)):
            widths = [1] * self.n
            for column, share in zip(self.free, shares):
                widths[column] += share
            fields, pos = [], 0
            for width in widths:
                fields.append(self.delimiter.join(parts[pos:pos + width]))
                pos += width
            if all(shape.fullmatch(fields[i]) for i, shape in self.shapes):
                return fields
        return None


def _records(path: Path, lines: list[str], complete: bool, n: int,
             delimiter: str) -> Iterator[tuple[int, str, int]]:
    """(first line number, record text, field count) per record, joining continuation lines."""
    start, text, count = 0, "", n
    for number, line in enumerate(lines[1:], start=2):
        fields = line.count(delimiter) + 1
        if count < n:
            if fields < n:  # a short line continues a short record
                text, count = f"{text}\n{line}", count + fields - 1
                continue
            raise ParseError(path, f"record has {count} fields, the header names {n}; the next "
                                   "line is a complete record, so this one is truncated", start)
        if start:
            yield start, text, count
        start, text, count = number, line, fields
    if count < n:
        why = "truncated last line (no final newline)" if not complete else "truncated record"
        raise ParseError(path, f"record has {count} fields, the header names {n}: {why}", start)
    if start:
        yield start, text, count


def _split_delimited(path: Path, lines: list[str], complete: bool,
                     layout: _Layout) -> tuple[list[list[str]], list[int]]:
    extra = _ExtraFields(layout)
    rows: list[list[str]] = []
    numbers: list[int] = []
    for number, text, count in _records(path, lines, complete, extra.n, layout.delimiter):
        parts = text.split(layout.delimiter)
        if count > extra.n:
            if not extra.free:
                raise ParseError(path, f"{count} fields but the header names {extra.n}, and no "
                                       "JobName column to hold the extra delimiters", number)
            fixed = extra.assign(parts)
            if fixed is None:
                owners = ", ".join(layout.names[i] for i in extra.free)
                raise ParseError(path, f"{count} fields but the header names {extra.n}: no way to "
                                       f"give the extra {layout.delimiter!r} to {owners} so that "
                                       "the typed fields parse", number)
            parts = fixed
        elif layout.trailing and parts[-1]:
            raise ParseError(path, f"expected the line to end with {layout.delimiter!r} like the "
                                   "header (--parsable)", number)
        rows.append(parts[:len(layout.names)])
        numbers.append(number)
    return rows, numbers


def _split_fixed(path: Path, lines: list[str], complete: bool,
                 layout: _Layout) -> tuple[list[list[str]], list[int], list[list[str]]]:
    """Values per column, line numbers, and per row the names of '+'-truncated fields."""
    spans = layout.spans
    gaps = [(end, nxt) for (_, end), (nxt, _) in zip(spans, spans[1:])]
    width = spans[-1][1]
    rows, numbers, truncated = [], [], []
    for number, line in enumerate(lines[2:], start=3):
        if number == len(lines) and not complete and len(line) < width:
            raise ParseError(path, f"truncated last line: {len(line)} characters, columns run "
                                   f"to {width}", number)
        if any(line[a:b].strip() for a, b in gaps) or line[width:].strip():
            raise ParseError(path, "value outside the columns given by the dashes line "
                                   f"(expected {len(spans)} columns of widths "
                                   f"{[b - a for a, b in spans]})", number)
        cells = [line[a:b] for a, b in spans]
        rows.append([cell.strip() for cell in cells])
        numbers.append(number)
        truncated.append([name for name, cell in zip(layout.names, cells)
                          if cell.endswith("+") and " " not in cell])
    return rows, numbers, truncated


# ---------------------------------------------------------------------------------------------
# Normalising columns (vectorised; failures name the first bad line)


class _Columns:
    """Converts raw string columns, raising ParseError at the first unparsable value."""

    def __init__(self, path: Path, numbers: np.ndarray, truncated: pd.DataFrame | None):
        self.path = path
        self.numbers = numbers
        self.truncated = truncated

    def cut(self, field: str, raw: pd.Series) -> pd.Series:
        """Rows where this field was truncated by the fixed-width layout (never an error)."""
        if self.truncated is None or field not in self.truncated:
            return pd.Series(False, index=raw.index)
        return self.truncated[field]

    def fail_at(self, bad: pd.Series, raw: pd.Series, expected: str) -> None:
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ParseError(self.path, f"expected {expected}, got {raw.iloc[i]!r}",
                             int(self.numbers[i]))

    def timestamps(self, field: str, raw: pd.Series) -> pd.Series:
        missing = raw.isin(_MISSING_TIMES) | self.cut(field, raw)
        values = pd.to_datetime(raw.where(~missing), format=_TIMESTAMP_FORMAT, errors="coerce")
        self.fail_at(values.isna() & ~missing, raw,
                     f"{field} timestamp like 2019-01-02T03:04:05 or Unknown")
        return values.astype("datetime64[s]")

    def durations(self, field: str, raw: pd.Series) -> pd.Series:
        parts = raw.str.extract(_DURATION_RE)
        missing = raw.isin(_MISSING_DURATIONS) | self.cut(field, raw)
        self.fail_at(parts["m"].isna() & ~missing, raw,
                     f"{field} duration [D-]HH:MM:SS, HH:MM:SS.mmm or MM:SS.mmm")
        number = {k: pd.to_numeric(parts[k]).fillna(0) for k in ("d", "h", "m", "s")}
        seconds = number["d"] * 86400 + number["h"] * 3600 + number["m"] * 60 + number["s"]
        return seconds.astype("float64").where(~missing)

    def integers(self, field: str, raw: pd.Series) -> pd.Series:
        missing = (raw == "") | self.cut(field, raw)
        values = pd.to_numeric(raw.where(~missing), errors="coerce")
        self.fail_at(values.isna() & ~missing, raw, f"{field} integer")
        return values.astype("Int64")

    def job_ids(self, raw: pd.Series) -> pd.DataFrame:
        parts = raw.str.extract(_JOBID_RE)
        self.fail_at(parts["job"].isna(), raw,
                     "JobID like 1234, 1234.batch, 1234_5, 1234_[1-3] or 1234+0")
        return pd.DataFrame({
            "job_id": parts["job"].astype("str"),
            "step": _optional(parts["step"]),
            "array_job_id": _optional(parts["base"].where(parts["task"].notna())),
            "array_task_id": _optional(parts["task"]),
        })

    def states(self, raw: pd.Series) -> pd.DataFrame:
        by = raw.str.extract(_CANCELLED_RE)[0]
        return pd.DataFrame({"state": raw.where(by.isna(), "CANCELLED"),
                             "cancelled_by": pd.to_numeric(by).astype("Int64")})

    def node_lists(self, raw: pd.Series) -> pd.Series:
        cut = self.cut("NodeList", raw).to_numpy()
        lists: list[list[str] | None] = []
        for i, text in enumerate(raw.tolist()):
            if cut[i]:
                lists.append(None)
                continue
            try:
                lists.append(list(_expand(text)))
            except hostlist.BadHostlist as exc:
                raise ParseError(self.path, f"expected a Slurm host list like nid0[0001-0004,0010], "
                                            f"got {text!r} ({exc})", int(self.numbers[i])) from exc
        return pd.Series(lists, index=raw.index, dtype=object)


@functools.lru_cache(maxsize=1024)
def _expand(text: str) -> tuple[str, ...]:
    """The nodes of a NodeList field. Cached across files: the sacct dumps of one campaign's runs
    list many of the same jobs, and python-hostlist takes 0.1-0.3 ms a list."""
    if text in _NO_NODES:
        return ()
    if "[" not in text:  # plain comma list: skip the (slow) general expander
        hosts = text.split(",")
        if all(hosts):
            return tuple(hosts)
    return tuple(hostlist.expand_hostlist(text))


def _optional(values: pd.Series) -> pd.Series:
    """String column with None (not NaN) where missing, as documented for step and array ids."""
    return pd.Series([None if pd.isna(v) else str(v) for v in values], index=values.index,
                     dtype=object)


def _adopt_truncated_ids(ids: pd.DataFrame, raw: pd.Series, cut: pd.Series) -> pd.DataFrame:
    """Give each truncated step-less JobID to the preceding allocation it extends (see module)."""
    ids = ids.copy()
    last: pd.Series | None = None
    for i, (text, was_cut, step) in enumerate(zip(raw.tolist(), cut.tolist(), ids["step"])):
        if not was_cut:
            if step is None:
                last = ids.iloc[i]
            continue
        if step is not None or last is None:
            continue
        visible, owner = text[:-1], last["job_id"] + "."
        if owner.startswith(visible) or visible.startswith(owner):
            for column in ("job_id", "array_job_id", "array_task_id"):
                ids.iat[i, ids.columns.get_loc(column)] = last[column]
            ids.iat[i, ids.columns.get_loc("step")] = visible[len(owner):] + "+"
    return ids


def _normalise(path: Path, layout: _Layout, rows: list[list[str]], numbers: list[int],
               truncated: list[list[str]] | None) -> pd.DataFrame:
    names = layout.names
    raw = pd.DataFrame({name: pd.array(column, dtype="str")
                        for name, column in zip(names, zip(*rows))} if rows
                       else {name: pd.array([], dtype="str") for name in names})
    line_numbers = np.asarray(numbers, dtype="int64")
    cut = None
    if truncated is not None:
        cut = pd.DataFrame({name: [name in row for row in truncated] for name in names},
                           dtype=bool)
    conv = _Columns(path, line_numbers, cut)

    ids = conv.job_ids(raw["JobID"])
    if cut is not None and cut["JobID"].any():
        ids = _adopt_truncated_ids(ids, raw["JobID"], cut["JobID"])
    out: dict[str, pd.Series] = {**ids, "line": pd.Series(line_numbers)}
    for name in names:
        if name == "JobID":
            continue
        column = raw[name]
        if name == "State":
            out.update(conv.states(column))
        elif name == "NodeList":
            out["node_list"] = conv.node_lists(column)
            out["node_list_raw"] = column
        elif name in _TIMESTAMP_FIELDS:
            out[_RENAMED[name]] = conv.timestamps(name, column)
        elif name in _DURATION_FIELDS:
            out[_RENAMED[name]] = conv.durations(name, column)
        elif name in _INT_FIELDS:
            out[_RENAMED[name]] = conv.integers(name, column)
        else:
            out[_RENAMED.get(name, name)] = column
    if truncated is not None:
        out["truncated"] = pd.Series(truncated, dtype=object)
    return pd.DataFrame(out)


# ---------------------------------------------------------------------------------------------
# Public reader API


def _parse(path: str | Path) -> tuple[pd.DataFrame, _Layout]:
    path = Path(path)
    lines, complete = _load_lines(path)
    layout = _detect_layout(lines[:2])
    if layout is None:
        raise ParseError(path, "unknown format: expected a sacct header line naming fields "
                               "('JobID|JobName|State', any delimiter) or a default sacct table "
                               "(header, then a line of dashes)", 1)
    if "JobID" not in layout.names:
        raise ParseError(path, f"header has no JobID field (fields: {', '.join(layout.names)}); "
                               "add JobID to sacct's --format", 1)
    duplicated = sorted({n for n in layout.names if layout.names.count(n) > 1})
    if duplicated:
        raise ParseError(path, f"header repeats field(s) {', '.join(duplicated)}", 1)
    if layout.delimiter is None:
        rows, numbers, truncated = _split_fixed(path, lines, complete, layout)
    else:
        rows, numbers = _split_delimited(path, lines, complete, layout)
        truncated = None
    return _normalise(path, layout, rows, numbers, truncated), layout


def read(path: str | Path) -> pd.DataFrame:
    """Parse a sacct dump into one row per line (allocations and steps), in file order.

    Always: ``job_id`` (allocation id, ``'1234'``, ``'1234_5'``, ``'1234+0'``), ``step``
    (None for the allocation line, else ``'batch'``, ``'extern'``, ``'0'``...), ``array_job_id``
    and ``array_task_id`` (None unless an array task; ``'5'`` or ``'[1-3]'``), ``line`` (1-based
    first source line). When the field is in the file: ``job_id_raw``, ``job_name``, ``user``,
    ``account``, ``partition``, ``exit_code`` (str); ``uid``, ``node_count``, ``ncpus`` (Int64);
    ``state`` (``CANCELLED by N`` -> ``CANCELLED``) with ``cancelled_by`` (Int64 uid);
    ``submit``, ``start``, ``end`` (datetime64[s], naive, as printed; Unknown/None/'' -> NaT);
    ``elapsed_s``, ``timelimit_s`` (float seconds; '', Unknown, UNLIMITED, Partition_Limit ->
    NaN); ``node_list`` (expanded list[str], [] for 'None assigned') and ``node_list_raw``.
    Any other field keeps its sacct name as a string column. Fixed-width files add
    ``truncated`` (list of sacct field names cut with '+').
    """
    return _parse(path)[0]


def allocations(df: pd.DataFrame) -> pd.DataFrame:
    """Allocation lines only (step is None), one per job_id (the last, as sacct shows requeues)."""
    jobs = df[df["step"].isna()]
    return jobs.drop_duplicates("job_id", keep="last")


def _states_summary(states: pd.Series, top: int = 3) -> str:
    counts = states.value_counts()
    text = ", ".join(f"{state} {count}" for state, count in counts.head(top).items())
    return text + (f", +{len(counts) - top} more" if len(counts) > top else "")


def describe(path: str | Path) -> dict:
    """Layout, line count, min start .. max end, and job/step/user/state/node figures."""
    df, layout = _parse(path)
    jobs = allocations(df)
    figures: dict[str, int | str] = {"jobs": len(jobs), "steps": int(df["step"].notna().sum())}
    if "user" in df:
        figures["users"] = int(df.loc[df["user"] != "", "user"].nunique())
    if "state" in df:
        figures["states"] = _states_summary(jobs["state"])
    if "node_count" in df and df["node_count"].notna().any():
        figures["max_node_count"] = int(df["node_count"].max())
    time_span = None
    if "start" in df and "end" in df and df["start"].notna().any() and df["end"].notna().any():
        time_span = [df["start"].min().isoformat(), df["end"].max().isoformat()]
    return {"kind": KIND, "format_version": layout.format_version, "records": len(df),
            "time_span": time_span, "figures": figures}


# ---------------------------------------------------------------------------------------------
# Writer


def _text(values: pd.Series) -> pd.Series:
    """Values as sacct prints them: ISO timestamps (NaT -> Unknown), other missing -> ''."""
    if pd.api.types.is_datetime64_any_dtype(values):
        return _text(values.dt.strftime(_TIMESTAMP_FORMAT)).replace("", "Unknown")
    return values.astype("string").fillna("").astype(object)


def _job_ids(jobs: pd.DataFrame) -> pd.Series:
    ids = _text(jobs["job_id"])
    if "step" not in jobs:
        return ids
    steps = _text(jobs["step"])
    return ids.where(steps == "", ids + "." + steps)


def _field_text(jobs: pd.DataFrame, field: str) -> pd.Series:
    """One sacct field as printed by sacct, from normalised (or original-named) columns."""
    if field == "JobID":
        return _job_ids(jobs)
    if field == "JobIDRaw" and "job_id_raw" not in jobs and "JobIDRaw" not in jobs:
        return _job_ids(jobs)  # equal to JobID except for array tasks
    if field == "State" and "state" in jobs:
        state = _text(jobs["state"])
        if "cancelled_by" not in jobs:
            return state
        by = _text(pd.to_numeric(jobs["cancelled_by"]).astype("Int64"))
        return state.where(by == "", state + " by " + by)
    if field == "NodeList" and "node_list" in jobs:
        return _host_lists(jobs["node_list"])
    if field == "NodeList" and "node_list_raw" in jobs:
        return _text(jobs["node_list_raw"])
    column = _RENAMED.get(field)
    if column in jobs:
        if field in _TIMESTAMP_FIELDS:
            return _text(pd.to_datetime(jobs[column]))
        if field in _DURATION_FIELDS:
            return pd.Series([format_duration(s) for s in pd.to_numeric(jobs[column])],
                             index=jobs.index, dtype=object)
        if field in _INT_FIELDS:
            return _text(pd.to_numeric(jobs[column]).astype("Int64"))
        return _text(jobs[column])
    if field in jobs:
        return _text(jobs[field])
    raise ValueError(f"cannot write sacct field {field!r}: no column {column or field!r}")


def _host_lists(node_lists: pd.Series) -> pd.Series:
    """Compressed host lists; steps usually repeat their allocation's nodes, so memoise."""
    cache: dict[tuple[str, ...], str] = {}
    texts = []
    for nodes in node_lists:
        key = tuple(nodes) if isinstance(nodes, (list, tuple, np.ndarray)) else ()
        if key not in cache:
            cache[key] = hostlist.collect_hostlist(list(key)) if key else "None assigned"
        texts.append(cache[key])
    return pd.Series(texts, index=node_lists.index, dtype=object)


def _default_fields(jobs: pd.DataFrame) -> list[str]:
    fields: list[str] = []
    for column, field in _WRITE_ORDER:
        if column in jobs and field not in fields:
            fields.append(field)
    named = {c for c, _ in _WRITE_ORDER} | _DERIVED
    return fields + [c for c in jobs.columns if c not in named and c not in fields]


def _check_writable(field: str, values: pd.Series, delimiter: str) -> None:
    """Refuse values that sacct -P text could not carry back unambiguously."""
    forbidden = ["\n", "\r"] + ([] if field == "JobName" else [delimiter])
    joined = "".join(values)  # one search of the whole column first: almost always clean
    for char in (c for c in forbidden if c in joined):
        bad = values.str.contains(char, regex=False)
        if bad.any():
            raise ValueError(f"{field} value {values[bad].iloc[0]!r} contains {char!r}; only "
                             "JobName may contain the delimiter, and no value a newline")


def write(path: str | Path, jobs: pd.DataFrame | Iterable[Mapping], fields: list[str] | None = None,
          delimiter: str = "|") -> None:
    """Write ``sacct -P`` text (header of sacct field names, one line per row).

    ``jobs`` has the columns :func:`read` returns (``job_id`` + ``step`` make ``JobID``;
    ``state`` + ``cancelled_by`` make ``CANCELLED by N``; ``node_list`` is compressed with
    ``hostlist.collect_hostlist``, so it comes back sorted and de-duplicated; ``[]`` is written
    ``None assigned``), and any other column under its sacct name. ``fields`` picks and orders
    the sacct fields (default: every field the columns provide). Timestamps are written ISO to
    the second (NaT -> ``Unknown``), durations as ``[D-]HH:MM:SS`` (whole seconds, NaN -> '').
    ``JobIDRaw`` defaults to ``JobID`` when there is no ``job_id_raw``. Raises ``ValueError`` for
    a newline in any value or the delimiter outside ``JobName``.
    """
    frame = jobs if isinstance(jobs, pd.DataFrame) else pd.DataFrame.from_records(list(jobs))
    frame = frame.reset_index(drop=True)
    if "job_id" not in frame:
        raise ValueError("jobs need a job_id column")
    fields = list(fields) if fields is not None else _default_fields(frame)
    if len(set(fields)) != len(fields):
        raise ValueError(f"fields repeat a name: {fields}")
    if not delimiter or re.search(r"[A-Za-z0-9_\n\r]", delimiter):
        raise ValueError(f"delimiter {delimiter!r} would not be found again in the header line")
    columns = []
    for field in fields:
        values = _field_text(frame, field)
        _check_writable(field, values, delimiter)
        columns.append(values.tolist())
    lines = [delimiter.join(fields)] + [delimiter.join(row) for row in zip(*columns)]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
