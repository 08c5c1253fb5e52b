"""Small pre-training runs for the loss experiments (Virtual Width Networks, checkpoint merging):
one process, the plain loop, a fixed held-out set, the learning rate from a schedule.

These experiments measure loss against tokens, not throughput, so they need no distributed
engine: ``suite.experiments.llm_train`` is the timed, gated, multi-rank run; this is the loop
whose every step is the same math a reader can check. A run is reproducible from its config and
seed: the seed fixes the initial weights and the order of the training windows, and the
held-out set is the same for every run of the same ``seq_len`` (the corpus's held-out split,
drawn with a fixed seed).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from reference_impl.configs import VWNConfig
from reference_impl.gpt import GPT
from reference_impl.schedules import make_schedule
from reference_impl.vwn import VWNGPT
from reference_impl.vwn import param_groups as vwn_param_groups
from suite.devices import resolve_device
from suite.experiments.pretrain_config import PretrainConfig
from suite.trainers.base import param_groups as gpt_param_groups

HELDOUT_SEED = 1_000_003  # the same held-out windows as suite.experiments.llm_train


# ----------------------------------------------------------------------------- pieces


def build_model(cfg: PretrainConfig, seed: int, device: torch.device) -> nn.Module:
    """The model with the seed's initial weights (the same on every device)."""
    torch.manual_seed(seed)
    mc = cfg.model_config()
    model = VWNGPT(mc) if isinstance(mc, VWNConfig) else GPT(mc)
    return model.to(device)


def build_optimizer(model: nn.Module, cfg: PretrainConfig) -> torch.optim.AdamW:
    """AdamW; VWN's static GHC matrices are exempt from weight decay like norms and biases."""
    groups = (vwn_param_groups(model, cfg.weight_decay) if isinstance(model, VWNGPT)
              else gpt_param_groups(model, cfg.weight_decay))
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=1e-8, foreach=True)


def train_batches(cfg: PretrainConfig, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    from suite.experiments.corpus import text_batches

    return text_batches("train", cfg.batch, cfg.seq_len, seed=seed)


def heldout_set(cfg: PretrainConfig) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The fixed held-out batches (the corpus's held-out split), the same for every run."""
    from suite.experiments.corpus import text_batches

    stream = text_batches("val", cfg.batch, cfg.seq_len, seed=HELDOUT_SEED)
    return [next(stream) for _ in range(cfg.eval_batches)]


def training_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What the optimizer minimises: next-token loss, plus the weighted next-2-token loss for a
    VWN with an MTP module."""
    return model(x, y)[1]


def autocast(device: torch.device, dtype: str):
    """bf16 autocast for ``dtype='bf16'``; a no-op context for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]],
             device: torch.device, dtype: str = "fp32") -> dict[str, float | None]:
    """Mean held-out next-token loss (nats/byte) and, with an MTP module, next-2-token loss."""
    was = model.training
    model.eval()
    nt, n2 = [], []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        with autocast(device, dtype):
            if isinstance(model, VWNGPT):
                parts = model(x, y, return_parts=True)[1]
                next_token, next_2 = parts.next_token, parts.next_2_token
            else:
                next_token, next_2 = model(x, y)[1], None
        nt.append(next_token.float().item())
        if next_2 is not None:
            n2.append(next_2.float().item())
    model.train(was)
    return {"next_token": sum(nt) / len(nt), "next_2_token": sum(n2) / len(n2) if n2 else None}


@dataclass
class Run:
    """A model, its optimizer, its data stream and where it stands: what a fork copies."""

    cfg: PretrainConfig
    seed: int
    model: nn.Module
    optimizer: torch.optim.Optimizer
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]]
    device: torch.device
    step: int = 0

    def fork(self) -> Run:
        """An independent copy: weights, optimizer state, and the data stream at the same
        position (rebuilt from the seed and advanced ``step`` batches: generators do not copy)."""
        model = copy.deepcopy(self.model)
        optimizer = build_optimizer(model, self.cfg)  # same groups, same parameter order
        optimizer.load_state_dict(copy.deepcopy(self.optimizer.state_dict()))
        batches = train_batches(self.cfg, self.seed)
        for _ in range(self.step):
            next(batches)
        return Run(self.cfg, self.seed, model, optimizer, batches, self.device, self.step)

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """Replace the weights (a rollback or a merge); optimizer state and data position stay."""
        self.model.load_state_dict(state)


Schedule = Callable[[int], float]


def train(run: Run, steps: int, schedule: Schedule,
          on_step: Callable[[int, float, float], None] | None = None) -> list[float]:
    """``steps`` optimizer steps; the LR of step ``s`` (counted over the whole run, from
    ``run.step``) is ``cfg.lr * schedule(s)``. Returns the training losses; ``on_step(step,
    loss, seconds)`` is called after each step with the run's step count after it."""
    model, opt, cfg = run.model, run.optimizer, run.cfg
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    losses = []
    for _ in range(steps):
        lr = cfg.lr * schedule(run.step)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = next(run.batches)
        t0 = time.perf_counter()
        with autocast(run.device, cfg.dtype):
            total = training_loss(model, x.to(run.device), y.to(run.device))
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = total.item()
        dt = time.perf_counter() - t0
        run.step += 1
        losses.append(value)
        if on_step is not None:
            on_step(run.step, value, dt)
    return losses


def start(cfg: PretrainConfig, seed: int) -> Run:
    """A fresh run: seeded model and data order, its optimizer, at step 0."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    model = build_model(cfg, seed, device)
    return Run(cfg, seed, model, build_optimizer(model, cfg), train_batches(cfg, seed), device)


def warmup_constant(cfg: PretrainConfig) -> Schedule:
    return make_schedule("constant", warmup_steps=cfg.warmup_steps)


def save_weights(model: nn.Module, path: str | Path) -> Path:
    """The model's state dict on CPU (a checkpoint to merge; no optimizer state)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    return path


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)
