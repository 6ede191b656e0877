"""The variability analyses of Bhatele et al. (IPDPS'20), Sections IV-V, one module each.

- :mod:`~hpcvar.analyses.neighbourhood`: which users' concurrent jobs go with slow runs.
- :mod:`~hpcvar.analyses.deviation`: which counters explain the per-step deviations.
- :mod:`~hpcvar.analyses.forecast`: predicting the next k steps from the last m.
- :mod:`~hpcvar.analyses.distributions`: latency and step-time distributions and their modes
  (the Confidence toolkit's view, Settlemyer et al.).

Each reads the tidy dataset, works per dataset (app x node count x input), logs to MLflow
(:mod:`hpcvar.tracking`) and writes ``summary.json`` plus the tables and figures the report uses.
"""
