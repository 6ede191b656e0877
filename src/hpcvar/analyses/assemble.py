"""One analysis's per-dataset parts merged into its ``summary.json``.

The workflow runs each (analysis, dataset) as a job of its own (``hpcvar <analysis> DATASET
--only NAME``: the dataset's tables and figures in ``OUT/<NAME>/``, its MLflow run, and its result
in ``OUT/parts/<NAME>.json``), so a cluster spreads them over nodes; then ``hpcvar assemble
<analysis> --out OUT PART...`` writes the summary the report and the other analyses read, the same
summary one run over every dataset writes:

* ``datasets``: every part's, by name;
* ``mlflow``: one run per dataset, every part's;
* lists (forecast's notes, explain's missing inputs): every item once, in the parts' order;
* everything else (the settings, the paper's bound, ...) is the same in every part, and is refused
  when it is not (parts of different settings, e.g. a stale one);
* what is drawn over all datasets, by the analysis's own ``assemble(result, out_dir)``:
  neighbourhood's cross-dataset table (the paper's Table III).
"""

from __future__ import annotations

import json
from pathlib import Path

from hpcvar.analyses.registry import ANALYSES
from hpcvar.results import ResultError


def merge(docs: list[dict], sources: list[str], across: tuple[str, ...] = ()) -> dict:
    """The parts' ``summary.json`` documents as one (see the module's description); the fields in
    ``across`` (the result's ``ACROSS_DATASETS``) are left empty for the analysis's assemble()."""
    if not docs:
        raise ResultError("no parts to assemble")
    merged: dict = {}
    for doc, source in zip(docs, sources):
        for key, value in doc.items():
            if key == "datasets":
                merged.setdefault("datasets", {}).update(value)
            elif key == "mlflow" and isinstance(value, dict) and "runs" in value:
                m = merged.setdefault("mlflow", {**value, "runs": {}})
                if {k: v for k, v in m.items() if k != "runs"} != {k: v for k, v in value.items() if k != "runs"}:
                    raise ResultError(f"{source}: logged to another MLflow store or experiment than {sources[0]}")
                m["runs"].update(value["runs"])
            elif key in across:
                merged.setdefault(key, [])  # drawn over all datasets by the analysis's assemble()
            elif isinstance(value, list):
                items = merged.setdefault(key, [])
                items += [v for v in value if v not in items]
            elif key not in merged:
                merged[key] = value
            elif merged[key] != value:
                raise ResultError(f"{source}: {key!r} differs from {sources[0]}'s ({value!r} against {merged[key]!r}):"
                                  " parts of one summary must come from one run of the workflow")
    merged["datasets"] = dict(sorted(merged.get("datasets", {}).items()))
    if "mlflow" in merged:
        merged["mlflow"]["runs"] = dict(sorted(merged["mlflow"]["runs"].items()))
    return merged


def assemble(analysis: str, out_dir: str | Path, parts: list[str | Path]):
    """Merge ``parts`` (``OUT/parts/<dataset>.json``) into ``out_dir/summary.json``; returns the
    analysis's typed result."""
    a = ANALYSES[analysis]
    if not a.per_dataset:
        raise ResultError(f"{analysis} covers the whole campaign and has no parts to assemble: run `hpcvar {analysis}`")
    out_dir = Path(out_dir)
    docs = []
    for part in parts:
        try:
            docs.append(json.loads(Path(part).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ResultError(f"{part}: not a result part ({exc})") from None
    cls = a.result
    result = cls.build(merge(docs, [str(p) for p in parts], cls.ACROSS_DATASETS))
    hook = getattr(a.module, "assemble", None)
    if hook is not None:
        result = hook(result, out_dir)
    result.write(out_dir)
    return result
