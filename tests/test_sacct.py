"""Slurm sacct reader/writer: real dumps, layouts, round trips and bad input."""

from __future__ import annotations

import math
import tempfile
from datetime import datetime
from pathlib import Path

import hostlist
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcvar.parsers import sacct
from hpcvar.parsers.errors import ParseError

SACCT_DIR = Path("slurm") / "sacct"


def sample(samples: Path, name: str) -> Path:
    return samples / SACCT_DIR / name


def row(df: pd.DataFrame, job_id: str, step: str | None = None, nth: int = 0) -> pd.Series:
    match = df[(df["job_id"] == job_id) & (df["step"].isna() if step is None else df["step"] == step)]
    return match.iloc[nth]


# --------------------------------------------------------------------------------------------
# Real samples: every file in the folder is covered by one of these checks.


def check_simple(path: Path) -> None:
    df = sacct.read(path)
    assert len(df) == 4 and df["step"].isna().all()
    assert df["line"].tolist() == [2, 3, 4, 5]
    # '|' inside JobName: 28 and 27 fields for 26 header names, given to JobName
    assert df["job_name"].tolist() == ["job_00001", "job_0||0002", "job_0|0003", "job_|00004"]
    assert row(df, "1")["elapsed_s"] == 23 * 3600 + 33 * 60 + 25
    assert (df["timelimit_s"] == 3 * 86400).all()
    assert row(df, "3")["node_list"] == ["b002", "b003"]
    assert row(df, "3")["node_list_raw"] == "b[002-003]"
    assert df["node_count"].tolist() == [1, 1, 2, 2]
    assert df["ncpus"].tolist() == [32, 32, 18, 18]
    assert df["user"].nunique() == 3
    assert row(df, "4")["end"] == pd.Timestamp("2021-12-10T14:56:54")
    assert (df["NTasks"] == "").all() and (df["ReqMem"] == ["500G", "187000M", "500G", "500G"]).all()
    info = sacct.describe(path)
    assert info["format_version"] == "parsable2" and info["records"] == 4
    assert info["time_span"] == ["2021-12-10T14:23:28", "2021-12-11T13:56:53"]
    assert info["figures"] == {"jobs": 4, "steps": 0, "users": 3, "states": "COMPLETED 4",
                               "max_node_count": 2}


def check_simple_expected(path: Path) -> None:
    # Not sacct output: the upstream project's pandas to_csv of the cleaned log, with quoted
    # job names ('"job_0||0002"') and '2021-12-10 14:23:28' timestamps. Used as the reference
    # in test_simple_matches_upstream_expected; as a sacct dump it must be rejected.
    assert sacct.sniff(path.read_text()[:8192], path.name)
    with pytest.raises(ParseError) as err:
        sacct.read(path)
    assert err.value.line == 3 and "JobName" in err.value.message


def check_submitline(path: Path) -> None:
    df = sacct.read(path)
    assert len(df) == 13
    # the record at line 8 holds a 5-line SubmitLine, so the next record starts at line 13
    assert df["line"].tolist() == [2, 3, 4, 5, 6, 7, 8, 13, 14, 15, 16, 17, 18]
    step1 = row(df, "9067954", "1")
    assert step1["SubmitLine"].count("\n") == 4
    assert step1["SubmitLine"].startswith("srun --nodes=16 --ntasks-per-node=1")
    assert step1["SubmitLine"].endswith("   fi")
    assert step1["TotalCPU"] == "00:00.202" and step1["elapsed_s"] == 0
    alloc = row(df, "9067954")
    assert alloc["node_count"] == 16 and len(alloc["node_list"]) == 16
    assert alloc["node_list"][:3] == ["cpn-q06-04-01", "cpn-q06-04-02", "cpn-q07-04-01"]
    assert alloc["state"] == "COMPLETED" and alloc["elapsed_s"] == 2 * 3600 + 40 * 60
    assert alloc["Constraints"] == "[q06*2&q07*2&q08*2&q09*2&u22*2&u23*2&u24*2&u25*2]"
    assert row(df, "9067954", "batch")["node_list"] == ["cpn-q06-04-01"]
    qlogin = row(df, "7957382")
    assert qlogin["state"] == "CANCELLED" and qlogin["cancelled_by"] == 75200
    # the same SubmitLine holds '|' ("env | grep SLURM | sed ..."): 110 fields for 109 names
    assert qlogin["SubmitLine"].endswith("--wrap=env | grep SLURM | sed 's/^/export /g'; sleep 24h")
    assert row(df, "7957382", "batch")["exit_code"] == "0:15"
    # '|' in Constraints and JobName at once (lines 15-18), resolved by the typed fields
    variants = df[df["line"] >= 15]
    assert variants["Constraints"].tolist() == ["cpu-a|cpu-b", "cpu-a|cpu-b", "cpu-a|cpu-b|gpu",
                                                "cpu-a|cpu-b|gpu|"]
    assert variants["job_name"].tolist() == ["qlogin", "qlo|gin", "qlogin|", "qlo|gin|"]
    assert (variants["elapsed_s"] == 56).all() and (variants["uid"] == 75200).all()
    info = sacct.describe(path)
    assert info["figures"] == {"jobs": 2, "steps": 7, "users": 2,
                               "states": "COMPLETED 1, CANCELLED 1", "max_node_count": 16}
    assert info["time_span"] == ["2021-10-05T11:26:12", "2022-07-31T14:32:36"]


