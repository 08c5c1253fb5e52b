"""Is a system's second call at a shape as fast as its later ones? The check behind counting
the correctness gate's call (the first) as the first warm-up call of a BERT point.

Each system of the config's headline point (``bert_varlen``: its baselines at the first batch
size and max length, the canonical model) runs in a process of its own (one framework per
process), as a point's job does: ``prepare``, ``build`` (its per-shape work), then ``--calls``
calls of the same batch, each timed. Per system the result gives every call's seconds and the
second call over the median of the third and later ones: near 1 means that no call after the
first pays a first-call cost, so one untimed call (the gate's) is warm-up enough.

    .venv/bin/python benchmarks/call_order.py [--config workflows/config/quick.yaml] [--reps 6]

``--reps`` is the number of calls per system. Writes --out (JSON) and prints a summary. Run it
on an otherwise idle machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

import common
from suite.config import BertVarlenConfig, load


def one(system: str, config: Path, calls: int) -> dict:
    """In this process: the system's calls at the headline point, each timed."""
    import torch

    from suite import env as envmod
    from suite.baselines.registry import baselines
    from suite.devices import resolve_device, torch_dtype
    from suite.experiments import bert_oracle
    from suite.experiments.bert_varlen import TASK
    from suite.models import canonical_model

    cfg = BertVarlenConfig.from_dict(load(config)["bert_varlen"])
    torch.set_num_threads(cfg.threads or envmod.usable_cores())
    batch_size, max_len = cfg.batch_sizes[0], cfg.max_seq_lens[0]
    _, batch = bert_oracle.point_inputs(cfg, cfg.distribution, batch_size, max_len)
    device = resolve_device(cfg.device)
    sut = baselines.create(system)
    ok, why = sut.can_run(TASK, device.type, cfg.dtype)
    if not ok:
        return {"status": "unavailable", "reason": why}
    sut.prepare(canonical_model("bert", cfg.model, cfg.max_len, seed=cfg.seed), device,
                torch_dtype(cfg.dtype))
    dev_batch = batch.to(device)
    sut.build(dev_batch)
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        sut.run(dev_batch)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    later = median(seconds[2:])
    return {"status": "ok", "point": f"b{batch_size}_l{max_len}", "seconds": seconds,
            "second_over_later": seconds[1] / later, "first_over_later": seconds[0] / later}


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        _, _, system, config, calls = sys.argv
        print(json.dumps(one(system, Path(config), int(calls))))
        return
    args = common.arguments(__doc__, "call_order", reps=6)
    if args.reps < 4:
        raise SystemExit(f"--reps {args.reps}: need >= 4 calls (the second beside two later)")
    cfg = BertVarlenConfig.from_dict(load(args.config)["bert_varlen"])
    systems = {}
    for system in cfg.baselines:
        done = subprocess.run([sys.executable, __file__, "--one", system, str(args.config),
                               str(args.reps)], capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        systems[system] = (json.loads(lines[-1]) if done.returncode == 0 and lines else
                           {"status": "failed", "reason": done.stderr[-1000:]})
        s = systems[system]
        print(f"{system:22s} " + (f"second/later {s['second_over_later']:.3f}  first/later "
                                  f"{s['first_over_later']:.2f}  calls "
                                  + " ".join(f"{x:.2f}" for x in s["seconds"])
                                  if s["status"] == "ok" else f"{s['status']}: {s['reason']}"))
    common.write("call_order", args, {"systems": systems})


if __name__ == "__main__":
    main()
