"""``seedbench build-external``: cmake-build the source checkout of a configured external
program."""

from __future__ import annotations

import argparse
import json
import os
import sys

from suite.commands.common import section_arguments, section_of


def add_parser(sub: argparse._SubParsersAction) -> None:
    ext = sub.add_parser("build-external",
                         help="cmake-build the source checkout of a configured external program")
    ext.add_argument("name", help="the program's key under bert_varlen.external")
    section_arguments(ext, "the bert_varlen config section as JSON")
    ext.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ext.add_argument("--record-failure", action="store_true",
                     help="a failed build writes its stamp with the failure and exits 0: the "
                          "program's points are then unavailable with cmake's error (the "
                          "workflow's rule; by hand a failure exits 1)")


def run(args: argparse.Namespace) -> int:
    from suite.baselines.external import build, spec_from_config
    from suite.config import BertVarlenConfig, ConfigError

    section = section_of(args, "bert_varlen")
    programs = BertVarlenConfig.from_dict(section).external
    if args.name not in programs:
        raise ConfigError(f"no external program {args.name!r} under bert_varlen.external "
                          f"(configured: {sorted(programs)})")
    from suite.baselines.external import BuildFailed

    try:
        stamp = build(spec_from_config(args.name, programs[args.name]), args.jobs,
                      record_failure=args.record_failure)
    except BuildFailed as e:
        print(f"seedbench build-external: {args.name} did not build: {e}", file=sys.stderr)
        return 1
    print(stamp, f"({json.loads(stamp.read_text())['status']})")
    return 0
