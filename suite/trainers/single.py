"""One process, the plain model: the reference every distributed engine is checked against."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from suite.trainers.base import (DistInfo, StepResult, Trainer, build_optimizer, loss_fn)


class SingleTrainer(Trainer):
    name = "single"
    description = "one process, no wrapper: the plain model and optimizer"
    launcher = "single"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def setup(self, model: nn.Module, train_cfg, dist: DistInfo) -> None:
        if dist.world_size != 1:
            raise ValueError(f"trainer 'single' runs one process; world_size={dist.world_size} "
                             f"(use ddp, fsdp2 or zero* for several ranks)")
        self._bind(model, train_cfg, dist)
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(model, train_cfg)

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepResult:
        with self.autocast():
            logits, _ = self.model(inputs)
        loss = loss_fn(logits, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(loss=loss.item(), grad_norm=norm.item())

    def details(self) -> dict[str, Any]:
        return {"engine": "plain nn.Module", "optimizer": type(self.optimizer).__name__,
                "precision": "bf16 autocast, fp32 weights" if self.bf16 else "fp32",
                "compiled_blocks": self.compiled}
