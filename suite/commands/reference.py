"""docs/cli.md, generated from the parsers themselves so that it cannot drift from them
(``make docs`` writes it; a test fails when it differs): ``python -m suite.commands.reference``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from suite import commands

WIDTH = "100"  # argparse wraps at $COLUMNS: fixed, so the text is the same on every terminal
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def cli_reference() -> str:
    from suite.cli import build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        sub = parser._subparsers._group_actions[0]  # the one subparsers action
        helps = {a.dest: a.help for a in sub._choices_actions}
        parts = ["# `seedbench` command reference",
                 "",
                 "Generated from the parsers (`make docs`; `tests/test_cli_reference.py` fails "
                 "when this file and the code differ). `seedbench COMMAND --help` prints the "
                 "same.",
                 "",
                 *[f"- [`{name}`](#seedbench-{name}): {helps[name]}" for name in commands.NAMES]]
        for name in commands.NAMES:
            text = sub.choices[name].format_help().rstrip()
            parts += ["", f"## seedbench {name}", "", "```text", text, "```"]
        return "\n".join(parts) + "\n"
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DOC
    out.write_text(cli_reference())
    print(f"wrote {out}", file=sys.stderr)
