"""``seedbench headlines``: the README's block of published results."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path



def add_parser(sub: argparse._SubParsersAction) -> None:
    heads = sub.add_parser("headlines", help="the README's block of published results "
                                             "(after make report) -> stdout or the README")
    heads.add_argument("folders", type=Path, nargs="+", help="published machine folders")
    heads.add_argument("--update-readme", type=Path, metavar="README",
                       help="write the block between the README's markers instead")


def run(args: argparse.Namespace) -> int:
    from suite.report.readme import headlines_markdown, update_readme

    if args.update_readme:
        changed = update_readme(args.update_readme, args.folders)
        print(f"{args.update_readme}: {'updated' if changed else 'already up to date'}",
              file=sys.stderr)
    else:
        print("\n\n".join(headlines_markdown(f) for f in args.folders))
    return 0
