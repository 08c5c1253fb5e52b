"""Checkpoint merging in pre-training (PMA, arXiv 2505.12082) at small scale, one seed per job.

One job trains a GPT at a constant learning rate (after warm-up) for ``train.steps`` steps and
writes a checkpoint (weights only) every ``checkpoint_every`` = V0 steps to disk. Then, from
those files and the live end state:

0. Stable phase. Before merging, the held-out curve's least-squares slope over the last
   ``stable.window`` steps is set against ``stable.max_slope`` (nats per 100 steps): the
   paper's claims are about merging in the stable phase, and the record says whether this run
   reached it (the analysis marks those claims not tested where it did not).
1. Merge grid. At each merge point t (every ``merge_every`` steps and the end), for each method
   (SMA, EMA(alpha), WMA), count N and interval V (a multiple of V0), the checkpoints at
   ``t, t - V, ..., t - (N-1) V`` are merged (``reference_impl.merging``) and the merged model's
   held-out loss is set beside the latest checkpoint's (the one at t).
2. Decay forks (the paper's Figure 3 comparison, at equal tokens). For each length d in
   ``decay.steps`` a fork leaves the constant run at step ``steps - d`` (weights, optimizer
   state and data position) and decays the LR to 0 over the same last d batches (WSD's decay
   stage): the annealed model at ``steps``, the step the constant-LR merges are taken at.
   Checkpoints inside the decay are merged too: the SMA of the last ``headline.n`` decay
   checkpoints, V0 apart (merging inside the decay), and of those in the decay's first half
   (merging early in annealing, the paper's Figure 2). With ``decay.early_end`` one more fork
   of the longest length ends there: the annealed model early in training beside the merge
   taken at the same step (the paper's early comparison).
3. Loss spike. From the end state, ``spike.steps`` steps at ``lr * spike.lr_factor`` (the
   spike); then three branches train ``spike.resume_steps`` more steps at
   ``lr * spike.resume_lr_factor`` (by default the spike's LR, kept: the paper's setting, an LR
   too high to recover at) on the same batches: from the SMA of the last
   ``spike.checkpoints`` pre-spike checkpoints (the paper's recovery), from the last pre-spike
   checkpoint alone (the control the paper lacks), and from the spiked weights (no
   intervention). The two rollbacks start from the pre-spike optimizer state.

The comparisons the claims need are all within one seed; the workflow runs several seeds and
the analysis (``suite.analysis.pma_analysis``) takes means and CIs over them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from reference_impl.merging import merge_checkpoints
from reference_impl.schedules import make_schedule
from suite import env as envmod
from suite.experiments import pretrain
from suite.experiments.pretrain_config import (PMA_EXPERIMENT, PretrainConfig, check_section,
                                               parse_method, stable_window)
from suite.records import Record, Status, new_record, outcome

class Checkpoints:
    """Weights-only checkpoints of one run on disk, by step; loaded once and kept (small
    models here; at paper scale the grid would stream them)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._cache: dict[int, dict] = {}

    def path(self, step: int) -> Path:
        return self.root / f"step{step:07d}.pt"

    def save(self, model, step: int) -> None:
        pretrain.save_weights(model, self.path(step))

    def load(self, step: int) -> dict:
        if step not in self._cache:
            if not self.path(step).exists():
                raise FileNotFoundError(f"no checkpoint at step {step} in {self.root}")
            self._cache[step] = pretrain.load_weights(self.path(step))
        return self._cache[step]

    def merged(self, steps: list[int], method: str, alpha: float) -> dict:
        return merge_checkpoints([self.load(s) for s in steps], method, alpha)


def measure_point(pma: dict[str, Any], seed: int, *, series: str = "main",
                  checkpoints: Path | None = None) -> Record:
    """The registry's runner (``seedbench pretrain``): one study has one series; its
    checkpoints go to ``checkpoints``."""
    if checkpoints is None:
        raise ValueError("pma_merging needs a folder for its checkpoints (--checkpoints DIR)")
    if series != "main":
        raise ValueError(f"pma_merging has one series, 'main'; got {series!r}")
    return run(pma, seed, checkpoints)


def run(pma: dict[str, Any], seed: int, checkpoint_dir: str | Path) -> Record:
    record = new_record(PMA_EXPERIMENT, "gpt", {"seed": seed}, pma)
    try:
        with outcome(record):
            _run(record, pma, seed, Path(checkpoint_dir))
    finally:
        if not pma.get("keep_checkpoints", False):
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    record.env = envmod.capture()
    return record


