"""``seedbench scale-table``: the cluster-scale model against every published run -> CSV."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.commands.common import paper_argument, paper_tables


def add_parser(sub: argparse._SubParsersAction) -> None:
    scale = sub.add_parser("scale-table", help="the cluster-scale model against every published "
                                               "run, llm-analysis beside it -> CSV")
    paper_argument(scale)
    scale.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from suite.scale.datasets import validation_table

    table = validation_table(paper_tables("llm_scale", args.paper))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    return 0
