"""``seedbench table``: BERT-family records -> one tidy CSV."""

from __future__ import annotations

import argparse
from pathlib import Path



def add_parser(sub: argparse._SubParsersAction) -> None:
    table = sub.add_parser("table", help="records -> one tidy CSV")
    table.add_argument("records", nargs="*", type=Path)
    table.add_argument("--padded-baseline", default="torch-eager")
    table.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from suite.analysis.tables import tidy_table

    df = tidy_table(args.records, args.padded_baseline)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    return 0
