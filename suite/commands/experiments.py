"""``seedbench experiments``: the experiments and the paper CSVs each reads."""

from __future__ import annotations

import argparse

from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("experiments", help="list experiment families")


def run(args: argparse.Namespace) -> int:
    for spec in experiments.SPECS.values():
        print(f"{spec.name:14s} [{spec.family}] {spec.title}")
        for role, path in spec.paper_paths().items():
            print(f"{'':14s} --paper {role}={path}")
    return 0
