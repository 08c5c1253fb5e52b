"""The command line's shape: one module per subcommand, and docs/cli.md generated from them."""

import pkgutil

import suite.commands as commands_pkg
from suite import commands
from suite.cli import build_parser
from suite.commands.reference import DOC, cli_reference

NOT_COMMANDS = {"common", "reference"}


def test_every_subcommand_is_one_module_with_add_parser_and_run():
    modules = {m.name for m in pkgutil.iter_modules(commands_pkg.__path__)} - NOT_COMMANDS
    assert modules == {name.replace("-", "_") for name in commands.NAMES}
    parser = build_parser()
    for name in commands.NAMES:
        module = commands.module(name)
        assert callable(module.add_parser) and callable(module.run), name
        assert parser._subparsers._group_actions[0].choices[name].get_default("run") \
            is module.run, name


def test_the_cli_reference_is_the_parsers_own():
    assert DOC.read_text() == cli_reference(), \
        "docs/cli.md differs from the parsers: run `make docs` and commit it"
