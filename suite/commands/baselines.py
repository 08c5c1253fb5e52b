"""``seedbench baselines``: the registered baselines and whether they run here."""

from __future__ import annotations

import argparse
import json
import os
import sys



def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("baselines", help="list registered baselines and whether they run here")


def run(args: argparse.Namespace) -> int:
    """Each baseline is loaded and asked in its own process: frameworks that cannot share one
    (tensorflow before triton crashes) are asked apart, and a broken plugin breaks nothing."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from suite.baselines.registry import baselines as registry

    def ask(name: str) -> str:
        code = ("import json, sys; from suite.baselines.registry import baselines as registry; "
                "b = registry.create(sys.argv[1]); ok, why = b.available(); "
                "print(json.dumps([ok, why, b.description]))")
        proc = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                              timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        try:
            ok, why, desc = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            ok, why, desc = False, f"cannot load: {tail}", ""
        state = "available" if ok else f"unavailable: {why}"
        return f"{name:22s} {state}  {desc}"

    with ThreadPoolExecutor(max_workers=2) as pool:
        for line in pool.map(ask, registry.names()):
            print(line)
    return 0
