"""mpiP reports: every real sample, malformed variants of them, and the writer round trip."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from hpcvar.parsers import mpip
from hpcvar.parsers.errors import ParseError

CI = "mpiP-3.5.0_ci_mpi_workload.4.2586003.1.mpiP"
MILC = "mpiP-3.4.1_cori_milc_su3_rmd.128.16720.1.mpiP"

# Values read off the files: the '*' row of the MPI Time table, the summed Aggregate Time rows of
# the top routine, the summed Count of its Callsite Time statistics '*' rows, 'Callsites: N'.
EXPECTED = {
    MILC: dict(version="3.4.1", ntasks=128, app=4.27e4, mpi=1.06e4, pct=24.94, top="Wait",
               top_s=(3.23e6 + 3.08e6 + 6.77e3 + 683) / 1e3, top_count=2 * 21504 + 2 * 304051200, sites=12),
    "mpiP-3.5.0_aws-c6gn_clover_leaf.64.5895.1.mpiP": dict(
        version="3.5.0", ntasks=64, app=1.17e3, mpi=68.1, pct=5.81, top="Waitall",
        # 832 sites, only the top twenty in the aggregate table: awk sum of count x mean of the
        # 128 Waitall '*' rows is 28614.8 ms.
        top_s=28.6148, top_count=66944, sites=832),
    "mpiP-3.5.0_bitonic_32_32.mpiP": dict(version="3.5.0", ntasks=32, app=221, mpi=107, pct=48.56,
                                          top="File_write_at", top_s=37.2, top_count=27, sites=14),
    "mpiP-3.5.0_bitonic_40_8.mpiP": dict(version="3.5.0", ntasks=8, app=46, mpi=19.3, pct=41.99, top="Barrier",
                                         top_s=3.25 + 2.09 + 0.294, top_count=16, sites=14),
    "mpiP-3.5.0_bitonic_8_8.mpiP": dict(version="3.5.0", ntasks=8, app=138, mpi=31.8, pct=22.98, top="Barrier",
                                        top_s=12.7 + 1.98 + 0.255, top_count=16, sites=14),
    CI: dict(version="3.5.0", ntasks=4, app=1.8, mpi=1.65, pct=91.57, top="Allreduce",
             top_s=(416 + 406 + 394 + 383) / 1e3, top_count=200, sites=8),
}


def test_every_sample_has_expectations(samples: Path):
    assert sorted(p.name for p in (samples / "mpiP").glob("*.mpiP")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample(samples: Path, name: str):
    want = EXPECTED[name]
    report = mpip.read(samples / "mpiP" / name)
    assert report.version == want["version"]
    assert report.ntasks == want["ntasks"] == len(report.tasks)
    assert list(report.tasks["rank"]) == list(range(want["ntasks"]))
    assert report.app_time_s == pytest.approx(want["app"])
    assert report.mpi_time_s == pytest.approx(want["mpi"])
    assert report.mpi_pct == want["pct"]
    top = report.routines.iloc[0]
    assert top["routine"] == want["top"]
    assert top["time_s"] == pytest.approx(want["top_s"], rel=1e-3)
    assert top["count"] == want["top_count"]
    assert report.routines["sites"].sum() == want["sites"]
    assert report.callsites["site"].nunique() == want["sites"]
    # mpiP's per-site MPI% adds up to the whole MPI time, up to rounding to 2 decimals.
    assert report.routines["mpi_pct"].sum() == pytest.approx(100, abs=0.01 * want["sites"] + 0.1)
    assert not any(r.startswith("MPI_") for r in report.routines["routine"])


def test_milc_details(samples: Path):
    report = mpip.read(samples / "mpiP" / MILC)
    assert report.command == "/global/homes/d/dylanw/UCD_W16/MILC7_mpiP/ks_imp_dyn/su3_rmd"
    assert report.start == datetime(2016, 5, 4, 17, 44, 24)
    assert report.stop == datetime(2016, 5, 4, 17, 49, 58)
    rank28 = report.tasks.set_index("rank").loc[28]
    assert (rank28["host"], rank28["app_time_s"], rank28["mpi_time_s"], rank28["mpi_pct"]) == (
        "nid00152", 333, 94.3, 28.29)
    assert report.tasks["host"].iloc[127] == "nid00155"
    # 3.4 has no Count column: counts come from the callsite statistics.
    assert report.routines.set_index("routine").loc["Allreduce", "count"] == 101632 + 1024 + 4096 + 8422144
    site11 = report.callsites[(report.callsites["site"] == 11) & report.callsites["rank"].isna()].iloc[0]
    assert (site11["routine"], site11["count"], site11["max_ms"], site11["app_pct"], site11["mpi_pct"]) == (
        "Allreduce", 8422144, 40, 2.93, 11.73)
    assert (site11["file"], site11["line"], site11["parent"]) == ("com_mpi.c", 450, "g_vecdoublesum")
    assert len(report.callsites) == 12 * 128 + 12


def test_ci_callsite_locations(samples: Path):
    calls = mpip.read(samples / "mpiP" / CI).callsites.drop_duplicates("site").set_index("site")
    assert (calls.loc[1, "file"], calls.loc[1, "line"], calls.loc[1, "parent"]) == ("mpi_workload.c", 27, "main")
    assert (calls.loc[3, "file"], calls.loc[3, "parent"]) == ("0x79d9e602208c", "[unknown]")
    assert calls["line"].isna().sum() == 6


def test_describe(samples: Path):
    info = mpip.describe(samples / "mpiP" / CI)
    assert info["kind"] == "mpip" and info["format_version"] == "3.5.0"
    assert info["records"] == 4
    assert info["time_span"] == ["2026-08-13T04:27:14", "2026-08-13T04:27:15"]
    assert info["figures"]["top_routine"] == "Allreduce"
    assert info["figures"]["callsites"] == 8
    assert info["figures"]["mpi_pct"] == 91.57


def test_sniff(samples: Path):
    for path in sorted(p for p in samples.rglob("*") if p.is_file()):
        head = path.read_text(errors="replace")[:8192]
        assert mpip.sniff(head, path.name) == (path.suffix == ".mpiP"), path


# --- bad input -----------------------------------------------------------------------------


def _variant(samples: Path, tmp_path: Path, edit) -> tuple[Path, list[str]]:
    lines = (samples / "mpiP" / CI).read_text().splitlines()
    lines = edit(lines)
    path = tmp_path / "bad.mpiP"
    path.write_text("\n".join(lines) + "\n")
    return path, lines


def _line_of(lines: list[str], start: str) -> int:
    return next(i for i, line in enumerate(lines, start=1) if line.startswith(start))


def test_truncated_mid_table(samples: Path, tmp_path: Path):
    path, lines = _variant(samples, tmp_path, lambda lines: lines[:70])
    with pytest.raises(ParseError, match="End of Report") as err:
        mpip.read(path)
    assert err.value.line == 70


def test_missing_mpi_time_section(samples: Path, tmp_path: Path):
    def drop(lines):
        start = _line_of(lines, "@--- MPI Time")
        end = _line_of(lines, "@--- Callsites")
        return lines[:start - 1] + lines[end - 1:]

    path, lines = _variant(samples, tmp_path, drop)
    with pytest.raises(ParseError, match="MPI Time") as err:
        mpip.read(path)
    assert err.value.line == _line_of(lines, "@--- Callsites")


def test_non_numeric_task_time(samples: Path, tmp_path: Path):
    path, lines = _variant(samples, tmp_path, lambda ls: [l.replace("0.417", "0.4x7") for l in ls])
    with pytest.raises(ParseError, match="MPITime") as err:
        mpip.read(path)
    assert err.value.line == _line_of(lines, "   1      0.449")


def test_missing_column_in_row(samples: Path, tmp_path: Path):
    path, lines = _variant(samples, tmp_path, lambda ls: [l.replace("   0.00", "") if l.startswith("Recv ") else l
                                                           for l in ls])
    with pytest.raises(ParseError, match="expected 7 columns") as err:
        mpip.read(path)
    assert err.value.line == _line_of(lines, "Recv ")


def test_bad_value_after_blank_lines_names_its_line(samples: Path, tmp_path: Path):
    """The callsite statistics separate sites by blank lines; a bad value deep in the table is
    reported on the file's own line, not on its row's index."""
    path, lines = _variant(samples, tmp_path, lambda ls: [l.replace("0.0497", "0.04x7") for l in ls])
    with pytest.raises(ParseError, match="'Mean'") as err:
        mpip.read(path)
    assert err.value.line == _line_of(lines, "Send                 8    3")


def test_callsite_count_mismatch(samples: Path, tmp_path: Path):
    path, lines = _variant(samples, tmp_path, lambda ls: [l for l in ls if not l.startswith("  8   0")])
    with pytest.raises(ParseError, match="announces 8 callsites") as err:
        mpip.read(path)
    assert err.value.line == _line_of(lines, "@--- Callsites")


def test_wrong_format(samples: Path):
    with pytest.raises(ParseError, match="@ mpiP") as err:
        mpip.read(samples / "reframe" / "perflogs" / "reframe4.10.4_generated_generic_default_MiniViteRGG.log")
    assert err.value.line == 1


# --- writer --------------------------------------------------------------------------------


def _g3(value: float) -> float:
    """A number as mpiP prints it (%.3g)."""
    return float("%.3g" % value)


def _synthetic(nranks: int, routines: list[str]):
    app = [100.0 + 0.37 * r for r in range(nranks)]
    times = {name: [0.01 * (k + 1) * (1 + (r % 7) / 10) for r in range(nranks)] for k, name in enumerate(routines)}
    counts = {name: [10 * (k + 1) + r % 3 for r in range(nranks)] for k, name in enumerate(routines)}
    return app, times, counts


def test_write_round_trip(tmp_path: Path):
    routines = ["MPI_Allreduce", "Waitall", "Isend", "Irecv", "Barrier", "Bcast", "Reduce", "Alltoall", "Send",
                "Recv"]
    app, times, counts = _synthetic(128, routines)
    times["Unused"], counts["Unused"] = [0.0] * 128, [0] * 128
    hosts = [f"nid{r // 32:05d}" for r in range(128)]
    start, stop = datetime(2024, 3, 1, 12, 0, 0), datetime(2024, 3, 1, 12, 2, 30)
    path = tmp_path / "app.128.4242.1.mpiP"
    mpip.write(path, command="./app -n 3", hosts=hosts, app_time_s=app, routine_time_s=times,
               routine_count=counts, start=start, stop=stop, pid=4242)

    report = mpip.read(path)
    mpi = [sum(times[name][r] for name in times) for r in range(128)]
    assert (report.version, report.command, report.start, report.stop) == ("3.5.0", "./app -n 3", start, stop)
    assert report.ntasks == 128
    assert list(report.tasks["host"]) == hosts
    assert list(report.tasks["app_time_s"]) == [_g3(a) for a in app]
    assert list(report.tasks["mpi_time_s"]) == [_g3(m) for m in mpi]
    assert report.app_time_s == _g3(sum(app)) and report.mpi_time_s == _g3(sum(mpi))
    got = report.routines.set_index("routine")
    assert sorted(got.index) == sorted(r.removeprefix("MPI_") for r in routines)
    for name in routines:
        short = name.removeprefix("MPI_")
        assert got.loc[short, "time_s"] == pytest.approx(_g3(sum(times[name]) * 1e3) / 1e3, rel=1e-12)
        assert got.loc[short, "count"] == sum(counts[name])
        assert got.loc[short, "sites"] == 1
    assert report.routines["mpi_pct"].sum() == pytest.approx(100, abs=0.05)
    assert len(report.callsites) == 10 * 128 + 10
    assert mpip.describe(path)["figures"]["routines"] == 10


def test_write_beyond_top_twenty(tmp_path: Path):
    """Sites outside mpiP's top-twenty aggregate table still reach the routine totals."""
    routines = [f"Routine{k:02d}" for k in range(25)]
    app, times, counts = _synthetic(4, routines)
    path = tmp_path / "wide.mpiP"
    mpip.write(path, command="./wide", hosts=["n0"] * 4, app_time_s=app, routine_time_s=times,
               routine_count=counts, start=datetime(2024, 1, 1), stop=datetime(2024, 1, 1, 0, 1))
    got = mpip.read(path).routines.set_index("routine")
    assert len(got) == 25
    for name in routines:
        assert got.loc[name, "time_s"] == pytest.approx(sum(times[name]), rel=5e-3)
        assert got.loc[name, "count"] == sum(counts[name])


