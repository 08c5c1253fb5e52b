"""Iteration time of one layout: the terms, each with its formula, and the estimate.

One slot is one micro-batch through one pipeline stage (forward + backward) on one GPU; the
pipeline runs every stage at the slowest one's pace (1F1B, Narayanan et al. 2021 Sec. 3.1).
A stage's slot:
  GEMMs      each layer GEMM at its per-GPU shape (after TP; sequence parallelism all-gathers
             before them, so shapes are the same), forward + input- and weight-gradient
             GEMMs, each timed from its shape (``suite.scale.gemm``) / the fitted ceiling; full
             recompute runs every forward GEMM again (with ``recompute_early_stop`` all but the
             MLP's output projection, whose input is the last tensor the backward saved),
             selective the attention block's.
  attention  unfused / fused_softmax: the Q K^T and P V batched GEMMs as above, and the s x s
             scores written and read (bytes per score element, forward and backward, at the
             HBM rate: ``SCORE_BYTES``; dropout adds its read, write and mask); recompute
             repeats the forward's. flash, flash2, flash1: FlashAttention's FLOPs (causal: the
             kernel skips the blocks above the diagonal, so half of the dense count; its
             backward runs 5 matmuls to the forward's 2: 2.5 x) at the kernel's fraction of
             peak at the sequence's length (``Hardware.flash_fractions``); no scores in HBM;
             recompute re-runs its forward.
  memory     (every HBM-bound time here runs at ``Hardware.hbm_rate``: the 0.88 of the
             datasheet bandwidth that streaming kernels reach)
             element-wise work of a layer per token, in h-sized activations of 2 bytes: two
             norms (read + write each), two residual adds (2 reads + 1 write), two dropouts
             (read + write) when the model has dropout: forward 10 (+4), backward twice that;
             sequence parallelism shards it over the TP ranks; full recompute repeats the
             forward (with ``recompute_early_stop`` all but the last residual add, 3, and
             dropout, 2). The MLP activation on the ffn/tp hidden: GELU forward reads and writes
             it (2 ffn), backward 3 ffn; a gated MLP (SwiGLU) reads two and writes one (3 ffn),
             backward 5 ffn. zero1_allreduce (DeepSpeed's BF16 optimizer) adds its fp32
             gradients to themselves after each micro-batch's backward, outside the GEMMs
             (``BF16_Optimizer.update_hp_grads``: ``hp.add_(lp.grad.to(fp32))``, the cast
             reading 2 bytes and writing 4, the add reading 4 + 4 and writing 4): 18 bytes
             per parameter of the stage (``HP_GRAD_ACCUMULATION_BYTES``). Megatron's fp32
             main gradients accumulate inside the weight-gradient GEMM instead
             (``--gradient-accumulation-fusion``). FSDP casts, divides and copies each
             micro-batch's parameters and gradients around its collectives with element-wise
             kernels of its own (``fsdp_copy_bytes``), on its side streams beside the layers'
             compute; an element-wise kernel streaming at the HBM rate occupies the SMs the
             GEMMs need, so they are priced as if they ran alone. A tiled attention kernel
             called through flash-attn's unpad/pad helpers (``Layout.attention_unpad``) adds
             their copies of q, k, v and the output (``unpad_bytes_per_token``).
  logits     the last stage's output GEMM (forward + backward, never recomputed) and its
             cross entropy's HBM traffic per logit (``Layout.loss``: Megatron's unfused fp32
             vocab-parallel loss 52 bytes, eager PyTorch on fp32-cast logits 36, a fused kernel
             6; ``suite.scale.layout.LOSS_KINDS``); plus, per ``logit_metrics``, a metric's
             eager cross entropy forward on the fp32-cast logits, 14 (Composer computes two
             train metrics on every micro-batch's logits).
  TP         4 collectives of b*s*h activations per layer (6 with full recompute, 5 when it
             stops early), ring bytes 2(t-1)/t each over NVLink, plus NCCL's latency; sequence
             parallelism moves the same bytes as reduce-scatter + all-gather (Korthikanti et
             al. 2022 Sec. 4.2.2), and
             half an all-reduce's more per column-parallel linear in the backward, to gather its
             sharded input again (``tp_collectives_per_layer``).
  PP         the b*s*h/tp slice at each of the v*p - 1 chunk boundaries, forward and backward,
             averaged over the stages, over the network (``cross_node_rate``: the NIC, or the
             measured busbw where lower). Once per iteration, with tied
             embeddings, the first and last stages (both hold the word embedding) all-reduce
             its vocab*h/tp gradients (grad_bytes) after the last backward, unhidden
             (``tied_embedding_sync``); in the breakdown's PP part.
  FSDP       (dp_mode fsdp, fsdp2, fsdp_grad_op) per micro-batch: the stage's parameters
             all-gathered for the forward and again for the backward (fsdp_grad_op keeps them
             gathered: once) (2 bytes, (d-1)/d of them), the gradients
             reduce-scattered (grad_bytes), each collective per layer (FSDP's unit) a ring of d
             ranks with NCCL's latency (one pass); with prefetch (dp_overlap) each layer's
             traffic hides under the previous layer's compute, so what shows is
             max(traffic - compute, one layer's traffic).
  interference
             a collective hidden under compute holds ``Hardware.collective_sm_share`` of the
             SMs (NCCL's channels, one CTA each) while it runs, so the kernels beside it run
             on the rest: hidden time x that share x the compute's share of the time it hides
             under (the memory-bound kernels too: the share stands in for the HBM the
             collective's copies take from them); for FSDP's hidden traffic here, for DP's
             overlapped part below. Not priced: hidden TP (Transformer Engine's overlap runs
             its all-gathers on the copy engines and its reduce-scatters on an SM count per
             GEMM, userbuffers' num_sm, that the runs do not state; MegaScale's is its own)
             and hidden PP (single send/recv transfers).
  slot       (GEMMs + attention + memory + exposed TP + exposed PP + exposed FSDP
             + interference)
             x (1 + straggler ln nodes).
The iteration:
  slots      m + (p-1)/v (interleaved 1F1B bubble) + (v-1)(p-r)/v when r = m mod p > 0.
  DP         of the stage holding the most parameters (``stage_params``: the end stages hold
             the embeddings and the output layer besides their layers); allreduce: ring
             all-reduce of its gradients (grad_bytes) in buckets of 40M parameters;
             zero1/zero2: reduce-scatter of the gradients + all-gather of the parameters
             (2 bytes), (d-1)/d each; zero1_allreduce: the all-reduce + the all-gather; over
             NVLink inside a node, else the NICs the group's ranks of a node share
             (min(r x NIC, NVLink, the measured busbw)); exposed = (1 - dp_overlap) of it plus
             what of the overlapped part does not fit the window the schedule leaves (one
             slot, plus the other v - 1 chunks of a group of min(m, p) micro-batches).
             fsdp, fsdp2, fsdp_grad_op: in the slots above. The overlapped part that fits
             the window pays the interference above.
  optimizer  Adam over the GPU's parameters (/ d when the optimizer state is sharded), as a
             multi-tensor fused kernel runs it with fp32 master weights (Megatron's and
             DeepSpeed's mixed-precision optimizers): it reads the fp32 gradient, master
             weight and two moments and writes the last three (28 bytes), copies the master
             weight out to the bf16 one (6), reads the gradient once more for the clipping norm
             (4), and zeroes the gradient buffer for the next iteration (4): 42 bytes per
             parameter (``ADAM_BYTES_PER_PARAM``). PyTorch's unfused AdamW (one kernel per
             operation, as Composer's DecoupledAdamW and torch's foreach AdamW run it, with
             clip_grad_norm_'s multiply) moves about 92; on the FSDP datasets, where the state
             is sharded over 8 or more GPUs, that changes no mean error by more than 0.1
             points, so one count serves.
  iteration = slots x slot + exposed DP + DP interference + optimizer + tied-embedding
             all-reduce.
  MFU = tokens/s x model FLOPs per token / (GPUs x peak); HFU counts recompute.

Each term can be switched off (``Terms``) to see what it adds. Fitted per system (``fit``): the
GEMM ceiling and the straggler constant; nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from math import ceil, log, log2

from suite.scale.checks import check_positive_int
from suite.scale.gemm import forward_backward_time
from suite.scale.hardware import Hardware
from suite.scale.layout import FSDP_MODES, LOGIT_METRIC, LOSS_KINDS, Layout
from suite.scale.model import ModelConfig

# Bytes per attention-score element (b x heads/tp x s x s) of the kernels between the attention
# GEMMs when the scores are materialized: (forward, backward) without dropout. The GEMMs' own
# reads and writes of the scores (Q K^T writes them, P V reads them; in the backward dP is
# written, P and dS read) are in their time (``suite.scale.gemm``), not here. fused_softmax
# (Megatron's scaled masked softmax): one kernel reads the scores and writes probabilities (4);
# backward it reads dP and P and writes dS (6). unfused (eager PyTorch): the scale, the causal
# mask and the softmax each read and write them (12); backward each reads and writes a gradient,
# the softmax also its output (14).
SCORE_BYTES = {"fused_softmax": (4, 6), "unfused": (12, 14)}
DROPOUT_SCORE_BYTES = 5  # read 2, write 2, the 1-byte mask; forward and backward each
ELEMENTWISE_FWD, DROPOUT_FWD = 10, 4  # h-sized activations per token: norms + residuals, dropouts
# what an early-stopping recompute leaves out after the MLP's output projection: the residual
# add (2 reads, 1 write) and, with dropout, the dropout before it (read, write)
EARLY_STOP_ELEMENTWISE, EARLY_STOP_DROPOUT = 3, 2
ADAM_BYTES_PER_PARAM = 42
HP_GRAD_ACCUMULATION_BYTES = 18  # zero1_allreduce, per parameter and micro-batch (docstring)
DP_BUCKET_PARAMS = 40_000_000
NCCL_BASE_LATENCY = 8.4e-6
FLASH_BWD_MATMULS = 2.5  # FlashAttention's backward: 5 matmuls to the forward's 2


@dataclass(frozen=True)
class Terms:
    """Which of the model's terms are on; each can be switched off to see what it adds."""
    gemm_shape: bool = True
    latency: bool = True
    dp_window: bool = True
    dp_nic_sharing: bool = True
    uneven_bubble: bool = True
    straggler: bool = True
    stage_imbalance: bool = True
    memory: bool = True
    loss: bool = True
    optimizer: bool = True
    tied_embedding: bool = True
    interference: bool = True

    @classmethod
    def none(cls) -> "Terms":
        """Only compute, bubble and bandwidth-bound communication."""
        return cls(**{f.name: False for f in fields(cls)})


