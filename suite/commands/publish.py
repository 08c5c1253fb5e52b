"""``seedbench publish``: copy a machine folder's records into results/published/<name>/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path



def add_parser(sub: argparse._SubParsersAction) -> None:
    publish = sub.add_parser("publish", help="copy a machine folder's records into "
                                             "results/published/<name>/ (then make report)")
    publish.add_argument("source", type=Path, help="a machine folder, e.g. results/<machine>")
    publish.add_argument("--name", help="the published folder's name (default: the source's)")
    publish.add_argument("--replace", action="store_true",
                         help="replace an already published folder of that name")


def run(args: argparse.Namespace) -> int:
    from suite.machine_results import publish, summarize

    dest, files = publish(args.source, args.name, replace=args.replace)
    records = [p for p in files if p.suffix == ".json" and p.name != "peak.json"]
    print(f"published {len(records)} records ({summarize(records)}) and "
          f"{len(files) - len(records)} other files to {dest}/\n"
          f"next: make report, then git add {dest}", file=sys.stderr)
    return 0
