"""Did an upgrade change performance? Compare the distributions of samples BEFORE and AFTER.

This package owns ``hpcvar compare``; :func:`run` is its entry point, as the other analyses'.
Its modules by concern: :mod:`~hpcvar.analyses.compare.sources` loads samples (CSV/Parquet files,
date ranges of a collated dataset, ReFrame's stored sessions), :mod:`~hpcvar.analyses.compare.stats`
makes the per-(test, variable) comparison and its verdict, and
:mod:`~hpcvar.analyses.compare.outputs` writes ``compare.csv``, one PDF+CDF figure per pair and
``summary.json`` (:class:`~hpcvar.results.compare.CompareResult`). The settings are
:class:`~hpcvar.settings.CompareSettings`.

Following Settlemyer et al., *Diagnosing anomalous network performance with Confidence*: after
the Jaguar SeaStar driver upgrade the mean latency hardly moved while the distribution became much
wider, so a mean +- threshold check would have passed it. Here every (test, variable) pair is
compared as a distribution:

* **Is there any difference?** Two-sample Kolmogorov-Smirnov, k-sample Anderson-Darling and
  Brown-Forsythe (Levene about the median); the pair's p-value is their Bonferroni minimum
  (``3 * min(p)``), and Holm's step-down correction over all pairs keeps the chance of even one
  false alarm in the whole comparison at ``alpha``.
* **Is it a practical difference, and what kind?** Only for pairs significant after Holm:

  - *slower/faster*: the median moved by at least ``min_effect`` % and its bootstrap confidence
    interval excludes 0 (direction from ``better``: lower-is-better unless told otherwise);
  - *changed shape*: the median did not move that much, but the spread did (IQR ratio beyond
    ``1 + min_spread`` % either way, Brown-Forsythe p < alpha), or a mode of at least
    ``min_mode_weight`` of the samples appeared or vanished (:func:`detect_modes`), or the shapes
    differ once the medians are aligned (Anderson-Darling on median-centred samples p < alpha and
    their Wasserstein distance at least ``min_effect`` % of the BEFORE median);
  - otherwise *unchanged*: different in a statistical sense only (huge samples see everything).

Samples that come in groups (``group``: the run of a time step or of a microbenchmark iteration)
are not independent: the steps of one run share its placement and its neighbours. For them the
three tests above are replaced by a permutation test that exchanges whole runs between BEFORE and
AFTER (:func:`group_permutation_tests`), and the confidence interval of the median shift resamples
whole runs, so ordinary run-to-run variation does not pass for a system change. ``independent``
pools them as independent draws instead, as Confidence does with the measurements of one long run.
"""

from __future__ import annotations

from __future__ import annotations

from pathlib import Path

from hpcvar.analyses.compare import outputs, sources, stats
from hpcvar.analyses.compare.outputs import (CSV_COLUMNS, counts_line, csv_table, format_table, plot_pair, summarise,
                                             write_outputs)
from hpcvar.analyses.compare.sources import (BARE_METAL, COLUMNS, BadInput, Selection, dataset_runs, dataset_samples,
                                             describe, load_samples, load_source, parse_range, parse_selection,
                                             reframe_config, reframe_samples, round_range, step_baseline)
from hpcvar.analyses.compare.stats import (DEFAULT_FAIL_ON, VERDICTS, compare, difference_tests, fail_on,
                                           group_permutation_tests, holm)
from hpcvar.defaults import REFRAME_CONFIG
from hpcvar.parsers.errors import ParseError
from hpcvar.results.compare import CompareResult
from hpcvar.settings import CompareSettings