def test_write_layout_matches_sample(tmp_path: Path, samples: Path):
    """Section headings and column headers are mpiP 3.5's, character for character."""
    app, times, counts = _synthetic(4, ["Allreduce", "Send"])
    path = tmp_path / "x.mpiP"
    mpip.write(path, command="/tmp/mpi_workload", hosts=["ci-github"] * 4, app_time_s=app, routine_time_s=times,
               routine_count=counts, start=datetime(2026, 8, 13, 4, 27, 14), stop=datetime(2026, 8, 13, 4, 27, 15))
    written = path.read_text().splitlines()
    sample = (samples / "mpiP" / CI).read_text().splitlines()
    for start in ("@--- MPI Time", "Task ", "@--- Aggregate Time", "Call ", "Name ", "@--- End of Report",
                  "@ Command", "@ Start time", "@ MPI Task Assignment      : 3"):
        assert next(l for l in written if l.startswith(start)) == next(l for l in sample if l.startswith(start))
    assert written[-1] == sample[-1] == "-" * 75


def test_write_rejects_inconsistent_input(tmp_path: Path):
    with pytest.raises(ValueError, match="per-rank"):
        mpip.write(tmp_path / "x.mpiP", command="x", hosts=["a", "b"], app_time_s=[1.0, 1.0],
                   routine_time_s={"Send": [0.1]}, routine_count={"Send": [1]},
                   start=datetime(2024, 1, 1), stop=datetime(2024, 1, 1))


