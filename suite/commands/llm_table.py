"""``seedbench llm-table``: training records -> one tidy CSV (and the loss curves)."""

from __future__ import annotations

import argparse
from pathlib import Path



def add_parser(sub: argparse._SubParsersAction) -> None:
    llm_table = sub.add_parser("llm-table", help="training records -> one tidy CSV")
    llm_table.add_argument("records", nargs="*", type=Path)
    llm_table.add_argument("--out", type=Path, required=True)
    llm_table.add_argument("--curves", type=Path, help="also write the loss per step (the step "
                                                       "logs the records name) here")


def run(args: argparse.Namespace) -> int:
    from suite.analysis.llm_tables import llm_curves, llm_table

    df = llm_table(args.records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    if args.curves:
        llm_curves(df).to_csv(args.curves, index=False)
    return 0
