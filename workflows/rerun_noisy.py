#!/usr/bin/env python3
"""Re-run the points timed on a busy machine: ``rerun_noisy.py CONFIG SNAKEMAKE [ARGS...]``.

Why: a noisy point (``suite.measure.load``: CV over its threshold, or other processes busy while
it was timed) is marked in the tables and the report; re-running it should be one command,
``make rerun-noisy``. Snakemake does not re-create a record while the tables after it are up to
date, so the records ``seedbench noisy --config CONFIG`` lists for this machine are forced:
``SNAKEMAKE ARGS... --forcerun RECORD...``; the tables, figures and report after them follow.
Nothing noisy: says so and runs nothing. Exit: Snakemake's, or 2 when listing failed.
"""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    config, snakemake = argv[0], argv[1:]
    listed = subprocess.run([sys.executable, "-m", "suite.cli", "noisy", "--config", config],
                            capture_output=True, text=True)
    if listed.returncode != 0:
        sys.stderr.write(listed.stderr)
        return 2
    records = listed.stdout.split()
    if not records:
        print("rerun-noisy: no noisy points: nothing to re-run", file=sys.stderr)
        return 0
    print(f"rerun-noisy: re-running {len(records)} noisy point(s): {' '.join(records)}",
          file=sys.stderr)
    return subprocess.run([*snakemake, "--forcerun", *records]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
