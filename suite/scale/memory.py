"""Per-GPU memory of a layout: weights, gradients, optimizer state and activations, so that a
layout that cannot fit is marked, not ranked.

State per parameter (mixed-precision Adam): Megatron and DeepSpeed keep 2-byte weights, a
``grad_bytes`` gradient (4: fp32 main gradients) and 12 bytes of optimizer state (fp32 master
weights, two fp32 moments); zero1 shards the 12 over DP, zero2 the gradients too.
zero1_allreduce (DeepSpeed's BF16 optimizer under its pipeline engine) accumulates into fp32
gradients (4 bytes, whatever dtype ``grad_bytes`` says they cross the wire in) and also keeps the
model's own 2-byte gradients beside them: the engine copies them over after each micro-batch's
backward without freeing them (``PipelineEngine._exec_backward_pass``:
``update_hp_grads(clear_lp_grads=False)``). Its all-reduce casts the flat fp32 buffer to the
wire dtype first (``DeepSpeedEngine.allreduce_bucket``: ``tensor.to(communication_data_type)``),
so with a 2-byte wire it needs a 2-byte copy of a parameter group's gradients while the
reduction runs (``Memory.transient``; the weights' group holds nearly all of them, counted as
all). That is after the last backward, when the activations are gone, so a stage's peak is its
state plus the larger of the two. FSDP
(PyTorch's FlatParameter, FSDP2's DTensor) keeps the sharded parameters themselves in fp32 (the
master copy: 4 bytes), their gradients (4) and the two moments (8), all over DP, plus the
gathered 2-byte parameters and gradients of the unit in use and the one prefetched (two
layers); SHARD_GRAD_OP (``fsdp_grad_op``) keeps every unit's parameters gathered from its
forward to its backward, all of the stage's 2-byte parameters at the backward's start.

Activations (Korthikanti et al. 2022, Sec. 4, Eq. 1-5, generalized to GQA, any FFN width, gated
MLPs and models without dropout): per layer and token, in bytes, with t the TP size:
  replicated over TP (sharded by sequence parallelism): the two norms' inputs 4h, the QKV
  input 2h, the MLP input 2h, the two dropout masks 2h (with dropout);
  split over TP: Q and K (2(heads + kv_heads) d), V (2 kv_heads d), the attention output
  projection's input 2h, the MLP's up/gate outputs (2 ffn per matrix) and the activation's
  output (2 ffn); the s x s scores when materialized: 2 a s for the softmax output, plus a s
  (mask) and 2 a s (dropout output) with dropout; flash keeps only its fp32 row statistics
  (4 a).
  MHA, GELU of 4h, dropout: 10h + 24h/t + 5as/t, Korthikanti's Eq. 2. Selective recompute
  drops the scores; full recompute keeps only each layer's input (2h, / t with sequence
  parallelism) plus one layer's full activations while it is recomputed (on the
  ``recompute_fraction`` of the layers it covers).
Selective recompute re-creates the scores of the one layer whose backward runs, full recompute
that layer's whole activations. In flight: stage i of 1F1B holds min(m, p - i) micro-batches
(its p - i - 1 warm-up forwards and the one in 1F1B; Narayanan et al. 2021), each stage of the
interleaved schedule (1 + (p - 1)/(p v)) min(m, p) (Korthikanti et al. Sec. 4.2.3: the first
stage's, taken for all). The last
stage also holds what its cross entropy keeps per logit (``suite.scale.layout.LOSS_KINDS``:
6 bytes for Megatron's, 14 for eager PyTorch's on fp32-cast logits, 2 for a fused kernel), and
a trainer that computes metrics on the logits after the backward (``logit_metrics``) holds 10
bytes per logit while each runs (``LOGIT_METRIC``: the logits, their fp32 copy and the
log-probabilities), a transient beside the state.

Each stage holds its own parameters (``suite.scale.step.stage_params``): the first also the
embeddings, the last the output layer, so with a large vocabulary an end stage is the fullest.
A layout fits when the largest stage's total is under the GPU's memory less ``RESERVE_BYTES``
(the CUDA context, NCCL's buffers and the caching allocator's fragmentation: PyTorch's CUDA
context takes 0.5-1 GB, NCCL a few hundred MB per communicator).
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.scale.hardware import Hardware
from suite.scale.layout import FSDP_MODES, LOGIT_METRIC, LOSS_KINDS, Layout
from suite.scale.model import ModelConfig
from suite.scale.step import fsdp_gathers, stage_params

OPTIMIZER_BYTES = 12
BF16_GRAD_BYTES = 2  # zero1_allreduce: the model's bf16 gradients, kept
FP32_GRAD_BYTES = 4  # zero1_allreduce: the fp32 gradients it accumulates into
RESERVE_BYTES = 2 * 1024 ** 3


@dataclass(frozen=True)
class Memory:
    """Bytes on the fullest GPU (its stage), by kind. ``transient``: what runs after the last
    backward has freed the activations holds: the gradient reduction's buffer, or the train
    metrics' logits."""
    stage: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    capacity: float
    transient: float = 0.0

    @property
    def total(self) -> float:
        """The peak: the state, and the activations or the transient."""
        return (self.weights + self.gradients + self.optimizer
                + max(self.activations, self.transient))

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


