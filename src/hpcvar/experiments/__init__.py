"""Interference experiments as data: the experiment file and the placement policies.

What the simulated what-if (:mod:`hpcvar.simulate.interference`) and the real Slurm experiment
(:mod:`hpcvar.campaign.interference`) share, so that neither depends on the other:

- :mod:`hpcvar.experiments.spec`: the experiment file (victim, aggressors, policies, routing,
  repetitions, seed, ``system:`` and ``slurm:`` sections), read and validated into an
  :class:`~hpcvar.experiments.spec.Experiment`.
- :mod:`hpcvar.experiments.placement`: the placement policies that give each job its nodes on a
  topology, and the seeded random streams that make them reproducible.
"""