def run(before: str | Path, after: str | Path | None = None, out_dir: str | Path | None = None,
        config: CompareSettings | dict | None = None, *, before_range: str | None = None,
        after_range: str | None = None, reference: str | Path | None = None,
        reframe_config: str | Path = REFRAME_CONFIG, higher_is_better=(), lower_is_better=(),
        fail_on: str | list[str] = DEFAULT_FAIL_ON, figures: bool = True) -> CompareResult:
    """``hpcvar compare``: did performance change from BEFORE to AFTER?

    ``before`` and ``after`` are each a samples file, a dataset directory or ``reframe:QUERY``;
    one dataset directory alone is compared with itself over ``before_range`` and ``after_range``
    (both needed; each a date range ``START..END``, rounds ``round:A..B``, an image
    ``image:NAME[@sha256:HEX]`` or ``bare-metal``, or a range and an image: :func:`parse_selection`). ``reference`` (an older baseline drawn beside them) is one of
    those too, or a date range of the same dataset. ``config`` holds the
    :class:`~hpcvar.settings.CompareSettings` (a mapping of its keys, or the settings);
    ``higher_is_better``/``lower_is_better`` are variable-name patterns; ``fail_on`` the verdicts
    that count as a regression (``slower,changed-shape``, or a list). With ``out_dir``, writes
    ``compare.csv``, ``summary.json`` and (``figures``) one figure per pair there.

    Returns the :class:`~hpcvar.results.compare.CompareResult` (its ``exit_code`` is the command's:
    1 when there is a regression). Bad input raises :class:`ParseError` (a file's, naming it and
    the line) or :class:`BadInput` (the arguments'), before anything is written; settings that are
    not :class:`~hpcvar.settings.CompareSettings`' raise :class:`~hpcvar.settings.SettingsError`.
    """
    settings = config if isinstance(config, CompareSettings) else CompareSettings.from_mapping(config)
    fails = stats.fail_on(fail_on)
    before_spec = str(before)
    after_spec = None if after is None else str(after)
    # round:A..B: a campaign's rounds, found beside a dataset directory (<results>/rounds).
    rounds_dir = Path(before_spec).parent / "rounds"
    before_win = parse_selection(before_range, rounds_dir) if before_range else None
    after_win = parse_selection(after_range, rounds_dir) if after_range else None
    if after_spec is None:
        if not Path(before_spec).is_dir():
            raise BadInput("give BEFORE and AFTER, or one dataset directory with --before and --after ranges")
        after_spec = before_spec
        if before_win is None or after_win is None:
            raise BadInput(f"{before_spec}: one dataset directory needs both --before and --after (date or round "
                           "ranges, images, bare-metal)")
    ref_spec, ref_win = (None if reference is None else str(reference)), None
    if ref_spec and not ref_spec.startswith("reframe:") and not Path(ref_spec).exists() and Path(before_spec).is_dir():
        ref_spec, ref_win = before_spec, parse_selection(ref_spec, rounds_dir)  # --reference of the same dataset
    baseline = None
    if Path(before_spec).is_dir() and Path(after_spec).is_dir():
        baseline = step_baseline(before_spec, before_win)
    kw = {"reframe_config_path": reframe_config}
    before_samples = load_source(before_spec, before_win, baseline=baseline, **kw)
    after_samples = load_source(after_spec, after_win, baseline=baseline, **kw)
    reference_samples = None
    if ref_spec:
        ref_base = baseline if (baseline is not None and Path(ref_spec).is_dir()) else None
        reference_samples = load_source(ref_spec, ref_win, baseline=ref_base, **kw)
    table = compare(before_samples, after_samples, settings, higher_is_better=higher_is_better,
                    lower_is_better=lower_is_better)
    if table.empty or (table["verdict"] == "not compared").all():
        only_b = sorted(set(before_samples["test"]) - set(after_samples["test"]))[:3]
        raise BadInput(f"nothing to compare: no (test, variable) has at least {settings.min_samples} samples in "
                       f"both BEFORE and AFTER" + (f" (BEFORE has tests {only_b}, AFTER "
                                                   f"{sorted(set(after_samples['test']))[:3]})" if only_b else ""))
    meta = {"before": describe(before_spec, before_win, before_samples),
            "after": describe(after_spec, after_win, after_samples),
            "reference": describe(ref_spec, ref_win, reference_samples) if ref_spec else None,
            "settings": {**settings.as_dict(), "correction": "holm", "higher_is_better": list(higher_is_better),
                         "lower_is_better": list(lower_is_better)}}
    if out_dir is None:
        return summarise(table, fails, meta)
    return write_outputs(table, out_dir, before_samples, after_samples, reference=reference_samples, meta=meta,
                         fail_verdicts=fails, figures=figures)


__all__ = ["BARE_METAL", "COLUMNS", "Selection", "parse_selection", "CSV_COLUMNS", "DEFAULT_FAIL_ON", "REFRAME_CONFIG", "VERDICTS", "BadInput", "CompareResult",
           "ParseError", "compare", "counts_line", "csv_table", "dataset_runs", "dataset_samples", "describe",
           "difference_tests", "fail_on", "format_table", "group_permutation_tests", "holm", "load_samples",
           "load_source", "outputs", "parse_range", "plot_pair", "reframe_config", "reframe_samples", "run",
           "sources", "stats", "step_baseline", "summarise", "write_outputs"]
