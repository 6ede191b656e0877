"""The tidy dataset: schema conformance, append-only Parquet parts, quarantine list, pseudonyms."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpcvar.data import schema
from hpcvar.data.dataset import Dataset, DuplicateRunError
from hpcvar.data.schema import TABLES, SchemaError, conform
from hpcvar.util.anonymise import Pseudonymiser, load_salt

T0 = pd.Timestamp("2024-03-05 10:00:00", tz="UTC")
COUNTERS = ("RT_RB_STL", "PT_FLIT_TOT")


def _round(*job_ids: int, system: str = "cori") -> dict[str, pd.DataFrame]:
    """One collation round of two-step MILC runs with every table filled."""
    runs, steps, sc, sysc, mpi, neigh, lat, hist, rc = [], [], [], [], [], [], [], [], []
    for k, job in enumerate(job_ids):
        rid = f"{system}-{job}"
        start = T0 + pd.Timedelta(hours=k)
        nodes = [f"nid{4 * k + i:05d}" for i in range(4)]
        runs.append(dict(run_id=rid, system=system, app="milc", dataset="milc-4", input="-n 4", num_nodes=4,
                         job_id=str(job), user="user-0a1b2c3d4e", submit=start - pd.Timedelta(minutes=5),
                         start=start, end=start + pd.Timedelta(seconds=30), total_time_s=25.5, elapsed_s=30.0,
                         num_steps=2, state="COMPLETED", node_list=nodes, num_routers=1, num_groups=1,
                         locality="single-router", locality_dfplus="same-group", bg_traffic=61.25,
                         bg_nodes_alloc=1900, bg_nodes_comm=1850, bg_nodes_comm_unique=1790, system_nodes=2288,
                         software="milc 7.8.1", container=None,
                         raw_dir=f"runs/{rid}"))
        for s, dur in ((1, 12.25), (2, 13.25)):
            s_start = start + pd.Timedelta(seconds=2 + 13 * (s - 1))
            steps.append(dict(run_id=rid, step=s, start=s_start, end=s_start + pd.Timedelta(seconds=dur),
                              duration_s=dur, reported_s=dur - 0.01 if s == 1 else None))
            for c, v in zip(COUNTERS, (8.0e6 * s, 1.1e7 + k)):
                sc.append(dict(run_id=rid, step=s, counter=c, value=v))
                for scope, n in (("io", 2), ("sys", 40)):
                    sysc.append(dict(run_id=rid, step=s, scope=scope, counter=c, value=v / n, num_routers=n))
        mpi += [dict(run_id=rid, routine="Allreduce", time_s=3.5, calls=800, mpi_pct=70.0, app_time_s=100.0,
                     mpi_time_s=5.0, ntasks=64),
                dict(run_id=rid, routine="Waitall", time_s=1.5, calls=None, mpi_pct=30.0, app_time_s=100.0,
                     mpi_time_s=5.0, ntasks=64)]
        neigh.append(dict(run_id=rid, job_id=str(job + 1000), user="user-ffff000011", num_nodes=128,
                          overlap_s=30.0, shared_groups=1, shared_routers=0,
                          start=start - pd.Timedelta(seconds=600), end=pd.NaT))
        lat += [dict(run_id=rid, benchmark="collectives", operation="allreduce", size_bytes=8, pair="", cycle=0,
                     iteration=i, value_us=1.5 + i, start_epoch_s=None) for i in range(2)]
        lat += [dict(run_id=rid, benchmark="aggressor", operation="uniform-random", size_bytes=65536, pair="",
                     cycle=0, iteration=0, value_us=68.5, start_epoch_s=1.7e9 + 0.25)]
        hist += [dict(run_id=rid, kind="timer", pair="0", bin=b, lower_us=0.05 * b, upper_us=0.05 * (b + 1),
                      count=10 - b) for b in range(2)]
        rc += [dict(run_id=rid, scope="job", counter="net.tx_bytes", value=1.5e9, seconds=28.5, sources=4),
               dict(run_id=rid, scope="io", counter=COUNTERS[0], value=2.5e6, seconds=30.0, sources=2)]
    frames = dict(runs=runs, steps=steps, step_counters=sc, system_counters=sysc, mpi_profile=mpi,
                  neighbourhood=neigh, latency=lat, latency_histograms=hist, run_counters=rc)
    return {name: pd.DataFrame(rows) for name, rows in frames.items()}


def _comparable(df: pd.DataFrame) -> list[dict]:
    """Rows as plain Python values (lists for node_list, None for nulls), for exact comparison."""
    out = []
    for rec in df.to_dict("records"):
        row = {}
        for k, v in rec.items():
            if isinstance(v, np.ndarray):
                v = v.tolist()
            elif not isinstance(v, list) and pd.isna(v):
                v = None
            elif isinstance(v, (np.integer, np.floating)):
                v = v.item()
            row[k] = v
        out.append(row)
    return out


def _snapshot(ds: Dataset) -> dict[str, str]:
    """sha256 of every file under the dataset directory, by relative path."""
    return {str(p.relative_to(ds.path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(ds.path.rglob("*")) if p.is_file()}


# --- schema.conform ---------------------------------------------------------------------------

def test_conform_returns_arrow_in_schema_order():
    df = _round(1)["runs"]
    tab = conform(schema.RUNS, df[list(reversed(df.columns))])
    assert tab.schema == schema.RUNS.arrow_schema
    assert tab.column_names == schema.RUNS.column_names
    assert tab["start"].type == pa.timestamp("us", tz="UTC")
    assert tab["node_list"].to_pylist() == [["nid00000", "nid00001", "nid00002", "nid00003"]]


def test_conform_fills_missing_nullable_columns():
    df = _round(1)["runs"].drop(columns=["container", "software", "elapsed_s"])
    tab = conform(schema.RUNS, df)
    assert tab["software"].to_pylist() == [None] and tab["elapsed_s"].to_pylist() == [None]


def test_conform_missing_required_column():
    with pytest.raises(SchemaError, match=r"runs from raw/x: missing required columns \['system'\]"):
        conform(schema.RUNS, _round(1)["runs"].drop(columns="system"), origin="raw/x")


def test_conform_unknown_column():
    df = _round(1)["steps"].assign(wallclock=1.0)
    with pytest.raises(SchemaError, match=r"steps: unknown columns \['wallclock'\]"):
        conform(schema.STEPS, df)


def test_conform_null_in_non_nullable_column():
    df = _round(1)["steps"]
    df.loc[1, "duration_s"] = np.nan
    with pytest.raises(SchemaError, match=r"steps: column 'duration_s' must not be null") as err:
        conform(schema.STEPS, df)
    assert "'run_id': 'cori-1', 'step': 2" in str(err.value)


def test_conform_null_in_nullable_column_is_fine():
    df = _round(1)["steps"]
    df.loc[0, "start"] = pd.NaT
    assert conform(schema.STEPS, df)["start"].null_count == 1


def test_conform_duplicate_key():
    df = _round(1)["step_counters"]
    df = pd.concat([df, df.iloc[[2]]], ignore_index=True)
    with pytest.raises(SchemaError, match=r"step_counters: duplicate key \['run_id', 'step', 'counter'\]") as err:
        conform(schema.STEP_COUNTERS, df)
    assert "'counter': 'RT_RB_STL'" in str(err.value) and "'step': 2" in str(err.value)


def test_conform_wrong_type():
    df = _round(1)["runs"].assign(num_nodes="four")
    with pytest.raises(SchemaError, match="runs"):
        conform(schema.RUNS, df)


def test_every_table_has_its_key_in_its_columns():
    assert set(TABLES) == {"runs", "steps", "step_counters", "system_counters", "mpi_profile", "neighbourhood",
                           "latency", "latency_histograms", "run_counters"}
    for t in TABLES.values():
        assert set(t.key) <= set(t.column_names), t.name
        assert all(not c.nullable for c in t.columns if c.name in t.key), t.name


def test_markdown_lists_every_table_and_column():
    md = schema.markdown()
    for t in TABLES.values():
        assert f"## `{t.name}`" in md
        for c in t.columns:
            assert f"| `{c.name}` |" in md


# --- Dataset append / read --------------------------------------------------------------------

def test_empty_dataset(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    assert ds.run_ids() == set() and ds.quarantine() == []
    empty = ds.read("steps")
    assert list(empty.columns) == schema.STEPS.column_names and len(empty) == 0
    assert ds.append({}) is None
    assert not (tmp_path / "ds").exists()


def test_append_read_round_trip_of_all_tables(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    tables = _round(101, 102)
    part = ds.append(tables, origin="raw")
    assert part.startswith("part-")
    assert ds.run_ids() == {"cori-101", "cori-102"}
    for name, df in tables.items():
        assert [p.name for p in ds.parts(name)] == [f"{part}.parquet"], name
        back = ds.read(name)
        assert list(back.columns) == TABLES[name].column_names
        assert _comparable(back) == _comparable(df[TABLES[name].column_names]), name
    runs = ds.read("runs")
    assert str(runs["start"].dtype).endswith(", UTC]")
    assert runs.loc[0, "start"] == T0
    assert list(runs.loc[1, "node_list"]) == ["nid00004", "nid00005", "nid00006", "nid00007"]
    # Nothing but the parts (no temporary files) is left in the dataset directory.
    assert sorted(_snapshot(ds)) == sorted(f"{n}/{part}.parquet" for n in tables)


def test_non_utc_timestamps_are_stored_as_the_same_instant(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    tables = _round(7)
    tables["runs"]["start"] = tables["runs"]["start"].dt.tz_convert("Europe/Zurich")
    ds.append(tables)
    assert ds.read("runs").loc[0, "start"] == T0


def test_second_append_of_same_run_is_refused_and_writes_nothing(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    ds.append(_round(1, 2))
    before = _snapshot(ds)
    data_before = {n: _comparable(ds.read(n)) for n in TABLES}
    with pytest.raises(DuplicateRunError, match="cori-2"):
        ds.append(_round(2, 3))
    assert _snapshot(ds) == before
    assert {n: _comparable(ds.read(n)) for n in TABLES} == data_before
    assert all(len(ds.parts(n)) == 1 for n in TABLES)
    assert ds.run_ids() == {"cori-1", "cori-2"}


def test_duplicate_run_within_a_round_is_a_schema_error(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    t = _round(1)
    t["runs"] = pd.concat([t["runs"], t["runs"]], ignore_index=True)
    with pytest.raises(SchemaError, match="runs: duplicate key"):
        ds.append(t)
    assert not (tmp_path / "ds").exists()


def test_child_rows_for_a_run_not_in_this_round(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    ds.append(_round(1))
    before = _snapshot(ds)
    t = _round(2)
    t["mpi_profile"] = pd.concat([t["mpi_profile"], _round(1)["mpi_profile"]], ignore_index=True)
    with pytest.raises(SchemaError, match=r"mpi_profile: rows for run_ids not in this round's runs table: \['cori-1'\]"):
        ds.append(t)
    assert _snapshot(ds) == before
    # Child rows without any runs table are refused as well.
    with pytest.raises(SchemaError, match="steps: rows for run_ids"):
        ds.append({"steps": _round(5)["steps"]})
    assert _snapshot(ds) == before


def test_schema_error_in_one_table_writes_no_table(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    t = _round(1)
    t["neighbourhood"] = t["neighbourhood"].drop(columns="num_nodes")
    with pytest.raises(SchemaError, match=r"neighbourhood: missing required columns \['num_nodes'\]"):
        ds.append(t)
    assert not (tmp_path / "ds").exists()


def test_unknown_table_is_refused(tmp_path: Path):
    with pytest.raises(SchemaError, match=r"unknown tables \['jobs'\]"):
        Dataset(tmp_path / "ds").append({"jobs": pd.DataFrame({"run_id": ["x"]})})


def test_new_round_adds_a_part_and_never_rewrites_earlier_parts(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    first = ds.append(_round(1, 2))
    before = _snapshot(ds)
    r2 = _round(3)
    del r2["mpi_profile"]  # a round may lack a table
    second = ds.append(r2)
    assert second != first
    after = _snapshot(ds)
    assert {k: after[k] for k in before} == before
    assert [p.name for p in ds.parts("runs")] == [f"{first}.parquet", f"{second}.parquet"]
    assert len(ds.parts("mpi_profile")) == 1
    assert ds.run_ids() == {"cori-1", "cori-2", "cori-3"}
    assert ds.read("runs")["run_id"].tolist() == ["cori-1", "cori-2", "cori-3"]
    assert len(ds.read("system_counters")) == 3 * 2 * 2 * 2
    # Parts are plain Parquet with the schema: pandas reads the table directory directly.
    assert sorted(pd.read_parquet(ds.path / "steps")["run_id"].unique()) == ["cori-1", "cori-2", "cori-3"]


def test_append_never_overwrites_a_part_with_the_same_stamp(tmp_path: Path, monkeypatch):
    import hpcvar.data.dataset as dataset_mod

    class FrozenClock:
        @staticmethod
        def now(tz=None):
            return pd.Timestamp("2024-01-01 00:00:00", tz="UTC").to_pydatetime()

    monkeypatch.setattr(dataset_mod, "datetime", FrozenClock)
    ds = Dataset(tmp_path / "ds")
    ds.append(_round(1))
    ds.append(_round(2))
    assert ds.run_ids() == {"cori-1", "cori-2"}


def _failing_write_table(monkeypatch, fail_at: int, write_first: bool) -> list[str]:
    """Make the ``fail_at``-th table written to a round fail (after writing if write_first)."""
    real = pq.ParquetWriter.write_table
    calls: list[str] = []

    def write_table(self, table, *args, **kwargs):
        calls.append(str(self.where))
        if len(calls) == fail_at:
            if write_first:
                real(self, table, *args, **kwargs)
            raise OSError("No space left on device")
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", write_table)
    return calls


def test_interrupted_append_leaves_no_visible_part(tmp_path: Path, monkeypatch):
    ds = Dataset(tmp_path / "ds")
    ds.append(_round(1))
    before = _snapshot(ds)
    data_before = {n: _comparable(ds.read(n)) for n in TABLES}
    calls = _failing_write_table(monkeypatch, fail_at=3, write_first=True)
    with pytest.raises(OSError, match="No space"):
        ds.append(_round(2))
    # The round's first tables, runs among them, were written (to hidden files) before the failure.
    assert [Path(c).parent.name for c in calls] == ["runs", "steps", "step_counters"]
    assert _snapshot(ds) == before
    assert sorted(str(p.relative_to(ds.path)) for p in ds.path.rglob("part-*.parquet")) == sorted(before)
    assert {n: _comparable(ds.read(n)) for n in TABLES} == data_before
    assert ds.run_ids() == {"cori-1"}
    # The round can be appended once the disk is fine again.
    monkeypatch.undo()
    ds.append(_round(2))
    assert ds.run_ids() == {"cori-1", "cori-2"}


def test_interrupted_append_leaves_no_temporary_file(tmp_path: Path, monkeypatch):
    ds = Dataset(tmp_path / "ds")
    _failing_write_table(monkeypatch, fail_at=3, write_first=True)
    with pytest.raises(OSError):
        ds.append(_round(1))
    assert not ds.path.exists()


def test_failed_rename_at_commit_leaves_no_part(tmp_path: Path, monkeypatch):
    """The parts become visible by renames, runs last: a rename that fails takes back the others."""
    import hpcvar.data.dataset as dataset_mod

    ds = Dataset(tmp_path / "ds")
    ds.append(_round(1))
    before = _snapshot(ds)
    real, done = os.replace, []

    def replace(src, dst):
        if len(done) == 4:
            raise OSError("Input/output error")
        real(src, dst)
        done.append(Path(dst).parent.name)

    monkeypatch.setattr(dataset_mod.os, "replace", replace)
    with pytest.raises(OSError, match="Input/output"):
        ds.append(_round(2))
    assert "runs" not in done and len(done) == 4
    assert _snapshot(ds) == before and ds.run_ids() == {"cori-1"}


def _pieces(tables: dict[str, pd.DataFrame], run_ids: list[str]) -> dict[str, pd.DataFrame]:
    return {name: df[df["run_id"].isin(run_ids)] for name, df in tables.items() if name != "runs"}


def test_a_round_added_in_pieces_reads_as_one_append(tmp_path: Path):
    whole, pieces = Dataset(tmp_path / "whole"), Dataset(tmp_path / "pieces")
    tables = _round(1, 2, 3)
    whole.append(tables)
    with pieces.round("raw") as r:
        r.add(_pieces(tables, ["cori-1", "cori-2"]))
        # Nothing is visible before the round ends, not even the pieces written so far.
        assert pieces.run_ids() == set() and all(pieces.parts(n) == [] for n in TABLES)
        r.add(_pieces(tables, ["cori-3"]))
        r.add({"runs": tables["runs"]})
    assert r.part is not None
    for name in TABLES:
        assert [p.name for p in pieces.parts(name)] == [f"{r.part}.parquet"], name
        assert _comparable(pieces.read(name)) == _comparable(whole.read(name)), name


def test_a_round_that_raises_leaves_nothing(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    ds.append(_round(1))
    before = _snapshot(ds)
    tables = _round(2, 3)
    with pytest.raises(RuntimeError, match="reading the next run failed"):
        with ds.round() as r:
            r.add(_pieces(tables, ["cori-2"]))
            raise RuntimeError("reading the next run failed")
    assert r.part is None and _snapshot(ds) == before
    # Pieces whose runs never came are refused at the end, with nothing written.
    with pytest.raises(SchemaError, match=r"steps: rows for run_ids not in this round's runs table: \['cori-3'\]"):
        with ds.round() as r:
            r.add(_pieces(tables, ["cori-2", "cori-3"]))
            r.add({"runs": tables["runs"].iloc[:1]})
    assert _snapshot(ds) == before


def test_a_run_added_twice_to_one_round_is_refused(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    tables = _round(1, 2)
    with pytest.raises(SchemaError, match=r"runs: duplicate key \['run_id'\] = \['cori-2'\]"):
        with ds.round() as r:
            r.add({"runs": tables["runs"]})
            r.add({"runs": tables["runs"].iloc[1:]})
    assert not ds.path.exists()


# --- quarantine ------------------------------------------------------------------------------

def test_quarantine_entries_are_deduplicated_across_calls(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    a = {"file": "raw/runs/x/counters.csv", "line": 4, "error": "expected 3 fields", "kind": "step_counters"}
    b = {"file": "raw/ldms/nid1.csv", "line": None, "error": "truncated", "kind": "ldms"}
    c = {"file": "raw/runs/y/stdout.txt", "line": 12, "error": "bad step", "kind": "app"}
    assert ds.add_quarantine([a, b]) == 2
    assert ds.add_quarantine([dict(reversed(list(a.items()))), c]) == 1  # key order does not matter
    assert ds.add_quarantine([b]) == 0
    assert ds.quarantine() == [a, b, c]
    assert len((ds.path / "quarantine.jsonl").read_text().splitlines()) == 3


def test_quarantine_duplicates_within_one_call_are_written_once(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    e = {"file": "f", "line": 1, "error": "x"}
    ds.add_quarantine([e, e])
    assert ds.quarantine() == [e]


def test_quarantine_count_matches_entries_written(tmp_path: Path):
    ds = Dataset(tmp_path / "ds")
    e = {"file": "f", "line": 1, "error": "x"}
    assert ds.add_quarantine([e, e]) == 1


# --- pseudonyms -------------------------------------------------------------------------------

def test_pseudonym_is_the_salted_hmac():
    p = Pseudonymiser(b"salt-A")
    expected = "user-" + hmac.new(b"salt-A", b"alice", hashlib.sha256).hexdigest()[:10]
    assert p("alice") == expected
    assert len(expected) == 15 and "alice" not in expected


def test_pseudonym_stable_per_salt_and_different_across_salts():
    a1, a2, b = Pseudonymiser(b"salt-A"), Pseudonymiser(b"salt-A"), Pseudonymiser(b"salt-B")
    names = ["alice", "bob", "carol", "u12345", "a"]
    assert [a1(n) for n in names] == [a2(n) for n in names]
    assert all(a1(n) != b(n) for n in names)
    assert len({a1(n) for n in names}) == len(names)
    assert all(n not in a1(n) for n in names if n != "a")  # "a" is a hex digit and may occur


def test_pseudonymiser_passes_missing_values_through():
    p = Pseudonymiser(b"s")
    assert p(None) is None and p("") == ""
    assert np.isnan(p(float("nan")))


def test_disabled_pseudonymiser_passes_names_through():
    p = Pseudonymiser(None, enabled=False)
    assert p("alice") == "alice"
    out = p.series(pd.Series(["alice", None]))
    assert out[0] == "alice" and pd.isna(out[1])


def test_enabled_pseudonymiser_needs_a_salt():
    with pytest.raises(ValueError, match="salt"):
        Pseudonymiser(b"")


def test_series():
    p = Pseudonymiser(b"s")
    out = p.series(pd.Series(["bob", "alice", "bob"]))
    assert out.tolist() == [p("bob"), p("alice"), p("bob")]
    assert out[0] == out[2] != out[1]


def test_load_salt_creates_a_private_file_once(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("HPCVAR_SALT", raising=False)
    path = tmp_path / "conf" / "salt"
    salt = load_salt(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(salt) == 64 and int(salt, 16) >= 0
    mtime = path.stat().st_mtime_ns
    assert load_salt(path) == salt
    assert path.stat().st_mtime_ns == mtime
    assert load_salt(tmp_path / "other") != salt


def test_load_salt_default_file_is_in_the_working_directory(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("HPCVAR_SALT", raising=False)
    monkeypatch.chdir(tmp_path)
    salt = load_salt()
    assert (tmp_path / ".hpcvar-salt").read_text().strip().encode() == salt


def test_hpcvar_salt_env_wins(tmp_path: Path, monkeypatch):
    path = tmp_path / "salt"
    path.write_text("from-file\n")
    monkeypatch.setenv("HPCVAR_SALT", "from-env")
    assert load_salt(path) == b"from-env"
    assert load_salt(tmp_path / "absent") == b"from-env"
    assert not (tmp_path / "absent").exists()
    monkeypatch.delenv("HPCVAR_SALT")
    assert load_salt(path) == b"from-file"
    assert os.listdir(tmp_path) == ["salt"]


def test_summary_tells_slurm_failures_from_reframe_failures(tmp_path):
    """A test that failed sanity ran a job Slurm COMPLETED: the summary says which failure is which."""
    from hpcvar.data.summary import format_summary

    ds = Dataset(tmp_path / "ds")
    ds.add_quarantine([
        {"run_id": "a", "kind": "failed-run", "state": "CANCELLED", "job_id": "1"},
        {"run_id": "b", "kind": "failed-run", "state": "TIMEOUT", "job_id": "2"},
        {"run_id": "c", "kind": "failed-run", "state": "COMPLETED", "job_id": "3", "reframe": "sanity failed"},
        {"file": "x/sacct.txt", "line": 4, "error": "truncated", "kind": "bad-file"},
    ])
    text = format_summary(tmp_path / "ds")
    assert ("Failed runs (not used as data): 3\n"
            "  Slurm state not COMPLETED: 2 (CANCELLED: 1, TIMEOUT: 1)\n"
            "  ReFrame test failed, Slurm COMPLETED: 1 (sanity failed: 1)\n"
            "Quarantined files (bad input, see quarantine.jsonl): 1\n") in text
