"""Pipeline parallelism (``torch.distributed.pipelining``): the GPT cut into one stage per rank,
micro-batches run under the 1F1B schedule (Narayanan et al. 2021; MegaScale's pipeline).

Stage ``r`` of ``p`` holds a contiguous run of blocks (split as evenly as the layer count
allows, earlier stages taking the extra one); the first stage also the embeddings, the last the
final norm and the LM head. Every stage sees the whole global batch (no data parallelism here):
the first feeds the token ids, the last reads the targets. ``micro_batches`` ``m`` (0 = one per
stage) cuts the global batch; the schedule scales each micro-batch's gradient by ``1/m``, so
the step applies the global-batch mean gradient, as the single-process reference does.

Tied embeddings span the first and the last stage: each holds the matrix, the two gradients
are summed between them after the backward (Megatron's embedding group), and both take the same
optimizer step, so the copies stay equal. The gradient norm for clipping is the total over all
stages (the tied matrix counted once).

The pipeline bubble is measured, not assumed: each stage times its compute (the forward and
backward of each micro-batch, and the loss on the last stage) inside the schedule's step; the
rest of the pipeline's step (the longest of the stages' schedule calls: a stage whose part is
done leaves early and waits in the step's all-reduce) is the stage waiting on its neighbours.
``1 - compute / step`` per stage is its idle fraction, against 1F1B's ``(p - 1) / (m + p - 1)``
for stages of equal cost.

Stage shapes are given to ``PipelineStage`` (from a local dry run of each stage), not inferred:
the runtime inference exchanges metadata that hangs under gloo (torch 2.13, CPU).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as tdist
from torch import nn

from reference_impl.gpt import GPT, embed
from suite.trainers.base import DistInfo, StepResult, Trainer, build_optimizer, loss_fn


def stage_layers(n_layer: int, stages: int) -> list[range]:
    """Block indices of each stage: as even as possible, earlier stages taking the extra."""
    if stages > n_layer:
        raise ValueError(f"{stages} pipeline stages need at least as many layers; the model has "
                         f"n_layer={n_layer}")
    base, extra = divmod(n_layer, stages)
    out, start = [], 0
    for s in range(stages):
        size = base + (s < extra)
        out.append(range(start, start + size))
        start += size
    return out


def bubble_formula(stages: int, micro_batches: int) -> float:
    """1F1B's idle fraction for stages of equal cost: (p - 1) / (m + p - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def bubble_of_costs(costs: list[float], micro_batches: int) -> float:
    """The idle fraction, mean over stages, of a pipeline whose stage ``s`` costs ``costs[s]``
    per micro-batch (forward + backward) and whose communication is free: the step is at least
    one pass through every stage plus ``m - 1`` more of the slowest, ``sum + (m - 1) max``, and
    stage ``s`` computes ``m costs[s]`` of it. Equal costs give (p - 1) / (m + p - 1)."""
    step = sum(costs) + (micro_batches - 1) * max(costs)
    return statistics.mean(1 - micro_batches * c / step for c in costs)


class GPTStage(nn.Module):
    """One stage of the GPT: its blocks, with the embeddings first and the head last."""

    def __init__(self, model: GPT, layers: range, first: bool, last: bool, autocast):
        super().__init__()
        self.first, self.last, self.autocast = first, last, autocast
        self.config = model.config
        if first:
            self.wte, self.wpe, self.drop = model.wte, model.wpe, model.drop
        self.blocks = nn.ModuleList(model.blocks[i] for i in layers)
        if last:
            self.norm_f, self.lm_head = model.norm_f, model.lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            if self.first:
                x = embed(self, x)
            for block in self.blocks:
                x = block(x)
            if self.last:
                x = self.lm_head(self.norm_f(x))
        return x