def check_dump2101(path: Path) -> None:
    # Line 16 is a fragment: the last 74 of 107 fields of some record (it starts at JobName;
    # Account..JobIDRaw are missing). No rule can place it, so the file is refused at line 16.
    with pytest.raises(ParseError) as err:
        sacct.read(path)
    assert err.value.line == 16 and "74 fields" in err.value.message
    # Everything before the fragment parses.
    with tempfile.TemporaryDirectory() as tmp:
        head = Path(tmp) / "dump2101_head.log"
        head.write_text("".join(path.read_text().splitlines(keepends=True)[:15]))
        df = sacct.read(head)
        info = sacct.describe(head)
    assert len(df) == 14 and len(df.columns) == 113  # 107 fields, JobID/State/NodeList split
    first = row(df, "4744528_255")
    assert (first["array_job_id"], first["array_task_id"], first["job_id_raw"]) == \
        ("4744528", "255", "4745200")
    assert first["state"] == "CANCELLED" and first["cancelled_by"] == 89200431
    assert first["node_list"] == [] and first["node_list_raw"] == "None assigned"
    assert first["timelimit_s"] == 2 * 86400 and first["Reason"] == "JobHeldUser"
    assert (df["state"] == "CANCELLED").sum() == 6
    assert row(df, "4822203", "extern")["state"] == "OUT_OF_MEMORY"
    assert row(df, "4822203")["elapsed_s"] == 128930  # ElapsedRaw of that line
    assert row(df, "4830974")["Constraints"] == "cpu-a|cpu-b"
    odd = row(df, "4830976")
    assert (odd["job_name"], odd["Constraints"]) == ("Job| Name |003", "cpu-a|cpu-b|gpu")
    assert odd["node_list"] == ["cpn-q06-12-01"] and odd["WorkDir"].endswith("/user005")
    assert row(df, "4830977")["job_name"] == "Jo| bNa| me003"
    assert df["user"].replace("", pd.NA).dropna().nunique() == 3
    assert info["figures"]["states"] == "CANCELLED 6, TIMEOUT 5, COMPLETED 1"
    assert info["figures"]["jobs"] == 12 and info["figures"]["steps"] == 2


def check_fixed_width(path: Path) -> None:
    df = sacct.read(path)
    assert len(df) == 2292 and df["line"].iloc[0] == 3
    jobs = sacct.allocations(df)
    assert len(jobs) == 753 and df["step"].notna().sum() == 1539
    assert jobs["state"].value_counts().to_dict() == {
        "COMPLETED": 651, "FAILED": 51, "RUNNING": 19, "TIMEOUT": 15, "CANCELLED+": 14,
        "CANCELLED": 3}
    first = df.iloc[0]
    assert (first["job_id"], first["job_name"], first["truncated"]) == \
        ("16261988", "h3as5_opt+", ["JobName"])
    batch = df.iloc[1]
    assert (batch["job_id"], batch["step"], batch["truncated"]) == ("16261988", "ba+", ["JobID"])
    assert df.loc[df["line"] == 63, "truncated"].item() == ["State"]
    # '16342389_10+' lines follow allocation 16342389_10 (line 1601) and 16342389_100 (1871)
    adopted = df.set_index("line").loc[[1602, 1603, 1872, 1873]]
    assert adopted["job_id"].tolist() == ["16342389_10"] * 2 + ["16342389_100"] * 2
    assert adopted["step"].tolist() == ["+"] * 4
    assert adopted["array_task_id"].tolist() == ["10", "10", "100", "100"]
    assert df.loc[df["line"] == 1599, "job_id"].item() == "16342389_9"
    assert (df.loc[df["truncated"].map(len) == 0, "job_id"].str.contains("+", regex=False)).sum() == 0
    assert row(df, "16290213", "ba+")["exit_code"] == "0:15"
    assert df["AllocCPUS"].iloc[0] == "40" and row(df, "16312373")["partition"] == "gpu-2080ti"
    info = sacct.describe(path)
    assert info["format_version"] == "fixed-width" and info["time_span"] is None
    assert info["figures"]["states"] == "COMPLETED 651, FAILED 51, RUNNING 19, +3 more"


