import json
import os
import shlex
import sys

import yaml

from snakemake.utils import validate


validate(config, "../schemas/config.schema.yaml")

RESULTS = config["results"]
# Raw campaign files: written by the simulator (source: simulate) or by a real campaign (source: raw).
RAW_DIR = f"{RESULTS}/raw" if config["source"] == "simulate" else config["raw_dir"]

# The `hpcvar` command next to this Snakemake's Python (the project's virtual environment), so
# `.venv/bin/snakemake` works without activating it; plain `hpcvar` from PATH otherwise (conda).
_venv_hpcvar = os.path.join(os.path.dirname(sys.executable), "hpcvar")
HPCVAR = _venv_hpcvar if os.path.exists(_venv_hpcvar) else "hpcvar"

# The simulator's ground truth (only when the raw files are simulated): the forecast analysis
# reports the simulator's oracle error beside its own.
TRUTH = f"{RAW_DIR}/truth.json" if config["source"] == "simulate" else None


def analysis_settings(name, **extra):
    """The analysis's config section as `--set key=value` options (values as JSON, which is YAML)."""
    settings = {**config["analyses"][name], **{k: v for k, v in extra.items() if v is not None}}
    return " ".join(shlex.quote(f"--set={k}={json.dumps(v)}") for k, v in settings.items())
