"""The hpcvar command line as a user runs it (subprocesses, real files)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO

HPCVAR = [sys.executable, "-m", "hpcvar"]

# Every real sample of a supported kind, with the kind hpcvar must detect.
SUPPORTED = {
    "slurm/sacct": "sacct", "mpiP": "mpip", "reframe/perflogs": "reframe_perflog",
    "reframe/json_reports": "reframe_report", "ldms": "ldms_store_csv", "apps/amg": "app_stdout",
    "apps/milc": "app_stdout", "apps/umt": "app_stdout", "apps/minivite": "app_stdout",
    "apps/osu": "app_stdout", "apps/imb": "app_stdout",
}
# Sample files that are not of a supported kind or are real-but-broken inputs (see each SOURCES.md).
NOT_READ = {"sacct_P_26fields_simple_expected.log",  # upstream's pandas CSV of the sacct log, not sacct
            "sacct_P_formatALL_ubhpc_dump2101.log",  # a record missing its first 33 fields at line 16
            "milc_ks_imp_dyn_test_su3_rmd.1.sample-in", "milc_su3_rmd_cori_128rank_mpip.err",
            "amg2023_aws-pcluster_32n_20-iter-1.err"}


def run(*args, **kw):
    return subprocess.run([*HPCVAR, *map(str, args)], capture_output=True, text=True, **kw)


def sample_files(samples: Path):
    for folder, kind in SUPPORTED.items():
        for p in sorted((samples / folder).iterdir()):
            if p.is_file() and p.name != "SOURCES.md" and p.name not in NOT_READ:
                yield p, kind


def test_inspect_reads_every_supported_sample(samples):
    files = list(sample_files(samples))
    assert len(files) >= 40
    out = run("inspect", "--json", *(p for p, _ in files))
    assert out.returncode == 0, out.stdout[-2000:]
    results = json.loads(out.stdout)
    for (path, kind), r in zip(files, results):
        assert r["ok"] and r["kind"] == kind, (path, r)
        assert r["records"] > 0, r


def test_inspect_text_output_and_error_exit(samples, tmp_path):
    mpip = samples / "mpiP" / "mpiP-3.4.1_cori_milc_su3_rmd.128.16720.1.mpiP"
    broken = tmp_path / "broken.mpiP"
    broken.write_text("".join(mpip.read_text().splitlines(keepends=True)[:60]))
    out = run("inspect", mpip, broken)
    assert out.returncode == 1
    assert f"{mpip}: mpip (format 3.4.1), 128 records" in out.stdout
    assert "top_routine: Wait" in out.stdout
    assert f"{broken}: ERROR {broken}:" in out.stdout and "truncated" in out.stdout


def test_inspect_rejects_unknown_files_by_name(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    out = run("inspect", "--json", f)
    assert out.returncode == 1
    (r,) = json.loads(out.stdout)
    assert not r["ok"] and "not a format hpcvar reads" in r["error"]


def test_simulate_collate_summary(tmp_path):
    raw, ds = tmp_path / "raw", tmp_path / "ds"
    out = run("simulate", "--preset", "demo", "--set", "days=1", "--out", raw)
    assert out.returncode == 0, out.stderr
    assert "simulate: " in out.stderr  # progress lines
    env = {"HPCVAR_SALT": "s", "PATH": "/usr/bin:/bin"}
    out = run("collate", raw, "--out", ds, "--summary", tmp_path / "summary.txt", env=env)
    assert out.returncode == 0, out.stderr
    truth = json.loads((raw / "truth.json").read_text())
    n = sum(d["runs"] - d["failed_runs"] for d in truth["datasets"].values()) + len(truth["microbenchmarks"]["runs"])
    assert truth["microbenchmarks"]["runs"] and f"collated {n} new runs" in out.stdout
    summary = (tmp_path / "summary.txt").read_text()
    assert f"{n} runs in" in summary and "slowest_fastest" in summary
    record = json.loads((ds / "collated.json").read_text())
    assert record["new_runs"] == n and record["rebuilt"] is False
    parts = {p: p.read_bytes() for p in ds.glob("*/part-*.parquet")}
    again = run("collate", raw, "--out", ds, env=env)
    assert f"collated 0 new runs ({n} already collated" in again.stdout
    assert json.loads((ds / "collated.json").read_text())["skipped_already_collated"] == n
    # Appending left every earlier part as it was.
    assert {p: p.read_bytes() for p in ds.glob("*/part-*.parquet")} == parts
    # --rebuild (the workflow's choice after re-simulating): everything collated again, once.
    rebuilt = run("collate", raw, "--out", ds, "--rebuild", env=env)
    assert rebuilt.returncode == 0 and f"collated {n} new runs (0 already collated" in rebuilt.stdout
    assert not set(ds.glob("*/part-*.parquet")) & set(parts)
    assert len(list((ds / "runs").glob("part-*.parquet"))) == 1


def test_collate_rebuild_refuses_a_directory_that_is_not_a_dataset(tmp_path):
    raw, ds = tmp_path / "raw", tmp_path / "mine"
    assert run("simulate", "--preset", "demo", "--set", "days=1", "--out", raw).returncode == 0
    ds.mkdir()
    (ds / "thesis.tex").write_text("precious")
    out = run("collate", raw, "--out", ds, "--rebuild", env={"HPCVAR_SALT": "s"})
    assert out.returncode == 2 and "not part of a dataset" in out.stderr and "thesis.tex" in out.stderr
    assert (ds / "thesis.tex").read_text() == "precious" and not (ds / "runs").exists()


def test_collate_reports_a_broken_campaign_directory(tmp_path):
    (tmp_path / "raw").mkdir()
    out = run("collate", tmp_path / "raw", "--out", tmp_path / "ds", env={"HPCVAR_SALT": "s"})
    assert out.returncode == 2 and "system.yaml" in out.stderr


def test_unknown_preset_field_is_refused(tmp_path):
    out = run("simulate", "--set", "nodez=3", "--out", tmp_path / "raw")
    assert out.returncode != 0 and "unknown preset fields" in out.stderr


@pytest.mark.parametrize("command", ["simulate", "collate"])
@pytest.mark.parametrize("workers", ["0", "-2", "two"])
def test_a_process_count_below_one_is_refused_before_anything_is_written(tmp_path, command, workers):
    """``--workers 0`` or a negative count is not taken as the default or as one process: the
    command stops, naming the option, and writes nothing."""
    args = ["--preset", "demo"] if command == "simulate" else [tmp_path / "raw"]
    out = run(command, *args, "--out", tmp_path / "out", "--workers", workers)
    assert out.returncode == 2 and "argument --workers:" in out.stderr, out.stderr
    assert ("give 1 or more" if workers != "two" else "invalid int value: 'two'") in out.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("table", ["runs", "steps", "step_counters", "system_counters", "mpi_profile",
                                   "neighbourhood"])
def test_schema_doc_is_current(table):
    doc = (Path(__file__).parents[1] / "docs" / "dataset.md").read_text()
    out = run("schema")
    assert out.stdout.strip() == doc.strip(), "regenerate docs/dataset.md with `hpcvar schema > docs/dataset.md`"
    assert f"## `{table}`" in doc


# --- what real files showed (issue 19): inspect says precisely what is wrong or unknown ------------

CAPTURED = Path(__file__).resolve().parent / "captured"


def test_inspect_sacct_without_jobid_names_the_field(samples, tmp_path):
    """sacct -P output whose --format left out JobID is still sacct's: the reader says what is missing."""
    lines = (samples / "slurm" / "sacct" / "sacct_P_26fields_simple.log").read_text().splitlines()
    no_id = tmp_path / "sacct-no-jobid.txt"
    no_id.write_text("\n".join("|".join(line.split("|")[2:]) for line in lines) + "\n")  # drop JobID, JobIDRaw
    out = run("inspect", no_id)
    assert out.returncode == 1
    assert f"{no_id}: ERROR {no_id}:1: header has no JobID field" in out.stdout
    assert "add JobID to sacct's --format" in out.stdout and "not a format hpcvar reads" not in out.stdout


