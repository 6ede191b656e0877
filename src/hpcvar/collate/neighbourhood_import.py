"""Per-run tables from elsewhere into a dataset for the neighbourhood analysis.

A facility's own accounting scripts, or the per-run CSVs a study publishes, often hold exactly
what the neighbourhood analysis needs: each run's time, and for each run the users that had jobs
running alongside it with their node counts. ``hpcvar import-neighbourhood`` makes a dataset of
two such plain CSV tables:

* runs: ``run_id,dataset,total_time_s,start,end`` (optional: ``num_nodes``, ``job_id``, ``user``);
  times in ISO 8601, UTC unless they carry an offset;
* neighbourhood: ``run_id,user,num_nodes``, one row per concurrent user and run, stored with
  job_id ``*`` (all the user's jobs alongside the run); with the optional ``job_id`` column, one
  row per job.

User names are pseudonymised as collation does. Every bad row (an unknown run, a negative node
count, a time that does not parse, a repeated key, a missing field) is reported with its file and
line, and then nothing is written: the import is refused as a whole, so a dataset never holds half
a table. What the tables cannot tell (steps, placement, Slurm state, overlaps) stays null.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hpcvar.data.dataset import Dataset
from hpcvar.parsers.errors import ParseError
from hpcvar.util.anonymise import Pseudonymiser

RUN_FIELDS = ("run_id", "dataset", "total_time_s", "start", "end")
RUN_OPTIONAL = ("num_nodes", "job_id", "user")
NEIGHBOUR_FIELDS = ("run_id", "user", "num_nodes")
NEIGHBOUR_OPTIONAL = ("job_id",)
#: job_id of a row that stands for all of a user's jobs alongside a run (tables without job_id).
ALL_JOBS = "*"


class RefusedTables(ValueError):
    """The tables were refused: every bad row, as :class:`ParseError`, in ``errors``."""

    def __init__(self, errors: list[ParseError]):
        self.errors = errors
        shown = "\n".join(f"  {e}" for e in errors[:50])
        more = f"\n  ... and {len(errors) - 50} more" if len(errors) > 50 else ""
        super().__init__(f"{len(errors)} bad row(s), nothing imported:\n{shown}{more}")


@dataclass
class _Rows:
    path: Path
    errors: list[ParseError] = field(default_factory=list)

    def bad(self, line: int | None, message: str) -> None:
        self.errors.append(ParseError(self.path, message, line))

    def read(self, required: tuple[str, ...], optional: tuple[str, ...]) -> list[tuple[int, dict]]:
        """(line number, row) for every data row; a header without a required field is one error."""
        try:
            with open(self.path, newline="", encoding="utf-8-sig") as fh:
                reader = csv.DictReader(fh)
                header = reader.fieldnames or []
                missing = [f for f in required if f not in header]
                if missing:
                    self.bad(1, f"header lacks {', '.join(missing)} (expected {','.join(required)}"
                                f"[,{','.join(optional)}])")
                    return []
                rows = []
                for row in reader:
                    if None in row or any(v is None for v in row.values()):
                        self.bad(reader.line_num, f"{len(header)} fields in the header, not as many in this row")
                        continue
                    rows.append((reader.line_num, {k: v.strip() for k, v in row.items() if k in required + optional}))
                return rows
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            self.bad(None, f"cannot read: {exc}")
            return []

    def text(self, line: int, row: dict, name: str) -> str | None:
        value = row.get(name) or ""
        if not value:
            self.bad(line, f"{name} is empty")
            return None
        return value

    def number(self, line: int, row: dict, name: str, *, integer: bool, optional: bool = False) -> float | None:
        value = row.get(name) or ""
        if not value and optional:
            return None
        try:
            number = float(value)
            if not math.isfinite(number) or number < 0 or (integer and number != int(number)):
                raise ValueError
        except ValueError:
            kind = "a whole number" if integer else "a number"
            self.bad(line, f"{name} must be {kind} >= 0, found {value!r}")
            return None
        return int(number) if integer else number

    def time(self, line: int, row: dict, name: str) -> pd.Timestamp | None:
        value = row.get(name) or ""
        try:
            ts = pd.Timestamp(value)
            if pd.isna(ts):
                raise ValueError
        except ValueError:
            self.bad(line, f"{name} is not an ISO 8601 time: {value!r}")
            return None
        return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def read_tables(runs_csv: str | Path, neighbourhood_csv: str | Path,
                pseudonymise: Pseudonymiser) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two tables as the dataset's ``runs`` and ``neighbourhood`` frames; :class:`RefusedTables`
    listing every bad row if any."""
    runs_in, neigh_in = _Rows(Path(runs_csv)), _Rows(Path(neighbourhood_csv))
    runs, seen = [], {}
    for line, row in runs_in.read(RUN_FIELDS, RUN_OPTIONAL):
        run_id, dataset = runs_in.text(line, row, "run_id"), runs_in.text(line, row, "dataset")
        total = runs_in.number(line, row, "total_time_s", integer=False)
        start, end = runs_in.time(line, row, "start"), runs_in.time(line, row, "end")
        nodes = runs_in.number(line, row, "num_nodes", integer=True, optional=True)
        if run_id in seen:
            runs_in.bad(line, f"run {run_id!r} again (first at line {seen[run_id]})")
            continue
        if start is not None and end is not None and end < start:
            runs_in.bad(line, f"end {row['end']} is before start {row['start']}")
            continue
        if None in (run_id, dataset, total, start, end) or total == 0:
            if total == 0:
                runs_in.bad(line, "total_time_s must be > 0")
            continue
        seen[run_id] = line
        runs.append({"run_id": run_id, "dataset": dataset, "total_time_s": total, "start": start, "end": end,
                     "num_nodes": nodes, "job_id": row.get("job_id") or None,
                     "user": pseudonymise.ensure(row.get("user") or None)})
    neigh, keys = [], {}
    for line, row in neigh_in.read(NEIGHBOUR_FIELDS, NEIGHBOUR_OPTIONAL):
        run_id, user = neigh_in.text(line, row, "run_id"), neigh_in.text(line, row, "user")
        nodes = neigh_in.number(line, row, "num_nodes", integer=True)
        job = row.get("job_id") or None
        if run_id is not None and run_id not in seen:
            neigh_in.bad(line, f"unknown run {run_id!r} (not in {runs_in.path.name})")
            continue
        key = (run_id, user, job)
        if key in keys:
            neigh_in.bad(line, f"run {run_id!r}, user {user!r}{f', job {job}' if job else ''} again "
                               f"(first at line {keys[key]})")
            continue
        if None in (run_id, user, nodes):
            continue
        keys[key] = line
        neigh.append({"run_id": run_id, "job_id": job or ALL_JOBS, "user": pseudonymise.ensure(user),
                      "num_nodes": nodes})
    errors = runs_in.errors + neigh_in.errors
    if errors:
        raise RefusedTables(errors)
    return _runs_frame(runs), pd.DataFrame(neigh, columns=["run_id", "job_id", "user", "num_nodes"])


def _runs_frame(runs: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(runs, columns=["run_id", "dataset", "total_time_s", "start", "end", "num_nodes", "job_id",
                                        "user"])
    # app and node count from the dataset's name when it follows hpcvar's <app>-<nodes>[-...]
    parts = frame["dataset"].str.extract(r"^(?P<app>.+?)-(?P<nodes>\d+)(?:-.*)?$")
    frame["app"] = parts["app"].fillna(frame["dataset"])
    frame["num_nodes"] = frame["num_nodes"].fillna(pd.to_numeric(parts["nodes"])).astype("Int64")
    return frame


def import_tables(runs_csv: str | Path, neighbourhood_csv: str | Path, out: str | Path,
                  pseudonymise: Pseudonymiser, system: str = "imported") -> dict:
    """Append the two tables to the dataset at ``out`` (created if needed); the counts added."""
    runs, neigh = read_tables(runs_csv, neighbourhood_csv, pseudonymise)
    runs["system"] = system
    Dataset(out).append({"runs": runs, "neighbourhood": neigh},
                        origin=f"{Path(runs_csv).name} + {Path(neighbourhood_csv).name}")
    return {"runs": len(runs), "neighbourhood_rows": len(neigh), "datasets": int(runs["dataset"].nunique())}
