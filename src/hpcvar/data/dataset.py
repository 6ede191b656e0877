"""The on-disk tidy dataset: append-only Parquet parts per table, plus the quarantine list.

Layout of a dataset directory::

    <dir>/runs/part-<round>.parquet        one part per collation round, never rewritten
    <dir>/steps/part-<round>.parquet       ... same for every table in hpcvar.data.schema.TABLES
    <dir>/quarantine.jsonl                 raw files set aside, one JSON object per line (appended)
    <dir>/collated.json                    what the last collation added (new, skipped, failed runs)

Appending a round validates every table against the schema first and refuses run_ids that are
already present, so nothing collated before can be changed or lost. Parts are written to a
temporary name and renamed, so an interrupted append leaves no half-written part behind. A round
may be written in pieces (:meth:`Dataset.round`, as collation writes batches of runs): each table's
pieces are row groups of its one part, and the round is checked and made visible as a whole.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hpcvar.data.schema import TABLES, SchemaError, conform
from hpcvar.util.fileio import temp_path


#: What the last collation did (written last by ``hpcvar collate``; the workflow's collate output).
COLLATED = "collated.json"


class DuplicateRunError(SchemaError):
    """A round tried to add a run_id that the dataset already holds."""


class Dataset:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # --- reading ----------------------------------------------------------------------
    def parts(self, table: str) -> list[Path]:
        return sorted((self.path / table).glob("part-*.parquet"))

    def read(self, table: str) -> pd.DataFrame:
        """A whole table as a DataFrame (empty, with the schema's columns, if nothing collated yet)."""
        spec = TABLES[table]
        parts = self.parts(table)
        if not parts:
            return spec.arrow_schema.empty_table().to_pandas()
        return pa.concat_tables([pq.read_table(p, schema=spec.arrow_schema) for p in parts]).to_pandas()

    def run_ids(self) -> set[str]:
        return set(self._column("runs", "run_id"))

    def systems(self) -> set[str]:
        """The systems the dataset's runs were measured on."""
        return set(self._column("runs", "system"))

    def _column(self, table: str, column: str) -> list:
        parts = self.parts(table)
        if not parts:
            return []
        return pa.concat_tables([pq.read_table(p, columns=[column]) for p in parts])[column].to_pylist()

    def quarantine(self) -> list[dict]:
        q = self.path / "quarantine.jsonl"
        if not q.exists():
            return []
        return [json.loads(line) for line in q.read_text().splitlines() if line.strip()]

    def is_dataset(self) -> bool:
        """A directory ``hpcvar collate`` wrote (it has a runs table, or records a collation)."""
        return bool(self.parts("runs")) or (self.path / COLLATED).exists()

    def describe(self) -> dict:
        """What ``hpcvar inspect DATASET_DIR`` shows: runs, their time span, rows per table."""
        runs = self.read("runs")
        span = [runs["start"].min().isoformat(), runs["end"].max().isoformat()] if len(runs) else None
        rows = {name: sum(pq.ParquetFile(p).metadata.num_rows for p in self.parts(name)) for name in TABLES}
        return {"kind": "dataset", "format_version": None, "records": len(runs), "time_span": span,
                "figures": {"datasets": int(runs["dataset"].nunique()), **{f"{k}_rows": v for k, v in rows.items() if v},
                            "quarantined": len(self.quarantine())}}

    # --- writing ----------------------------------------------------------------------
    def append(self, tables: dict[str, pd.DataFrame], origin: str = "") -> str | None:
        """Validate and add one round; returns the part name, or None if there was nothing new.

        Every table is checked before any is written: a schema error or a run_id the dataset
        already has aborts the whole round with nothing written.
        """
        with self.round(origin) as r:
            r.add(tables)
        return r.part

    @contextmanager
    def round(self, origin: str = "") -> Iterator[Round]:
        """A round added in pieces (:meth:`Round.add`), as collation reads it: it becomes visible
        as a whole when the block ends, and not at all if the block raises."""
        r = Round(self, origin)
        try:
            yield r
        except BaseException:
            r.abort()
            raise
        r.commit()

    def _new_part_name(self, tables) -> str:
        """A part name no table uses yet: time-ordered, with a random suffix against equal stamps."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        while True:
            part = f"part-{stamp}-{secrets.token_hex(4)}"
            if not any((self.path / name / f"{part}.parquet").exists() for name in tables):
                return part

    def clear(self) -> None:
        """Remove every table part and the quarantine list (``hpcvar collate --rebuild``). Refuses a
        directory holding anything a dataset does not, so a mistyped path loses nothing else."""
        if not self.path.exists():
            return
        ours = {*TABLES, "quarantine.jsonl", COLLATED}
        foreign = sorted(p.name for p in self.path.iterdir() if p.name not in ours)
        if foreign:
            raise SchemaError(f"{self.path}: not cleared, it holds files that are not part of a dataset: {foreign[:5]}")
        for name in TABLES:
            for part in (self.path / name).glob("*.parquet*"):
                part.unlink()
            if (self.path / name).is_dir():
                (self.path / name).rmdir()
        for name in ("quarantine.jsonl", COLLATED):
            (self.path / name).unlink(missing_ok=True)

    def add_quarantine(self, entries: list[dict]) -> int:
        """Append entries not already listed (so re-running collation does not repeat them)."""
        seen = {json.dumps(e, sort_keys=True, default=str) for e in self.quarantine()}
        new = list(dict.fromkeys(s for s in (json.dumps(e, sort_keys=True, default=str) for e in entries)
                                 if s not in seen))
        if new:
            self.path.mkdir(parents=True, exist_ok=True)
            with open(self.path / "quarantine.jsonl", "a") as fh:
                fh.writelines(s + "\n" for s in new)
        return len(new)


class Round:
    """One round of a dataset being written: each table's rows go to a hidden temporary Parquet
    file as they come (:meth:`add`), so a round never has to be held in memory whole. On
    :meth:`commit` the round is checked as a whole (every table's run ids are in its runs table)
    and the files are renamed to the round's parts, ``runs`` last (readers take a run as collated
    once it is in ``runs``). :meth:`abort`, or any error, removes them: nothing of the round is seen.
    """

    def __init__(self, ds: Dataset, origin: str = ""):
        self.ds, self.origin = ds, origin
        self.part: str | None = None            # the round's part name, once committed
        self._name = ds._new_part_name(TABLES)
        self._have = ds.run_ids()
        self._new_runs: set[str] = set()
        self._referenced: dict[str, set[str]] = {}  # run ids each other table has rows for
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._made: list[Path] = []              # directories this round created

    def _path(self, name: str) -> Path:
        return self.ds.path / name / f"{self._name}.parquet"

    def add(self, tables: dict[str, pd.DataFrame]) -> None:
        """Validate ``tables`` (the schema; run ids neither in the dataset nor earlier in this
        round), then write them. Nothing of ``tables`` is written unless all are valid."""
        unknown = set(tables) - set(TABLES)
        if unknown:
            raise SchemaError(f"unknown tables {sorted(unknown)}")
        arrow = {name: conform(TABLES[name], df, self.origin) for name, df in tables.items()}
        if "runs" in arrow:
            ids = arrow["runs"]["run_id"].to_pylist()
            clash = sorted(set(ids) & self._have)
            if clash:
                raise DuplicateRunError(f"runs already collated: {clash[:5]}{' ...' if len(clash) > 5 else ''}")
            again = sorted(set(ids) & self._new_runs)
            if again:
                raise SchemaError(f"runs: duplicate key ['run_id'] = {again[:5]} (an earlier piece of this round)")
            self._new_runs.update(ids)
        for name, tab in arrow.items():
            if name != "runs":
                self._referenced.setdefault(name, set()).update(tab["run_id"].to_pylist())
            self._writer(name).write_table(tab)

    def _writer(self, name: str) -> pq.ParquetWriter:
        if name not in self._writers:
            d = self.ds.path / name
            for parent in reversed([d, *d.parents]):
                if not parent.exists():
                    parent.mkdir()
                    self._made.append(parent)
            self._writers[name] = pq.ParquetWriter(temp_path(self._path(name)), TABLES[name].arrow_schema)
        return self._writers[name]

    def commit(self) -> None:
        """Check the round as a whole and make it visible (``part`` is then its part name); a
        round without new runs writes nothing."""
        for name, ids in self._referenced.items():
            orphans = ids - self._new_runs
            if orphans:
                self.abort()
                raise SchemaError(f"{name}: rows for run_ids not in this round's runs table: {sorted(orphans)[:5]}")
        if not self._new_runs:
            self.abort()
            return
        renamed = []
        try:
            for writer in self._writers.values():
                writer.close()
            for name in sorted(self._writers, key=lambda n: n == "runs"):
                os.replace(temp_path(self._path(name)), self._path(name))
                renamed.append(self._path(name))
        except BaseException:
            for path in renamed:
                path.unlink(missing_ok=True)
            self.abort()
            raise
        self.part = self._name

    def abort(self) -> None:
        """Remove whatever the round wrote (its temporary files, and directories it created)."""
        for name, writer in self._writers.items():
            try:
                writer.close()
            except Exception:  # a writer that failed mid-write: its file goes anyway
                pass
            temp_path(self._path(name)).unlink(missing_ok=True)
        self._writers = {}
        for d in reversed(self._made):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
