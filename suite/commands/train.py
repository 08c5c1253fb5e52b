"""``seedbench train``: one training run under its launcher, supervised -> a record and a
step log."""

from __future__ import annotations

import argparse
import json
import os

from suite.experiments import registry as experiments
from suite.experiments.train_interface import add_run_arguments, rank_argv


def add_parser(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="one training run under its launcher -> a record and "
                                         "a JSON-lines step log (what the llm rules call)")
    train.add_argument("experiment", choices=experiments.names("llm"),
                       help="experiment name in the record")
    add_run_arguments(train)
    train.add_argument("--nprocs", type=int, default=1, help="processes per node")
    train.add_argument("--timeout-s", type=float, default=1800.0)
    train.add_argument("--nnodes", type=int, default=1,
                       help="nodes of the run; > 1 needs --rdzv-endpoint (the same command on "
                            "every node) or a SLURM allocation of that many nodes (one torchrun "
                            "per node through srun, meeting at the allocation's first host)")
    train.add_argument("--rdzv-endpoint", help="HOST:PORT every node reaches (multi-node)")
    train.add_argument("--node-rank", type=int,
                       help="this node's rank with --rdzv-endpoint: node 0 writes the record, "
                            "the others only run their ranks")
    train.add_argument("--local-addr", help="this node's address as the other nodes reach it "
                                            "(torchrun --local-addr; default: its hostname)")


def run(args: argparse.Namespace) -> int:
    """Launch the run (torchrun, the deepspeed launcher or one process) under supervision: a
    crash, a hang past the limit (the whole process group is killed) or a missing record
    becomes a failed record."""
    from suite.launch.slurm import AllocationError, multi_node_allocation, srun_environment
    from suite.launch.jobs import command, run_isolated
    from suite.records import Record, failed_record, write_record

    train = json.loads(args.train_json)

    def failed(reason: str) -> Record:
        point = {"nprocs": args.nprocs, **({"nnodes": args.nnodes} if args.nnodes > 1 else {}),
                 **({"label": args.label} if args.label else {})}
        return failed_record(args.experiment, args.trainer, point, train,
                             reason)

    inner = rank_argv(args, args.experiment)
    owner = not args.node_rank  # node 0 (or a one-node run) owns the record
    if owner:
        args.out.unlink(missing_ok=True)
        args.steplog.parent.mkdir(parents=True, exist_ok=True)
    try:
        endpoint, prefix, rdzv_id, env = args.rdzv_endpoint, [], "seedbench", None
        if args.nnodes > 1 and not endpoint:  # the nodes of the SLURM allocation
            alloc = multi_node_allocation(args.nnodes)
            endpoint, prefix = alloc.rendezvous_endpoint(), alloc.srun_prefix(args.nnodes)
            rdzv_id, env = f"slurm-{alloc.job_id}", srun_environment(os.environ)
        cmd = prefix + command(args.trainer, args.nprocs, inner, nnodes=args.nnodes,
                               node_rank=args.node_rank, rdzv_endpoint=endpoint,
                               rdzv_id=rdzv_id, local_addr=args.local_addr,
                               join_timeout_s=args.timeout_s if args.nnodes > 1 else None,
                               warm=True)
    except (AllocationError, ValueError, FileNotFoundError) as e:
        if not owner:
            raise
        write_record(failed(f"cannot launch: {e}"), args.out)
        args.steplog.touch()
        return 0
    # warm: a one-process run is forked by the warm server (a launcher's ranks: command(warm=))
    code = run_isolated(cmd, args.out, failed if owner else None, args.timeout_s,
                        record_wait_s=60.0 if args.nnodes > 1 else 0.0, env=env, warm=True)
    if not owner:
        return code
    if not args.steplog.exists():  # a run that failed before its first step: an empty log
        args.steplog.touch()
    return 0
