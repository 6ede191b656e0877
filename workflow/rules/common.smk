import json
import os
import shlex
import sys

import yaml

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate


validate(config, "../schemas/config.schema.yaml")

RESULTS = config["results"]
# Raw campaign files: written by the simulator (source: simulate) or imported round by round from
# this workflow's ReFrame runs (source: campaign), under the results unless raw_dir names another
# place; or a real campaign's directory elsewhere (source: raw, raw_dir required). Every
# configuration with results of its own has a raw directory of its own.
if config["source"] == "raw" and not config["raw_dir"]:
    raise ValueError("source: raw reads a real campaign's raw directory: set raw_dir (docs/raw-layout.md)")
if config["source"] == "simulate" and config["raw_dir"]:
    raise ValueError("source: simulate writes its raw files to <results>/raw: raw_dir is for source raw or campaign")
RAW_DIR = config["raw_dir"] or f"{RESULTS}/raw"
# The dataset grows round by round (collate appends new runs); the rules that read it wait for
# collate's record of what it added, DATASET/collated.json.
DATASET = f"{RESULTS}/dataset"
COLLATED = f"{DATASET}/collated.json"

# The `hpcvar` command next to this Snakemake's Python (the project's virtual environment), so
# `.venv/bin/snakemake` works without activating it; plain `hpcvar` from PATH otherwise (conda).
_venv_hpcvar = os.path.join(os.path.dirname(sys.executable), "hpcvar")
HPCVAR = _venv_hpcvar if os.path.exists(_venv_hpcvar) else "hpcvar"

# The analyses (src/hpcvar/analyses/registry.py: one list for the command line, MLflow, this
# workflow and the report; the hpcvar package is installed beside this Snakemake by ./setup.sh).
from hpcvar.analyses.registry import ANALYSES
from hpcvar.data import rawlayout

# The simulator's ground truth (only when the raw files are simulated): the forecast analysis
# reports the simulator's oracle error beside its own.
TRUTH = f"{RAW_DIR}/{rawlayout.TRUTH}" if config["source"] == "simulate" else None


def set_options(values):
    """Settings as `--set key=value` options, values as JSON (which is YAML): the one way every
    step (simulate, the analyses, compare, the interference experiment) takes its config section."""
    return " ".join(shlex.quote(f"--set={k}={json.dumps(v)}") for k, v in values.items())


def analysed_datasets(wildcards):
    """The collated dataset's names, once the collate checkpoint has run: the analyses fan out
    over them (one job per analysis and dataset, analyses.smk)."""
    checkpoints.collate.get()
    from hpcvar.data.dataset import Dataset

    return sorted(Dataset(DATASET).read("runs")["dataset"].dropna().unique())


def analysis_input(wildcards):
    """What `hpcvar <analysis>` reads: the collated dataset, the summaries of the analyses it
    builds on (explain: deviation's, neighbourhood's) and, for forecast, the simulator's truth."""
    a = ANALYSES[wildcards.analysis]
    return {"collated": COLLATED, "reads": [f"{RESULTS}/analyses/{r}/summary.json" for r in a.reads],
            "truth": [TRUTH] if TRUTH and a.takes_truth else []}


def analysis_inputs(wildcards, input):
    """The analyses an analysis reads (--analyses DIR) and the simulator's truth (--truth)."""
    return " ".join(([f"--analyses {os.path.dirname(os.path.dirname(input.reads[0]))}"] if input.reads else [])
                    + ([f"--truth {input.truth}"] if input.truth else []))


def analysis_command(wildcards, input, output):
    """`hpcvar <analysis> DATASET --out DIR` with its inputs and settings (one job over every dataset)."""
    return (f"{HPCVAR} {wildcards.analysis} {shlex.quote(os.path.dirname(input.collated))}"
            f" --out {shlex.quote(os.path.dirname(output.summary))} {analysis_inputs(wildcards, input)}"
            f" {analysis_settings(wildcards.analysis)}")


def analysis_threads(wildcards):
    """Cores of an analysis job over every dataset: for one that spreads its datasets over
    processes (the forecaster, explain), its `workers` when the config sets them, else every core
    of a run on this machine (`--cores`; a cluster job gets one unless its profile sets threads);
    one for the others."""
    a = ANALYSES[wildcards.analysis]
    if not a.spreads or config["fan_out"] != "analysis":
        return 1
    configured = config["analyses"][wildcards.analysis].get("workers")
    if configured:
        return configured
    return local_cores()


def local_cores():
    """Every core of a run on this machine (`--cores`); one when jobs go to a cluster (no
    --cores: a profile sets the rule's threads)."""
    try:
        return workflow.cores
    except WorkflowError:
        return 1


def analysis_workers(wildcards, threads):
    """The spreading analysis's processes: the job's threads."""
    return f" --set=workers={threads}" if ANALYSES[wildcards.analysis].spreads else ""


# Job priorities. Snakemake starts, of the ready jobs, the set that fits the cores with the largest
# sum of priorities. The longest chain goes first: the simulator and collation (each on every
# core), the analyses that spread over every core (the forecaster, explain), and those another
# analysis reads (deviation and neighbourhood, before explain). Next come the longest one-core
# jobs that only the report waits for, the interference experiment and compare (12 and 10 s of
# the demo's main job, 12 and 26 s of the paper preset's). They run beside deviation, and the
# short ones after it, so that both cores come free together for explain. Started after
# deviation, they kept explain waiting on one core.
PRIORITY_SPREAD, PRIORITY_CHAIN, PRIORITY_LONG = 100, 2, 1


