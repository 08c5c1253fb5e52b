"""The contract of a distributed training engine, as the LLM training run (``suite.experiments.
llm_train``) drives it.

One instance lives in each rank's process. The run builds the same model on every rank (same
seed, so the same initial weights), hands it to ``setup`` with the train config and the rank's
``DistInfo``, then calls ``train_step`` once per optimizer step with this rank's slice of the
global batch. An engine owns everything between the model and the optimizer step: wrapping or
sharding the model, building the optimizer from the config, mixed precision, gradient
synchronisation and clipping.

The contract of ``train_step``, which the correctness gate checks against the ``single`` engine:

- forward on the rank's slice; the loss is the fp32 mean cross-entropy over the slice's tokens
  (``loss_fn``, computed from the logits so that a bf16 model still reports an fp32 loss);
- backward; the gradient every rank applies is that of the mean loss over the *global* batch
  (so with equal slices, the average of the ranks' gradients);
- clip to ``train_cfg.grad_clip`` (0 = no clipping) by the total L2 norm over all parameters
  and ranks, and report the norm *before* clipping;
- optimizer step, zero the gradients;
- return ``StepResult`` with the loss averaged over ranks (the global-batch loss). Its ``.item()``
  follows an all-reduce that every rank reaches only after its optimizer step, so the step's end
  is synchronised across ranks without a separate barrier: the caller times around it.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suite.trainers.config import OPTIMIZERS, TrainConfig


@dataclass(frozen=True)
class StepResult:
    loss: float  # mean over the global batch
    grad_norm: float  # total L2 norm before clipping


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits. ``backend`` is None for a one-process run without a group."""
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @classmethod
    def single(cls, device: torch.device) -> DistInfo:
        return cls(rank=0, world_size=1, local_rank=0, device=device, backend=None)


class Trainer(ABC):
    """A training engine; subclasses set the class attributes and implement ``setup`` and
    ``train_step``."""

    name: str = ""
    description: str = ""
    launcher: str = "torchrun"  # config.LAUNCHERS: how ``suite.launch.command`` starts ranks
    # why a checkpoint of this engine cannot be taken through ``checkpoint_state``; "" = it can
    checkpoint_unsupported: str = ""

    def available(self) -> tuple[bool, str]:
        """Whether this engine can run here; ``(False, reason)`` instead of raising, so that a
        missing package becomes an 'unavailable' record and not a crash."""
        if not torch.distributed.is_available():
            return False, "this torch build has no torch.distributed"
        return True, ""

    @abstractmethod
    def setup(self, model: nn.Module, train_cfg: TrainConfig, dist: DistInfo) -> None:
        """Wrap/shard ``model`` (already on ``dist.device``, fp32) and build the optimizer."""

    @abstractmethod
    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepResult:
        """One optimizer step on this rank's slice; see the module docstring."""

    def details(self) -> dict[str, Any]:
        """What this engine did, for the record (wrapping, dtypes, what the framework chose)."""
        return {}

    def data_parallel(self, dist: DistInfo) -> tuple[int, int]:
        """(this rank's index, the count) among the ranks that split the global batch's rows:
        every rank for a data-parallel engine; a pipeline's stages all see the whole batch."""
        return dist.rank, dist.world_size

    def forward_module(self) -> nn.Module:
        """What ``eval_loss`` calls: the wrapped or sharded model (engines keep it as ``model``,
        DeepSpeed's as ``engine``)."""
        return getattr(self, "engine", None) or self.model

    @torch.no_grad()
    def eval_loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """Mean loss of this rank's slice of a held-out batch, averaged over ranks (every rank
        must call it: it ends on a collective)."""
        module = self.forward_module()
        was_training = module.training
        module.eval()
        with self.autocast():
            logits, _ = module(inputs)
        module.train(was_training)
        return self.global_mean(loss_fn(logits, targets))

    def checkpoint_state(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        """The module and optimizer a checkpoint holds, as ``torch.distributed.checkpoint``'s
        ``get_state_dict`` reads them (plain, DDP-wrapped or FSDP2-sharded modules); an engine
        that keeps its state elsewhere says so in ``checkpoint_unsupported``."""
        return self.model, self.optimizer

    def teardown(self) -> None:
        """Release what ``setup`` built beyond the process group (which the run owns); an
        engine that holds nothing more has nothing to do."""
        return None

    # -------------------------------------------------------------- helpers for subclasses

    def _bind(self, model: nn.Module, train_cfg: TrainConfig, dist: DistInfo) -> None:
        self.cfg, self.dist, self.device = train_cfg, dist, dist.device
        self.bf16 = train_cfg.dtype == "bf16"
        self.compiled = apply_compile(model) if train_cfg.compile else False

    def autocast(self):
        """bf16 autocast around forward for engines whose weights stay fp32 (mixed precision);
        a no-op context for fp32."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def global_mean(self, value: torch.Tensor) -> float:
        """Average of a scalar over ranks, as a float (the step's synchronisation point).
        SUM then divide: gloo has no ReduceOp.AVG."""
        value = value.detach().float().clone()
        if self.dist.distributed and self.dist.world_size > 1:
            torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.SUM)
            value /= self.dist.world_size
        return value.item()

    def max_norm(self) -> float:
        """The clip threshold; with clipping off, inf (the norm is still computed and logged)."""
        return self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """fp32 mean cross-entropy whatever the logits' dtype (a bf16 loss has 3 digits: the
    correctness gate could not compare it)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=-1)


def apply_compile(model: nn.Module) -> bool:
    """``torch.compile`` each transformer block in place (``nn.Module.compile``): the module
    objects and parameters stay the same, so every engine wraps or shards the model as usual,
    DDP still sees per-block gradient readiness, and FSDP2 compiles per sharded unit as its
    docs recommend. Returns whether blocks were found."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        model.compile()
        return True
    for block in blocks:
        block.compile()
    return True


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay matrices (2-D and up), not biases and norm gains (nanoGPT's rule). Parameters are
    taken once even when tied, in ``named_parameters`` order, so every engine builds the same
    groups."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, train_cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW or LAMB over ``model``'s current parameters (call after any sharding that
    replaces them)."""
    groups = param_groups(model, train_cfg.weight_decay)
    betas = tuple(train_cfg.betas)
    if train_cfg.optimizer == "adamw":
        # foreach: the same kernel choice on every engine (fused is CUDA/CPU-dtype dependent)
        return torch.optim.AdamW(groups, lr=train_cfg.lr, betas=betas, eps=1e-8, foreach=True)
    if train_cfg.optimizer == "lamb":
        from reference_impl.optim import Lamb

        return Lamb(groups, lr=train_cfg.lr, betas=betas)
    raise ValueError(f"optimizer={train_cfg.optimizer!r} is not one of {OPTIMIZERS}")


def env_rank() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from a launcher's environment; (0, 1, 0) without one."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))
