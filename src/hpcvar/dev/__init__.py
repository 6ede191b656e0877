"""Developer tools: a real single-node Slurm cluster with accounting (``hpcvar dev slurm``)."""
