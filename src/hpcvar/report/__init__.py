"""The HTML report for facility staff: one self-contained file (static SVG figures inlined as data
URIs, CSS and a few lines of JavaScript inline, nothing fetched) built from the collated dataset
and the analyses' ``summary.json`` files.

Where each number comes from:

- every number and figure: an analysis's ``summary.json`` and the figures it drew (the campaign
  and per-dataset sections: :mod:`hpcvar.analyses.overview`, whose run counts and slowest/fastest
  ratios are :func:`hpcvar.data.summary.dataset_summary`'s, the function that writes
  ``summary.txt``; the interference section: the experiment's result, figures drawn by
  :func:`hpcvar.analyses.interference.draw_figures`). The same numbers each analysis logged to
  MLflow: the report renders, it computes nothing.

Every figure is also written to ``FIGURES/<section>/<dataset>/<name>.svg``, which the Snakemake
rule registers with ``report()`` so ``snakemake --report`` shows them by analysis and dataset.
User names are pseudonymised on the way in unless anonymisation is switched off.
"""

from hpcvar.report.build import SECTIONS, build

__all__ = ["SECTIONS", "build"]
