import os
import sys

from snakemake.utils import validate


validate(config, "../schemas/config.schema.yaml")

RESULTS = config["results"]
# Raw campaign files: written by the simulator (source: simulate) or by a real campaign (source: raw).
RAW_DIR = f"{RESULTS}/raw" if config["source"] == "simulate" else config["raw_dir"]

# The `hpcvar` command next to this Snakemake's Python (the project's virtual environment), so
# `.venv/bin/snakemake` works without activating it; plain `hpcvar` from PATH otherwise (conda).
_venv_hpcvar = os.path.join(os.path.dirname(sys.executable), "hpcvar")
HPCVAR = _venv_hpcvar if os.path.exists(_venv_hpcvar) else "hpcvar"
