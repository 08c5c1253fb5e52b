"""Virtual Width Networks at small scale: the same backbone trained at several expansions r, with
seeds, a constant learning rate and a fixed held-out set.

The plan (``variants`` in ``suite.experiments.pretrain_config``) turns the ``vwn`` config
section into runs: the main series over ``expansions`` at the fixed ``m`` (``n = r m``), and the
m ablation at one r. Every run trains a ``reference_impl.vwn.VWNGPT`` with the same backbone
(``train.model``) and, with ``mtp``, the next-2-token module, so next-token and next-2-token
losses are measured on the same model. The r = 1 baseline is ``m = n`` with the GHCs frozen at
their initialization, i.e. exactly the residual adds of a plain pre-norm transformer (same
embedding, output path and MTP module as the wide models, so the comparison isolates the width).

One run -> one record (``run``): the held-out curve (next-token and next-2-token loss every
``eval_every`` steps), the step times, and the parameter/FLOP overhead from ``vwn_cost``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from suite import env as envmod
from suite.experiments import pretrain
from suite.experiments.pretrain_config import VWN_EXPERIMENT, PretrainConfig
from suite.records import Record, Status, new_record, outcome
from suite.measure.stats import summarize

TIMING_WARMUP = 5  # first steps left out of the step-time statistics


def measure_point(train: dict[str, Any], seed: int, *, series: str = "main",
                  checkpoints: Path | None = None) -> Record:
    """The registry's runner (``seedbench pretrain``): no checkpoints are kept."""
    return run(train, seed, series=series)


def run(train: dict[str, Any], seed: int, *, series: str = "main") -> Record:
    """Train one variant for one seed; every error becomes a failed record."""
    model = train.get("model", {})
    label = f"m{model.get('m')}-n{model.get('n')}"
    record = new_record(VWN_EXPERIMENT, label, {"m": model.get("m"), "n": model.get("n"),
                                            "seed": seed, "series": series}, train)
    with outcome(record):
        _run(record, PretrainConfig.from_dict(train), seed)
    record.env = envmod.capture()
    return record


def _run(record: Record, cfg: PretrainConfig, seed: int) -> None:
    from reference_impl.vwn import vwn_cost

    mc = cfg.model_config()
    state = pretrain.start(cfg, seed)
    heldout = pretrain.heldout_set(cfg)
    cost = vwn_cost(mc, cfg.seq_len)
    record.point.update({"r": mc.expansion, "dynamic": mc.dynamic, "mtp": mc.mtp,
                         "n_params": state.model.num_params(non_embedding=False)})
    curve, times, recent = [], [], []

    def evaluate(step: int) -> None:
        losses = pretrain.evaluate(state.model, heldout, state.device, cfg.dtype)
        curve.append({"step": step, "tokens": step * cfg.tokens_per_step,
                      "train_loss": sum(recent) / len(recent) if recent else None, **losses})
        recent.clear()

    def on_step(step: int, loss: float, seconds: float) -> None:
        times.append(seconds)
        recent.append(loss)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            evaluate(step)

    evaluate(0)
    t0 = time.perf_counter()
    pretrain.train(state, cfg.steps, pretrain.warmup_constant(cfg), on_step)
    wall = time.perf_counter() - t0
    final = curve[-1]
    record.workload = {"tokens_per_step": cfg.tokens_per_step, "data": "kjv bytes, train split",
                       "heldout": f"{cfg.eval_batches} x {cfg.batch} x {cfg.seq_len} bytes of the "
                                  f"held-out split (fixed seed)"}
    record.timing = {"unit": "s", "timer": "time.perf_counter around each optimizer step",
                     "warmup_steps": TIMING_WARMUP, "samples": times[TIMING_WARMUP:],
                     "stats": summarize(times[TIMING_WARMUP:] or times), "wall_s": wall,
                     "device": str(state.device)}
    record.derived = {
        "curve": curve,
        "final_next_token": final["next_token"],
        "final_next_2_token": final["next_2_token"],
        "tokens_seen": final["tokens"],
        "cost": {"params_total": cost.params_total, "params_overhead": cost.params_overhead,
                 "flops_per_token": cost.flops_total, "flops_overhead": cost.flops_overhead,
                 "baseline_params": cost.baseline_params,
                 "baseline_flops_per_token": cost.baseline_flops},
        "losses_finite": all(v == v and abs(v) != float("inf")
                             for v in (final["next_token"], final["next_2_token"] or 0.0)),
    }
    record.status = Status.OK