SAMPLE_CHECKS = {
    "sacct_P_26fields_simple.log": check_simple,
    "sacct_P_26fields_simple_expected.log": check_simple_expected,
    "sacct_P_formatALL_submitline_multiline.log": check_submitline,
    "sacct_P_formatALL_ubhpc_dump2101.log": check_dump2101,
    "sacct_default_fixedwidth_hyak.txt": check_fixed_width,
}


def test_every_sample_has_a_check(samples: Path) -> None:
    files = {p.name for p in (samples / SACCT_DIR).iterdir() if p.name != "SOURCES.md"}
    assert files == set(SAMPLE_CHECKS)


@pytest.mark.parametrize("name", sorted(SAMPLE_CHECKS))
def test_sample(samples: Path, name: str) -> None:
    SAMPLE_CHECKS[name](sample(samples, name))


def test_simple_matches_upstream_expected(samples: Path) -> None:
    """Our values equal the upstream parser's cleaned version of the same log."""
    ours = sacct.read(sample(samples, "sacct_P_26fields_simple.log"))
    ref = pd.read_csv(sample(samples, "sacct_P_26fields_simple_expected.log"), sep="|",
                      dtype=str, keep_default_na=False)
    assert len(ours) == len(ref)
    for col in ("submit", "start", "end"):
        assert (ours[col] == pd.to_datetime(ref[col.capitalize()])).all()
    assert ours["elapsed_s"].tolist() == pd.to_timedelta(ref["Elapsed"]).dt.total_seconds().tolist()
    assert ours["timelimit_s"].tolist() == pd.to_timedelta(ref["Timelimit"]).dt.total_seconds().tolist()
    assert ours["job_name"].tolist() == ref["JobName"].tolist()
    for ours_col, ref_col in (("job_id", "JobID"), ("user", "User"), ("state", "State"),
                              ("node_list_raw", "NodeList"), ("exit_code", "ExitCode")):
        assert ours[ours_col].tolist() == ref[ref_col].tolist()
    assert ours["node_count"].tolist() == ref["NNodes"].astype(int).tolist()


def test_rewrite_is_byte_identical(samples: Path, tmp_path: Path) -> None:
    path = sample(samples, "sacct_P_26fields_simple.log")
    text = path.read_text()
    out = tmp_path / "again.log"
    sacct.write(out, sacct.read(path), fields=text.split("\n", 1)[0].split("|"))
    assert out.read_text() == text


def test_sniff(samples: Path) -> None:
    for path in sorted(samples.rglob("*")):
        if not path.is_file() or path.name in ("SOURCES.md", "README.md"):
            continue
        head = path.read_bytes()[:8192].decode("utf-8", errors="replace")
        assert sacct.sniff(head, path.name) == (SACCT_DIR in path.relative_to(samples).parents), path


# --------------------------------------------------------------------------------------------
# Layouts and field parsing


def write_text(tmp_path: Path, text: str, name: str = "s.log") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def test_parsable_trailing_delimiter(tmp_path: Path) -> None:
    path = write_text(tmp_path, "JobID|JobName|State|\n7|a|b|COMPLETED|\n7.batch|batch|FAILED|\n")
    df = sacct.read(path)
    assert df["job_name"].tolist() == ["a|b", "batch"] and df["state"].tolist() == ["COMPLETED", "FAILED"]
    assert sacct.describe(path)["format_version"] == "parsable"
    bad = write_text(tmp_path, "JobID|State|\n7|COMPLETED|\n8|FAILED\n", "bad.log")
    with pytest.raises(ParseError) as err:
        sacct.read(bad)
    assert err.value.line == 3


