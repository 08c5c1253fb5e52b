"""Starting processes: a job supervised in its own process group (``jobs``), the launcher line
of a training run (``jobs.command``), SLURM allocations (``slurm``), free ports (``ports``)."""
