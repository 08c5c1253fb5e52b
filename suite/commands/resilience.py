"""``seedbench resilience``: one llm_resilience job (a trainer's checkpoint, faults or straggler
runs under torchrun's agent) -> one record per system of the group."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GROUPS = ("checkpoint", "faults", "straggler")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resilience", help="checkpoint stall, failure recovery or stragglers "
                                          "under torchrun's agent -> a record per system")
    p.add_argument("group", choices=GROUPS)
    p.add_argument("--trainer", required=True, help="a registered torchrun trainer (ddp, fsdp2)")
    p.add_argument("--nprocs", type=int, default=2, help="ranks")
    p.add_argument("--train-json", required=True, help="the runs' train config section (JSON)")
    p.add_argument("--spec-json", required=True,
                   help="the group's settings, as llm.resilience.<group> (JSON)")
    p.add_argument("--out-dir", type=Path, required=True, help="writes <system>.json here")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="where checkpoints are written (default: the system's temp folder; on "
                        "a cluster, the file system a job would checkpoint to)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per launch")


def run(args: argparse.Namespace) -> int:
    from suite.experiments.llm_plan import ResilienceJob
    from suite.experiments.llm_resilience import run_job
    from suite.records import read_record

    job = ResilienceJob(args.trainer, args.group, args.nprocs, json.loads(args.train_json),
                        json.loads(args.spec_json))
    for path in run_job(job, args.out_dir, args.work_dir, args.timeout_s):
        rec = read_record(path)
        print(f"{path}: {rec.status.value} {rec.reason[:300]}")
    return 0
