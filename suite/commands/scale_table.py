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
    scale.add_argument("--paper-dir", type=Path, default=Path("results/paper"),
                       help="where every role not given with --paper is read from (the "
                            "spec's file names; default: %(default)s)")
    scale.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from suite.scale.datasets import PAPER_ROLES, load_paper, validation_table
    from suite.scale.validate import unfitted_straggler, weak_calibration

    given = paper_tables("llm_scale", args.paper)
    missing = sorted(set(PAPER_ROLES) - set(given))
    table = validation_table({**load_paper(args.paper_dir, missing), **given})
    for line in weak_calibration(table) + [u.line() for u in unfitted_straggler(table)]:
        print(f"warning: {line}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    return 0