def test_tab_delimiter_and_any_order(tmp_path: Path) -> None:
    path = write_text(tmp_path, "NodeList\tElapsed\tJobID\tUser\n"
                                "nid0[0001-0004,0010]\t1-02:03:04\t1234_[1-3]\talice\n"
                                "c0-0c0s[1-2]n[0-3]\t00:00.128\t1234_5.0\tbob\n")
    df = sacct.read(path)
    assert sacct.describe(path)["format_version"] == "delimiter=\\t"
    assert df.columns.tolist()[:5] == ["job_id", "step", "array_job_id", "array_task_id", "line"]
    assert df["node_list"][0] == ["nid00001", "nid00002", "nid00003", "nid00004", "nid00010"]
    assert len(df["node_list"][1]) == 8 and df["node_list"][1][0] == "c0-0c0s1n0"
    assert df["elapsed_s"].tolist() == [93784.0, 0.128]
    assert df["array_task_id"].tolist() == ["[1-3]", "5"]
    assert (df["job_id"][1], df["step"][1], df["array_job_id"][1]) == ("1234_5", "0", "1234")


def test_job_ids_states_times(tmp_path: Path) -> None:
    path = write_text(tmp_path,
                      "JobID|State|Start|End|Timelimit|Elapsed\n"
                      "55+0|CANCELLED by 12345|2019-01-02T03:04:05|Unknown|UNLIMITED|12:34:56.5\n"
                      "55+0.batch|NODE_FAIL|None||Partition_Limit|00:00:01\n"
                      "55+1.extern|RUNNING|2019-01-02T03:04:05|Unknown||1:00:00\n")
    df = sacct.read(path)
    assert df["job_id"].tolist() == ["55+0", "55+0", "55+1"]
    assert df["step"].tolist() == [None, "batch", "extern"]
    assert df["array_job_id"].tolist() == [None, None, None]
    assert df["state"].tolist() == ["CANCELLED", "NODE_FAIL", "RUNNING"]
    assert df["cancelled_by"][0] == 12345 and df["cancelled_by"][1:].isna().all()
    assert df["start"][0] == pd.Timestamp("2019-01-02T03:04:05") and pd.isna(df["start"][1])
    assert df["end"].isna().all() and df["timelimit_s"].isna().all()
    assert df["elapsed_s"].tolist() == [45296.5, 1.0, 3600.0]
    assert str(df["start"].dtype) == "datetime64[s]"
    assert sacct.allocations(df)["job_id"].tolist() == ["55+0"]


def test_header_only_and_crlf(tmp_path: Path) -> None:
    assert sacct.read(write_text(tmp_path, "JobID|State\n")).empty
    df = sacct.read(write_text(tmp_path, "JobID|State\r\n1|FAILED\r\n", "crlf.log"))
    assert df["state"].tolist() == ["FAILED"]


def test_durations_examples() -> None:
    assert sacct.parse_duration("3-00:00:00") == 259200
    assert sacct.parse_duration("00:00.128") == pytest.approx(0.128)
    assert sacct.parse_duration("01:02:03.250") == pytest.approx(3723.25)
    assert sacct.parse_duration("UNLIMITED") is None
    assert sacct.format_duration(259200) == "3-00:00:00" and sacct.format_duration(59) == "00:00:59"
    with pytest.raises(ValueError):
        sacct.parse_duration("1h")


@given(st.integers(0, 10**8))
def test_duration_round_trip(seconds: int) -> None:
    assert sacct.parse_duration(sacct.format_duration(seconds)) == seconds


@given(st.integers(0, 99), st.integers(0, 59), st.integers(0, 59), st.integers(0, 999), st.booleans())
def test_fractional_duration(hours: int, minutes: int, secs: int, ms: int, with_hours: bool) -> None:
    text = (f"{hours:02d}:" if with_hours else "") + f"{minutes:02d}:{secs:02d}.{ms:03d}"
    expected = (hours * 3600 if with_hours else 0) + minutes * 60 + secs + ms / 1000
    assert sacct.parse_duration(text) == pytest.approx(expected)


