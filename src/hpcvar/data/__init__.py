"""The data model: what a campaign's data is, on disk.

- :mod:`hpcvar.data.schema`: the tidy dataset's tables, columns, types, keys and meanings (the
  single definition; ``docs/dataset.md`` is generated from it);
- :mod:`hpcvar.data.dataset`: the dataset store (append-only Parquet parts per table, the
  quarantine list, what each collation added), validated against the schema;
- :mod:`hpcvar.data.rawlayout`: the raw campaign layout (``docs/raw-layout.md``), the contract
  between what writes a raw campaign directory (the simulator, ``hpcvar import-reframe``) and
  what reads it (``hpcvar collate``);
- :mod:`hpcvar.data.summary`: the short text summary of a dataset (``hpcvar summary``, the report).
"""
