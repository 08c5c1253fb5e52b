"""``seedbench table-step``: the records of an experiment that builds its own table (VWN, PMA,
serving) -> table.csv, curves.csv and claims.csv."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.commands.common import paper_argument, paper_tables
from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    step = sub.add_parser("table-step", help="records of an experiment with its own table step "
                                             "(VWN, PMA, serving) -> table.csv, curves.csv and "
                                             "claims.csv")
    step.add_argument("experiment", choices=experiments.table_step_names())
    step.add_argument("records", nargs="*", type=Path)
    paper_argument(step)
    step.add_argument("--out-dir", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    spec = experiments.get(args.experiment)
    paper = paper_tables(spec.name, args.paper)
    missing = sorted(set(spec.paper) - set(paper))
    if missing:
        raise ValueError(f"{spec.name}: the table step needs the paper CSV(s) {missing} "
                         "(--paper ROLE=CSV)")
    table, curves, claims = experiments.load(spec.table)(args.records, paper)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, df in (("table", table), ("curves", curves), ("claims", claims)):
        df.to_csv(args.out_dir / f"{name}.csv", index=False)
    return 0
