"""``seedbench report``: tidy CSVs, figures and analyses of every machine folder -> the HTML
report."""

from __future__ import annotations

import argparse
from pathlib import Path



def add_parser(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="tidy CSVs + figures + analyses of every machine "
                                           "folder -> HTML report")
    report.add_argument("--machine", nargs=3, action="append",
                        metavar=("FOLDER", "LABEL", "PEAK_JSON"),
                        help="a machine folder, its label in the report and its peak.json "
                             "(repeat; the first is shown first; default: the sections' "
                             "folders, without a peak)")
    report.add_argument("--section", nargs=5, action="append", required=True,
                        metavar=("FOLDER", "EXPERIMENT", "TABLE", "FIGURE_SVG", "ANALYSIS_JSON"))
    report.add_argument("--config", type=Path)
    report.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    from suite.report.render import Machine, Section, render_report

    machines = [Machine(folder, label, Path(peak))
                for folder, label, peak in args.machine] if args.machine else None
    sections = [Section(m, e, Path(t), Path(f), Path(a)) for m, e, t, f, a in args.section]
    render_report(sections, args.out, machines=machines, config_path=args.config)
    return 0
