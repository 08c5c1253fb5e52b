"""A training layout: how a model is split over GPUs (TP x PP x DP, virtual stages, uneven stage
splits), what each GPU recomputes and shards, the attention kernel, and how much of each kind of
communication hides behind compute.

Vocabularies (one place):
- ``RECOMPUTE``: none; selective (attention's score, softmax and P V block); full (every
  layer's forward, or ``recompute_fraction`` of the layers', as Megatron's
  ``--recompute-num-layers`` and torchtitan's layer-wise selective checkpointing do).
  ``recompute_early_stop``: the recomputed forward stops at the last tensor the backward saved,
  as PyTorch's non-reentrant checkpoint does from torch 2.1 (pytorch/pytorch#96866, the
  default since): a pre-norm block's MLP output projection and the residual add after it are
  not re-run (checked by counting the matmuls in ``tests/test_scale_model.py``). Megatron's and
  DeepSpeed's checkpointing (reentrant) re-run the whole forward.
- ``ATTENTION``: unfused (the scores materialized by separate kernels, as eager PyTorch runs
  them); fused_softmax (scores materialized, scale + mask + softmax in one kernel, Megatron's);
  the tiled kernels, no s x s tensor in HBM (their fractions of peak per GPU:
  ``suite.scale.hardware``): flash (the architecture's best: FlashAttention-2 on Ampere,
  FlashAttention-3 or cuDNN's on Hopper); flash2 (FlashAttention-2 on any GPU: on Hopper it
  uses none of Hopper's instructions); flash1 (the generation before: FlashAttention-1, the
  Triton kernel of its time). ``attention_unpad``: the tiled kernel is called through
  flash-attn's variable-length interface behind its ``bert_padding`` helpers, as llm-foundry's
  MPT does for ``attn_impl: flash`` (``flash_attn_fn``): q, k and v are gathered into packed
  copies and the output scattered back into a zero-filled tensor, and the backward undoes each
  (``suite.scale.step.unpad_bytes_per_token``).
- ``DP_MODES``: allreduce (DDP's gradient all-reduce); zero1, zero2 (the distributed optimizer:
  gradient reduce-scatter and parameter all-gather, optimizer state, and for zero2 the
  gradients, sharded); zero1_allreduce (the optimizer state sharded as zero1, but the fp32
  gradients all-reduced in full, at ``grad_bytes`` on the wire: DeepSpeed's BF16 optimizer
  under its pipeline engine, ``PipelineEngine._bf16_reduce_grads``, which also accumulates
  them outside the GEMMs after each micro-batch); fsdp (ZeRO-3: parameters sharded too, all-gathered
  per micro-batch; torch's FullyShardedDataParallel, whose flat parameters the all-gather fills
  in place); fsdp2 (the same collectives by torch's per-parameter ``fully_shard``, which copies
  each gradient into its reduce-scatter buffer and each all-gather's output out into the
  parameters: ``suite.scale.step.fsdp_copy_bytes``); fsdp_grad_op (FullyShardedDataParallel's
  SHARD_GRAD_OP, FSDP2's reshard_after_forward=False: the parameters all-gathered once per
  micro-batch and kept through its backward, the gradients reduce-scattered and sharded with
  the optimizer state).
- ``LOSS_KINDS``: the cross entropy's kernels (below); ``logit_metrics``, the cross entropies a
  trainer computes besides on each micro-batch's logits, outside autograd (Composer's train
  metrics: LanguageCrossEntropy and LanguagePerplexity, a torch CrossEntropyLoss each, 2).

Uneven stage splits: Megatron-Core's ``--decoder-first-pipeline-num-layers`` /
``--decoder-last-pipeline-num-layers`` (``first_stage_layers``, ``last_stage_layers``; the middle
stages share the rest evenly); with neither and layers not a multiple of the stages, DeepSpeed's
uniform partition (deepspeed/runtime/utils.py ``partition_uniform``): the first
``layers mod pp`` stages take one layer more.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.configs import CHECKPOINTING
from suite.scale.checks import (
    check_bool,
    check_choice,
    check_count,
    check_fraction,
    check_positive_int,
)

RECOMPUTE = CHECKPOINTING  # the GPT's checkpointing modes; suite.mfu counts their FLOPs
ATTENTION = ("unfused", "fused_softmax", "flash1", "flash2", "flash")
FLASH_KINDS = ("flash", "flash2", "flash1")  # the tiled kernels, no s x s scores in HBM
DP_MODES = ("allreduce", "zero1", "zero1_allreduce", "zero2", "fsdp", "fsdp2", "fsdp_grad_op")
FSDP_MODES = ("fsdp", "fsdp2", "fsdp_grad_op")  # parameters all-gathered per micro-batch
# The cross entropy over the logits: (HBM bytes per logit forward + backward, bytes per logit
# held at the backward's start). megatron: the vocab-parallel fp32 loss, unfused but in place
# (cast 2+4, max 4, subtract 8, exp 8, sum 4, divide 8; backward scale 8, cast back 6: 52; it
# keeps the 2-byte logits' fp32 softmax: 6). eager: F.cross_entropy on logits cast to fp32
# (cast 2+4, log-softmax 4+4; backward its gradient 4, log-softmax's 4+4+4, cast back 4+2: 36;
# it holds the logits, their fp32 copy, the log-probabilities and, as the backward starts,
# their fp32 gradient: 14). fused: one kernel (flash-attn's cross entropy, as llm-foundry's
# fused_crossentropy): reads the logits, writes their gradient in place (6; 2 held).
LOSS_KINDS = {"megatron": (52, 6), "eager": (36, 14), "fused": (6, 2)}
# A training metric computed on each micro-batch's logits outside autograd (``logit_metrics``),
# as (HBM bytes per logit, bytes per logit held while it runs): an eager cross entropy's forward
# on the logits cast to fp32 (autocast runs cross_entropy in fp32): cast 2+4, log-softmax 4+4,
# as the eager loss's forward above (14); the logits the trainer keeps (2), their fp32 copy and
# the log-probabilities (4 + 4), after the backward has freed the activations. The metrics run
# one after the other. A lower bound, as for the eager loss: PyTorch's log-softmax reads a row
# too long for its persistent kernel three times (max, sum of exponentials, the write), and
# whether the rereads hit L2 depends on the rows in flight (a 50368-logit fp32 row is 201 KB;
# two blocks per SM on an A100 stream 43 MB through its 40 MB L2); each is counted once.
LOGIT_METRIC = (14, 10)


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    virtual_stages: int = 1
    tp_overlap: float = 0.0
    pp_overlap: float = 0.0
    dp_overlap: float = 0.0
    grad_bytes: int = 4
    recompute: str = "none"
    sequence_parallel: bool = False
    attention: str = "fused_softmax"
    dp_mode: str = "allreduce"
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    recompute_fraction: float = 1.0  # full recompute of this share of the layers
    recompute_early_stop: bool = False
    loss: str = "megatron"
    logit_metrics: int = 0  # forward-only cross entropies over each micro-batch's logits
    attention_unpad: bool = False  # the kernel behind flash-attn's unpad/pad copies

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "micro_batch", "global_batch", "virtual_stages",
                     "grad_bytes"):
            check_positive_int(name, getattr(self, name))
        for name in ("tp_overlap", "pp_overlap", "dp_overlap"):
            check_fraction(name, getattr(self, name))
        check_choice("recompute", self.recompute, RECOMPUTE)
        check_fraction("recompute_fraction", self.recompute_fraction)
        if self.recompute_fraction != 1.0 and self.recompute != "full" or \
                self.recompute_fraction == 0:
            raise ValueError(f"recompute_fraction={self.recompute_fraction} needs "
                             "recompute='full' and a share in (0, 1]")
        check_choice("attention", self.attention, ATTENTION)
        check_choice("dp_mode", self.dp_mode, DP_MODES)
        check_choice("loss", self.loss, tuple(LOSS_KINDS))
        check_count("logit_metrics", self.logit_metrics)
        check_bool("sequence_parallel", self.sequence_parallel)
        check_bool("recompute_early_stop", self.recompute_early_stop)
        check_bool("attention_unpad", self.attention_unpad)
        if self.attention_unpad and not self.tiled_attention:
            raise ValueError(f"attention_unpad=True needs a tiled kernel (flash1, flash2, flash),"
                             f" not attention={self.attention!r}")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel=True needs tp > 1 (it shards over the TP ranks)")
        for name in ("first_stage_layers", "last_stage_layers"):
            value = getattr(self, name)
            if value is not None:
                check_positive_int(name, value)
                if self.pp == 1:
                    raise ValueError(f"{name}={value} needs pp > 1")
        if self.global_batch % (self.dp * self.micro_batch):
            raise ValueError(f"global_batch={self.global_batch} is not a multiple of "
                             f"dp * micro_batch = {self.dp * self.micro_batch}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration (m)."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def full_recompute(self) -> float:
        """Share of the layers whose whole forward is recomputed (0 without full recompute)."""
        return self.recompute_fraction if self.recompute == "full" else 0.0

    @property
    def tiled_attention(self) -> bool:
        """A FlashAttention kernel (``FLASH_KINDS``): no s x s scores in HBM."""
        return self.attention in FLASH_KINDS

    @property
    def shards_optimizer(self) -> bool:
        return self.dp_mode != "allreduce"

    def stage_layers(self, layers: int) -> list[int]:
        """Layers of each pipeline stage, first to last (see the module docstring)."""
        p, first, last = self.pp, self.first_stage_layers, self.last_stage_layers
        if first is None and last is None:
            base, extra = divmod(layers, p)
            split = [base + (i < extra) for i in range(p)]
        else:
            rest = layers - (first or 0) - (last or 0)
            middle = p - (first is not None) - (last is not None)
            if rest < 0 or (middle == 0 and rest) or (middle and rest % middle):
                raise ValueError(f"first_stage_layers={first}, last_stage_layers={last}: the "
                                 f"other {rest} of layers={layers} do not split evenly over "
                                 f"{middle} middle stage(s)")
            share = rest // middle if middle else 0
            split = ([first] if first is not None else []) + [share] * middle \
                + ([last] if last is not None else [])
        if min(split) < 1:
            raise ValueError(f"layers={layers} over pp={p} leaves a stage empty: {split}")
        if self.virtual_stages > 1 and any(n % self.virtual_stages for n in split):
            raise ValueError(f"stage layers {split} do not split into "
                             f"virtual_stages={self.virtual_stages} chunks")
        return split