def analysis_priority(wildcards):
    """:data:`PRIORITY_SPREAD` for an analysis that spreads its datasets over processes,
    :data:`PRIORITY_CHAIN` for one another analysis reads, 0 for the others."""
    if ANALYSES[wildcards.analysis].spreads:
        return PRIORITY_SPREAD
    return PRIORITY_CHAIN if any(wildcards.analysis in a.reads for a in ANALYSES.values()) else 0


def fanned_out_input(wildcards):
    """An analysis of each dataset on its own waits for its parts; one whose numbers compare
    the datasets (the overview) reads the collated dataset, as with fan_out: analysis."""
    if not ANALYSES[wildcards.analysis].per_dataset:
        return analysis_input(wildcards)
    return {"parts": expand(f"{RESULTS}/analyses/{wildcards.analysis}/parts/{{dataset}}.json",
                            dataset=analysed_datasets(wildcards))}


def fanned_out_command(wildcards, input, output):
    """`hpcvar assemble` of the parts, or the analysis itself when it has none."""
    if not ANALYSES[wildcards.analysis].per_dataset:
        return analysis_command(wildcards, input, output)
    # No parts yet while the collate checkpoint is pending: Snakemake plans them once it has run.
    parts = getattr(input, "parts", [])
    return (f"{HPCVAR} assemble {wildcards.analysis} --out {shlex.quote(os.path.dirname(output.summary))} "
            + " ".join(shlex.quote(p) for p in parts))


def analysis_settings(name):
    """The analysis's config section as `--set` options."""
    return set_options(config["analyses"][name])


def compare_windows():
    """The `compare:` date ranges (before, after), or None when there is nothing to compare.

    With the simulator and no ranges set, the check splits the campaign at the simulated
    upgrade (preset field upgrade_day), the change it planted in the microbenchmark latencies.
    """
    c = config["compare"]
    if c.get("before") and c.get("after"):
        return c["before"], c["after"]
    if c.get("before") or c.get("after"):
        raise ValueError("compare: set both before and after (START..END), or neither")
    if config["source"] != "simulate":
        return None
    from hpcvar.simulate.presets import upgrade_windows

    return upgrade_windows(config["simulate"]["preset"], config["simulate"]["overrides"])


COMPARE = compare_windows()


def compare_options():
    """The `compare:` settings (those of hpcvar.settings.CompareSettings: not the windows) as
    `--set` options."""
    from hpcvar.settings import CompareSettings

    return set_options({k: v for k, v in config["compare"].items() if k in CompareSettings.model_fields})


# --- interference experiment (config `interference:`) ------------------------------------------

INTERFERENCE = config["interference"]


def interference_sets():
    """The experiment's `overrides` as `--set` options."""
    return set_options(INTERFERENCE["overrides"])


# --- campaigns (source: campaign) ---------------------------------------------------------------

def campaign_rounds():
    """Rounds 001..N of the config, then the rounds requested by hand or by a schedule (the
    hpcvar package is installed beside this Snakemake by ./setup.sh)."""
    from hpcvar.campaign.rounds import requested

    fixed = [f"{i:03d}" for i in range(1, config["campaign"]["rounds"] + 1)]
    return fixed + [r for r in requested(RESULTS) if r not in fixed]


ROUNDS = campaign_rounds() if config["source"] == "campaign" else []


def previous_round(wildcards):
    """Rounds run in order: a round starts once the previous one is imported."""
    i = ROUNDS.index(wildcards.round)
    return [f"{RESULTS}/rounds/{ROUNDS[i - 1]}/imported.json"] if i > 0 else []


def campaign_args(round_id):
    """`hpcvar campaign round`'s arguments for a round, quoted for the shell and with braces
    doubled (shell() formats its string again; campaign.background is JSON)."""
    c = config["campaign"]
    args = ["--reframe-config", c["reframe_config"], "--system", c["system"]]
    args += [a for p in c["checks"] for a in ("--checks", p)]
    args += [a for t in c["tests"] for a in ("--tests", t)]
    args += [f"--option={o}" for o in c["options"]]
    args += [f"--env={k}={v}" for k, v in c["environment"].items()]
    if c["alongside"]:
        args += ["--alongside", c["alongside"]["test"]]
        args += [f"--alongside-option={o}" for o in c["alongside"].get("options", [])]
    if c["container"]:
        args += ["--image", c["container"]]
    if c["background"]:
        args += ["--background", json.dumps(c["background"]), "--topology", c["topology"] or ""]
    args += ["--round-index", str(ROUNDS.index(round_id) + 1), "--rounds", str(c["rounds"])]
    return " ".join(shlex.quote(a) for a in args).replace("{", "{{").replace("}", "}}")


def collate_input(wildcards):
    """What collate waits for: the simulator's raw directory, or every round's import."""
    if config["source"] == "campaign":
        return {"rounds": expand(f"{RESULTS}/rounds/{{round}}/imported.json", round=ROUNDS)}
    if config["source"] == "simulate":
        return {"truth": TRUTH}  # written last by the simulator
    return {"raw": RAW_DIR}
