"""``seedbench analyze``: one experiment's table (+ the papers' CSVs, other tables, records) ->
analysis.json."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.commands.common import paper_argument, paper_tables, pairs
from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    analyze = sub.add_parser("analyze", help="one experiment's table (+ the papers' CSVs, other "
                                             "tables, records) -> analysis.json for the report")
    analyze.add_argument("experiment", choices=experiments.names())
    analyze.add_argument("--table", type=Path, required=True)
    paper_argument(analyze)
    analyze.add_argument("--table-of", action="append", default=[], metavar="EXPERIMENT=CSV",
                         help="another experiment's table this analysis reads")
    analyze.add_argument("--claims", type=Path, help="a claims table the table step wrote")
    analyze.add_argument("--records", nargs="*", type=Path, default=[],
                         help="the records behind the table (provenance)")
    analyze.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from suite.analysis.analyze import AnalysisInputs, analyze
    from suite.analysis.tidy import read_table
    from suite.records import atomic_write_json

    spec = experiments.get(args.experiment)
    others = pairs(args.table_of, "--table-of")
    unknown = sorted(set(others) - set(spec.reads_tables))
    if unknown:
        raise ValueError(f"{spec.name} reads the tables of {list(spec.reads_tables) or 'none'}, "
                         f"not {unknown}")
    inputs = AnalysisInputs(read_table(args.table), paper_tables(spec.name, args.paper),
                            {name: read_table(path) for name, path in others.items()},
                            pd.read_csv(args.claims) if args.claims else None, args.records)
    atomic_write_json(analyze(spec, inputs), args.out)
    return 0
