"""What several commands share: a config section as an argument, the papers' CSVs as arguments,
a results folder by name."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from suite.experiments import registry as experiments


def section_arguments(parser: argparse.ArgumentParser, help_json: str) -> None:
    """``--config FILE`` or ``--section-json JSON``, one of them required."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", type=Path, help="workflow config YAML")
    src.add_argument("--section-json", help=help_json)


def section_of(args: argparse.Namespace, key: str) -> dict[str, Any]:
    """The config section ``key`` from ``--config``, or the ``--section-json`` given."""
    from suite.config import load

    return load(args.config)[key] if args.config else json.loads(args.section_json)


def paper_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--paper", action="append", default=[], metavar="ROLE=CSV",
                        help="a paper's CSV under the role the experiment's spec names "
                             "(`seedbench experiments` lists them)")


def pairs(items: list[str], what: str) -> dict[str, Path]:
    """``["key=path", ...]`` -> {key: path}."""
    out = {}
    for item in items:
        key, sep, path = item.partition("=")
        if not sep or not key or not path:
            raise ValueError(f"{what} {item!r} is not KEY=PATH")
        out[key] = Path(path)
    return out


def paper_tables(experiment: str, items: list[str]) -> dict:
    """The --paper CSVs, checked against the roles the experiment's spec declares."""
    import pandas as pd

    given = pairs(items, "--paper")
    roles = experiments.get(experiment).paper
    unknown = sorted(set(given) - set(roles))
    if unknown:
        raise ValueError(f"{experiment}: paper role(s) {unknown} are not declared; its spec "
                         f"declares {sorted(roles) or 'none'}")
    return {role: pd.read_csv(path) for role, path in given.items()}


def results_folder(name: str) -> Path:
    """A folder as given, else a machine's folder under results/ or results/published/."""
    for candidate in (Path(name), Path("results") / name, Path("results/published") / name):
        if candidate.is_dir():
            return candidate
    raise ValueError(f"{name!r} is neither a folder nor a machine under results/ or "
                     "results/published/")