def _run(record: Record, pma: dict[str, Any], seed: int, root: Path) -> None:
    cfg = check_section(pma)
    v0, steps = pma["checkpoint_every"], cfg.steps
    shutil.rmtree(root, ignore_errors=True)
    ckpts = Checkpoints(root / "constant")
    main = pretrain.start(cfg, seed)
    heldout = pretrain.heldout_set(cfg)
    scratch = pretrain.build_model(cfg, seed, main.device)  # evaluates merged weights

    def loss_of(model) -> float:
        return pretrain.evaluate(model, heldout, main.device, cfg.dtype)["next_token"]

    def loss_of_state(state: dict) -> float:
        scratch.load_state_dict(state)
        return loss_of(scratch)

    record.point["n_params"] = main.model.num_params(non_embedding=False)
    curve = [{"step": 0, "tokens": 0, "latest": loss_of(main.model)}]
    # (step the fork leaves the run, decay length, step its decay ends)
    planned = [(steps - d, d, steps) for d in pma["decay"]["steps"]]
    early_end = pma["decay"]["early_end"]
    if early_end:
        longest = max(pma["decay"]["steps"])
        planned.append((early_end - longest, longest, early_end))
    forks: dict[tuple[int, int], pretrain.Run] = {}

    def on_main(step: int, loss: float, seconds: float) -> None:
        if step % v0 == 0:
            ckpts.save(main.model, step)
            curve.append({"step": step, "tokens": step * cfg.tokens_per_step,
                          "latest": loss_of(main.model), "train_loss": loss})
        for at, d, end in planned:
            if step == at:
                forks[(d, end)] = main.fork()

    constant = pretrain.warmup_constant(cfg)
    pretrain.train(main, steps, constant, on_main)
    latest = {row["step"]: row["latest"] for row in curve}
    stable = stable_phase(curve, stable_window(pma, steps), pma["stable"]["max_slope"])

    merges = _merge_grid(pma, cfg, ckpts, latest, loss_of_state)

    h = pma["headline"]
    h_method, h_alpha = parse_method(h["method"])

    def headline_span(t: int) -> list[int]:  # the headline's checkpoints ending at t
        return [t - i * h["interval"] * v0 for i in range(h["n"])][::-1]

    def headline_merge(t: int) -> float:
        return loss_of_state(ckpts.merged(headline_span(t), h_method, h_alpha))

    h_span = headline_span(steps)
    headline = headline_merge(steps)

    decays = _decay_forks(pma, cfg, forks, root, loss_of, loss_of_state)
    early = None
    if early_end:
        fork = next(d for d in decays if d["end_step"] == early_end)
        early = {"end_step": early_end, "decay_steps": fork["decay_steps"],
                 "annealed": fork["annealed"], "merged": headline_merge(early_end),
                 "latest": latest[early_end]}
        decays = [d for d in decays if d["end_step"] == steps]

    # 3. the loss spike
    spike = None
    sp = pma["spike"]
    if sp["enabled"]:
        spike = _spike(main, sp, ckpts, v0, steps, loss_of)

    record.workload = {"tokens_per_step": cfg.tokens_per_step, "checkpoint_every": v0,
                       "data": "kjv bytes, train split",
                       "heldout": f"{cfg.eval_batches} x {cfg.batch} x {cfg.seq_len} bytes of the "
                                  f"held-out split (fixed seed)"}
    record.derived = {"curve": curve, "merges": merges,
                      "headline": {**h, "merged": headline, "latest": latest[steps],
                                   "steps": h_span},
                      "decays": decays, "early_fork": early, "stable": stable,
                      "spike": spike, "constant_steps": steps}
    record.status = Status.OK


def _merge_grid(pma: dict[str, Any], cfg: PretrainConfig, ckpts: Checkpoints,
                latest: dict[int, float], loss_of_state) -> list[dict[str, Any]]:
    """1. Every (merge point, method, count, interval) whose oldest checkpoint exists."""
    v0, steps = pma["checkpoint_every"], cfg.steps
    points = sorted({t for t in range(pma["merge_every"], steps + 1, pma["merge_every"])
                     if t % v0 == 0} | {steps})
    merges = []
    for t in points:
        for spec in pma["methods"]:
            method, alpha = parse_method(spec)
            for n in pma["counts"]:
                for k in pma["intervals"]:
                    span = [t - i * k * v0 for i in range(n)][::-1]  # oldest first
                    if span[0] < v0:
                        continue
                    merges.append({"step": t, "tokens": t * cfg.tokens_per_step,
                                   "method": spec, "n": n, "interval_steps": k * v0,
                                   "merged": loss_of_state(ckpts.merged(span, method, alpha)),
                                   "latest": latest[t]})
    return merges