ALL_TERMS = Terms()


BREAKDOWN = ("gemm_s", "attention_s", "memory_s", "bubble_s", "tp_exposed_s", "pp_exposed_s",
             "fsdp_exposed_s", "dp_exposed_s", "interference_s", "sync_s",
             "optimizer_s")  # Estimate.breakdown


@dataclass(frozen=True)
class Estimate:
    """One iteration, broken down; the *_s parts sum to ``iteration_time_s``."""
    iteration_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    breakdown: dict[str, float] = field(default_factory=dict)


# --- communication ---------------------------------------------------------------------------

def ring_factor(n: int) -> float:
    """Bytes each rank sends per byte of an all-reduce on a ring of n ranks: 2(n-1)/n."""
    check_positive_int("n", n)
    return 2 * (n - 1) / n


def ring_latency(ranks: int, nodes: int, hw: Hardware, passes: int = 2) -> float:
    """NCCL's ring latency: base + passes x (ranks-1) steps, passes x (nodes-1) of them over the
    network; an all-reduce makes 2 passes, an all-gather or a reduce-scatter 1."""
    if ranks == 1:
        return 0.0
    steps, net_steps = passes * (ranks - 1), passes * (nodes - 1)
    return (NCCL_BASE_LATENCY + net_steps * hw.network_latency_s
            + (steps - net_steps) * hw.nvlink_latency_s)


