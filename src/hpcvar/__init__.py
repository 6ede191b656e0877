"""hpcvar: performance-variability campaigns on HPC systems.

Sub-packages:
- ``hpcvar.parsers``: one module per raw file format (reader and matching writer).
- ``hpcvar.simulate``: the simulated dragonfly system that writes the same raw files.
- ``hpcvar.dataset`` / ``hpcvar.schema``: the tidy, run_id-keyed Parquet dataset.
- ``hpcvar.collate``: raw campaign directory -> tidy dataset.
"""

__version__ = "0.1.0"
