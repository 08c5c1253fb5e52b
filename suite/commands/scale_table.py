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
    import pandas as pd

    from suite.scale.datasets import PAPER_ROLES, validation_table
    from suite.scale.validate import weak_calibration

    paper = paper_tables("llm_scale", args.paper)
    for role in sorted(set(PAPER_ROLES) - set(paper)):
        path = args.paper_dir / PAPER_ROLES[role]
        if not path.is_file():
            raise ValueError(f"--paper-dir {args.paper_dir}: no {PAPER_ROLES[role]} for role "
                             f"{role!r}; give it with --paper {role}=CSV")
        paper[role] = pd.read_csv(path)
    table = validation_table(paper)
    for line in weak_calibration(table):
        print(f"warning: {line}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    return 0