def tree_latency(ranks: int, nodes: int, hw: Hardware) -> float:
    """NCCL's tree all-reduce latency: up and down log2(nodes) network hops, the ranks of a
    node chained over NVLink."""
    if ranks == 1:
        return 0.0
    return NCCL_BASE_LATENCY + 2 * (log2(nodes) * hw.network_latency_s
                                    + (ranks / nodes - 1) * hw.nvlink_latency_s)


def allreduce_latency(ranks: int, nodes: int, hw: Hardware) -> float:
    """The cheaper of ring and tree, as NCCL's tuner picks for latency-bound sizes."""
    return min(ring_latency(ranks, nodes, hw), tree_latency(ranks, nodes, hw))


def tp_collectives_per_layer(full_recompute: float, sequence_parallel: bool = False,
                             early_stop: bool = False) -> float:
    """All-reduces' worth of TP traffic per layer: 2 forward + 2 backward, the recomputed
    forward's 2 on the layers fully recomputed (``Layout.full_recompute``: their share; 1 with
    ``early_stop``, which does not re-run the MLP's output projection and its reduction), and
    with sequence parallelism 1 more in the backward: the two column-parallel linears keep
    their input sharded (where SP's memory saving comes from) and all-gather it again for the
    weight gradient (Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication.backward,
    2022 onwards: half an all-reduce's bytes each)."""
    return 4 + (1 if early_stop else 2) * full_recompute + (1 if sequence_parallel else 0)


