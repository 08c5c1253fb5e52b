"""``seedbench noisy``: the records of points timed on a busy or noisy machine (make rerun-noisy
re-runs them)."""

from __future__ import annotations

import argparse
from pathlib import Path



def add_parser(sub: argparse._SubParsersAction) -> None:
    noisy = sub.add_parser("noisy", help="the records of points timed on a busy or noisy "
                                         "machine, one path per line (make rerun-noisy "
                                         "re-runs them)")
    noisy.add_argument("folders", nargs="*", type=Path, help="results folders")
    noisy.add_argument("--config", type=Path,
                       help="a workflow config: its machine's folder, results/<machine>")


def run(args: argparse.Namespace) -> int:
    from suite.measure.load import noise_columns
    from suite.records import read_record, record_files

    if not args.folders and not args.config:
        raise ValueError("give results folders or --config")
    folders = list(args.folders)
    if args.config:
        from suite.config import load
        from suite.env import machine_slug

        machine = load(args.config)["machine"]
        mine = Path("results") / (machine_slug() if machine == "auto" else machine)
        if mine.is_dir():  # else nothing has run on this machine yet: nothing is noisy
            folders.append(mine)
    for folder in folders:
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder of results")
        for path in record_files(folder):
            if noise_columns(read_record(path).timing)["noisy"]:
                print(path)
    return 0
