"""``seedbench compare``: two results folders point by point; exit 1 on a significant regression."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.commands.common import results_folder
from suite.measure.load import NOISY_CV


def add_parser(sub: argparse._SubParsersAction) -> None:
    cmp = sub.add_parser("compare", help="two results folders (machines or commits) point by "
                                         "point; exit 1 on a significant regression")
    cmp.add_argument("base", help="a results folder, or a machine name under results/ or "
                                  "results/published/")
    cmp.add_argument("new", help="the same, compared against base")
    cmp.add_argument("--threshold", type=float, default=0.05,
                     help="a change counts when its whole 95%% CI is beyond 1 +/- this (0.05)")
    cmp.add_argument("--noisy-cv", type=float, default=NOISY_CV,
                     help="a point whose samples vary more than this CV is 'noisy' "
                          f"({NOISY_CV}; so is one timed beside busy processes)")
    cmp.add_argument("--percentile", type=float, default=50.0,
                     help="compare this percentile of each point's samples: 50 (the median), "
                          "90 or 99 for the tail")
    cmp.add_argument("--out", type=Path, help="also write the Markdown table here")


def run(args: argparse.Namespace) -> int:
    from suite.analysis.compare import compare, markdown

    base, new = results_folder(args.base), results_folder(args.new)
    table = compare(base, new, threshold=args.threshold, noisy_cv=args.noisy_cv,
                    percentile=args.percentile)
    text = markdown(table, str(base), str(new), args.threshold)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    slower = table[table.verdict == "slower"]
    if not slower.empty:
        print(f"seedbench compare: {len(slower)} point(s) slower beyond "
              f"{100 * args.threshold:g}%", file=sys.stderr)
        return 1
    return 0
