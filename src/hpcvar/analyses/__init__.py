"""The analyses, one module (or package) each; :mod:`~hpcvar.analyses.registry` lists them.

- :mod:`~hpcvar.analyses.overview`: the campaign at a glance (spread, coverage, time per step,
  compute vs MPI, placement): what the report opens with.
- :mod:`~hpcvar.analyses.neighbourhood`: which users' concurrent jobs go with slow runs.
- :mod:`~hpcvar.analyses.deviation`: which counters explain the per-step deviations.
- :mod:`~hpcvar.analyses.forecast`: predicting the next k steps from the last m.
- :mod:`~hpcvar.analyses.distributions`: latency and step-time distributions and their modes
  (the Confidence toolkit's view, Settlemyer et al.).
- :mod:`~hpcvar.analyses.explain`: one run's slowdown split into causes, from the others' results.

Besides: :mod:`~hpcvar.analyses.compare` (the regression check) and
:mod:`~hpcvar.analyses.interference` (an interference experiment's slowdowns and figures).

Each reads the tidy dataset, works per dataset (app x node count x input; the overview compares
them), logs to MLflow (:mod:`hpcvar.tracking`; the overview and explain fit no model and do not)
and writes ``summary.json`` plus the tables and figures the report uses.
"""
