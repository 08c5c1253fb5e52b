"""What the benchmarks share: their command line, the warm-start precondition, and the header
and writing of their result files (``reports/benchmarks/<name>.json``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from suite import env as envmod
from suite.launch import warm


def arguments(doc: str, name: str, reps: int) -> argparse.Namespace:
    """``--config`` (a workflow config), ``--reps`` and ``--out``, after warm starts were
    checked to be on (every benchmark here times jobs as the workflow starts them)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("workflows/config/quick.yaml"))
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--out", type=Path, default=Path(f"reports/benchmarks/{name}.json"))
    args = parser.parse_args()
    ok, why = warm.enabled()
    if not ok:
        raise SystemExit(f"warm starts are off here: {why}")
    return args


def write(name: str, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The result with the machine and commit it was measured on."""
    header = {"benchmark": name, "config": str(args.config), "reps": args.reps,
              "machine": envmod.machine_slug(), "cpu_model": envmod.cpu_model(),
              "git": envmod.git_state()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**header, **result}, indent=1))
