"""Virtual Width Networks at small scale: the same backbone trained at several expansions r, with
seeds, a constant learning rate and a fixed held-out set.

The plan (``variants``) turns the ``vwn`` config section into runs: the main series over
``expansions`` at the fixed ``m`` (``n = r m``), and the m ablation at one r. Every run trains a
``reference_impl.vwn.VWNGPT`` with the same backbone (``train.model``) and, with ``mtp``, the
next-2-token module, so next-token and next-2-token losses are measured on the same model. The
r = 1 baseline is ``m = n`` with the GHCs frozen at their initialization, i.e. exactly the
residual adds of a plain pre-norm transformer (same embedding, output path and MTP module as the
wide models, so the comparison isolates the width).

One run -> one record (``run``): the held-out curve (next-token and next-2-token loss every
``eval_every`` steps), the step times, and the parameter/FLOP overhead from ``vwn_cost``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any

from suite import env as envmod
from suite.config import ConfigError
from suite.experiments import pretrain
from suite.records import Record, Status
from suite.stats import summarize

EXPERIMENT = "vwn_scaling"
TIMING_WARMUP = 5  # first steps left out of the step-time statistics


@dataclass(frozen=True)
class Variant:
    m: int
    n: int
    series: str  # "main" (over r at the fixed m) or "m_ablation" (over m at one r)

    @property
    def r(self) -> float:
        return self.n / self.m

    @property
    def label(self) -> str:
        return f"m{self.m}-n{self.n}"


def _n_for(r: float, m: int, where: str) -> int:
    n = Fraction(str(r)) * m
    if n.denominator != 1 or n < m:
        raise ConfigError(f"{where}: expansion r={r} with m={m} gives n={float(n):g}; r*m must be "
                          f"an integer >= m (e.g. r=1.5 needs an even m)")
    return int(n)


def variants(vwn: dict[str, Any]) -> list[Variant]:
    """The runs' (m, n), main series first; a variant in both series is run once (as main)."""
    m = vwn["m"]
    out = [Variant(m, _n_for(r, m, "vwn.expansions"), "main") for r in vwn["expansions"]]
    ab = vwn["m_ablation"]
    if ab["enabled"]:
        for mm in ab["m"]:
            v = Variant(mm, _n_for(ab["r"], mm, "vwn.m_ablation"), "m_ablation")
            if all((v.m, v.n) != (o.m, o.n) for o in out):
                out.append(v)
    return out


def train_config(vwn: dict[str, Any], v: Variant) -> dict[str, Any]:
    """The complete ``PretrainConfig`` dict of one variant. The r = 1 baseline trains
    ``baseline_length`` times as many steps: a wide model's loss at T can only be matched by the
    baseline if the baseline runs on past T (its curve at the common T is what the loss
    comparisons use)."""
    baseline = v.m == v.n
    if vwn["train"]["steps"] % vwn["train"]["eval_every"]:
        raise ConfigError(f"vwn.train.steps={vwn['train']['steps']} must be a multiple of "
                          f"eval_every={vwn['train']['eval_every']}: the baseline is compared "
                          f"with the wide runs at their last step")
    model = {**vwn["train"]["model"], "m": v.m, "n": v.n, "mtp": vwn["mtp"],
             "dynamic": vwn["dynamic"] and not baseline, "ghc_trainable": not baseline}
    train = {**vwn["train"], "kind": "vwn", "model": model, "device": vwn["device"]}
    if baseline:  # longer, so that S(T) = tokens the baseline needs / T is measurable
        train["steps"] = vwn["train"]["steps"] * vwn["baseline_length"]
    pretrain.PretrainConfig.from_dict(train)  # fail at planning, not in the job
    return train


def run(train: dict[str, Any], seed: int, *, series: str = "main") -> Record:
    """Train one variant for one seed; every error becomes a failed record."""
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    model = train.get("model", {})
    label = f"m{model.get('m')}-n{model.get('n')}"
    record = Record(EXPERIMENT, label, {"m": model.get("m"), "n": model.get("n"), "seed": seed,
                                        "series": series}, train, Status.FAILED,
                    created_at=created)
    try:
        _run(record, pretrain.PretrainConfig.from_dict(train), seed)
    except Exception as e:  # noqa: BLE001 - any error of a run becomes a failed record
        record.status, record.reason = Status.FAILED, f"{type(e).__name__}: {e}"
    record.env = envmod.capture()
    return record


def _run(record: Record, cfg: pretrain.PretrainConfig, seed: int) -> None:
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
