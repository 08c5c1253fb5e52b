#!/usr/bin/env python3
"""Recover a stale Snakemake lock before a run: ``unlock_stale.py SNAKEMAKE [ARGS...]``.

Why: a workflow killed outright (SIGKILL, the OOM killer, a closed laptop) leaves
``.snakemake/locks`` behind, and the next ``make reproduce`` stops with Snakemake's
LockException until someone finds ``snakemake --unlock``. A lock is stale when no live Snakemake
process works in this directory; then this runs ``SNAKEMAKE ARGS... --unlock`` (Snakemake's own
way to drop it) and says so. A lock held by a live run is left alone, with that run's pid named.
Unlocking changes no output: Snakemake's incomplete-file markers survive it, so the next run
(``rerun-incomplete``) redoes only the jobs that were cut off.

Standard library only; exit 0 when the run may start, 1 when another run holds the lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LOCKS = Path(".snakemake") / "locks"


def snakemake_processes(directory: Path) -> list[int]:
    """Pids of live Snakemake processes (other than this one) whose working directory is
    ``directory``."""
    here = directory.resolve()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid == os.getpid():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:  # gone, or not ours to read
            continue
        # the console script (python .../bin/snakemake) or python -m snakemake
        is_snakemake = any(Path(a.decode(errors="replace")).name == "snakemake"
                           for a in argv[:3])
        if is_snakemake and cwd == here:
            found.append(pid)
    return found


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    if not LOCKS.is_dir() or not any(LOCKS.iterdir()):
        return 0
    live = snakemake_processes(Path.cwd())
    if live:
        print(f"[seedbench] another Snakemake run (pid {', '.join(map(str, live))}) works in "
              f"{Path.cwd()} and holds its lock: wait for it, or stop it first",
              file=sys.stderr)
        return 1
    print(f"[seedbench] stale lock in {LOCKS} (no Snakemake process is running here, the last "
          "run was killed): unlocking; jobs it left unfinished run again", file=sys.stderr)
    done = subprocess.run([*argv, "--unlock"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode:
        print(done.stderr[-2000:], file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