def _decay_forks(pma: dict[str, Any], cfg: PretrainConfig,
                 forks: dict[tuple[int, int], pretrain.Run], root: Path, loss_of,
                 loss_of_state) -> list[dict[str, Any]]:
    """2. Each fork decays over its d steps to its end step: annealed models at the merges'
    tokens, and the merges of its own checkpoints (all of the decay's last, its first half's)."""
    v0, h = pma["checkpoint_every"], pma["headline"]
    decays = []
    for (d, end), fork in forks.items():
        dck = Checkpoints(root / f"decay{d}-end{end}")
        schedule = make_schedule("wsd", total_steps=end, warmup_steps=cfg.warmup_steps,
                                 decay_fraction=d / end, shape=pma["decay"]["shape"])
        dcurve = []

        def on_decay(step: int, loss: float, seconds: float, fork=fork, dck=dck,
                     dcurve=dcurve) -> None:
            if step % v0 == 0:
                dck.save(fork.model, step)
                dcurve.append({"step": step, "tokens": step * cfg.tokens_per_step,
                               "loss": loss_of(fork.model)})

        pretrain.train(fork, d, schedule, on_decay)
        saved = [row["step"] for row in dcurve]
        inside = saved[-min(h["n"], len(saved)):]
        first_half = [s for s in saved if s <= end - d + d // 2]
        first_half = first_half[-min(h["n"], len(first_half)):]
        decays.append({"decay_steps": d, "fork_step": end - d, "end_step": end,
                       "shape": pma["decay"]["shape"], "tokens": end * cfg.tokens_per_step,
                       "annealed": loss_of(fork.model),
                       "merged_in_decay": loss_of_state(dck.merged(inside, "sma", 0.2)),
                       "merged_in_decay_n": len(inside),
                       "merged_early_in_decay": (loss_of_state(dck.merged(first_half, "sma", 0.2))
                                                 if first_half else None),
                       "merged_early_in_decay_steps": first_half, "curve": dcurve})
    return decays


def stable_phase(curve: list[dict[str, Any]], window: int, max_slope: float) -> dict[str, Any]:
    """Whether the constant-LR run is in a stable phase at its end: the least-squares slope of
    its held-out loss over the last ``window`` steps, in nats per 100 steps, no steeper than
    ``-max_slope``. The paper's claims concern merging there; a run still falling fast is
    earlier in training than they speak of."""
    end = curve[-1]["step"]
    points = [(c["step"], c["latest"]) for c in curve if c["step"] >= end - window]
    if len(points) < 3:
        raise ValueError(f"pma.stable.window={window} holds {len(points)} evaluations of the "
                         f"held-out curve; it needs at least 3 (checkpoint_every steps apart)")
    steps, losses = np.array(points, dtype=float).T
    slope = float(np.polyfit(steps, losses, 1)[0]) * 100
    return {"window": window, "points": len(points), "slope_per_100_steps": slope,
            "max_slope": max_slope, "met": slope >= -max_slope}


def _spike(main: pretrain.Run, sp: dict[str, Any],
           ckpts: Checkpoints, v0: int, steps: int, loss_of) -> dict[str, Any]:
    pre = [steps - i * v0 for i in range(sp["checkpoints"])][::-1]
    spiked = main.fork()
    spike_losses = pretrain.train(spiked, sp["steps"], lambda s: sp["lr_factor"])
    after_spike = loss_of(spiked.model)
    branches = {"merged": main.fork(), "last": main.fork(), "spiked": spiked}
    branches["merged"].load_weights(ckpts.merged(pre, "sma", 0.2))
    branches["last"].load_weights(ckpts.load(steps))
    curves: dict[str, list[dict[str, float]]] = {}
    # the spike's LR kept after the resume unless the config sets another
    resume = sp["lr_factor"] if sp["resume_lr_factor"] is None else sp["resume_lr_factor"]
    lrs: dict[str, float] = {}  # the LR each branch trained at, read back from its optimizer
    for name, branch in branches.items():
        first = {"step": 0, "loss": loss_of(branch.model)}
        curves[name] = [first]

        def on_step(step: int, loss: float, seconds: float, name=name, branch=branch,
                    start=branch.step) -> None:
            done = step - start
            if done % v0 == 0 or done == sp["resume_steps"]:
                curves[name].append({"step": done, "loss": loss_of(branch.model)})

        pretrain.train(branch, sp["resume_steps"], lambda s: resume, on_step)
        lrs[name] = branch.optimizer.param_groups[0]["lr"]
    return {"pre_spike_steps": pre, "pre_spike_loss": loss_of(main.model),
            "spike_train_losses": spike_losses, "after_spike": after_spike,
            "lr_factor": sp["lr_factor"], "resume_lr_factor": resume, "branch_lr": lrs,
            "resume_steps": sp["resume_steps"], "curves": curves,
            "final": {name: c[-1]["loss"] for name, c in curves.items()}}
