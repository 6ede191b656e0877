"""ReFrame perflogs (3.x and 4.x) and JSON run reports: real samples, bad input, writer."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from hpcvar.parsers import reframe
from hpcvar.parsers.errors import ParseError

V4_LOG = "reframe4.10.4_generated_generic_default_MiniViteRGG.log"
REPORT = "reframe4.10.4_generated_run-report.json"
REMHOS = "Remhos_Remhos2DRemapArchComparisonTest_remhos_1_0_gcc_10_3_0_N_1_MPI_{}_OMP_1"
MINITRI = "miniTri_ca-GrQc_minitri__arm_21_0_0_879_N_1_MPI_1_OMP_1"

# Per 3.7 sample: test, partition, [(completion time, jobid, Total Time)], read off the lines.
V3_SAMPLES = {
    f"reframe3.7_c5n_{REMHOS.format(16)}.log": (REMHOS.format(16), "c5n", [
        ("2021-07-14T15:59:59", "43", 5.3), ("2021-07-14T16:05:45", "115", 3.97)]),
    f"reframe3.7_c5n_{REMHOS.format(32)}.log": (REMHOS.format(32), "c5n", [
        ("2021-07-14T16:00:00", "44", 6.09), ("2021-07-14T16:05:49", "116", 5.07)]),
    f"reframe3.7_c6gn_{REMHOS.format(16)}.log": (REMHOS.format(16), "c6gn", [("2021-07-14T15:47:55", "658", 3.76)]),
    f"reframe3.7_c6gn_{REMHOS.format(32)}.log": (REMHOS.format(32), "c6gn", [("2021-07-14T15:47:55", "659", 4.04)]),
    f"reframe3.7_c6gn_{MINITRI}.log": (MINITRI, "c6gn", [
        ("2021-07-15T17:04:50", "149", 0.169483), ("2021-07-15T17:37:04", "166", 0.16961)]),
}
# MiniViteRGG, 2 parameters x 3 repeats, in file order.
V4_JOBS = ["15287", "15290", "15302", "15314", "15330", "15336"]
V4_AVG_TOTAL_TIME = [2.73037, 2.29695, 2.44321, 1.27055, 1.21019, 1.12787]
V4_ITERATIONS = [18, 17, 18, 15, 15, 17]


def test_every_perflog_sample_has_expectations(samples: Path):
    names = {p.name for p in (samples / "reframe" / "perflogs").glob("*.log")}
    assert names == set(V3_SAMPLES) | {V4_LOG}


@pytest.mark.parametrize("name", sorted(V3_SAMPLES))
def test_v3_sample(samples: Path, name: str):
    test, partition, records = V3_SAMPLES[name]
    frame = reframe.read(samples / "reframe" / "perflogs" / name)
    assert len(frame) == len(records)
    assert set(frame["test"]) == {test}
    assert set(frame["system"]) == {"aws"} and set(frame["partition"]) == {partition}
    assert set(frame["environ"]) == {"builtin"} and set(frame["variable"]) == {"Total Time"}
    assert set(frame["unit"]) == {"s"} and set(frame["version"]) == {"reframe 3.7.0-dev.3+34ee3d0b"}
    assert list(frame["time"]) == [pd.Timestamp(t) for t, _, _ in records]
    assert list(frame["job_id"]) == [j for _, j, _ in records]
    assert list(frame["value"]) == [v for _, _, v in records]
    assert (frame["reference"] == 0).all()
    assert frame[["lower_thres", "upper_thres", "result"]].isna().all().all()
    info = reframe.describe(samples / "reframe" / "perflogs" / name)
    assert (info["kind"], info["format_version"], info["records"]) == ("reframe_perflog", "3.x", len(records))
    assert info["time_span"] == [min(t for t, _, _ in records), max(t for t, _, _ in records)]


def test_v4_sample(samples: Path):
    frame = reframe.read_perflog(samples / "reframe" / "perflogs" / V4_LOG)
    assert len(frame) == 18
    assert list(frame.columns[:13]) == reframe.COLUMNS
    assert list(frame["variable"][:3]) == ["avg_total_time", "modularity", "iterations"]
    by_var = {var: group for var, group in frame.groupby("variable", sort=False)}
    assert list(by_var["avg_total_time"]["value"]) == V4_AVG_TOTAL_TIME
    assert list(by_var["iterations"]["value"]) == V4_ITERATIONS
    assert by_var["modularity"]["value"].iloc[0] == 0.740045
    assert list(by_var["avg_total_time"]["job_id"]) == V4_JOBS
    assert set(by_var["avg_total_time"]["unit"]) == {"s"} and set(by_var["iterations"]["unit"]) == {""}
    assert list(by_var["avg_total_time"]["test"]) == ["MiniViteRGG %nv=20000"] * 3 + ["MiniViteRGG %nv=40000"] * 3
    first = frame.iloc[0]
    assert first["time"] == pd.Timestamp("2026-11-22T06:34:31")
    assert (first["system"], first["partition"], first["environ"], first["result"]) == (
        "generic", "default", "builtin", "pass")
    assert (first["reference"], pd.isna(first["lower_thres"]), pd.isna(first["upper_thres"])) == (0, True, True)
    # Every other field is kept as a string, nulls as NA.
    assert (first["nodelist"], first["num_tasks"], first["nv"], first["short_name"]) == (
        "vm", "2", "20000", "MiniViteRGG_01cad29e")
    assert json.loads(first["env_vars"])["OMP_NUM_THREADS"] == "1"
    assert pd.isna(first["num_gpus_per_node"]) and first["descr"] == ""


def test_v4_describe(samples: Path):
    info = reframe.describe(samples / "reframe" / "perflogs" / V4_LOG)
    assert info == {"kind": "reframe_perflog", "format_version": "4.x", "records": 6,
                    "time_span": ["2026-11-22T06:34:31", "2026-11-22T06:34:36"],
                    "figures": {"tests": 2, "variables": 3, "values": 18, "pass": 6, "fail": 0}}


def test_report_sample(samples: Path):
    path = samples / "reframe" / "json_reports" / REPORT
    frame = reframe.read(path)
    assert len(frame) == 18
    assert list(frame.columns[:13]) == reframe.COLUMNS
    perf = frame[frame["variable"] == "avg_total_time"]
    assert list(perf["value"]) == V4_AVG_TOTAL_TIME
    assert list(perf["job_id"]) == V4_JOBS
    assert list(perf["test"])[:2] == ["MiniViteRGG %nv=20000 %.repeat_no=0", "MiniViteRGG %nv=20000 %.repeat_no=1"]
    first = frame.iloc[0]
    # "2026-11-22T06:34:31+00:00" in the report: the same instant as the perflog's time.
    assert first["time"] == pd.Timestamp("2026-11-22T06:34:31")
    assert (first["system"], first["partition"], first["environ"], first["result"]) == (
        "generic", "default", "builtin", "pass")
    assert (first["nodelist"], first["name"], first["num_tasks"]) == ("vm", "MiniViteRGG %nv=20000", "2")
    assert first["executable_opts"] == "--oversubscribe,-np,2,/opt/minivite/miniVite,-n,20000,-p,3"
    assert frame["fail_reason"].isna().all()
    info = reframe.describe(path)
    assert (info["kind"], info["format_version"], info["records"]) == ("reframe_report", "4.2", 6)
    assert info["figures"] == {"tests": 6, "variables": 3, "values": 18, "pass": 6, "fail": 0}


def test_report_matches_perflog(samples: Path):
    """The run report and the perflog of the same session carry the same values."""
    cols = ["time", "system", "partition", "environ", "job_id", "result", "variable", "value", "unit",
            "reference", "nodelist", "num_tasks", "env_vars", "short_name"]
    log = reframe.read(samples / "reframe" / "perflogs" / V4_LOG)[cols]
    report = reframe.read(samples / "reframe" / "json_reports" / REPORT)[cols]
    pd.testing.assert_frame_equal(log, report)


def test_sniff(samples: Path):
    mine = {samples / "reframe" / "json_reports" / REPORT, *(samples / "reframe" / "perflogs").glob("*.log")}
    for path in sorted(p for p in samples.rglob("*") if p.is_file()):
        head = path.read_text(errors="replace")[:8192]
        assert reframe.sniff(head, path.name) == (path in mine), path


# --- several header sections, synthetic (ReFrame 4.0-4.5 default format) ------------------

MULTI_HEADER = """\
job_completion_time|version|display_name|system|partition|environ|jobid|result|bw_value|bw_unit|bw_ref|bw_lower_thres|bw_upper_thres
2023-09-01T10:00:00+02:00|reframe 4.3.2|OSU %size=1024|daint|gpu|gnu|4711|pass|9.5|GB/s|10|-0.1|None
job_completion_time|version|display_name|system|partition|environ|jobid|result|bw_value|bw_unit|bw_ref|bw_lower_thres|bw_upper_thres|lat_value|lat_unit|lat_ref|lat_lower_thres|lat_upper_thres|image_digest
2023-09-02T10:00:00+02:00|reframe 4.3.2|OSU %size=1024|daint|gpu|gnu|4712|fail|7.5|GB/s|10|-0.1|None|2.5|us|2|None|0.1|sha256:ab12
"""


def test_repeated_header_starts_new_section(tmp_path: Path):
    path = tmp_path / "osu.log"
    path.write_text(MULTI_HEADER)
    frame = reframe.read(path)
    assert list(frame["variable"]) == ["bw", "bw", "lat"]
    assert list(frame["value"]) == [9.5, 7.5, 2.5]
    assert list(frame["job_id"]) == ["4711", "4712", "4712"]
    assert list(frame["result"]) == ["pass", "fail", "fail"]
    assert list(frame["time"]) == [pd.Timestamp("2023-09-01T08:00:00")] + [pd.Timestamp("2023-09-02T08:00:00")] * 2
    assert list(frame["reference"]) == [10, 10, 2]
    assert list(frame["lower_thres"].fillna(99)) == [-0.1, -0.1, 99]
    assert list(frame["upper_thres"].fillna(99)) == [99, 99, 0.1]
    assert frame["image_digest"].isna().tolist() == [True, False, False]
    assert frame["image_digest"].iloc[2] == "sha256:ab12"
    assert set(frame["version"]) == {"reframe 4.3.2"}
    assert reframe.describe(path)["figures"] == {"tests": 1, "variables": 2, "values": 3, "pass": 1, "fail": 1}


# --- bad input -----------------------------------------------------------------------------


def _bad(tmp_path: Path, text: str, name: str = "bad.log") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_wrong_field_count(tmp_path: Path):
    lines = MULTI_HEADER.splitlines()
    lines[1] = lines[1].rsplit("|", 1)[0]
    with pytest.raises(ParseError, match="expected 13 '\\|'-separated fields as named by the header on line 1") as err:
        reframe.read(_bad(tmp_path, "\n".join(lines)))
    assert err.value.line == 2


def test_non_numeric_value(tmp_path: Path):
    with pytest.raises(ParseError, match="lat_value") as err:
        reframe.read(_bad(tmp_path, MULTI_HEADER.replace("|2.5|us|", "|fast|us|")))
    assert err.value.line == 4


def test_missing_column(tmp_path: Path):
    text = MULTI_HEADER.replace("job_completion_time|version", "completed|version")
    with pytest.raises(ParseError, match="job_completion_time") as err:
        reframe.read(_bad(tmp_path, text))
    assert err.value.line == 1


def test_bad_time(tmp_path: Path):
    with pytest.raises(ParseError, match="ISO 8601") as err:
        reframe.read(_bad(tmp_path, MULTI_HEADER.replace("2023-09-02T10:00:00+02:00", "yesterday")))
    assert err.value.line == 4


def test_malformed_v3_key_value(samples: Path, tmp_path: Path):
    text = (samples / "reframe" / "perflogs" / f"reframe3.7_c6gn_{MINITRI}.log").read_text()
    with pytest.raises(ParseError, match="key=value") as err:
        reframe.read(_bad(tmp_path, text.replace("jobid=166", "jobid 166")))
    assert err.value.line == 2


def test_malformed_v3_check_info(samples: Path, tmp_path: Path):
    text = (samples / "reframe" / "perflogs" / f"reframe3.7_c6gn_{MINITRI}.log").read_text()
    with pytest.raises(ParseError, match="on <system>:<partition>") as err:
        reframe.read(_bad(tmp_path, text.replace("on aws:c6gn using", "at aws")))
    assert err.value.line == 1


def test_truncated_v3_line(samples: Path, tmp_path: Path):
    text = (samples / "reframe" / "perflogs" / f"reframe3.7_c6gn_{MINITRI}.log").read_text()
    with pytest.raises(ParseError, match="ref=<ref>") as err:
        reframe.read_perflog(_bad(tmp_path, text[:-40]))
    assert err.value.line == 2


def test_not_a_perflog(samples: Path, tmp_path: Path):
    console = samples / "reframe" / "console" / "reframe4.10.4_generated_console_with_ansi.txt"
    with pytest.raises(ParseError, match="expected a ReFrame perflog") as err:
        reframe.read(console)
    assert err.value.line == 1
    with pytest.raises(ParseError, match="empty"):
        reframe.read_perflog(_bad(tmp_path, "\n"))
    with pytest.raises(ParseError, match="no records"):
        reframe.read_perflog(_bad(tmp_path, MULTI_HEADER.splitlines()[0] + "\n"))


def test_invalid_json(samples: Path, tmp_path: Path):
    text = (samples / "reframe" / "json_reports" / REPORT).read_text()
    cut = text[:3000]
    with pytest.raises(ParseError, match="invalid JSON") as err:
        reframe.read(_bad(tmp_path, cut, "report.json"))
    assert err.value.line == cut.count("\n") + 1


def test_report_missing_runs(samples: Path, tmp_path: Path):
    doc = json.loads((samples / "reframe" / "json_reports" / REPORT).read_text())
    del doc["runs"]
    with pytest.raises(ParseError, match="'runs' list"):
        reframe.read(_bad(tmp_path, json.dumps(doc), "report.json"))


def test_report_non_numeric_value(samples: Path, tmp_path: Path):
    doc = json.loads((samples / "reframe" / "json_reports" / REPORT).read_text())
    doc["runs"][0]["testcases"][1]["perfvalues"]["generic:default:modularity"][0] = "n/a"
    with pytest.raises(ParseError, match=r"runs\[0\].testcases\[1\] modularity value"):
        reframe.read(_bad(tmp_path, json.dumps(doc), "report.json"))


def test_report_v3_layout_and_failed_case(tmp_path: Path):
    """3.x reports: 'system' is 'sys:part', 'environment', success/failure, a 'perfvars' list."""
    case = {"name": "Stream", "display_name": "Stream %n=1", "system": "daint:mc", "environment": "gnu",
            "jobid": "99", "nodelist": ["nid001", "nid002"], "result": "success", "fail_reason": None,
            "job_completion_time": "2022-05-01T10:00:00+00:00",
            "perfvars": [{"name": "triad", "value": 81.5, "reference": 80, "thres_lower": -0.1,
                          "thres_upper": None, "unit": "GB/s"}]}
    failed = {**case, "jobid": "100", "result": "failure", "fail_reason": "sanity error", "perfvars": None}
    doc = {"session_info": {"data_version": "2.1"}, "runs": [{"runid": 0, "testcases": [case, failed]}]}
    frame = reframe.read(_bad(tmp_path, json.dumps(doc), "report.json"))
    assert list(frame["result"]) == ["pass", "fail"]
    assert (frame["system"].iloc[0], frame["partition"].iloc[0], frame["environ"].iloc[0]) == ("daint", "mc", "gnu")
    assert (frame["variable"].iloc[0], frame["value"].iloc[0], frame["lower_thres"].iloc[0]) == ("triad", 81.5, -0.1)
    assert frame["nodelist"].iloc[0] == "nid001,nid002"
    assert pd.isna(frame["variable"].iloc[1]) and frame["fail_reason"].iloc[1] == "sanity error"
    assert reframe.describe(_bad(tmp_path, json.dumps(doc), "report.json"))["format_version"] == "2.1"


def test_a_retried_failure_gives_way_to_its_retry():
    """A real report of `--max-retries=1` (tests/captured/reframe/SOURCES.md): the first run holds
    both cases, one failed; the second run only the retry, passed. What counts is what ReFrame
    itself counts (its session_info: 2 cases, 0 failures): the retry and the case that passed at
    once, not the last run alone (which would lose the case that passed at once)."""
    path = Path(__file__).parent / "captured" / "reframe" / "reframe4.10.4_retry_run-report.json"
    doc = json.loads(path.read_text())
    assert [len(r["testcases"]) for r in doc["runs"]] == [2, 1]
    cases = reframe.final_attempts(doc["runs"])
    assert sorted((c["name"], c["result"]) for c in cases) == [("FailsOnce", "pass"), ("PassesAtOnce", "pass")]
    info = doc["session_info"]
    assert len(cases) == info["num_cases"] and sum(c["result"] == "fail" for c in cases) == info["num_failures"]
    values = {c["name"]: c["perfvalues"]["local:default:total_time"][0] for c in cases}
    assert values == {"FailsOnce": 1.5, "PassesAtOnce": 2.5}
    # A failure on the last attempt stays (ReFrame counts it too).
    failed_again = [doc["runs"][0], {**doc["runs"][1], "testcases": [doc["runs"][0]["testcases"][0]]}]
    assert sorted((c["name"], c["result"]) for c in reframe.final_attempts(failed_again)) == [
        ("FailsOnce", "fail"), ("PassesAtOnce", "pass")]


# --- writer --------------------------------------------------------------------------------

FIELDS = ["job_completion_time", "version", "display_name", "system", "partition", "environ", "jobid",
          "result", "perfvalues", "job_nodelist", "num_tasks", "image_digest"]


def _record(job: int, value: float, when: datetime) -> dict:
    return {"job_completion_time": when, "version": "reframe 4.10.4", "display_name": "MILC %nodes=128",
            "system": "sim", "partition": "compute", "environ": "gnu", "jobid": job, "result": "pass",
            "job_nodelist": ["nid00001", "nid00002"], "num_tasks": 4096, "image_digest": None,
            "perfvalues": {"sim:compute:total_time": (value, 300, -0.1, 0.1, "s"),
                           "sim:compute:comm_time": (value / 3, None, None, None, "s")}}


def test_write_round_trip(tmp_path: Path):
    path = tmp_path / "sim" / "compute"
    path.mkdir(parents=True)
    path = path / "MILC_1a2b3c4d.log"
    when = datetime(2024, 5, 1, 12, 0, 1)
    reframe.write_perflog(path, [_record(101, 312.25, when)], FIELDS)
    reframe.write_perflog(path, [_record(102, 0.1 + 0.2, when.replace(second=2))], FIELDS)
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    assert lines[0] == ("job_completion_time|version|display_name|system|partition|environ|jobid|result|"
                        "total_time_value|total_time_unit|total_time_ref|total_time_lower_thres|"
                        "total_time_upper_thres|comm_time_value|comm_time_unit|comm_time_ref|"
                        "comm_time_lower_thres|comm_time_upper_thres|job_nodelist|num_tasks|image_digest")
    assert lines[1] == ("2024-05-01T12:00:01|reframe 4.10.4|MILC %nodes=128|sim|compute|gnu|101|pass|"
                        "312.25|s|300|-0.1|0.1|104.08333333333333|s|None|None|None|nid00001,nid00002|4096|null")

    frame = reframe.read(path)
    assert list(frame["variable"]) == ["total_time", "comm_time"] * 2
    assert list(frame["value"]) == [312.25, 312.25 / 3, 0.1 + 0.2, (0.1 + 0.2) / 3]
    assert list(frame["reference"].fillna(-1)) == [300, -1, 300, -1]
    assert list(frame["lower_thres"].fillna(-1)) == [-0.1, -1, -0.1, -1]
    assert list(frame["time"]) == [pd.Timestamp(when)] * 2 + [pd.Timestamp(when.replace(second=2))] * 2
    assert list(frame["job_id"]) == ["101", "101", "102", "102"]
    assert set(frame["nodelist"]) == {"nid00001,nid00002"} and set(frame["num_tasks"]) == {"4096"}
    assert frame["image_digest"].isna().all()
    assert set(frame["test"]) == {"MILC %nodes=128"} and set(frame["unit"]) == {"s"}


def test_write_reproduces_reframe_sample(samples: Path, tmp_path: Path):
    """Fed the sample's own fields, the writer produces ReFrame 4.10.4's file byte for byte."""
    sample = samples / "reframe" / "perflogs" / V4_LOG
    header, *rows = sample.read_text().splitlines()
    names = header.split("|")
    start = names.index("avg_total_time_value")
    fields = names[:start] + ["perfvalues"] + names[start + 15:]
    records = []
    for row in rows:
        values = row.split("|")
        record = dict(zip(names, values))
        perf = values[start:start + 15]
        record["perfvalues"] = {var: (v, ref, lo, up, unit) for var, (v, unit, ref, lo, up) in
                                zip(["avg_total_time", "modularity", "iterations"],
                                    [perf[i:i + 5] for i in range(0, 15, 5)])}
        records.append(record)
    out = tmp_path / V4_LOG
    reframe.write_perflog(out, records, fields)
    assert out.read_text() == sample.read_text()


def test_write_header_change_keeps_old_file(tmp_path: Path):
    path = tmp_path / "t.log"
    reframe.write_perflog(path, [_record(1, 1.0, datetime(2024, 1, 1))], FIELDS)
    reframe.write_perflog(path, [_record(2, 2.0, datetime(2024, 1, 2))], FIELDS[:-1])
    assert list(reframe.read(tmp_path / "t.log.h0")["job_id"].unique()) == ["1"]
    frame = reframe.read(path)
    assert list(frame["job_id"].unique()) == ["2"] and "image_digest" not in frame.columns


def test_write_rejects_separator_in_value(tmp_path: Path):
    record = _record(1, 1.0, datetime(2024, 1, 1))
    record["display_name"] = "a|b"
    with pytest.raises(ValueError, match="'\\|'"):
        reframe.write_perflog(tmp_path / "t.log", [record], FIELDS)