def test_inspect_a_reframe_report_with_a_sanity_failure(tmp_path):
    """ReFrame 4.10.4 writes a never-evaluated performance variable as null (captured report)."""
    report = CAPTURED / "reframe" / "reframe4.10.4_sanity-failure_run-report.json"
    out = run("inspect", "--json", report)
    assert out.returncode == 0, out.stdout
    (r,) = json.loads(out.stdout)
    assert r["kind"] == "reframe_report" and r["records"] == 1
    assert r["figures"] == {"tests": 1, "variables": 1, "values": 0, "pass": 0, "fail": 1}
    # A passed test with a null value is still malformed.
    doc = json.loads(report.read_text())
    doc["runs"][0]["testcases"][0]["result"] = "pass"
    bad = tmp_path / "report.json"
    bad.write_text(json.dumps(doc))
    out = run("inspect", bad)
    assert out.returncode == 1 and "expected a number for runs[0].testcases[0] total_time value, found None" in out.stdout


def test_inspect_perflog_without_result_field_says_unknown(samples):
    """ReFrame 3.x perflogs carry no pass/fail: that is unknown, not 'pass 0 / fail 0'."""
    v3 = next((samples / "reframe" / "perflogs").glob("reframe3.7_*.log"))
    (r,) = json.loads(run("inspect", "--json", v3).stdout)
    assert r["ok"] and r["figures"]["pass"] == r["figures"]["fail"] == "unknown (no result field)"
    v4 = next((samples / "reframe" / "perflogs").glob("reframe4*.log"))
    (r,) = json.loads(run("inspect", "--json", v4).stdout)
    assert (r["figures"]["pass"], r["figures"]["fail"]) == (6, 0)