def test_one_profile_per_run_from_several_launches(samples: Path, tmp_path: Path):
    """A job that launches the application several times (miniVite's repetitions) leaves one
    report per launch: collation sums them per routine; one report stays as mpiP wrote it."""
    from hpcvar.collate import _mpi_profile

    src = samples / "mpiP" / MILC
    one = _mpi_profile("r", [src])
    rep = mpip.read(src)
    assert list(one["time_s"]) == list(rep.routines["time_s"]) and list(one["mpi_pct"]) == list(rep.routines["mpi_pct"])
    copies = []
    for i in (1, 2):
        copies.append(tmp_path / f"app.{i}.mpiP")
        copies[-1].write_bytes(src.read_bytes())
    two = _mpi_profile("r", copies).set_index("routine")
    single = one.set_index("routine")
    assert two["time_s"].to_dict() == pytest.approx((2 * single["time_s"]).to_dict())
    assert two["calls"].to_dict() == (2 * single["calls"]).to_dict()
    assert two["app_time_s"].iloc[0] == pytest.approx(2 * rep.app_time_s)
    assert two["mpi_time_s"].iloc[0] == pytest.approx(2 * rep.mpi_time_s)
    # Each routine's share of the summed MPI time: what one launch's report says, to its rounding.
    assert two["mpi_pct"].to_dict() == pytest.approx((100 * single["time_s"] / rep.mpi_time_s).to_dict())
    assert set(two["ntasks"]) == {rep.ntasks}
