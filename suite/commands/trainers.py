"""``seedbench trainers``: the registered training engines and whether they run here."""

from __future__ import annotations

import argparse



def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("trainers", help="list registered training engines and whether they run here")


def run(args: argparse.Namespace) -> int:
    from suite.trainers import registry as trainers

    for name in trainers.names():
        try:
            engine = trainers.create(name)
            ok, why = engine.available()
            desc = engine.description
        except Exception as e:  # noqa: BLE001 - a broken plugin is listed, not fatal
            ok, why, desc = False, f"cannot load: {type(e).__name__}: {e}", ""
        state = "available" if ok else f"unavailable: {why}"
        print(f"{name:18s} {state}  {desc}")
    return 0
