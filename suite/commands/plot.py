"""``seedbench plot``: one experiment's tidy CSV -> a figure (SVG)."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.commands.common import paper_argument, paper_tables
from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    plot = sub.add_parser("plot", help="one experiment's tidy CSV -> a figure (SVG)")
    plot.add_argument("experiment", choices=experiments.names())
    plot.add_argument("--table", type=Path, required=True)
    paper_argument(plot)
    plot.add_argument("--curves", type=Path, help="the table step's curves.csv (loss curves)")
    plot.add_argument("--peak", type=Path, help="peak.json (the roofline's library lines)")
    plot.add_argument("--out", type=Path, required=True, help="figure path without suffix")


def run(args: argparse.Namespace) -> int:

    from suite.analysis.figure_io import FigureData
    from suite.analysis.tidy import read_table
    from suite.peak.schema import read_peak

    data = FigureData(read_table(args.table), paper_tables(args.experiment, args.paper),
                      curves=read_table(args.curves) if args.curves else None,
                      peak=read_peak(args.peak))
    experiments.load(experiments.get(args.experiment).figure)(data, args.out)
    return 0
