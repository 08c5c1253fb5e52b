"""``seedbench serve``: one system served under MLPerf LoadGen for one repeat -> a record, its
LoadGen logs beside it (what the serving rule calls)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from suite.commands.common import section_arguments, section_of
from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="one system served under MLPerf LoadGen (Offline, "
                                         "SingleStream, Server) -> a record and LoadGen's logs")
    serve.add_argument("experiment", choices=experiments.names("serving"))
    serve.add_argument("--system", required=True,
                       help="padded-<baseline>, bucketed-<baseline>, packed-reference or "
                            "packed-reference-eager")
    serve.add_argument("--repeat", type=int, default=0,
                       help="which independent run (LoadGen's seeds are seed + repeat)")
    section_arguments(serve, "the experiment's config section as JSON")
    serve.add_argument("--out", type=Path, required=True,
                       help="the record; LoadGen's logs go to <stem>.loadgen/ beside it")
    serve.add_argument("--in-process", action="store_true",
                       help="run here instead of in a supervised child process")


def run(args: argparse.Namespace) -> int:
    from suite.experiments.bert_serving import logs_of
    from suite.records import write_record
    from suite.serving.config import SECTION, ServingConfig

    cfg = ServingConfig.from_dict(section_of(args, SECTION))
    logs = logs_of(args.out)  # a declared output of the rule: there whatever the outcome
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    if args.in_process:
        runner = experiments.load(experiments.get(args.experiment).runner)
        record = runner(cfg.to_dict(), args.system, args.repeat, args.out)
        write_record(record, args.out)
        print(f"{args.out}: {record.status.value} {record.reason[:200]}", file=sys.stderr)
        return 0

    from suite.launch.jobs import run_isolated
    from suite.records import failed_record

    def failed(reason: str):
        point = {"system": args.system, "repeat": args.repeat}
        return failed_record(args.experiment, args.system, point, cfg.to_dict(), reason)

    child = ["serve", args.experiment, "--system", args.system, "--repeat", str(args.repeat),
             "--section-json", json.dumps(cfg.to_dict()), "--out", str(args.out), "--in-process"]
    run_isolated([sys.executable, "-m", "suite.cli", *child], args.out, failed, cfg.timeout_s,
                 warm=True)
    return 0
