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


# Commands forked by a warm server when one can be had (suite.launch.warm): those whose job is
# their own process (the workflow's derived rules and loss runs), short enough that imports
# dominate, and the supervisors `train` and `serve`, which import torch (a trainer's launcher,
# the serving module) before they hand their job to a child that starts warm too: cold, that
# import cost a training job ~0.5 s of its ~3. `run` supervises without torch; `peak` times
# each library in a fresh process on purpose.
WARM = ("pretrain", "train", "serve", "table", "llm-table", "table-step", "scale-table",
        "analyze", "plot", "report")


def main(argv: list[str] | None = None) -> int:
    """``argv`` None: this process's command line (the console script), which a warm child may
    run instead; a list: run here (callers in Python)."""
    if argv is None and sys.argv[1:2] and sys.argv[1] in WARM:
        from suite.launch import warm

        code = warm.forward([sys.executable, "-m", "suite.cli", *sys.argv[1:]])
        if code is not None:
            return code
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, KeyError, OSError) as e:  # OSError: a missing file, a full disk
        print(f"seedbench {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
