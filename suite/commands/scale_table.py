"""``seedbench scale-table``: the cluster-scale model against every published run -> CSV."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.commands.common import paper_argument, paper_tables


def add_parser(sub: argparse._SubParsersAction) -> None:
    scale = sub.add_parser("scale-table", help="the cluster-scale model against every published "
                                               "run, llm-analysis beside it -> CSV")
    paper_argument(scale)
    scale.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from suite.scale.datasets import validation_table
    from suite.scale.validate import weak_calibration

    table = validation_table(paper_tables("llm_scale", args.paper))
    for line in weak_calibration(table):
        print(f"warning: {line}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    return 0
