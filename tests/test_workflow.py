"""The Snakemake workflow: lint-clean, config validated, and the main job end to end."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import REPO, snakemake

# Lint and the dry run use the checkout's .snakemake/ directory: one at a time, on the main job's worker.
pytestmark = pytest.mark.xdist_group("main-job")


def test_lint_is_clean():
    out = snakemake("--lint")
    assert out.returncode == 0 and "Congratulations" in out.stdout + out.stderr, out.stdout + out.stderr


def _dag(*args, cwd=None) -> tuple[dict, set]:
    """The workflow's DAG: node -> label, and the edges."""
    import re

    dag = snakemake("--dag", *args, **({"cwd": cwd} if cwd else {}))
    assert dag.returncode == 0, dag.stderr[-3000:]
    label = {m[1]: m[2] for m in re.finditer(r'(\d+)\[label = "([^"]+)"', dag.stdout)}
    return label, set(re.findall(r"(\d+) -> (\d+)", dag.stdout))


def _rule_counts(*args) -> dict[str, int]:
    out = snakemake("-n", "--quiet", "rules", *args)
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.split()[0]: int(line.split()[1]) for line in out.stdout.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}


def _wildcards(text: str) -> dict[str, str]:
    return dict(f.split(": ", 1) for f in text.split("\\n")[1:] if ": " in f)


def test_one_rule_runs_every_analysis_of_the_registry():
    """The workflow takes its analyses from the registry: one `analysis` job per entry (fan_out:
    analysis, the default), each waiting for the analyses it reads (explain: deviation,
    neighbourhood), forecast for the truth."""
    from hpcvar.analyses.registry import ANALYSES

    # --forceall: the plan from scratch, whatever a main job run in this checkout left in results/.
    assert _rule_counts("--forceall")["analysis"] == len(ANALYSES)
    label, edges = _dag("--forceall")
    node = {_wildcards(text)["analysis"]: n for n, text in label.items() if text.startswith("analysis\\n")}
    assert set(node) == set(ANALYSES)
    for name, analysis in ANALYSES.items():
        before = {label[a].split("\\n")[0] if a not in node.values() else _wildcards(label[a])["analysis"]
                  for a, b in edges if b == node[name]}
        assert before == {"collate", *analysis.reads, *(["simulate"] if analysis.takes_truth else [])}, (name, before)


def test_fanned_out_analyses_wait_on_the_collate_checkpoint():
    """fan_out: dataset, before collation: the datasets are unknown, so one `analysis` job per
    registry entry waits on the collate checkpoint; its parts are planned once it has run."""
    from hpcvar.analyses.registry import ANALYSES

    counts = _rule_counts("--forceall", "--config", "fan_out=dataset")
    assert counts["analysis"] == len(ANALYSES) and "analysis_part" not in counts
    label, edges = _dag("--forceall", "--config", "fan_out=dataset")
    node = {_wildcards(text)["analysis"]: n for n, text in label.items() if text.startswith("analysis\\n")}
    collate = next(n for n, text in label.items() if text.startswith("collate"))
    assert set(node) == set(ANALYSES) and all((collate, n) in edges for n in node.values())