class PipelineTrainer(Trainer):
    name = "pipeline"
    description = "torch.distributed.pipelining, one GPT stage per rank, 1F1B schedule"
    launcher = "torchrun"

    def available(self) -> tuple[bool, str]:
        ok, why = super().available()
        if not ok:
            return ok, why
        try:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B  # noqa: F401
        except ImportError as e:
            return False, f"torch {torch.__version__} has no torch.distributed.pipelining: {e}"
        return True, ""

    def data_parallel(self, dist: DistInfo) -> tuple[int, int]:
        return 0, 1  # every stage sees the whole global batch

    def setup(self, model: nn.Module, train_cfg, dist: DistInfo) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        if not dist.distributed:
            raise RuntimeError("pipeline needs an initialized process group (run under "
                               "torchrun)")
        self._bind(model, train_cfg, dist)
        p, r = dist.world_size, dist.rank
        self.stages = p
        self.micro_batches = train_cfg.micro_batches or p
        if train_cfg.global_batch % self.micro_batches:
            raise ValueError(f"global_batch={train_cfg.global_batch} does not split into "
                             f"micro_batches={self.micro_batches}")
        if self.micro_batches < p:
            raise ValueError(f"1F1B needs micro_batches >= stages: {self.micro_batches} < {p}")
        self.layers = stage_layers(model.config.n_layer, p)
        self.first, self.last = r == 0, r == p - 1
        self.module = GPTStage(model, self.layers[r], self.first, self.last, self.autocast)
        # the tied matrix when it spans two stages, and the group of those two (every rank
        # takes part in creating a group; with two stages it is the whole world)
        spans = model.config.tied_embeddings and p > 1
        self.tied = model.lm_head.weight if spans and (self.first or self.last) else None
        self.tied_group = tdist.new_group([0, p - 1]) if spans and p > 2 else None
        mb = train_cfg.global_batch // self.micro_batches
        inputs, outputs = self._stage_shapes(model, mb)
        stage = PipelineStage(self.module, r, p, dist.device, input_args=inputs,
                              output_args=outputs)
        self._time_compute(stage)
        # every rank passes the loss: without one a schedule runs its stage forward-only
        self.schedule = Schedule1F1B(stage, n_microbatches=self.micro_batches,
                                     loss_fn=self._timed_loss)
        # the gradient norm counts each parameter once: the tied matrix on the first stage
        self.params = [q for q in self.module.parameters()
                       if q.requires_grad and not (self.last and q is self.tied)]
        self.optimizer = build_optimizer(self.module, train_cfg)
        self.busy = 0.0
        self.idle: list[list[float]] = [[] for _ in range(p)]  # per stage, per step
        self.compute: list[list[float]] = [[] for _ in range(p)]  # seconds, per stage and step

    def _stage_shapes(self, model: GPT, mb: int) -> tuple[tuple, tuple]:
        """This stage's input and output (meta) tensors, from a dry run of the stages up to it
        on this rank's full copy of the model (no communication). With autograd on: the stage
        exchanges gradients only for tensors that require them."""
        x = torch.zeros(mb, self.cfg.seq_len, dtype=torch.long, device=self.device)
        for s, layers in enumerate(self.layers[:self.dist.rank + 1]):
            module = GPTStage(model, layers, s == 0, s == self.stages - 1, self.autocast)
            y = module(x)
            if s < self.dist.rank:
                x = y.detach().requires_grad_()
        model.zero_grad(set_to_none=True)
        return (x.to("meta"),), (y.to("meta"),)

    def _time_compute(self, stage) -> None:
        """Count the time the schedule spends in this stage's compute."""
        for name in ("forward_one_chunk", "backward_one_chunk"):
            inner = getattr(stage, name)

            def timed(*args, _inner=inner, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _inner(*args, **kwargs)
                finally:
                    self.busy += time.perf_counter() - t0
            setattr(stage, name, timed)

    def _timed_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        loss = loss_fn(logits, targets)
        self.busy += time.perf_counter() - t0
        return loss

    def _run(self, inputs, targets, losses: list, evaluate: bool = False) -> None:
        step = self.schedule.eval if evaluate else self.schedule.step
        args = (inputs,) if self.first else ()
        kwargs = {"target": targets, "losses": losses} if self.last else {}
        step(*args, **kwargs)

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepResult:
        losses: list[torch.Tensor] = []
        self.busy = 0.0
        t0 = time.perf_counter()
        self._run(inputs, targets, losses)
        step_s = time.perf_counter() - t0
        if self.tied is not None:  # Megatron's embedding group
            if self.tied.grad is None:
                self.tied.grad = torch.zeros_like(self.tied)
            tdist.all_reduce(self.tied.grad, group=self.tied_group)
        local = sum((q.grad.detach().float() ** 2).sum() for q in self.params
                    if q.grad is not None)
        # one collective: the squared norm, the loss (last stage), each stage's time split
        p, r = self.stages, self.dist.rank
        packed = torch.zeros(2 + 2 * p, device=self.device)
        packed[0] = local
        if self.last:
            packed[1] = torch.stack([x.detach().float() for x in losses]).mean()
        packed[2 + r], packed[2 + p + r] = self.busy, step_s
        tdist.all_reduce(packed)
        norm = packed[0].sqrt()
        clip = self.max_norm() / (norm + 1e-6)
        if clip < 1:
            for q in self.module.parameters():
                if q.grad is not None:
                    q.grad.mul_(clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        # the pipeline's step ends when its last stage does: a stage whose part is done returns
        # from the schedule early and waits for the others in the all-reduce above, and that
        # wait is bubble too (the first stage's last backward comes after the last stage's)
        total = max(packed[2 + p + s].item() for s in range(p))
        for s in range(p):
            busy = packed[2 + s].item()
            self.idle[s].append(max(0.0, 1.0 - busy / total) if total > 0 else float("nan"))
            self.compute[s].append(busy)
        return StepResult(loss=packed[1].item(), grad_norm=norm.item())

    @torch.no_grad()
    def eval_loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        self.module.eval()
        losses: list[torch.Tensor] = []
        self._run(inputs, targets, losses, evaluate=True)
        self.module.train()
        value = torch.zeros(1, device=self.device)
        if self.last:
            value[0] = torch.stack([x.float() for x in losses]).mean()
        tdist.all_reduce(value)
        return value.item()

    def forward_module(self) -> nn.Module:
        return self.module

    def checkpoint_state(self):
        return self.module, self.optimizer  # this stage's layers and their optimizer state

    def details(self) -> dict[str, Any]:
        p, m = self.stages, self.micro_batches
        timed = slice(self.cfg.warmup_steps - self.cfg.steps, None)  # the measured steps
        per_stage = [statistics.median(v[timed]) if v[timed] else None for v in self.idle]
        per_step = [statistics.mean(stages) for stages in zip(*(v[timed] for v in self.idle))]
        costs = [statistics.median(v[timed]) / m if v[timed] else None for v in self.compute]
        return {"engine": f"torch.distributed.pipelining Schedule1F1B, {p} stages "
                          f"({self.dist.backend})",
                "stages": p, "layers_per_stage": [len(x) for x in self.layers],
                "micro_batches": m, "micro_batch_size": self.cfg.global_batch // m,
                "bubble_fraction_per_stage": per_stage,
                "bubble_fraction_steps": per_step,
                "bubble_fraction": statistics.mean(per_step) if per_step else None,
                "bubble_fraction_formula": bubble_formula(p, m),
                "compute_per_micro_batch_s": costs,
                "bubble_fraction_of_stage_costs": (bubble_of_costs(costs, m)
                                                   if None not in costs else None),
                "bubble_note": "1 - (the stage's forward, backward and loss compute) / (the "
                               "pipeline's step, the longest stage's schedule call): per "
                               "stage (median over the measured steps), "
                               "per measured step (mean over the stages) and their mean; "
                               "the formula (p-1)/(m+p-1) assumes stages of equal cost and "
                               "free communication; bubble_fraction_of_stage_costs is the same "
                               "bound with each stage's measured compute per micro-batch "
                               "(unequal stages), communication still free",
                "tied_embeddings": ("gradients summed between the first and last stage"
                                    if self.tied is not None else "not tied across stages"),
                "optimizer": type(self.optimizer).__name__,
                "precision": "bf16 autocast, fp32 weights" if self.bf16 else "fp32",
                "compiled_blocks": self.compiled}
