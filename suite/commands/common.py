"""What several commands share: the papers' CSVs as arguments, a results folder by name."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.experiments import registry as experiments


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