# --------------------------------------------------------------------------------------------
# Writer round trip (property based)

STATES = ["COMPLETED", "FAILED", "TIMEOUT", "RUNNING", "PENDING", "OUT_OF_MEMORY", "NODE_FAIL",
          "PREEMPTED"]
# sacct field -> the read() columns it carries
FIELD_COLUMNS = {"JobID": ["job_id", "step"], "JobIDRaw": ["job_id_raw"], "JobName": ["job_name"],
                 "User": ["user"], "UID": ["uid"], "Account": ["account"],
                 "Partition": ["partition"], "State": ["state", "cancelled_by"],
                 "ExitCode": ["exit_code"], "Submit": ["submit"], "Start": ["start"],
                 "End": ["end"], "Elapsed": ["elapsed_s"], "Timelimit": ["timelimit_s"],
                 "NNodes": ["node_count"], "NCPUS": ["ncpus"], "NodeList": ["node_list"],
                 "QOS": ["QOS"]}
NAME_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r")
TIMES = st.datetimes(datetime(2000, 1, 1), datetime(2099, 1, 1)).map(lambda t: t.replace(microsecond=0))
WORD = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)


@st.composite
def job_ids(draw: st.DrawFn) -> str:
    base = str(draw(st.integers(1, 10**8)))
    kind = draw(st.sampled_from(["plain", "task", "pending", "het"]))
    if kind == "task":
        return f"{base}_{draw(st.integers(0, 10**5))}"
    if kind == "pending":
        low = draw(st.integers(0, 100))
        return f"{base}_[{low}-{low + draw(st.integers(1, 100))}]"
    return f"{base}+{draw(st.integers(0, 9))}" if kind == "het" else base


@st.composite
def node_lists(draw: st.DrawFn) -> list[str]:
    prefix = draw(st.sampled_from(["nid", "cn-", "c0-0c0s", "gpu"]))
    digits = draw(st.integers(1, 5))
    numbers = draw(st.lists(st.integers(0, 10**digits - 1), max_size=20))
    # canonical order, as collect_hostlist/expand_hostlist produce it
    return hostlist.expand_hostlist(hostlist.collect_hostlist(
        [f"{prefix}{n:0{digits}d}" for n in numbers])) if numbers else []


@st.composite
def jobs(draw: st.DrawFn) -> dict:
    cancelled_by = None
    state = draw(st.sampled_from(STATES + ["CANCELLED"]))
    if state == "CANCELLED" and draw(st.booleans()):
        cancelled_by = draw(st.integers(0, 2**32 - 1))
    return {
        "job_id": draw(job_ids()),
        "step": draw(st.none() | st.sampled_from(["batch", "extern", "interactive", "0", "17"])),
        "job_id_raw": str(draw(st.integers(1, 10**9))),
        "job_name": draw(st.text(NAME_CHARS, max_size=12) | st.sampled_from(["a|b", "|", "x\ty"])),
        "user": draw(WORD), "uid": draw(st.integers(0, 2**31)), "account": draw(WORD),
        "partition": draw(WORD), "state": state, "cancelled_by": cancelled_by,
        "exit_code": f"{draw(st.integers(0, 255))}:{draw(st.integers(0, 64))}",
        "submit": draw(TIMES), "start": draw(st.none() | TIMES), "end": draw(st.none() | TIMES),
        "elapsed_s": float(draw(st.integers(0, 10**7))),
        "timelimit_s": draw(st.none() | st.integers(60, 10**7).map(float)),
        "node_count": draw(st.integers(0, 10**5)), "ncpus": draw(st.integers(1, 10**6)),
        "node_list": draw(node_lists()), "QOS": draw(WORD),
    }


def same(written: object, read_back: object) -> bool:
    if written is None or (isinstance(read_back, float) and math.isnan(read_back)):
        return written is None and pd.isna(read_back)
    if isinstance(written, datetime):
        return pd.Timestamp(written) == read_back
    return written == read_back


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(jobs(), min_size=1, max_size=6), st.permutations(list(FIELD_COLUMNS)),
       st.integers(1, len(FIELD_COLUMNS)), st.sampled_from(["|", "\t"]))