@pytest.mark.slow
def test_fanned_out_per_dataset_the_analyses_write_the_same_summaries(main_job, tmp_path):
    """fan_out: dataset on the main job's copy: per (analysis, dataset) one `analysis_part` job,
    each after the analyses it reads and, for forecast, the truth; per analysis one `analysis`
    job after its parts. What they assemble is what one job per analysis wrote (the MLflow ids
    and timings aside), and each part's log is kept."""
    import json
    import shutil

    from hpcvar.analyses.registry import ANALYSES
    from hpcvar.data.dataset import Dataset

    copy = tmp_path / "wf"
    shutil.copytree(main_job.workdir, copy, symlinks=True)
    # A store of its own (the copied one's experiments keep their artifacts in the original).
    (copy / "results" / "mlflow.db").unlink()
    shutil.rmtree(copy / "results" / "mlartifacts")
    names = set(Dataset(copy / "results" / "dataset").read("runs")["dataset"].unique())
    label, edges = _dag("--config", "fan_out=dataset", cwd=copy)
    parts = {(_wildcards(t)["analysis"], _wildcards(t)["dataset"]): n for n, t in label.items()
             if t.startswith("analysis_part\\n")}
    # The overview compares the datasets: one job, as without the fan-out.
    per_dataset = [name for name, a in ANALYSES.items() if a.per_dataset]
    assert "overview" not in per_dataset and len(per_dataset) == len(ANALYSES) - 1
    assert set(parts) == {(a, d) for a in per_dataset for d in names}
    # Each analysis's parts lead to one `analysis` job of its own (its label names no wildcard).
    assembly = {n for n, t in label.items() if t.split("\\n")[0] == "analysis"}
    assembled = {}
    for (name, dataset), n in parts.items():
        after = {b for a, b in edges if a == n and b in assembly}
        assert len(after) == 1, (name, dataset, after)
        assert assembled.setdefault(name, after.pop()) in {b for a, b in edges if a == n}
    assert len(set(assembled.values())) == len(per_dataset)
    for (name, dataset), n in parts.items():
        of = {v: k for k, v in assembled.items()}
        before = {of[a] if a in of else label[a].split("\\n")[0] for a, b in edges if b == n}
        assert before == {"collate", *ANALYSES[name].reads, *(["simulate"] if ANALYSES[name].takes_truth else [])}
    # Every analysis but the forecaster, the longest (benchmarks/compare_main_job.py compares its
    # fanned-out summary too: 0 differences).
    compared = [name for name in ANALYSES if name != "forecast"]
    out = snakemake("--cores", "2", *[f"results/analyses/{name}/summary.json" for name in compared],
                    "--config", "fan_out=dataset", cwd=copy)  # targets first: --config takes what follows
    assert out.returncode == 0, out.stderr[-3000:]
    import re

    volatile = re.compile(r"(_seconds|^seconds|^elapsed_s|^run_ids?|_run_id|^runs$|^experiment_id)$")

    def stable(doc):
        if isinstance(doc, dict):
            return {k: stable(v) for k, v in doc.items() if not volatile.search(k)}
        return [stable(v) for v in doc] if isinstance(doc, list) else doc

    for name in compared:
        one = json.loads((main_job.results / "analyses" / name / "summary.json").read_text())
        fanned = json.loads((copy / "results" / "analyses" / name / "summary.json").read_text())
        assert stable(json.loads(json.dumps(one).replace(str(main_job.workdir), str(copy)))) == stable(fanned), name
        for dataset in names if name in per_dataset else ():
            assert (copy / "results" / "analyses" / name / "parts" / f"{dataset}.json").is_file()
            assert (copy / "results" / "logs" / name / f"{dataset}.log").is_file()


def test_the_documented_paper_preset_command_runs_the_paper_preset():
    """docs/reference/configuration.md's command for the study-scale campaign, as written there
    (Snakemake parses the values inside --config's braces as strings: only the preset may be
    given, the seed keeps its number from config/config.yaml)."""
    import shlex

    line = next(ln for ln in (REPO / "docs" / "reference" / "configuration.md").read_text().splitlines()
                if ln.startswith(".venv/bin/snakemake") and "preset: paper" in ln)
    # --forcerun: the dry run shows simulate's command also in a checkout that ran the preset already.
    out = snakemake("-n", "-p", "--forcerun", "simulate", *shlex.split(line)[1:])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    simulate = next(ln for ln in out.stdout.splitlines() if " simulate " in ln and "--preset" in ln)
    assert "--preset paper" in simulate and "--seed 0" in simulate, simulate


def test_invalid_config_is_rejected_with_the_key():
    out = snakemake("-n", "--config", "simulate={preset: huge, seed: 0, overrides: {}}")
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "huge" in text and "preset" in text and "is not one of" in text


def test_the_main_job_comparison_counts_the_cpu_of_every_process_under_it():
    """benchmarks/compare_main_job.py reports the main job's CPU as that of every process under
    Snakemake: a job's worker processes (the forecaster's, the simulator's) are grandchildren."""
    import subprocess
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from compare_main_job import busy, children_cpu

    grandchild = ("import time\nwhile time.process_time() < 0.4:\n    pass\nprint(time.process_time())")
    child = f"import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', {grandchild!r}], " \
            "capture_output=True, text=True, check=True).stdout)"
    before = children_cpu()
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    spent = children_cpu() - before
    assert spent >= float(out.stdout) >= 0.4, (spent, out.stdout)
    assert busy(150.0, 79.0) == "95%" and busy(79.0, 79.0) == "50%"


