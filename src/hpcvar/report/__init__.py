"""The HTML report for facility staff: one self-contained file (static SVG figures inlined as data
URIs, CSS and a few lines of JavaScript inline, nothing fetched) built from the collated dataset
and the analyses' ``summary.json`` files.

Where each number comes from:

- campaign and per-dataset figures: the dataset's tables, drawn by :mod:`hpcvar.report.figures`;
  the run counts and slowest/fastest ratios by :func:`hpcvar.data.summary.dataset_summary` (the same
  function that writes ``summary.txt``);
- neighbourhood, deviation and forecasting: the analyses' ``summary.json`` and figures, the
  same numbers each analysis logged to MLflow (the report reads, it never recomputes them).

Every figure is also written to ``FIGURES/<section>/<dataset>/<name>.svg``, which the Snakemake
rule registers with ``report()`` so ``snakemake --report`` shows them by analysis and dataset.
User names are pseudonymised on the way in unless anonymisation is switched off.
"""

from hpcvar.report.build import SECTIONS, build

__all__ = ["SECTIONS", "build"]