def layer_activation_bytes(model: ModelConfig, layout: Layout) -> tuple[float, float]:
    """(stored per layer, working set of one layer) in bytes per micro-batch, without
    recompute; see the module docstring."""
    t, h, d = layout.tp, model.hidden, model.head_dim
    a, s, ffn = model.heads, model.seq_len, model.ffn_hidden
    replicated = 8 * h + (2 * h if model.dropout else 0)
    split = (2 * (a + model.kv_heads) * d + 2 * model.kv_heads * d + 2 * h
             + 2 * ffn * (model.mlp_matrices - 1) + 2 * ffn)
    if layout.tiled_attention:
        scores = 4 * a
    else:
        scores = (5 if model.dropout else 2) * a * s
    shard = t if layout.sequence_parallel else 1
    per_token = replicated / shard + split / t
    tokens = layout.micro_batch * s
    full = tokens * (per_token + scores / t)
    stored = tokens * per_token if layout.recompute == "selective" else full
    return stored, full


def kept_per_layer(model: ModelConfig, layout: Layout) -> float:
    """Bytes a layer keeps through the forward for its backward, per micro-batch, under the
    layout's recompute: its input alone on the layers full recompute covers, the stored
    activations on the others."""
    stored, _ = layer_activation_bytes(model, layout)
    shard = layout.tp if layout.sequence_parallel else 1
    layer_input = layout.micro_batch * model.seq_len * 2 * model.hidden / shard
    f = layout.full_recompute
    return f * layer_input + (1 - f) * stored


def stage_memory(model: ModelConfig, layout: Layout, hw: Hardware) -> list[Memory]:
    """Each stage's memory on one of its GPUs, first to last."""
    split = layout.stage_layers(model.layers)
    d = layout.dp
    stored, working = layer_activation_bytes(model, layout)
    p, v, m = layout.pp, layout.virtual_stages, layout.micro_batches
    interleaved = min(m, p) * (1 + (p - 1) / (p * v))
    f = layout.full_recompute
    # the layer whose backward runs re-creates what recompute dropped: all of it (full), its
    # scores (selective; without recompute nothing was dropped: stored == working)
    recreated = working if f else working - stored
    per_layer = kept_per_layer(model, layout)
    stages = []
    for i, (layers, params) in enumerate(zip(split, stage_params(model, layout))):
        weights, grads, optim = 2 * params, layout.grad_bytes * params, OPTIMIZER_BYTES * params
        transient = 0.0
        if layout.shards_optimizer:
            optim /= d
        if layout.dp_mode in ("zero2", *FSDP_MODES):
            grads /= d
        if layout.dp_mode == "zero1_allreduce":
            grads = (FP32_GRAD_BYTES + BF16_GRAD_BYTES) * params
            if layout.grad_bytes != FP32_GRAD_BYTES:
                transient = layout.grad_bytes * params
        if layout.dp_mode in FSDP_MODES:
            unit = 2 * model.layer_params / layout.tp  # two layers' parameters
            # gathered once a micro-batch, every layer's parameters stay gathered from its
            # forward to its backward: at the backward's start, all of the stage's
            gathered = params if fsdp_gathers(layout) == 1 else unit
            weights = 4 * params / d + 2 * gathered
            grads = 4 * params / d + 2 * unit
            optim = 8 * params / d
        inflight = min(m, p - i) if v == 1 else interleaved
        acts = layers * per_layer * inflight + recreated
        if i == p - 1:
            logits = layout.micro_batch * model.seq_len * model.vocab / layout.tp
            acts += LOSS_KINDS[layout.loss][1] * logits
            if layout.logit_metrics:
                transient = max(transient, LOGIT_METRIC[1] * logits)
        stages.append(Memory(i, weights, grads, optim, acts, hw.hbm_bytes - RESERVE_BYTES,
                             transient))
    return stages


def fullest(stages: list[Memory]) -> Memory:
    """The stage whose memory decides whether the layout fits."""
    return max(stages, key=lambda m: m.total)


def memory(model: ModelConfig, layout: Layout, hw: Hardware) -> Memory:
    """The fullest stage's memory on one GPU: whether the layout fits."""
    return fullest(stage_memory(model, layout, hw))