def test_main_job_end_to_end(main_job):
    workdir, out = main_job.workdir, main_job.result
    assert out.returncode == 0, out.stderr[-3000:]
    summary = (workdir / "results" / "summary.txt").read_text()
    for ds in ("amg-128", "amg-512", "milc-128", "milc-512", "minivite-128", "umt-128"):
        assert ds in summary
    runs = pd.read_parquet(workdir / "results" / "dataset" / "runs")
    assert len(runs) > 30 and runs["user"].str.startswith("user-").all()
    assert (workdir / "results" / "logs" / "collate.log").read_text().strip()
    # The three analyses ran on every dataset and logged to the store beside the dataset.
    import json

    # The microbenchmark dataset has no steps: neighbourhood and distributions analyse it, the
    # counter and forecasting analyses cannot.
    for analysis, n in (("neighbourhood", 7), ("deviation", 6), ("forecast", 6), ("distributions", 7)):
        summary = json.loads((workdir / "results" / "analyses" / analysis / "summary.json").read_text())
        assert len(summary["datasets"]) == n, analysis
        assert summary["mlflow"]["tracking_uri"] == f"sqlite:///{workdir / 'results' / 'mlflow.db'}"
    assert list((workdir / "results" / "mlartifacts").rglob("relevance.svg"))
    # The example interference experiment ran on the simulated network (interference.mode: simulate).
    import yaml

    inter = json.loads((workdir / "results" / "analyses" / "interference" / "summary.json").read_text())
    example = yaml.safe_load((workdir / "config" / "experiments" / "interference.yaml").read_text())
    assert list(inter["policies"]) == example["policies"] and inter["experiment"] == example["name"]
    assert not (workdir / "mlruns").exists()
    # ... and the job ends with the report (its content is checked in test_report.py).
    assert "no data for" not in (workdir / "results" / "logs" / "report.log").read_text()
    # The salt stays local, outside results/.
    assert (workdir / ".hpcvar-salt").exists()
    salt = (workdir / ".hpcvar-salt").read_text().strip()
    for f in (workdir / "results").rglob("*"):
        if f.is_file() and f.stat().st_size < 50_000_000:
            assert salt.encode() not in f.read_bytes(), f
    # Each job left Snakemake's benchmark record (results/benchmarks/, what bench_scaling.py
    # reads): its wall time is the job's span in Snakemake's log (what compare_main_job.py reads,
    # to the second), its peak memory that of a Python process that imported pandas at least.
    import csv
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    from compare_main_job import rule_times

    spans = rule_times(out.stderr)
    records = {p.stem: next(csv.DictReader(p.open(), delimiter="\t"))
               for p in (workdir / "results" / "benchmarks").glob("*.tsv")}
    assert set(records) == {name.split("=")[-1].rstrip("]") for name in spans} - {"all"}
    for name, span in spans.items():
        if name != "all":
            record = records[name.split("=")[-1].rstrip("]")]
            assert abs(float(record["s"]) - span) <= 2.0, (name, record["s"], span)
            assert name == "effective_config" or float(record["max_rss"]) > 50, (name, record["max_rss"])
    # The analyses explain reads (deviation, neighbourhood) lie on the longest chain of jobs:
    # once the forecaster, which takes both cores, is done, they start before the others.
    from compare_main_job import job_spans

    starts = {name.split("=")[-1].rstrip("]"): start for name, (start, _) in job_spans(out.stderr).items()}
    for first in ("deviation", "neighbourhood"):
        for later in ("overview", "distributions", "compare"):
            assert starts["forecast"] <= starts[first] <= starts[later], (first, later, starts)
    # Nothing to do on a second invocation.
    again = snakemake("--cores", "2", cwd=workdir)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_every_summary_reads_back_through_its_typed_result(main_job):
    """The report reads each analysis through its result class (hpcvar.results): every summary.json
    of the main job loads through it and writes back unchanged: no key lost, renamed or added."""
    import json

    from hpcvar.results.compare import CompareResult
    from hpcvar.results.deviation import DeviationResult
    from hpcvar.results.distributions import DistributionsResult
    from hpcvar.results.explain import ExplainResult
    from hpcvar.results.forecast import ForecastResult
    from hpcvar.results.interference import InterferenceResult
    from hpcvar.results.neighbourhood import NeighbourhoodResult
    from hpcvar.results.overview import OverviewResult

    assert main_job.result.returncode == 0, main_job.result.stderr[-3000:]
    analyses = main_job.results / "analyses"
    kinds = (OverviewResult, NeighbourhoodResult, DeviationResult, ForecastResult, DistributionsResult, CompareResult,
             InterferenceResult, ExplainResult)
    assert {k.NAME for k in kinds} == {p.name for p in analyses.iterdir() if (p / "summary.json").is_file()}
    for kind in kinds:
        result = kind.read(analyses / kind.NAME)
        assert result.dump() == json.loads((analyses / kind.NAME / "summary.json").read_text()), kind.NAME


