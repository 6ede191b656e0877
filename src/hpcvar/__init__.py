"""hpcvar: performance-variability campaigns on HPC systems.

Sub-packages:
- ``hpcvar.data``: the data model: the tidy, run_id-keyed Parquet dataset (schema and store) and
  the raw campaign layout.
- ``hpcvar.system``: the system model: dragonfly topology, router counters, background traffic.
- ``hpcvar.util``: helpers (atomic writes, file names, progress lines, pseudonyms, process grids).
- ``hpcvar.parsers``: one module per raw file format (reader and matching writer).
- ``hpcvar.collate``: the collation stage: raw campaign directory -> tidy dataset (and plain
  per-run tables -> dataset, ``hpcvar.collate.neighbourhood_import``).
- ``hpcvar.simulate``: the simulated dragonfly system that writes the same raw files.
- ``hpcvar.analyses``, ``hpcvar.results``, ``hpcvar.report``: the analyses, their typed results,
  the HTML report.
- ``hpcvar.campaign``, ``hpcvar.experiments``, ``hpcvar.sampler``, ``hpcvar.dev``: campaign rounds
  and ReFrame import, interference experiments, the per-node counter sampler, the dev Slurm
  cluster and testbed.

At the top level: the command line (``cli``, ``__main__``) and configuration (``settings``,
``defaults``, ``tracking``).
"""

import os as _os

__version__ = "0.1.0"

# MLflow, the analyses' tracking, sends usage telemetry to its makers unless told not to; nothing
# leaves the machine unless the user says so (MLFLOW_DISABLE_TELEMETRY=false allows it;
# docs/how-to/privacy.md). Set before any hpcvar module imports mlflow.
_os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
