"""``seedbench``: thin command line over the layers below. Each ``run`` is one job in its own
process, as the workflow's rules call it."""

from __future__ import annotations

import argparse
import sys

from suite import commands


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand's parser (``suite.commands``), each bound to its ``run``."""
    parser = argparse.ArgumentParser(prog="seedbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in commands.NAMES:
        module = commands.module(name)
        module.add_parser(sub)
        sub.choices[name].set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, KeyError, OSError) as e:  # OSError: a missing file, a full disk
        print(f"seedbench {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