def test_main_job_finds_the_planted_upgrade(main_job):
    """The demo campaign's simulator changes the shape of every collective's latency on its
    upgrade day (same mean and median, a second mode); the main job's regression check splits
    the campaign there and must call every within-run shape variable "changed shape"."""
    import json

    results = main_job.results
    truth = json.loads((results / "raw" / "truth.json").read_text())["microbenchmarks"]
    summary = json.loads((results / "analyses" / "compare" / "summary.json").read_text())
    assert summary["after"]["range"].startswith(truth["upgrade"]["time"][:10])
    pairs = pd.DataFrame(summary["pairs"])
    mb = pairs[pairs["test"] == truth["dataset"]].set_index("variable")
    rel = mb[mb.index.str.endswith("_rel")]
    assert len(rel) == len(truth["operations"]) and (rel["verdict"] == "changed shape").all(), rel["reason"]
    assert (rel["iqr_ratio"] > 2).all() and (rel["shift_pct"].abs() < 2).all()
    # A regression found is a finding in the report, not a failed workflow step.
    assert summary["regression"] and summary["exit_code"] == 1


def test_snakemake_report(main_job):
    """`snakemake --report` packs the figures by section (category) and dataset (subcategory)."""
    workdir = main_job.workdir
    out = snakemake("--cores", "2", "--report", "report.html", cwd=workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    html = (workdir / "report.html").read_text()
    assert "summary.txt" in html
    figures = sorted((workdir / "results" / "report" / "figures").rglob("*.svg"))
    assert len(figures) >= 6 * 6  # per dataset: steps, MPI, top users, relevance, forecast grid, placement
    added = {line.split("Adding ", 1)[1].split(" (")[0] for line in out.stderr.splitlines() if "Adding " in line}
    assert {f.name for f in figures} <= added
    for category in ("campaign", "datasets", "neighbourhood", "deviation", "forecast", "placement", "explained",
                     "report"):
        assert f'"{category}"' in html, category
    for dataset in ("amg-128", "milc-512", "umt-128"):
        assert f'"{dataset}"' in html


LOCAL_CAMPAIGN = """source: campaign
{results}campaign:
  rounds: 1
  system: local
  checks: [reframe_tests/microbenchmarks]
  tests: [Collectives]
  options: ["-S", "Collectives.iterations=50"]
interference:
  experiment: null  # the main job's simulated one is tested there; not again for this campaign
"""


def _snapshot(directory) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_readme_order_in_one_checkout_keeps_each_campaigns_raw_files_apart(main_job):
    """The order of the documentation's getting started and mini-campaign in one workflow directory: the main job, then a real campaign (the
    mini-campaign's shape: source campaign, no raw_dir; on the `local` system, so no cluster is
    needed), then the main job again. The simulated raw directory stays byte for byte what the
    simulator wrote, both datasets collate; a campaign left on the main job's `results` is refused
    at import, naming both systems, and changes nothing."""

    wd = main_job.workdir
    assert main_job.result.returncode == 0
    raw = wd / "results" / "raw"
    before, dataset_before = _snapshot(raw), _snapshot(wd / "results" / "dataset")
    if not (wd / "reframe_tests").exists():
        (wd / "reframe_tests").symlink_to(REPO / "reframe_tests")  # ReFrame runs in the workflow directory
    (wd / "local-campaign.yaml").write_text(LOCAL_CAMPAIGN.format(results="results: results/local-campaign\n"))
    out = snakemake("--cores", "2", "--configfile", "local-campaign.yaml", cwd=wd, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    campaign = wd / "results" / "local-campaign"
    assert [p.name for p in (campaign / "raw" / "runs").iterdir()] and (campaign / "raw" / "system.yaml").exists()
    assert set(pd.read_parquet(campaign / "dataset" / "runs")["dataset"]) == {"collectives-1"}
    assert _snapshot(raw) == before
    # The same campaign left on the main job's results: its import is refused.
    (wd / "shared-campaign.yaml").write_text(LOCAL_CAMPAIGN.format(results=""))
    out = snakemake("--cores", "2", "--configfile", "shared-campaign.yaml", cwd=wd, timeout=1200)
    assert out.returncode != 0
    log = (wd / "results" / "logs" / "import-001.log").read_text()
    assert f"results/raw is the raw directory of system 'dragonfly-sim', these runs are of system 'local'" in log
    assert _snapshot(raw) == before and _snapshot(wd / "results" / "dataset") == dataset_before
    # The main job again: nothing of it changed, nothing to redo.
    again = snakemake("--cores", "2", cwd=wd, timeout=1200)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert _snapshot(raw) == before
    runs = pd.read_parquet(wd / "results" / "dataset" / "runs")
    assert set(runs["system"]) == {"dragonfly-sim"} and "collectives-16" in set(runs["dataset"])
