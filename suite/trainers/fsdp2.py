"""FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state
sharded over a 1-D device mesh of all ranks (ZeRO-3 style), one FSDP unit per transformer block
plus the root (embeddings, final norm, LM head).

Two registered names differ only in explicit prefetching:

- ``fsdp2``: each unit's forward pre-hook also all-gathers the *next* block (the root's gathers
  block 0; ``set_modules_to_forward_prefetch``) and each block's backward pre-hook the
  *previous* block (``set_modules_to_backward_prefetch``), so that the next unit's gather is
  in flight while this one computes;
- ``fsdp2-noprefetch``: no explicit prefetch. FSDP2's implicit behaviour stays: on CUDA the
  CPU thread still issues the next all-gather ahead of the GPU on a separate stream, and
  backward prefetches one unit in reverse forward order. On CPU the "streams" are no-ops and
  the all-gathers are issued synchronously (``unshard_async_op`` is False by default), so there
  the two names differ in the order of the collectives only, not in overlap.

bf16 is FSDP2's mixed precision: fp32 sharded parameters and optimizer, bf16 all-gathered
parameters for compute, gradients reduce-scattered in fp32 (``MixedPrecisionPolicy``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from suite.trainers.base import DistInfo, StepResult, Trainer, build_optimizer, loss_fn


class Fsdp2Trainer(Trainer):
    name = "fsdp2"
    description = "FSDP2 fully_shard per block + root, explicit forward/backward prefetch"
    launcher = "torchrun"
    prefetch = True

    def available(self) -> tuple[bool, str]:
        ok, why = super().available()
        if not ok:
            return ok, why
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError as e:
            return False, (f"torch {torch.__version__} has no FSDP2 fully_shard "
                           f"(needs torch >= 2.6): {e}")
        return True, ""

    def setup(self, model: nn.Module, train_cfg, dist: DistInfo) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if not dist.distributed:
            raise RuntimeError(f"{self.name} needs an initialized process group (run under "
                               f"torchrun)")
        self._bind(model, train_cfg, dist)
        self.mesh = init_device_mesh(dist.device.type, (dist.world_size,))
        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if self.bf16 else MixedPrecisionPolicy())
        blocks = list(model.blocks)
        for block in blocks:
            fully_shard(block, mesh=self.mesh, mp_policy=mp)
        fully_shard(model, mesh=self.mesh, mp_policy=mp)
        if self.prefetch:
            model.set_modules_to_forward_prefetch(blocks[:1])  # root: block 0 with its own
            for i, block in enumerate(blocks):
                if i + 1 < len(blocks):
                    block.set_modules_to_forward_prefetch([blocks[i + 1]])
                if i > 0:
                    block.set_modules_to_backward_prefetch([blocks[i - 1]])
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(model, train_cfg)  # over the sharded DTensor params

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepResult:
        logits, _ = self.model(inputs)  # mixed precision is the policy's, no autocast
        loss = loss_fn(logits, targets)
        loss.backward()  # reduce-scatter (average) per unit during backward
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm())
        if hasattr(norm, "full_tensor"):  # a DTensor: the norm over all shards
            norm = norm.full_tensor()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(loss=self.global_mean(loss), grad_norm=norm.item())

    def details(self) -> dict[str, Any]:
        return {"engine": f"FSDP2 fully_shard on a 1-D {self.mesh.device_type} mesh of "
                          f"{self.dist.world_size} ({self.dist.backend})",
                "units": "one per Block + root (embeddings, final norm, LM head)",
                "explicit_prefetch": self.prefetch,
                "reshard_after_forward": "blocks yes, root no (FSDP2 default)",
                "optimizer": type(self.optimizer).__name__ + " over sharded DTensor parameters",
                "precision": ("bf16 params for compute, fp32 shards and fp32 reduce-scatter"
                              if self.bf16 else "fp32"),
                "compiled_blocks": self.compiled}


class Fsdp2NoPrefetchTrainer(Fsdp2Trainer):
    name = "fsdp2-noprefetch"
    description = "FSDP2 fully_shard per block + root, no explicit prefetch"
    prefetch = False