def test_inspect_mpip_says_app_time_is_summed_and_gives_per_task_times(samples):
    from hpcvar.parsers import mpip

    path = samples / "mpiP" / "mpiP-3.4.1_cori_milc_su3_rmd.128.16720.1.mpiP"
    (r,) = json.loads(run("inspect", "--json", path).stdout)
    tasks = mpip.read(path).tasks["app_time_s"]
    f = r["figures"]
    assert "sum over all tasks" in f["app_time_is"] and f["app_time_s"] == 42700.0
    assert f["task_app_time_max_s"] == tasks.max() and f["task_app_time_mean_s"] == pytest.approx(tasks.mean())
    # The aggregate is the tasks' sum to mpiP's 3 significant digits.
    assert f["app_time_s"] == pytest.approx(tasks.sum(), rel=5e-3)


def test_inspect_a_dataset_directory(campaign, tmp_path):
    c = campaign("demo", 3, 2)
    out = run("inspect", c.dataset)
    assert out.returncode == 0, out.stdout + out.stderr
    runs = pd.read_parquet(c.dataset / "runs")
    assert out.stdout.startswith(f"{c.dataset}: dataset, {len(runs)} runs, {runs['start'].min().isoformat()} .. ")
    (r,) = json.loads(run("inspect", "--json", c.dataset).stdout)
    assert r["figures"]["datasets"] == runs["dataset"].nunique()
    assert r["figures"]["steps_rows"] == len(pd.read_parquet(c.dataset / "steps"))
    empty = tmp_path / "somewhere"
    empty.mkdir()
    out = run("inspect", empty)
    assert out.returncode == 1 and "a directory, not a dataset" in out.stdout and "Errno" not in out.stdout


def test_analyses_take_the_workflows_own_configuration(campaign, tmp_path):
    """`--config config/config.yaml` (the workflow's file) gives each analysis its `analyses:`
    section, as the workflow does; `--set` overrides it; an unknown setting is refused by name."""
    import yaml

    from hpcvar.cli import analysis_settings
    from hpcvar.settings import NeighbourhoodSettings

    workflow = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name in ("neighbourhood", "deviation", "forecast", "distributions"):
        assert analysis_settings(workflow, name) == (workflow["analyses"].get(name) or {})
    assert analysis_settings({"forecast": {"lr": 0.01}}, "forecast") == {"lr": 0.01}
    assert analysis_settings({"lr": 0.01}, "forecast") == {"lr": 0.01}

    ds = campaign("demo", 3, 2).dataset
    out = run("neighbourhood", ds, "--out", tmp_path / "n", "--config", REPO / "config" / "config.yaml",
              "--set", "top_k=3")
    assert out.returncode == 0, out.stderr
    assert f"(MLflow: sqlite:///{ds.resolve().parent / 'mlflow.db'}, experiment hpcvar-neighbourhood)" in out.stdout
    params = json.loads((tmp_path / "n" / "summary.json").read_text())["params"]
    # config.yaml sets no neighbourhood setting (only what differs from the defaults)
    assert params == {**NeighbourhoodSettings().as_dict(), **(workflow["analyses"].get("neighbourhood") or {}),
                      "top_k": 3}

    bad = tmp_path / "bad.yaml"
    bad.write_text("analyses:\n  forecast:\n    lr: 0.01\n    epochs: 5\n")
    out = run("forecast", ds, "--out", tmp_path / "f", "--config", bad)
    assert out.returncode != 0 and "unknown setting 'epochs'" in out.stderr and str(bad) in out.stderr
    assert "max_epochs" in out.stderr  # the known ones are listed
    assert not (tmp_path / "f" / "summary.json").exists()


