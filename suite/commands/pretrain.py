"""``seedbench pretrain``: one pre-training loss run (a VWN variant or the PMA study) for one seed
-> a record."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    pre = sub.add_parser("pretrain", help="one pre-training loss run (VWN variant or PMA study) "
                                          "for one seed -> a record")
    pre.add_argument("experiment", choices=experiments.names("pretrain"))
    pre.add_argument("--spec-json", required=True,
                     help="vwn_scaling: the variant's train config; pma_merging: the pma section")
    pre.add_argument("--seed", type=int, required=True)
    pre.add_argument("--series", default="main", help="vwn_scaling: main or m_ablation")
    pre.add_argument("--checkpoints", type=Path,
                     help="pma_merging: folder for the run's checkpoints")
    pre.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from suite.records import write_record

    runner = experiments.load(experiments.get(args.experiment).runner)
    record = runner(json.loads(args.spec_json), args.seed, series=args.series,
                    checkpoints=args.checkpoints)
    write_record(record, args.out)
    print(f"{args.out}: {record.status.value} {record.reason[:300]}", file=sys.stderr)
    return 0
