"""``seedbench run``: measure one workload point of one system -> a record (what the BERT rules
call)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from suite.commands.common import section_arguments, section_of
from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="measure one workload point of one system -> a record")
    run.add_argument("experiment", choices=experiments.names("bert"),
                     help="a BERT experiment (training runs: `train`, loss runs: `pretrain`)")
    run.add_argument("--system", required=True,
                     help="system under test: a registered baseline, a ladder step (ladder-N), "
                          "a kernel variant or external-<name>")
    run.add_argument("--subject", default=None,
                     help="model family (bert, albert, distilbert, deberta) for end-to-end "
                          "experiments; operator (attention, layernorm, gemm_gelu) for kernels")
    run.add_argument("--batch-size", type=int, required=True)
    run.add_argument("--max-seq-len", type=int, required=True)
    section_arguments(run, "the experiment's config section as JSON")
    run.add_argument("--peak", type=Path, help="peak.json from `seedbench peak`")
    run.add_argument("--oracle-dir", type=Path,
                     help="end-to-end experiments: read the point's float64 reference output "
                          "and the model's weights from this folder when an earlier job wrote "
                          "them, else compute them and write them there for the next (without "
                          "it: computed, not kept)")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--in-process", action="store_true",
                     help="run here instead of in a supervised child process")


def run(args: argparse.Namespace) -> int:
    from suite.config import BertVarlenConfig

    section = section_of(args, "bert_varlen")
    cfg = BertVarlenConfig.from_dict(section)
    if args.in_process:
        from suite.peak.schema import read_peak
        from suite.records import write_record

        peak = read_peak(args.peak)
        record = _measure(args, cfg, peak)
        write_record(record, args.out)
        print(f"{args.out}: {record.status.value} {record.reason[:200]}", file=sys.stderr)
        return 0

    from suite.launch.jobs import run_isolated
    from suite.records import Record, failed_record

    def failed(reason: str) -> Record:
        point = {"batch_size": args.batch_size, "max_seq_len": args.max_seq_len,
                 "subject": args.subject}
        return failed_record(args.experiment, args.system, point, cfg.to_dict(), reason)

    child = ["run", args.experiment, "--system", args.system, "--batch-size",
             str(args.batch_size), "--max-seq-len", str(args.max_seq_len), "--section-json",
             json.dumps(cfg.to_dict()), "--out", str(args.out), "--in-process"]
    if args.subject:
        child += ["--subject", args.subject]
    if args.peak:
        child += ["--peak", str(args.peak)]
    if args.oracle_dir:
        child += ["--oracle-dir", str(args.oracle_dir)]
    run_isolated([sys.executable, "-m", "suite.cli", *child], args.out, failed, cfg.timeout_s,
                 warm=True)
    return 0


def _measure(args: argparse.Namespace, cfg, peak):
    runner = experiments.load(experiments.get(args.experiment).runner)
    if args.oracle_dir and not experiments.shares_oracle(args.experiment):
        raise SystemExit(f"--oracle-dir: {args.experiment} has no shared oracle (those that "
                         f"do: {experiments.oracle_experiments()})")
    extra = {"oracle_dir": args.oracle_dir} if args.oracle_dir else {}
    return runner(cfg, args.experiment, args.subject, args.system, args.batch_size,
                  args.max_seq_len, peak, **extra)
