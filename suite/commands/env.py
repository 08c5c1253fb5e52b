"""``seedbench env``: the environment and provenance record, printed."""

from __future__ import annotations

import argparse
import json



def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("env", help="print the environment and provenance record")


def run(args: argparse.Namespace) -> int:
    from suite.env import capture

    print(json.dumps(capture(), indent=1))
    return 0
