"""What the workflow itself needs from the package: progress lines (``progress``, for the
Snakemake logger plugin) and the source digest its derived rules carry (``source_digest``)."""