def test_write_read_round_trip(records: list[dict], order: list[str], keep: int,
                               delimiter: str) -> None:
    fields = order[:keep] + ([] if "JobID" in order[:keep] else ["JobID"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "jobs.sacct"
        sacct.write(path, records, fields=fields, delimiter=delimiter)
        df = sacct.read(path)
        assert df["line"].tolist() == list(range(2, len(records) + 2))
        for field in fields:
            for column in FIELD_COLUMNS[field]:
                for i, record in enumerate(records):
                    assert same(record[column], df[column][i]), (field, column, i)
        # writing what was read gives the same text again
        again = Path(tmp) / "again.sacct"
        sacct.write(again, df, fields=fields, delimiter=delimiter)
        assert again.read_text() == path.read_text()


def test_writer_defaults_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    sacct.write(path, [{"job_id": "9", "step": None, "state": "CANCELLED", "cancelled_by": 7,
                        "end": None, "node_list": [], "elapsed_s": 90061.0}])
    assert path.read_text() == ("JobID|State|End|Elapsed|NodeList\n"
                                "9|CANCELLED by 7|Unknown|1-01:01:01|None assigned\n")
    with pytest.raises(ValueError, match="only JobName"):
        sacct.write(path, [{"job_id": "9", "user": "a|b"}])
    with pytest.raises(ValueError, match="newline"):
        sacct.write(path, [{"job_id": "9", "job_name": "a\nb"}])
    # The column is searched as a whole first: a delimiter that only spans two values is no refusal.
    sacct.write(path, [{"job_id": "9", "user": "a:"}, {"job_id": "10", "user": ":b"}], delimiter="::")
    assert path.read_text() == "JobID::User\n9::a:\n10:::b\n"
    with pytest.raises(ValueError, match="User value '::' contains '::'"):
        sacct.write(path, [{"job_id": "9", "user": "a:"}, {"job_id": "10", "user": ":b"},
                           {"job_id": "11", "user": "::"}], delimiter="::")
    with pytest.raises(ValueError, match="ReqMem"):
        sacct.write(path, [{"job_id": "9"}], fields=["JobID", "ReqMem"])


# --------------------------------------------------------------------------------------------
# Bad input -> ParseError at the right line

BAD_INPUTS = {
    "empty": ("", 1, "empty file"),
    "blank": ("\n\n  \n", 1, "empty file"),
    "no header": ("1234|alice|COMPLETED\n1235|bob|FAILED\n", 1, "unknown format"),
    "not sacct": ("@ mpiP\n@ Command : ./a.out\n", 1, "unknown format"),
    "missing JobID": ("User|State\nalice|COMPLETED\n", 1, "no JobID"),
    "repeated field": ("JobID|State|State\n1|A|B\n", 1, "repeats"),
    "short row": ("JobID|User|State\n1|a|COMPLETED\n2|b\n3|c|FAILED\n", 3, "truncated"),
    "truncated last line": ("JobID|User|State\n1|a|COMPLETED\n2|b", 3, "no final newline"),
    "fragment at end": ("JobID|User|State\n1|a|COMPLETED\n2|b\n", 3, "truncated record"),
    "extra without JobName": ("JobID|User|State\n1|a|b|COMPLETED\n", 2, "no JobName"),
    "extra not resolvable": ("JobID|JobName|Elapsed\n1|a|b|c\n", 2, "typed fields"),
    "bad duration": ("JobID|Elapsed\n1|00:00:01\n2|1h30m\n", 3, "duration"),
    "bad timestamp": ("JobID|Start\n1|2019-01-02T03:04:05\n2|02/01/2019\n", 3, "timestamp"),
    "bad hostlist": ("JobID|NodeList\n1|nid[1-3]\n2|nid[3-\n", 3, "host list"),
    "bad JobID": ("JobID|State\nabc|FAILED\n", 2, "JobID like"),
    "bad count": ("JobID|NNodes\n1|many\n", 2, "NNodes integer"),
    "fixed overflow": ("JobID      State\n---------- ----------\n1          COMPLETED\n"
                       "12345678901234 FAILED\n", 4, "outside the columns"),
    "fixed truncated": ("JobID      State\n---------- ----------\n1           COMPLETED\n2    ",
                        4, "truncated last line"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input(tmp_path: Path, case: str) -> None:
    text, line, message = BAD_INPUTS[case]
    with pytest.raises(ParseError) as err:
        sacct.read(write_text(tmp_path, text))
    assert err.value.line == line
    assert message in err.value.message
