"""Parts that several results share."""

from __future__ import annotations

from hpcvar.results import Record


class MLflowRuns(Record):
    """Where an analysis logged: the tracking store, its experiment and one run per dataset."""

    tracking_uri: str | None = None
    experiment_id: str
    runs: dict[str, str]


class Mode(Record):
    """One performance mode (:func:`hpcvar.analyses.distribution_stats.detect_modes`): KDE peak, share of
    the samples and its basin."""

    location: float
    weight: float  # share of the samples
    lower: float
    upper: float
