"""PyTorch DistributedDataParallel: every rank holds the whole model, gradients are averaged.

``train_cfg.ddp_overlap`` is MegaScale's "communication overlap" switch for data parallelism:

- True: plain DDP. Gradients are packed into buckets of ``bucket_cap_mb`` as backward produces
  them, and each full bucket's all-reduce starts while backward goes on.
- False: no overlap. Backward runs under ``no_sync()`` (DDP's hooks record nothing), then the
  same buckets (same size cap, parameters in reverse order as DDP fills them) are flattened and
  all-reduced one after the other. The bytes on the wire and the bucket count match the overlapped
  run, so the difference in step time is the overlap alone.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as tdist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.nn.parallel import DistributedDataParallel

from suite.trainers.base import DistInfo, StepResult, Trainer, build_optimizer, loss_fn


class DdpTrainer(Trainer):
    name = "ddp"
    description = "torch DistributedDataParallel (bucketed all-reduce, overlap switchable)"
    launcher = "torchrun"

    def setup(self, model: nn.Module, train_cfg, dist: DistInfo) -> None:
        if not dist.distributed:
            raise RuntimeError("ddp needs an initialized process group (run under torchrun)")
        self._bind(model, train_cfg, dist)
        self.overlap = train_cfg.ddp_overlap
        self.bucket_cap_mb = train_cfg.bucket_cap_mb
        device_ids = [dist.device.index] if dist.device.type == "cuda" else None
        self.model = DistributedDataParallel(model, device_ids=device_ids,
                                             bucket_cap_mb=self.bucket_cap_mb)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buckets = _buckets(self.params, self.bucket_cap_mb)
        self.optimizer = build_optimizer(model, train_cfg)

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepResult:
        if self.overlap:
            with self.autocast():
                logits, _ = self.model(inputs)
            loss = loss_fn(logits, targets)
            loss.backward()  # DDP's hooks all-reduce (average) bucket by bucket meanwhile
        else:
            with self.model.no_sync():
                with self.autocast():
                    logits, _ = self.model(inputs)
                loss = loss_fn(logits, targets)
                loss.backward()
            self._all_reduce_after_backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.max_norm())
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(loss=self.global_mean(loss), grad_norm=norm.item())

    def _all_reduce_after_backward(self) -> None:
        world = self.dist.world_size
        for bucket in self.buckets:
            grads = [p.grad for p in bucket if p.grad is not None]
            if not grads:
                continue
            flat = _flatten_dense_tensors(grads)
            tdist.all_reduce(flat, op=tdist.ReduceOp.SUM)
            flat /= world
            for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
                g.copy_(synced)

    def details(self) -> dict[str, Any]:
        return {"engine": f"torch DistributedDataParallel ({self.dist.backend})",
                "overlap": self.overlap,
                "grad_sync": ("DDP bucketed all-reduce overlapping backward" if self.overlap else
                              "backward under no_sync(), then one all-reduce per bucket"),
                "bucket_cap_mb": self.bucket_cap_mb, "n_buckets_no_overlap": len(self.buckets),
                "optimizer": type(self.optimizer).__name__,
                "precision": "bf16 autocast, fp32 weights and gradients" if self.bf16 else "fp32",
                "compiled_blocks": self.compiled}


def _buckets(params: list[nn.Parameter], cap_mb: float) -> list[list[nn.Parameter]]:
    """Parameters in reverse registration order (roughly the order backward finishes them,
    which DDP's first buckets follow), cut into buckets of at most ``cap_mb`` (a parameter
    larger than the cap gets a bucket of its own)."""
    cap = cap_mb * 2**20
    buckets: list[list[nn.Parameter]] = [[]]
    size = 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if buckets[-1] and size + nbytes > cap:
            buckets.append([])
            size = 0
        buckets[-1].append(p)
        size += nbytes
    return [b for b in buckets if b]