def dp_ranks_per_node(layout: Layout, hw: Hardware) -> int:
    """Ranks of one DP group on a node: ranks are ordered TP fastest, then DP."""
    return max(1, min(layout.dp, hw.gpus_per_node // layout.tp))


def cross_node_rate(hw: Hardware, ranks_per_node: int = 1) -> float:
    """Per-rank rate of a ring (or a transfer) that leaves the node, with ``ranks_per_node`` of
    its ranks on each node sharing their NICs (one ring channel per NIC, each leaving the node
    once): r x NIC, capped by NVLink and by the fabric's measured busbw where given
    (``Hardware.network_busbw``)."""
    rate = min(ranks_per_node * hw.network_bw, hw.nvlink_bw)
    return rate if hw.network_busbw is None else min(rate, hw.network_busbw)


def job_nodes(layout: Layout, hw: Hardware) -> int:
    """Nodes the job spans: the ``ln nodes`` the straggler constant stretches a step by."""
    return max(1, ceil(layout.gpus / hw.gpus_per_node))


def dp_group_nodes(layout: Layout, hw: Hardware, ranks_per_node: int) -> int:
    """Nodes one DP group spans, ``ranks_per_node`` of its ranks on each (at most the job's
    nodes when one is counted per node)."""
    if ranks_per_node == 1:
        return min(layout.dp, job_nodes(layout, hw))
    return ceil(layout.dp / ranks_per_node)


def dp_bandwidth(layout: Layout, hw: Hardware, ranks_per_node: int) -> float:
    """Per-rank rate of a DP ring: NVLink when the group fits in a node, else
    ``cross_node_rate``."""
    if ranks_per_node >= layout.dp:
        return hw.nvlink_bw
    return cross_node_rate(hw, ranks_per_node)


def stage_params(model: ModelConfig, layout: Layout) -> list[float]:
    """Parameters one GPU of each stage holds before DP sharding, first to last: its layers; the
    first stage also the word (and learned position) embeddings, the last the output layer
    (when tied, its own copy of the word embedding, which DeepSpeed's and Megatron's pipelines
    keep and update on both end stages) and the final norm; one stage holds each once."""
    h = model.hidden
    word = model.vocab * h
    first = word + (model.seq_len * h if model.position_embeddings else 0)
    last = model.embedding_params - first + (word if model.tied_embeddings else 0)
    split = layout.stage_layers(model.layers)
    counts = [n * model.layer_params for n in split]
    if layout.pp == 1:
        counts[0] += model.embedding_params
    else:
        counts[0] += first
        counts[-1] += last
    return [c / layout.tp for c in counts]


def dp_bytes_per_iteration(model: ModelConfig, layout: Layout, local_params: float) -> float:
    """DP bytes a GPU sends once per iteration (0 for fsdp, which moves its bytes per
    micro-batch)."""
    d = layout.dp
    if layout.dp_mode == "allreduce":
        return ring_factor(d) * local_params * layout.grad_bytes
    if layout.dp_mode in ("zero1", "zero2"):
        return (d - 1) / d * local_params * (layout.grad_bytes + model.activation_bytes)
    if layout.dp_mode == "zero1_allreduce":
        return (ring_factor(d) * layout.grad_bytes + (d - 1) / d * model.activation_bytes) \
            * local_params
    return 0.0


def fsdp_gathers(layout: Layout) -> int:
    """All-gathers of the parameters per micro-batch: the forward's and the backward's, or the
    forward's alone when they stay gathered through the backward (``fsdp_grad_op``)."""
    return 1 if layout.dp_mode == "fsdp_grad_op" else 2


def fsdp_bytes_per_microbatch(model: ModelConfig, layout: Layout, local_params: float) -> float:
    """FSDP / ZeRO-3 per micro-batch: parameters all-gathered for the forward and the
    backward (``fsdp_gathers``), gradients reduce-scattered."""
    d = layout.dp
    return (d - 1) / d * local_params * (fsdp_gathers(layout) * model.activation_bytes
                                         + layout.grad_bytes)


def fsdp_copy_bytes(model: ModelConfig, layout: Layout) -> float:
    """HBM bytes per parameter of a stage, per micro-batch, that FSDP's own kernels move around its
    collectives (beside the collectives' traffic). torch's FullyShardedDataParallel (``fsdp``,
    ``fsdp_grad_op``; ``_runtime_utils``, 1.13 to 2.x) per all-gather (``fsdp_gathers``) casts
    the fp32 shard to the compute dtype (read 4, write ``activation_bytes``: 1/d of the
    parameters) and all-gathers straight into the flat parameter; after the backward it casts
    the unsharded gradient to the reduce dtype where that differs (reads ``activation_bytes``,
    writes ``grad_bytes``: Composer's DEFAULT mixed precision reduces bf16 gradients in fp32,
    PURE does not cast) and divides it by the pre-divide factor (read and write, 2 x
    grad_bytes); on the shard, the post-divide (2 x grad_bytes) and, from an iteration's second
    micro-batch on, the accumulation into the gradient there (two reads, one write: 3 x
    grad_bytes). ``fsdp2`` (``fully_shard`` as torchtitan ran it in 2024, ``_fsdp_collectives``)
    always copies the gradients into its reduce-scatter buffer (in the reduce dtype) and copies
    each all-gather's output out into the parameters (read and write, 2 x activation_bytes,
    twice); the rest as FSDP. (Later FSDP2 lets NCCL average, ReduceOp.AVG, and drops the
    divides; Megatron's and DeepSpeed's data parallelism scale their gradients once per
    iteration, under 0.1% of these runs, not counted.)"""
    a, g, m = model.activation_bytes, layout.grad_bytes, layout.micro_batches
    gathers = fsdp_gathers(layout)
    fsdp2 = layout.dp_mode == "fsdp2"
    unsharded = (a + g if g != a or fsdp2 else 0) + 2 * g + (gathers * 2 * a if fsdp2 else 0)
    shard = gathers * (4 + a) + 2 * g + 3 * g * (m - 1) / m
    return unsharded + shard / layout.dp


def tied_embedding_sync(model: ModelConfig, layout: Layout, hw: Hardware,
                        latency: bool = True) -> float:
    """Seconds of the word embedding's gradient all-reduce between the first and the last
    pipeline stage when the output layer is tied to it (Megatron's finalize_model_grads,
    ``_allreduce_word_embedding_grads``; DeepSpeed's pipeline engine, ``_exec_reduce_tied_grads``):
    two ranks, so each sends its vocab x h / tp gradients once; over NVLink when a replica's
    stages share a node, else the network."""
    if layout.pp == 1 or not model.tied_embeddings:
        return 0.0
    in_node = layout.tp * layout.dp * layout.pp <= hw.gpus_per_node
    grads = model.vocab * model.hidden / layout.tp * layout.grad_bytes
    time = ring_factor(2) * grads / (hw.nvlink_bw if in_node else cross_node_rate(hw))
    if latency:
        time += ring_latency(2, 1 if in_node else 2, hw)
    return time


def uneven_bubble_slots(pp: int, virtual_stages: int, micro_batches: int) -> float:
    """Extra idle slots of the interleaved schedule when m is not a multiple of p."""
    r = micro_batches % pp
    if r == 0 or virtual_stages == 1:
        return 0.0
    return (virtual_stages - 1) * (pp - r) / virtual_stages


# --- one stage's work per micro-batch ---------------------------------------------------------

@dataclass(frozen=True)
class StageWork:
    """Seconds one GPU of a stage spends per micro-batch; ``gemm`` at ceiling 1."""
    gemm: float
    attention: float  # flash kernels (not under the GEMM ceiling)
    memory: float
    tp: float
    pp: float
    fsdp: float
    interference: float  # what hidden FSDP traffic costs the compute beside it


def forward_reruns(gemm: str, layout: Layout) -> float:
    """Times the backward re-runs the forward of the layer GEMM named ``gemm``
    (``ModelConfig.layer_gemms``), averaged over the layers: selective recompute the attention
    core's once; full recompute every GEMM on the layers it covers, but with
    ``recompute_early_stop`` not the MLP's output projection (its input is the last tensor the
    backward saved)."""
    if gemm in ("scores", "context"):
        return 1.0 if layout.recompute == "selective" else layout.full_recompute
    if gemm == "mlp_down" and layout.recompute_early_stop:
        return 0.0
    return layout.full_recompute


def unpad_bytes_per_token(model: ModelConfig, tp: int) -> tuple[float, float]:
    """HBM bytes per token of one layer (on one of its TP ranks), forward and backward, that
    flash-attn's ``bert_padding`` helpers move around the kernel (``Layout.attention_unpad``;
    flash-attn 2.4.2, as llm-foundry's ``flash_attn_fn`` calls them): ``unpad_input`` gathers q,
    k and v into packed copies (read + write each) and ``pad_input`` writes the output into a
    zero-filled tensor (the fill, then a read and a write); the backward scatters each
    gradient of q, k, v into a zero-filled tensor (fill, read, write) and gathers the output's
    (read, write)."""
    q = model.hidden / tp
    qkv = q + 2 * model.kv_heads * model.head_dim / tp
    forward = 2 * qkv + 3 * q
    backward = 3 * qkv + 2 * q
    return forward * model.activation_bytes, backward * model.activation_bytes


def _layer_passes(model: ModelConfig, layout: Layout, hw: Hardware, terms: Terms
                  ) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """(GEMM seconds at ceiling 1, flash seconds, HBM-bound seconds) of one layer's forward
    pass, and of its backward pass with whatever it recomputes."""
    b, tp, kind = layout.micro_batch, layout.tp, layout.attention
    full = layout.full_recompute
    gemm, flash, memory = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]  # [forward, backward]
    tiled = layout.tiled_attention
    if tiled:
        fwd_q, bwd_q = hw.flash_fractions(kind, model.seq_len)
    for g in model.layer_gemms(b, tp):
        core = g.name in ("scores", "context")
        reruns = forward_reruns(g.name, layout)
        if core and tiled:
            forward = g.flops / 2 / (hw.peak_flops * fwd_q)
            backward = FLASH_BWD_MATMULS * g.flops / 2 / (hw.peak_flops * bwd_q)
            flash[0] += forward
            flash[1] += forward * reruns + backward
            continue
        if terms.gemm_shape:
            fwd, bwd = forward_backward_time(g, hw)
        else:
            fwd = g.flops / hw.peak_flops
            bwd = 2 * fwd
        gemm[0] += fwd
        gemm[1] += fwd * reruns + bwd
    if terms.memory:
        h, s, act = model.hidden, model.seq_len, model.activation_bytes
        fwd_units = ELEMENTWISE_FWD + (DROPOUT_FWD if model.dropout else 0)
        skipped = EARLY_STOP_ELEMENTWISE + (EARLY_STOP_DROPOUT if model.dropout else 0)
        rerun_units = fwd_units - (skipped if layout.recompute_early_stop else 0)
        shard = tp if layout.sequence_parallel else 1
        ffn = model.ffn_hidden / tp / h
        act_fwd, act_bwd = (3 * ffn, 5 * ffn) if model.gated_mlp else (2 * ffn, 3 * ffn)
        unit = b * s * h * act / hw.hbm_rate
        memory[0] += (fwd_units / shard + act_fwd) * unit
        memory[1] += ((2 * fwd_units + rerun_units * full) / shard + act_fwd * full
                      + act_bwd) * unit
        if layout.attention_unpad:
            fwd_u, bwd_u = unpad_bytes_per_token(model, tp)
            memory[0] += b * s * fwd_u / hw.hbm_rate
            memory[1] += b * s * (fwd_u * forward_reruns("scores", layout) + bwd_u) / hw.hbm_rate
        if kind in SCORE_BYTES:
            fwd_b, bwd_b = SCORE_BYTES[kind]
            if model.dropout:
                fwd_b, bwd_b = fwd_b + DROPOUT_SCORE_BYTES, bwd_b + DROPOUT_SCORE_BYTES
            scores = b * (model.heads / tp) * s * s / hw.hbm_rate
            memory[0] += scores * fwd_b
            memory[1] += scores * (fwd_b * forward_reruns("scores", layout) + bwd_b)
    return (gemm[0], flash[0], memory[0]), (gemm[1], flash[1], memory[1])


def _layer_compute(model: ModelConfig, layout: Layout, hw: Hardware,
                   terms: Terms) -> tuple[float, float, float]:
    """(GEMM seconds at ceiling 1, flash seconds, HBM-bound seconds) of one layer."""
    forward, backward = _layer_passes(model, layout, hw, terms)
    return tuple(f + b for f, b in zip(forward, backward))


def layer_seconds(model: ModelConfig, layout: Layout, hw: Hardware,
                  terms: Terms = ALL_TERMS) -> float:
    """One layer's compute per micro-batch on one GPU (GEMMs at ``hw.gemm_efficiency``,
    attention, element-wise), no communication: what a single-GPU layer timing measures."""
    gemm, flash, memory = _layer_compute(model, layout, hw, terms)
    return gemm / hw.gemm_efficiency + flash + memory


def _tp_allreduce_seconds(model: ModelConfig, layout: Layout, hw: Hardware,
                          terms: Terms) -> float:
    """One all-reduce of a micro-batch's b*s*h activations over the TP group (NVLink)."""
    if layout.tp == 1:
        return 0.0
    activation = layout.micro_batch * model.seq_len * model.hidden * model.activation_bytes
    seconds = ring_factor(layout.tp) * activation / hw.nvlink_bw
    return seconds + (ring_latency(layout.tp, 1, hw) if terms.latency else 0.0)


def tp_seconds_per_layer(model: ModelConfig, layout: Layout, hw: Hardware,
                         terms: Terms = ALL_TERMS) -> float:
    """One layer's exposed TP collectives per micro-batch ((1 - tp_overlap) of them)."""
    collectives = tp_collectives_per_layer(layout.full_recompute, layout.sequence_parallel,
                                           layout.recompute_early_stop)
    return (1 - layout.tp_overlap) * collectives * _tp_allreduce_seconds(model, layout, hw, terms)


def layer_passes(model: ModelConfig, layout: Layout, hw: Hardware,
                 terms: Terms = ALL_TERMS) -> tuple[float, float]:
    """(forward, backward with its recompute) seconds of one layer on its TP group, which
    Korthikanti et al.'s Table 4 times apart; they sum to ``timed_layer_seconds``. The forward
    has 2 of the layer's TP collectives; the hidden ones (``tp_overlap`` of all) are taken from
    the backward's first, where the systems hide them."""
    forward, backward = _layer_passes(model, layout, hw, terms)
    one = _tp_allreduce_seconds(model, layout, hw, terms)
    total = tp_collectives_per_layer(layout.full_recompute, layout.sequence_parallel,
                                     layout.recompute_early_stop)
    hidden, in_backward = layout.tp_overlap * total, total - 2
    tp_forward = (2 - max(0.0, hidden - in_backward)) * one
    tp_backward = max(0.0, in_backward - hidden) * one

    def seconds(part: tuple[float, float, float]) -> float:
        return part[0] / hw.gemm_efficiency + part[1] + part[2]

    return seconds(forward) + tp_forward, seconds(backward) + tp_backward


def layer_breakdown(model: ModelConfig, layout: Layout, hw: Hardware,
                    terms: Terms = ALL_TERMS) -> dict[str, float]:
    """One layer's forward, backward and recompute per micro-batch on its TP group, as a
    benchmark of one layer times it (Korthikanti et al. 2022, Table 4): compute and the exposed
    TP collectives, in ``BREAKDOWN``'s keys (the rest 0); they sum to the layer's time."""
    gemm, flash, memory = _layer_compute(model, layout, hw, terms)
    parts = dict.fromkeys(BREAKDOWN, 0.0)
    parts.update(gemm_s=gemm / hw.gemm_efficiency, attention_s=flash, memory_s=memory,
                 tp_exposed_s=tp_seconds_per_layer(model, layout, hw, terms))
    return parts


def timed_layer_seconds(model: ModelConfig, layout: Layout, hw: Hardware,
                        terms: Terms = ALL_TERMS) -> float:
    """The sum of ``layer_breakdown``: what a measured layer time is compared with."""
    return sum(layer_breakdown(model, layout, hw, terms).values())


def _logits_compute(model: ModelConfig, layout: Layout, hw: Hardware,
                    terms: Terms) -> tuple[float, float]:
    """(GEMM seconds at ceiling 1, loss HBM seconds) of the output layer per micro-batch."""
    g = model.logits_gemm(layout.micro_batch, layout.tp)
    if terms.gemm_shape:
        fwd, bwd = forward_backward_time(g, hw)
    else:
        fwd, bwd = g.flops / hw.peak_flops, 2 * g.flops / hw.peak_flops
    per_logit = LOSS_KINDS[layout.loss][0] + layout.logit_metrics * LOGIT_METRIC[0]
    loss = per_logit * g.m * g.n / hw.hbm_rate if terms.loss else 0.0
    return fwd + bwd, loss


def stage_works(model: ModelConfig, layout: Layout, hw: Hardware,
                terms: Terms = ALL_TERMS) -> list[StageWork]:
    """Each pipeline stage's work per micro-batch on one GPU (first to last)."""
    model.check_tp(layout.tp)
    if layout.tp > hw.gpus_per_node:
        raise ValueError(f"tp={layout.tp} spans nodes; the model keeps TP on NVLink, so tp must "
                         f"be <= gpus_per_node={hw.gpus_per_node}")
    split = layout.stage_layers(model.layers)
    gemm, flash, memory = _layer_compute(model, layout, hw, terms)
    logits_gemm, loss = _logits_compute(model, layout, hw, terms)
    activation = layout.micro_batch * model.seq_len * model.hidden * model.activation_bytes
    tp_layer = tp_seconds_per_layer(model, layout, hw, terms)
    pp = 0.0
    if layout.pp > 1:
        boundaries = layout.virtual_stages * layout.pp - 1
        pp = 2 * boundaries / layout.pp * activation / layout.tp / cross_node_rate(hw)
        if terms.latency:
            pp += 2 * boundaries / layout.pp * (NCCL_BASE_LATENCY + hw.network_latency_s)
    works = []
    params = stage_params(model, layout)
    # element-wise bytes per parameter of a stage and micro-batch that the DP mode's own
    # gradient handling moves outside the GEMMs
    dp_handling = 0.0
    if terms.memory and layout.dp_mode == "zero1_allreduce":
        dp_handling = HP_GRAD_ACCUMULATION_BYTES
    elif terms.memory and layout.dp_mode in FSDP_MODES and layout.dp > 1:
        dp_handling = fsdp_copy_bytes(model, layout)
    fsdp_rate = fsdp_latency = fsdp_share = 0.0  # per stage: bytes/s of its rings, each ring's
    # latency, and the SMs its collectives hold
    if layout.dp_mode in FSDP_MODES and layout.dp > 1:
        per_node = dp_ranks_per_node(layout, hw) if terms.dp_nic_sharing else 1
        fsdp_rate = dp_bandwidth(layout, hw, per_node)
        nodes = dp_group_nodes(layout, hw, per_node)
        if terms.latency:
            fsdp_latency = ring_latency(layout.dp, nodes, hw, passes=1)
        if terms.interference:
            fsdp_share = hw.collective_sm_share(nodes)
    for i, (layers, held) in enumerate(zip(split, params)):
        last = i == layout.pp - 1
        if not terms.stage_imbalance:  # the layers, the output layer and the parameters spread
            share, layers, held = 1 / layout.pp, model.layers / layout.pp, sum(params) / layout.pp
        else:
            share = 1.0 if last else 0.0
        stage_gemm = layers * gemm + share * logits_gemm
        stage_memory = layers * memory + share * loss + dp_handling * held / hw.hbm_rate
        stage_flash = layers * flash
        fsdp = interference = 0.0
        if fsdp_rate:
            traffic = fsdp_bytes_per_microbatch(model, layout, held) / fsdp_rate \
                + layers * (fsdp_gathers(layout) + 1) * fsdp_latency
            compute = stage_gemm / hw.gemm_efficiency + stage_flash + stage_memory
            hidden = max(traffic - compute, traffic / max(layers, 1))
            fsdp = (1 - layout.dp_overlap) * traffic + layout.dp_overlap * hidden
            interference = layout.dp_overlap * (traffic - hidden) * fsdp_share
        works.append(StageWork(stage_gemm, stage_flash, stage_memory,
                               layers * tp_layer,
                               (1 - layout.pp_overlap) * pp, fsdp, interference))
    return works


def _slot(work: StageWork, hw: Hardware) -> float:
    return work.gemm / hw.gemm_efficiency + work.attention + work.memory + work.tp + work.pp \
        + work.fsdp + work.interference


def estimate(model: ModelConfig, hw: Hardware, layout: Layout,
             terms: Terms = ALL_TERMS) -> Estimate:
    """Iteration time, throughput, MFU and the breakdown of one layout on one machine."""
    works = stage_works(model, layout, hw, terms)
    slowest = max(works, key=lambda w: _slot(w, hw))
    work = _slot(slowest, hw)
    m, p, v = layout.micro_batches, layout.pp, layout.virtual_stages
    slots = m + (p - 1) / v
    if terms.uneven_bubble:
        slots += uneven_bubble_slots(p, v, m)
    nodes = job_nodes(layout, hw)
    stretch = 1 + hw.straggler * log(nodes) if terms.straggler else 1.0
    local = max(stage_params(model, layout))
    dp = dp_share = 0.0
    if layout.dp > 1 and layout.dp_mode not in FSDP_MODES:
        per_node = dp_ranks_per_node(layout, hw) if terms.dp_nic_sharing else 1
        dp_nodes = dp_group_nodes(layout, hw, per_node)
        dp = dp_bytes_per_iteration(model, layout, local) / dp_bandwidth(layout, hw, per_node)
        if terms.latency:
            dp += ceil(local / DP_BUCKET_PARAMS) * allreduce_latency(layout.dp, dp_nodes, hw)
        if terms.interference:
            dp_share = hw.collective_sm_share(dp_nodes)
    dp_exposed = (1 - layout.dp_overlap) * dp
    hidden = layout.dp_overlap * dp
    if terms.dp_window and layout.dp_overlap > 0:
        window = work * (1 + min(m, p) * (v - 1) / v)
        dp_exposed += max(0.0, hidden - window)
        hidden = min(hidden, window)
    compute = slowest.gemm / hw.gemm_efficiency + slowest.attention + slowest.memory
    dp_interference = hidden * dp_share * compute / work if work > 0 else 0.0
    shard = layout.dp if layout.shards_optimizer else 1
    optimizer = local / shard * ADAM_BYTES_PER_PARAM / hw.hbm_rate if terms.optimizer else 0.0
    embedding = tied_embedding_sync(model, layout, hw, terms.latency) \
        if terms.tied_embedding else 0.0
    time = slots * work * stretch + dp_exposed + dp_interference + optimizer + embedding
    tokens_per_s = layout.global_batch * model.seq_len / time
    mfu = tokens_per_s * model.flops_per_token / (layout.gpus * hw.peak_flops)
    hfu = (tokens_per_s * model.hardware_flops_per_token(layout.recompute)
           / (layout.gpus * hw.peak_flops))
    parts = {"gemm_s": m * slowest.gemm / hw.gemm_efficiency,
             "attention_s": m * slowest.attention, "memory_s": m * slowest.memory,
             "bubble_s": (slots - m) * work, "tp_exposed_s": m * slowest.tp,
             "pp_exposed_s": m * slowest.pp + embedding, "fsdp_exposed_s": m * slowest.fsdp,
             "dp_exposed_s": dp_exposed,
             "interference_s": m * slowest.interference + dp_interference,
             "sync_s": slots * work * (stretch - 1), "optimizer_s": optimizer}
    return Estimate(time, tokens_per_s, mfu, hfu, parts)
