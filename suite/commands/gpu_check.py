"""``seedbench gpu-check``: the GPU half in one short lease -> OUT."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    gpu = sub.add_parser("gpu-check", help="the GPU half in one short lease (kernel tests, "
                                           "autotune, MHA, BERT, ladder, ~1B GPT) -> OUT")
    gpu.add_argument("--out", type=Path, required=True,
                     help="steps.json, tuning.json, kernel_tests.xml, results.tar.gz")
    gpu.add_argument("--dry", action="store_true",
                     help="rehearse every step on CPU at tiny sizes (Triton interpreted)")
    gpu.add_argument("--budget-s", type=float, default=480.0,
                     help="no step starts after this many seconds (480)")
    gpu.add_argument("--work", type=Path,
                     help="the working folder (records, oracles, the tuning; default a fresh "
                          "temporary one). An earlier call's, on the same machine: its "
                          "records, tuning and peak are kept, and only what it cut off or "
                          "failed runs")
    gpu.add_argument("--steps", nargs="+", metavar="STEP",
                     help="only these steps, in the pack's order (e.g. the ones a cut-off run "
                          "skipped; without tune, the kernels run their default launch)")


def run(args: argparse.Namespace) -> int:
    from suite.gpu.pack import run

    steps = run(args.out, dry=args.dry, budget_s=args.budget_s, only=args.steps,
                work=args.work)["steps"]
    for step in steps:
        print(f"{step['step']:8s} {step['status']:8s} {step.get('seconds', '')}")
    return 0 if all(s["status"] == "ok" for s in steps) else 1
