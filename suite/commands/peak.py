"""``seedbench peak``: the GEMM FLOP/s of every library this machine reaches -> peak.json."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

from suite.config import DEVICES



def add_parser(sub: argparse._SubParsersAction) -> None:
    peak = sub.add_parser("peak", help="measure the GEMM FLOP/s of every library this machine "
                                       "reaches (each in its own process) -> peak.json")
    peak.add_argument("--dtypes", nargs="+", default=["fp32"])
    peak.add_argument("--sizes", nargs="+", type=int, default=[1024, 2048])
    peak.add_argument("--repeats", type=int, default=3)
    peak.add_argument("--min-time-s", type=float, default=0.2, help="per timed round")
    peak.add_argument("--device", default="auto", choices=DEVICES)
    peak.add_argument("--threads", type=int, help="default: the usable cores")
    peak.add_argument("--libraries", nargs="+",
                      help="default: every library of the device type (torch.matmul, onednn, "
                           "numpy, tensorflow, onnxruntime on CPU; cublas on CUDA)")
    peak.add_argument("--fma-units", type=int,
                      help="FMA units per core, where cpuinfo cannot tell (Intel AVX-512 SKUs)")
    peak.add_argument("--clock-ghz", type=float, help="the clock for the theoretical peak")
    peak.add_argument("--out", type=Path, help="write JSON here (default: print)")


def run(args: argparse.Namespace) -> int:
    from suite.env import capture
    from suite.peak import peak_report
    from suite.records import atomic_write_json

    device_type = args.device
    if device_type == "auto":
        import torch

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    result = {**peak_report(args.dtypes, device_type, args.sizes, args.repeats, args.threads,
                            args.libraries, args.min_time_s, args.fma_units, args.clock_ghz),
              "env": capture(torch_info=False),
              "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    for dtype, entry in result["peaks"].items():
        for lib, e in entry["libraries"].items():
            rate = (f"{e['flops_per_s'] / 1e9:8.1f} GFLOP/s  {e['isa']}" if e["status"] == "ok"
                    else f"{e['status']}: {e['reason']}")
            print(f"{dtype} {lib:13s} {rate}", file=sys.stderr)
        best, theory = entry["measured"], entry["theoretical"]
        print(f"{dtype} measured peak: " + (f"{best['flops_per_s'] / 1e9:.1f} GFLOP/s "
                                            f"({best['library']})" if best else "none"),
              file=sys.stderr)
        print(f"{dtype} theoretical: " + (f"{theory['flops_per_s'] / 1e9:.1f} GFLOP/s = "
                                          f"{theory['formula']}" if theory["flops_per_s"]
                                          else f"unknown ({theory['reason']})"), file=sys.stderr)
    if args.out:
        atomic_write_json(result, args.out)
    else:
        print(json.dumps(result, indent=1))
    return 0
