"""The on-disk tidy dataset: append-only Parquet parts per table, plus the quarantine list.

Layout of a dataset directory::

    <dir>/runs/part-<round>.parquet        one part per collation round, never rewritten
    <dir>/steps/part-<round>.parquet       ... same for every table in hpcvar.data.schema.TABLES
    <dir>/quarantine.jsonl                 raw files set aside, one JSON object per line (appended)
    <dir>/collated.json                    what the last collation added (new, skipped, failed runs)

Appending a round validates every table against the schema first and refuses run_ids that are
already present, so nothing collated before can be changed or lost. Parts are written to a
temporary name and renamed, so an interrupted append leaves no half-written part behind.
"""

from __future__ import annotations

import json
import secrets
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hpcvar.data.schema import TABLES, SchemaError, conform
from hpcvar.util.fileio import atomic_path


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
        unknown = set(tables) - set(TABLES)
        if unknown:
            raise SchemaError(f"unknown tables {sorted(unknown)}")
        arrow = {name: conform(TABLES[name], df, origin) for name, df in tables.items()}
        new_runs = set(arrow["runs"]["run_id"].to_pylist()) if "runs" in arrow else set()
        clash = sorted(new_runs & self.run_ids())
        if clash:
            raise DuplicateRunError(f"runs already collated: {clash[:5]}{' ...' if len(clash) > 5 else ''}")
        for name, tab in arrow.items():
            if name == "runs":
                continue
            orphans = set(tab["run_id"].to_pylist()) - new_runs
            if orphans:
                raise SchemaError(f"{name}: rows for run_ids not in this round's runs table: {sorted(orphans)[:5]}")
        if not new_runs:
            return None
        part = self._new_part_name(arrow)
        written = []
        try:
            # Runs last: readers treat a run as collated once it is in `runs`.
            for name in sorted(arrow, key=lambda n: n == "runs"):
                d = self.path / name
                d.mkdir(parents=True, exist_ok=True)
                with atomic_path(d / f"{part}.parquet") as tmp:  # removed again if writing fails
                    pq.write_table(arrow[name], tmp)
                written.append(d / f"{part}.parquet")
        except BaseException:
            for p in written:
                p.unlink(missing_ok=True)
            raise
        return part

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
