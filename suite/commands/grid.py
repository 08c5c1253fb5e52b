"""``seedbench grid``: every point of a (batch sizes x lengths) grid of one system, in one process
-> a record per point. What the GPU pack's table step calls: the process start, the model build
and a compile are paid once per system, not once per point (the workflow's ``run`` measures a
point per process)."""

from __future__ import annotations

import argparse
import json
import sys
from itertools import product
from pathlib import Path

from suite.commands.common import section_arguments, section_of
from suite.experiments import registry as experiments


def add_parser(sub: argparse._SubParsersAction) -> None:
    grid = sub.add_parser("grid", help="every point of a grid of one system, in one process "
                                       "-> a record per point")
    grid.add_argument("experiment", choices=experiments.oracle_experiments(),
                      help="an end-to-end BERT experiment")
    grid.add_argument("--system", required=True,
                      help="a registered baseline, a ladder step (ladder-N) or external-<name>")
    grid.add_argument("--subject", default=None, help="model family (default bert)")
    grid.add_argument("--batch-sizes", type=int, nargs="+", required=True)
    grid.add_argument("--max-seq-lens", type=int, nargs="+", required=True)
    section_arguments(grid, "the experiment's config section as JSON")
    grid.add_argument("--peak", type=Path, help="peak.json from `seedbench peak`")
    grid.add_argument("--oracle-dir", type=Path,
                      help="share each point's float64 reference output and the model's "
                           "weights with the other systems' grids (as `run --oracle-dir`)")
    grid.add_argument("--out-dir", type=Path, required=True,
                      help="the records go to OUT_DIR/b<batch>_l<length>.json")
    grid.add_argument("--timeout-s", type=float, default=None,
                      help="the whole grid's limit (default: the section's timeout_s per point)")
    grid.add_argument("--in-process", action="store_true",
                      help="run here instead of in a supervised child process")


def record_path(out_dir: Path, batch_size: int, max_seq_len: int) -> Path:
    return out_dir / f"b{batch_size}_l{max_seq_len}.json"


def run(args: argparse.Namespace) -> int:
    from suite.config import BertVarlenConfig

    section = section_of(args, "bert_varlen")
    cfg = BertVarlenConfig.from_dict(section)
    points = list(product(args.batch_sizes, args.max_seq_lens))
    if args.in_process:
        return _measure(args, cfg, points)

    from suite.launch.jobs import run_isolated
    from suite.records import failed_record, write_record

    for b, n in points:  # what is on disk afterwards is this run's
        record_path(args.out_dir, b, n).unlink(missing_ok=True)
    child = [sys.executable, "-m", "suite.cli", "grid", args.experiment, "--system",
             args.system, "--batch-sizes", *map(str, args.batch_sizes), "--max-seq-lens",
             *map(str, args.max_seq_lens), "--section-json", json.dumps(cfg.to_dict()),
             "--out-dir", str(args.out_dir), "--in-process"]
    for flag, value in (("--subject", args.subject), ("--peak", args.peak),
                        ("--oracle-dir", args.oracle_dir)):
        if value:
            child += [flag, str(value)]
    timeout_s = args.timeout_s or cfg.timeout_s * len(points)
    code = run_isolated(child, args.out_dir, None, timeout_s, warm=True)
    missing = [(b, n) for b, n in points if not record_path(args.out_dir, b, n).exists()]
    for b, n in missing:  # the process ended before these points: each a failed record
        why = (f"the grid's process ended (exit {code}; 124: past its {timeout_s:g} s) "
               f"before this point")
        point = {"batch_size": b, "max_seq_len": n, "subject": args.subject}
        write_record(failed_record(args.experiment, args.system, point, cfg.to_dict(), why),
                     record_path(args.out_dir, b, n))
    print(f"{args.out_dir}: {len(points) - len(missing)} of {len(points)} points recorded by "
          f"the grid's process", file=sys.stderr)
    return 0


def _measure(args: argparse.Namespace, cfg, points: list[tuple[int, int]]) -> int:
    from suite.experiments.bert_varlen import run_points
    from suite.peak.schema import read_peak
    from suite.records import write_record

    records = run_points(cfg, args.system, points, read_peak(args.peak),
                         experiment=args.experiment, model_kind=args.subject or "bert",
                         oracle_dir=args.oracle_dir)
    for (b, n), record in zip(points, records):  # each written as it is done
        write_record(record, record_path(args.out_dir, b, n))
        print(f"{record_path(args.out_dir, b, n)}: {record.status.value} "
              f"{record.reason[:200]}", file=sys.stderr, flush=True)
    return 0
