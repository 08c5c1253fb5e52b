"""Starting processes: a job supervised in its own process group (``jobs``), forked warm by a
server that has done the imports (``warm``), the launcher line
of a training run (``jobs.command``), SLURM allocations (``slurm``), free ports (``ports``)."""
