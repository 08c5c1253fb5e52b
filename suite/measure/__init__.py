"""How a point is measured: the timing loop (``timing``) under its policy (``policy``), the
statistics of its samples (``stats``), the machine's load while it ran (``load``), and the check
against the reference that comes first (``correctness``)."""
