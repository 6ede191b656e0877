"""hpcvar import-neighbourhood: per-run times and concurrent users from two plain tables become a
dataset that the neighbourhood analysis and the report read like a collated one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from hpcvar.analyses import neighbourhood
from hpcvar.data.dataset import Dataset
from hpcvar.util.anonymise import Pseudonymiser

HPCVAR = [sys.executable, "-m", "hpcvar"]


def run(*args, **kw):
    return subprocess.run([*HPCVAR, *map(str, args)], capture_output=True, text=True, **kw)


def export(dataset: Path, out: Path, per_job: bool) -> tuple[Path, Path]:
    """The collated dataset's runs and neighbourhood as the two plain tables a facility would have:
    one row per job of another user (``per_job``), or one per user and run with their nodes summed."""
    runs = pd.read_parquet(dataset / "runs")[["run_id", "dataset", "total_time_s", "start", "end"]]
    for col in ("start", "end"):
        runs[col] = runs[col].map(lambda t: t.isoformat())
    neigh = pd.read_parquet(dataset / "neighbourhood")
    if per_job:
        neigh = neigh[["run_id", "user", "num_nodes", "job_id"]]
    else:
        neigh = neigh.groupby(["run_id", "user"], as_index=False)["num_nodes"].sum()
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv", index=False)
    neigh.to_csv(out / "neighbourhood.csv", index=False)
    return out / "runs.csv", out / "neighbourhood.csv"


def rankings(dataset: Path, out: Path) -> dict[str, pd.DataFrame]:
    summary = neighbourhood.run(dataset, out)
    return {name: pd.read_csv(out / name / "ranking.csv") for name in summary.datasets}


def test_tables_from_a_simulated_campaign_give_the_same_rankings(campaign, tmp_path):
    c = campaign("demo", 0, 15)
    collated = rankings(c.dataset, tmp_path / "collated")
    runs_csv, neigh_csv = export(c.dataset, tmp_path / "per-job", per_job=True)
    out = run("import-neighbourhood", runs_csv, neigh_csv, "--out", tmp_path / "imported",
              "--salt-file", tmp_path / "salt")
    assert out.returncode == 0, out.stderr
    n_runs = len(pd.read_parquet(c.dataset / "runs"))
    assert out.stdout.startswith(f"imported {n_runs} runs of 7 datasets")
    imported = rankings(tmp_path / "imported", tmp_path / "analyses" / "neighbourhood")
    assert set(imported) == set(collated)
    for name, table in collated.items():
        pd.testing.assert_frame_equal(imported[name], table, obj=name)  # every user, both ranks
    # One row per user and run (nodes summed): the Pearson ranking is the same.
    runs_csv, neigh_csv = export(c.dataset, tmp_path / "per-user", per_job=False)
    assert run("import-neighbourhood", runs_csv, neigh_csv, "--out", tmp_path / "per-user-ds",
               "--salt-file", tmp_path / "salt").returncode == 0
    for name, table in rankings(tmp_path / "per-user-ds", tmp_path / "from-per-user").items():
        cols = ["user", "nodes_r", "rank_r", "runs_alongside"]
        want = collated[name][cols].sort_values("user").reset_index(drop=True)
        pd.testing.assert_frame_equal(table[cols].sort_values("user").reset_index(drop=True), want, obj=name)
    # The report reads the imported dataset: the neighbourhood section has its figures, and what
    # the tables cannot tell (steps, placement) is said to be missing.
    from hpcvar.analyses import overview
    from hpcvar.report import build

    ov = overview.run(tmp_path / "imported", tmp_path / "analyses" / "overview")
    assert all(d.steps is None and d.mpi is None and d.placement is None for d in ov.datasets.values())
    result = build(tmp_path / "imported", tmp_path / "report.html", analyses_dir=tmp_path / "analyses",
                   figures_dir=tmp_path / "figures")
    assert not result["sections"]["neighbourhood"]["empty"] and result["sections"]["neighbourhood"]["figures"]
    assert "no run has a node list" in result["sections"]["placement"]["empty"]


def test_user_names_are_pseudonymised_on_import(tmp_path):
    (tmp_path / "runs.csv").write_text("run_id,dataset,total_time_s,start,end\n"
                                       "r1,milc-128,100.5,2024-03-01T10:00:00,2024-03-01T10:01:40\n"
                                       "r2,milc-128,130.0,2024-03-01T11:00:00+01:00,2024-03-01T11:02:10+01:00\n")
    (tmp_path / "neigh.csv").write_text("run_id,user,num_nodes\nr1,alice,512\nr2,alice,256\nr2,bob,0\n")
    salt = tmp_path / "salt"
    assert run("import-neighbourhood", tmp_path / "runs.csv", tmp_path / "neigh.csv", "--out", tmp_path / "ds",
               "--salt-file", salt).returncode == 0
    pseudo = Pseudonymiser(salt.read_text().strip().encode())
    ds = Dataset(tmp_path / "ds")
    neigh, runs = ds.read("neighbourhood"), ds.read("runs").set_index("run_id")
    assert sorted(neigh["user"]) == sorted([pseudo("alice"), pseudo("alice"), pseudo("bob")])
    assert not any(b"alice" in part.read_bytes() for part in (tmp_path / "ds").rglob("*.parquet"))
    # Times without an offset are UTC; app and node count come from the dataset's name.
    assert runs.loc["r1", "start"] == pd.Timestamp("2024-03-01T10:00:00Z")
    assert runs.loc["r2", "start"] == pd.Timestamp("2024-03-01T10:00:00Z")
    assert (runs.loc["r1", "app"], runs.loc["r1", "num_nodes"], runs.loc["r1", "system"]) == ("milc", 128, "imported")
    assert pd.isna(runs.loc["r1", "num_steps"]) and pd.isna(runs.loc["r1", "job_id"])
    assert (neigh["job_id"] == "*").all()  # one row per user and run: all their jobs alongside it
    kept = run("import-neighbourhood", tmp_path / "runs.csv", tmp_path / "neigh.csv", "--out", tmp_path / "named",
               "--no-anonymise")
    assert kept.returncode == 0 and set(Dataset(tmp_path / "named").read("neighbourhood")["user"]) == {"alice", "bob"}
    assert any(b"alice" in part.read_bytes() for part in (tmp_path / "named").rglob("*.parquet"))  # the check sees names


def test_bad_rows_are_refused_with_file_and_line_and_nothing_is_written(tmp_path):
    runs = tmp_path / "runs.csv"
    runs.write_text("run_id,dataset,total_time_s,start,end\n"
                    "r1,milc-128,100,2024-03-01T10:00:00,2024-03-01T10:01:40\n"
                    "r2,milc-128,ninety,2024-03-01T11:00:00,2024-03-01T11:01:30\n"
                    "r3,milc-128,90,yesterday,2024-03-01T12:01:30\n"
                    "r1,milc-128,100,2024-03-01T10:00:00,2024-03-01T10:01:40\n")
    neigh = tmp_path / "neigh.csv"
    neigh.write_text("run_id,user,num_nodes\nr1,alice,512\nr9,bob,64\nr1,carol,-4\nr1,alice,512\n")
    out = run("import-neighbourhood", runs, neigh, "--out", tmp_path / "ds", "--salt-file", tmp_path / "salt")
    assert out.returncode == 2
    for where, what in ((f"{runs}:3", "total_time_s must be a number >= 0, found 'ninety'"),
                        (f"{runs}:4", "start is not an ISO 8601 time: 'yesterday'"),
                        (f"{runs}:5", "run 'r1' again (first at line 2)"),
                        (f"{neigh}:3", "unknown run 'r9' (not in runs.csv)"),
                        (f"{neigh}:4", "num_nodes must be a whole number >= 0, found '-4'"),
                        (f"{neigh}:5", "run 'r1', user 'alice' again (first at line 2)")):
        assert f"{where}: {what}" in out.stderr, (where, out.stderr)
    assert "6 bad row(s), nothing imported" in out.stderr
    assert not (tmp_path / "ds").exists()
    # A header without a required field is named; a run already in the dataset is refused whole.
    (tmp_path / "short.csv").write_text("run_id,dataset,total_time_s\nr1,milc-128,100\n")
    out = run("import-neighbourhood", tmp_path / "short.csv", neigh, "--out", tmp_path / "ds")
    assert out.returncode == 2 and f"{tmp_path / 'short.csv'}:1: header lacks start, end" in out.stderr
    good = tmp_path / "good.csv"
    good.write_text("run_id,user,num_nodes\nr1,alice,512\n")
    runs.write_text("run_id,dataset,total_time_s,start,end\nr1,milc-128,100,2024-03-01T10:00:00,2024-03-01T10:01:40\n")
    assert run("import-neighbourhood", runs, good, "--out", tmp_path / "ds", "--salt-file", tmp_path / "s").returncode == 0
    before = {p: p.read_bytes() for p in (tmp_path / "ds").rglob("*.parquet")}
    again = run("import-neighbourhood", runs, good, "--out", tmp_path / "ds", "--salt-file", tmp_path / "s")
    assert again.returncode == 2 and "runs already collated: ['r1']" in again.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "ds").rglob("*.parquet")} == before


@pytest.mark.parametrize("text,message", [
    ("run_id,dataset,total_time_s,start,end\nr1,x-1,100,2024-03-01T10:05:00,2024-03-01T10:00:00\n",
     "end 2024-03-01T10:00:00 is before start 2024-03-01T10:05:00"),
    ("run_id,dataset,total_time_s,start,end\nr1,x-1,0,2024-03-01T10:00:00,2024-03-01T10:01:00\n",
     "total_time_s must be > 0"),
    ("run_id,dataset,total_time_s,start,end\nr1,x-1,100,2024-03-01T10:00:00\n",
     "5 fields in the header, not as many in this row"),
])
def test_bad_run_rows(tmp_path, text, message):
    (tmp_path / "runs.csv").write_text(text)
    (tmp_path / "n.csv").write_text("run_id,user,num_nodes\n")
    out = run("import-neighbourhood", tmp_path / "runs.csv", tmp_path / "n.csv", "--out", tmp_path / "ds")
    assert out.returncode == 2 and f"{tmp_path / 'runs.csv'}:2: {message}" in out.stderr, out.stderr