def test_help_and_inspect_start_without_the_settings_models_and_an_analysis_still_lists_its_settings(samples):
    """`hpcvar --help` and the commands that are not analyses build only their own options: the
    settings models (pydantic) stay unimported; an analysis's own help lists its settings' names
    from its model, and compare's options are there."""
    probe = ("import sys, contextlib, io\nfrom hpcvar.cli import main\nout = io.StringIO()\n"
             "with contextlib.redirect_stdout(out):\n    try:\n        code = main(sys.argv[1:])\n"
             "    except SystemExit as e:\n        code = e.code\n"
             "print(code, 'pydantic' in sys.modules, 'hpcvar.settings' in sys.modules)\nprint(out.getvalue())")
    sacct = samples / "slurm" / "sacct" / "sacct_P_26fields_simple.log"
    for args, code, models in ((["--help"], 0, False), (["inspect", sacct], 0, False), (["forecast", "--help"], 0, True),
                               (["explain", "--help"], 0, True), (["compare", "--help"], 0, True)):
        out = subprocess.run([sys.executable, "-c", probe, *map(str, args)], capture_output=True, text=True)
        first, _, printed = out.stdout.partition("\n")
        assert first == f"{code} {models} {models}", (args, out.stdout[-2000:], out.stderr[-2000:])
        if args[0] == "--help":
            assert "forecast" in printed and "compare" in printed and "settings:" not in printed
        elif args[0] == "inspect":
            assert "sacct (format parsable2), 4 records" in printed
        elif args[0] == "forecast":
            assert "settings: grid, folds, seed, feature_sets" in " ".join(printed.split())
        elif args[0] == "explain":
            assert "; settings: slowest, slow_threshold, alpha" in " ".join(printed.split())
        else:
            assert "--alpha" in printed and "--min-effect" in printed
    # main() takes the first argument without a dash for the command: true while the top level
    # has no option of its own that takes a value.
    from hpcvar.cli import build_parser

    assert [a.option_strings for a in build_parser("")._actions if a.option_strings] == [["-h", "--help"]]


def test_a_forecast_with_nothing_to_forecast_does_not_import_the_models(campaign, tmp_path):
    """A campaign of microbenchmark rounds has no time steps to forecast: its forecast job writes
    the summary with the reason and does not pay for torch, Lightning and LightGBM (most of such a job)."""
    ds = campaign("demo", 3, 2).dataset
    runs = pd.read_parquet(ds / "runs")
    bench = sorted(runs.loc[runs["num_steps"] == 0, "dataset"].unique())
    assert bench == ["collectives-16"]
    probe = ("import sys\nfrom hpcvar.cli import main\ncode = main(sys.argv[1:])\n"
             "print('imported:', *sorted({'torch', 'lightning', 'lightgbm'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe, "forecast", str(ds), "--out", str(tmp_path / "f"),
                          "--set", "datasets=[collectives-16]"], capture_output=True, text=True,
                         env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "imported:", out.stdout
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert summary["datasets"] == {}
    assert "collectives-16: no time steps (microbenchmark runs), nothing to forecast" in summary["notes"]


def test_an_analysis_that_logs_nothing_to_mlflow_runs_without_importing_it(campaign, tmp_path):
    """The overview is not tracked: its job does not pay for MLflow's import (about a second), and
    says where its summary went without naming a store."""
    ds = campaign("demo", 3, 2).dataset
    probe = ("import sys\nfrom hpcvar.cli import main\ncode = main(sys.argv[1:])\n"
             "print('mlflow imported:', 'mlflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, "overview", str(ds), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    datasets = pd.read_parquet(ds / "runs")["dataset"].nunique()
    assert out.stdout.splitlines() == [f"overview: {datasets} datasets -> {tmp_path / 'o' / 'summary.json'}",
                                       "mlflow imported: False"], out.stdout
