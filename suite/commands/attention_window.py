"""``seedbench attention-window``: sliding-window attention against causal attention at one
point, every system side by side in this process -> one record per system."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.config import DEVICES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attention-window", help="windowed vs causal attention, forward + "
                                                "backward, side by side -> a record per system")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--window", type=int, required=True)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--repeats", type=int, default=7, help="timed rounds")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    p.add_argument("--device", default="auto", choices=DEVICES)
    p.add_argument("--out-dir", type=Path, required=True,
                   help="writes <system>.json here, one per system")


def run(args: argparse.Namespace) -> int:
    from suite.devices import resolve_device
    from suite.experiments import llm_window
    from suite.records import write_record

    if args.seq_len < 1 or args.window < 1 or args.repeats < 1:
        raise ValueError(f"--seq-len {args.seq_len}, --window {args.window} and --repeats "
                         f"{args.repeats} must each be >= 1")
    point = {"seq_len": args.seq_len, "window": args.window, "heads": args.heads,
             "head_dim": args.head_dim, "batch": args.batch}
    device = resolve_device(args.device, 0)
    records = llm_window.run_point(point, dtype=args.dtype, repeats=args.repeats,
                                   warmup=args.warmup, device=str(device))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for record in records:
        write_record(record, args.out_dir / f"{record.system}.json")
        ratio = record.derived.get("time_vs_causal")
        print(f"{record.system}: {record.status.value} {record.reason[:200]}"
              + (f" {ratio:.3f}x causal's time" if ratio is not None else ""))
    return 0
