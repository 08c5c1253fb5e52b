"""An analytical model of iteration time and MFU for 3D-parallel (TP x PP x DP) GPT training.

Why: MegaScale (Jiang et al., NSDI'24) reports MFU falling from 53% to 41% (Megatron-LM) and
from 65% to 55% (MegaScale) as the 175B model goes from 256 to 12288 GPUs. A model whose terms
each have a formula says how much of that drop the bubble, each kind of communication and
synchronisation explain; fitted on a few small-scale rows it predicts the large-scale ones.

One slot is one micro-batch through one pipeline stage (forward + backward) on one GPU:
  GEMMs     F_hw * b * s / (tp * pp) / (peak * gemm_efficiency * q_tile), q_tile = 1 unless
            the gemm_size term is on
            F_hw = Megatron FLOPs per token with the layout's recompute (``suite.mfu``:
            "full" re-runs the forward, 96 l h^2 (1 + s/6h + V/16lh); "selective" re-runs
            attention's softmax part, Korthikanti et al. 2022's form; "none" 72 l h^2 (...)).
  memory    the element-wise work of a layer (2 LayerNorms, 2 dropouts, 2 residual adds) reads
            and writes 14 b*s*h activations forward and 28 backward (2 bytes each) at HBM
            bandwidth; sequence parallelism shards it over the TP ranks (/ tp), full recompute
            repeats the forward's 14. The MLP's GELU (Megatron's fused bias + GELU) reads and
            writes the 4h hidden activations, which TP always splits: 8 b*s*h/tp forward, 12
            backward (gradient and saved input read, gradient written), 8 again under full
            recompute. Without flash attention the b*(a/tp)*s^2 attention
            scores are written and read too: 13 bytes per score forward (scores, softmax,
            dropout + mask, the AV GEMM's read), 23 backward; recompute repeats the 13.
  loss      the last stage's cross entropy over its b*s*V/tp logits in fp32 (the loss term
            below): 52 bytes per logit at HBM bandwidth.
  TP        4 collectives of b*s*h activations per layer (6 with full recompute: the recomputed
            forward repeats its 2), ring bytes 2(t-1)/t each, over NVLink; sequence parallelism
            turns each all-reduce into a reduce-scatter + all-gather: the same ring bytes
            (Korthikanti et al. 2022, Sec. 4.2.2), so only the memory term changes.
  PP        the b*s*h/tp slice sent at each of the v*p - 1 chunk boundaries, forward and
            backward, averaged over the p stages, over the network.
  slot      (GEMMs + memory + exposed TP + exposed PP) x (1 + straggler * ln(nodes)).
The iteration:
  slots     m + (p-1)/v (interleaved 1F1B bubble, Narayanan et al. 2021)
              + (v-1)(p-r)/v when r = m mod p > 0 and v > 1 (uneven bubble: the interleaved
              schedule runs micro-batches in groups of p; in the last group of r the first
              stage waits p - r chunk-steps at each of the v - 1 chunk changes, forward and
              backward);
  DP        gradient all-reduce (ring bytes 2(d-1)/d of the replica's N/(tp*pp) parameters at
            grad_bytes; the distributed optimizer below changes it), in buckets of 40M parameters
            (Megatron's DDP default), over the network at the NIC rate times the ranks of the
            group per node (dp_nic_sharing below); exposed = (1 - dp_overlap) of it, plus
            whatever of the overlapped part does not fit in the window the schedule leaves for
            it: one slot (the last micro-batch's backward hides the reduce-scatter, the first
            one's forward the all-gather) plus, interleaved, the other v - 1 chunks' work of
            one group of min(m, p) micro-batches (so the exposed part grows once micro-batches
            per replica drop below the stages);
  optimizer Adam over the GPU's N/(tp*pp) parameters (/ d with the distributed optimizer, which
            also turns the DP all-reduce into a gradient reduce-scatter and a 2-byte parameter
            all-gather), 36 bytes of HBM traffic per parameter (fp32 param, grad, two moments
            read and written, bf16 copy written);
  iteration = slots x slot + exposed DP + optimizer.
  MFU = tokens/s x F (no recompute) / (GPUs x peak); HFU counts F_hw.

The terms the earlier version lacked, each switchable (``Terms``), none fitted per row:
- latency: each collective also costs NCCL's latency model (src/graph/tuning.cc, Simple
  protocol): base 8.4 us + per ring step 3.4 us on NVLink, 9.6 us on the network; a ring
  all-reduce takes 2(n-1) steps, a tree 2 log2(nodes) network steps plus 2(ranks per node - 1)
  NVLink ones; NCCL picks the cheaper, so DP latency grows with log2 of the nodes;
- dp_window: the overlapped DP traffic only hides inside the window above;
- dp_nic_sharing: Megatron orders ranks TP fastest, then DP, so a node of g GPUs holds
  r = min(d, g/tp) ranks of one DP group. NCCL runs a ring channel per NIC and each ring leaves
  a node once, so those r ranks share r NICs for one network hop: per-rank DP rate
  min(r x NIC, NVLink), NVLink alone when the group fits in a node (NCCL's ring bus
  bandwidth, nccl-tests doc/PERFORMANCE.md), and DP latency over ceil(d / r) nodes. Off, every
  rank has its own NIC's rate only (right for TP = 8, where r = 1);
- uneven_bubble: the extra bubble when micro-batches are not a multiple of the stages;
- straggler: a synchronous step waits for the slowest node; with exponential-tailed per-node
  jitter the expected maximum over n nodes grows as H_n ~ ln n (order statistics), so each
  slot stretches by straggler * ln(nodes); ``straggler`` is a fitted number of the system;
- stage_imbalance: the last pipeline stage also runs the output layer (6 h V FLOPs per token),
  and 1F1B paces every stage at the slowest one (Narayanan et al. 2021, Sec. 3.1; Megatron-LM
  later added --decoder-last-pipeline-num-layers to rebalance it): a slot costs
  (F_hw - 6hV)/p + 6hV per token instead of F_hw/p;
- gemm_size (off by default): tile and wave quantization of each layer GEMM (output tiles of
  128 x 256 spread over the GPU's SMs in whole waves): q_tile = FLOP-weighted useful fraction
  of the tiles run. With it on, the 530B GEMMs of Figure 9 come out 9% more efficient than the
  175B ones the efficiency is fitted on, and Figure 9's MFU is over-predicted by 4-8 points:
  cuBLAS picks other tiles (and split-K) than this one shape, so the term stays off;
- memory, optimizer: the element-wise and optimizer HBM traffic above;
- loss: Megatron's vocab-parallel cross entropy (megatron/core/tensor_parallel/
  cross_entropy.py in core_r0.8.0; megatron/mpu/cross_entropy.py in the 2021 code, the same
  steps) is unfused: it casts the logits to fp32 (read 2 bytes, write 4), takes the max (read
  4), subtracts it in place (8), exponentiates in place (8), sums (4) and divides in place (8):
  38 bytes per logit forward; backward scales the saved softmax by the incoming gradient in
  place (8) and autograd casts the fp32 gradient back to the logits' 2 bytes (6): 14. Per
  micro-batch that is 52 b*s*V/tp bytes on the last stage, which 1F1B paces every stage at
  (spread over the stages, as its FLOPs are, with stage_imbalance off). It matters where V/tp
  is large against the layer work: the README's 1.7B on H100 (V = 131072 at TP 1) spends about
  8% of its time there; 175B at TP 8 well under 1%. Added in the third round, after the
  second's held-out errors (the 2021 and r0.8 cross-entropy code was read then); nothing in
  it is fitted. core_r0.8.0 has --cross-entropy-loss-fusion (off unless given; the README does
  not list it), which would cut these bytes; the model assumes the default;

Fitted, per system: ``gemm_efficiency`` and ``straggler`` (two numbers, ``fit_system``), from
the rows each system declares (``suite.scale_datasets.CALIBRATION``); no other row is read by
the fit. The straggler is fitted only from a scaling pair (one model and layout at two DP
sizes); two different models leave it at 0, since their difference is not only scale.
What each published run was (model, layout, overlaps) is in ``suite.scale_datasets``.

Hardware presets (``HARDWARE``), datasheet values: A100 SXM 80GB: bf16 312 TFLOP/s, HBM
2.0 TB/s, 108 SMs, NVLink 3 300 GB/s per direction; H100 SXM: 989 TFLOP/s, 3.35 TB/s, 132 SMs,
NVLink 4 450 GB/s; H200: 989 TFLOP/s, 4.8 TB/s, 132 SMs, 450 GB/s. 8 GPUs per node, one NIC
per GPU: 200 Gb/s HDR (25 GB/s) on A100 clusters, 400 Gb/s NDR (50 GB/s) on H100/H200 ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from math import ceil, log, log2
from numbers import Integral, Real
from typing import Literal

from suite.mfu import megatron_flops_per_token

Recompute = Literal["none", "selective", "full"]
RECOMPUTE = ("none", "selective", "full")
# Element-wise HBM traffic of one layer per token, in units of h activations: forward reads and
# writes for 2 LayerNorms (2 x 2), 2 dropouts (2 x 2) and 2 residual adds (2 x 3) = 14;
# backward about twice that.
ELEMENTWISE_FWD, ELEMENTWISE_BWD = 14, 28
# The MLP's GELU on its 4h hidden activations (always split over the TP ranks: the first MLP
# GEMM is column-parallel), in units of h per token: the forward (Megatron's fused bias + GELU)
# reads 4h and writes 4h; the backward reads the incoming gradient and the saved input and
# writes the gradient: 12.
GELU_FWD, GELU_BWD = 8, 12
# Megatron's unfused vocab-parallel cross entropy, bytes per logit (b x s x V/tp, fp32 math):
# forward cast to fp32 (2 + 4), max (4), in-place subtract (8), exp (8), sum (4), divide (8);
# backward the in-place scale by the loss gradient (8) and the cast back to 2 bytes (4 + 2).
LOSS_FWD, LOSS_BWD = 38, 14
# Bytes per attention-score element (b x heads x s x s, 2-byte activations) when the scores are
# materialized (no flash attention): forward writes the scores, the fused softmax reads them and
# writes probabilities, dropout reads and writes them (+ a 1-byte mask), the AV GEMM reads
# them: 13; backward about 23 (gradients through the same ops, probabilities read again).
SCORES_FWD, SCORES_BWD = 13, 23
ADAM_BYTES_PER_PARAM = 36
DP_BUCKET_PARAMS = 40_000_000
# NCCL's latency model (src/graph/tuning.cc), Simple protocol, in seconds.
NCCL_BASE_LATENCY = 8.4e-6
TILE_M, TILE_N = 128, 256


def _check_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise ValueError(f"{name}={value!r} must be a positive number")


def _check_fraction(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value <= 1:
        raise ValueError(f"{name}={value!r} must be a fraction in [0, 1]")


@dataclass(frozen=True)
class ModelConfig:
    """A GPT as the Megatron FLOP formula sees it (MHA, GELU MLP of 4h)."""
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    activation_bytes: int = 2
    tied_embeddings: bool = True

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "activation_bytes"):
            _check_positive_int(name, getattr(self, name))
        if not isinstance(self.tied_embeddings, bool):
            raise ValueError(f"tied_embeddings={self.tied_embeddings!r} must be a bool")

    @property
    def flops_per_token(self) -> float:
        """Model FLOPs per token (no recompute): what MFU counts."""
        return megatron_flops_per_token(self.layers, self.hidden, self.seq_len, self.vocab)

    def hardware_flops_per_token(self, recompute: Recompute) -> float:
        """FLOPs the GPUs run per token with this recompute: what HFU counts."""
        return megatron_flops_per_token(self.layers, self.hidden, self.seq_len, self.vocab,
                                        recompute)

    @property
    def n_params(self) -> float:
        """Weights and biases of the layers plus token and position embeddings, and the output
        head's V x h when it is not tied to the token embedding."""
        l, h = self.layers, self.hidden
        head = 0 if self.tied_embeddings else self.vocab * h
        return float(12 * l * h * h + 13 * l * h + (self.vocab + self.seq_len) * h + head)


@dataclass(frozen=True)
class Hardware:
    """Per-GPU peak and bandwidths (bytes/s, one direction); efficiency = achieved / peak.

    ``gemm_efficiency`` and ``straggler`` are the two numbers fitted per system; the rest are
    datasheet values and NCCL's latency constants."""
    peak_flops: float
    gemm_efficiency: float
    nvlink_bw: float
    network_bw: float
    gpus_per_node: int = 8
    hbm_bw: float = 2.039e12
    sms: int = 108
    nvlink_latency_s: float = 3.4e-6
    network_latency_s: float = 9.6e-6
    straggler: float = 0.0

    def __post_init__(self) -> None:
        for name in ("peak_flops", "nvlink_bw", "network_bw", "hbm_bw", "nvlink_latency_s",
                     "network_latency_s"):
            _check_positive(name, getattr(self, name))
        _check_positive("gemm_efficiency", self.gemm_efficiency)
        if self.gemm_efficiency > 1:
            raise ValueError(f"gemm_efficiency={self.gemm_efficiency!r} must be in (0, 1]")
        _check_positive_int("gpus_per_node", self.gpus_per_node)
        _check_positive_int("sms", self.sms)
        if isinstance(self.straggler, bool) or not isinstance(self.straggler, Real) or \
                self.straggler < 0:
            raise ValueError(f"straggler={self.straggler!r} must be a number >= 0")


@dataclass(frozen=True)
class Layout:
    """3D-parallel layout, recompute, sequence parallelism, and how much of each
    communication kind hides behind compute."""
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
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    flash_attention: bool = False
    distributed_optimizer: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "micro_batch", "global_batch", "virtual_stages",
                     "grad_bytes"):
            _check_positive_int(name, getattr(self, name))
        for name in ("tp_overlap", "pp_overlap", "dp_overlap"):
            _check_fraction(name, getattr(self, name))
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute={self.recompute!r} is not one of {RECOMPUTE}")
        for name in ("sequence_parallel", "flash_attention", "distributed_optimizer"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be a bool")
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


@dataclass(frozen=True)
class Terms:
    """Which of the model's terms are on; each can be switched off to see what it adds."""
    latency: bool = True
    dp_window: bool = True
    dp_nic_sharing: bool = True
    uneven_bubble: bool = True
    straggler: bool = True
    gemm_size: bool = False
    stage_imbalance: bool = True
    memory: bool = True
    loss: bool = True
    optimizer: bool = True

    @classmethod
    def none(cls) -> "Terms":
        """Only compute, bubble and bandwidth-bound communication (the earlier model)."""
        return cls(**{f.name: False for f in fields(cls)})


ALL_TERMS = Terms()


@dataclass(frozen=True)
class Estimate:
    """One iteration, broken down; the *_s parts sum to ``iteration_time_s``."""
    iteration_time_s: float
    tokens_per_s: float
    mfu: float  # fraction, model FLOPs
    hfu: float  # fraction, FLOPs run (with recompute)
    compute_s: float  # GEMMs and element-wise work of the m micro-batches
    bubble_s: float
    tp_exposed_s: float
    pp_exposed_s: float
    dp_exposed_s: float
    sync_s: float  # the straggler stretch of every slot
    optimizer_s: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)


def bubble_fraction(pp: int, virtual_stages: int, micro_batches: int) -> float:
    """Idle time of the interleaved 1F1B schedule relative to the ideal: (p-1)/(v m)."""
    for name, value in (("pp", pp), ("virtual_stages", virtual_stages),
                        ("micro_batches", micro_batches)):
        _check_positive_int(name, value)
    return (pp - 1) / (virtual_stages * micro_batches)


def uneven_bubble_slots(pp: int, virtual_stages: int, micro_batches: int) -> float:
    """Extra idle slots of the interleaved schedule when m is not a multiple of p:
    (v-1)(p-r)/v with r = m mod p (0 when r = 0 or v = 1)."""
    for name, value in (("pp", pp), ("virtual_stages", virtual_stages),
                        ("micro_batches", micro_batches)):
        _check_positive_int(name, value)
    r = micro_batches % pp
    if r == 0 or virtual_stages == 1:
        return 0.0
    return (virtual_stages - 1) * (pp - r) / virtual_stages


def ring_factor(n: int) -> float:
    """Bytes each rank sends per byte of an all-reduce (= reduce-scatter + all-gather) on a
    ring of n ranks: 2(n-1)/n."""
    _check_positive_int("n", n)
    return 2 * (n - 1) / n


def ring_latency(ranks: int, nodes: int, hw: Hardware) -> float:
    """NCCL's ring all-reduce latency: base + 2(ranks-1) steps, 2(nodes-1) of them over the
    network and the rest over NVLink."""
    _check_positive_int("ranks", ranks)
    _check_positive_int("nodes", nodes)
    if ranks == 1:
        return 0.0
    steps, net_steps = 2 * (ranks - 1), 2 * (nodes - 1)
    return (NCCL_BASE_LATENCY + net_steps * hw.network_latency_s
            + (steps - net_steps) * hw.nvlink_latency_s)


def tree_latency(ranks: int, nodes: int, hw: Hardware) -> float:
    """NCCL's tree all-reduce latency: base + up and down a tree of log2(nodes) network hops,
    with the ranks of a node chained over NVLink."""
    _check_positive_int("ranks", ranks)
    _check_positive_int("nodes", nodes)
    if ranks == 1:
        return 0.0
    per_node = ranks / nodes
    return NCCL_BASE_LATENCY + 2 * (log2(nodes) * hw.network_latency_s
                                    + (per_node - 1) * hw.nvlink_latency_s)


def allreduce_latency(ranks: int, nodes: int, hw: Hardware) -> float:
    """The cheaper of ring and tree, as NCCL's tuner picks for latency-bound sizes."""
    return min(ring_latency(ranks, nodes, hw), tree_latency(ranks, nodes, hw))


def tile_efficiency(m: int, n: int, sms: int) -> float:
    """Useful fraction of an M x N GEMM output computed as 128 x 256 tiles in whole waves over
    ``sms`` multiprocessors."""
    tiles = ceil(m / TILE_M) * ceil(n / TILE_N)
    waves = ceil(tiles / sms)
    return m * n / (waves * sms * TILE_M * TILE_N)


def gemm_size_factor(model: ModelConfig, layout: Layout, hw: Hardware) -> float:
    """FLOP-weighted tile/wave efficiency of a layer's four GEMMs (QKV, attention output,
    MLP up, MLP down) on this TP split; 1 means perfectly tiled."""
    m, h, t = layout.micro_batch * model.seq_len, model.hidden, layout.tp
    gemms = [(3 * h // t, h), (h, h // t), (4 * h // t, h), (h, 4 * h // t)]  # (N, K)
    flops = [n * k for n, k in gemms]
    return sum(f * tile_efficiency(m, n, hw.sms) for f, (n, _) in zip(flops, gemms)) / sum(flops)


def stage_flops_per_token(model: ModelConfig, layout: Layout, imbalance: bool = True) -> float:
    """FLOPs per token of the pipeline's slowest stage (all TP ranks together).

    The output layer's logits GEMM (6 h V per token, forward and backward, never recomputed:
    the V terms of Narayanan et al.'s closed forms) runs on the last stage on top of its
    layers / pp share; 1F1B runs every stage at the slowest one's pace. Without ``imbalance``
    the FLOPs are spread evenly over the stages, as the earlier model did.
    """
    total = model.hardware_flops_per_token(layout.recompute)
    if not imbalance or layout.pp == 1:
        return total / layout.pp
    logits = 6 * model.hidden * model.vocab
    return (total - logits) / layout.pp + logits


def tp_collectives_per_layer(recompute: Recompute) -> int:
    """TP collectives per layer and micro-batch: 2 forward + 2 backward, and the recomputed
    forward's 2 again under full recompute."""
    return 6 if recompute == "full" else 4


def tp_bytes_per_microbatch(model: ModelConfig, layout: Layout) -> float:
    """Bytes a GPU sends for TP per micro-batch in its stage (same with sequence parallelism:
    reduce-scatter + all-gather move the all-reduce's bytes)."""
    activation = layout.micro_batch * model.seq_len * model.hidden * model.activation_bytes
    return (tp_collectives_per_layer(layout.recompute) * (model.layers / layout.pp)
            * ring_factor(layout.tp) * activation)


def pp_bytes_per_microbatch(model: ModelConfig, layout: Layout) -> float:
    """Bytes a GPU sends point-to-point per micro-batch, averaged over stages.

    v*p - 1 chunk boundaries, each crossed forward (activations) and backward (gradients);
    each TP rank sends its 1/tp slice.
    """
    if layout.pp == 1:
        return 0.0
    boundaries = layout.virtual_stages * layout.pp - 1
    activation = layout.micro_batch * model.seq_len * model.hidden * model.activation_bytes
    return 2 * boundaries / layout.pp * activation / layout.tp


def dp_bytes_per_iteration(model: ModelConfig, layout: Layout) -> float:
    """Bytes a GPU sends for DP per iteration: an all-reduce of the gradients (ring factor
    2(d-1)/d at grad_bytes), or with the distributed optimizer a reduce-scatter of the
    gradients at grad_bytes and an all-gather of the updated parameters at the activations'
    2 bytes ((d-1)/d each)."""
    local = model.n_params / (layout.tp * layout.pp)
    if layout.distributed_optimizer:
        return (layout.dp - 1) / layout.dp * local * (layout.grad_bytes + model.activation_bytes)
    return ring_factor(layout.dp) * local * layout.grad_bytes


def dp_ranks_per_node(layout: Layout, hw: Hardware) -> int:
    """Ranks of one DP group on one node: Megatron orders ranks TP fastest, then DP, so a
    node of g GPUs holds g / tp consecutive DP ranks of one stage (all of them if fewer)."""
    return max(1, min(layout.dp, hw.gpus_per_node // layout.tp))


def dp_bandwidth(layout: Layout, hw: Hardware, ranks_per_node: int = 1) -> float:
    """Bytes/s at which one rank's DP ring traffic moves when ``ranks_per_node`` ranks of the
    group share a node (one NIC each). NCCL runs a ring channel per NIC and a ring leaves each
    node once, so the node's r ranks share r NICs for one network hop: r x the NIC rate per
    rank, capped by NVLink, which carries the hops inside the node; a group inside one node
    is NVLink only. r = 1 (TP = 8, or the term off): the NIC rate."""
    _check_positive_int("ranks_per_node", ranks_per_node)
    if ranks_per_node == 1:
        return hw.network_bw
    if ranks_per_node >= layout.dp:
        return hw.nvlink_bw
    return min(ranks_per_node * hw.network_bw, hw.nvlink_bw)


def elementwise_bytes_per_microbatch(model: ModelConfig, layout: Layout) -> float:
    """HBM bytes of a stage's memory-bound work per micro-batch on one GPU: LayerNorm, dropout
    and residual adds on b*s*h activations (sharded over TP by sequence parallelism), the
    GELU on the b*s*4h/tp MLP activations (always split over TP), and,
    without flash attention, the materialized attention scores of the GPU's heads. Full
    recompute repeats the forward part; selective recompute repeats the scores' forward."""
    layers = model.layers / layout.pp
    forward_runs = 2 if layout.recompute == "full" else 1
    shard = layout.tp if layout.sequence_parallel else 1
    units = ((ELEMENTWISE_FWD * forward_runs + ELEMENTWISE_BWD) / shard
             + (GELU_FWD * forward_runs + GELU_BWD) / layout.tp)
    tokens = layout.micro_batch * model.seq_len
    activations = units * tokens * model.hidden * model.activation_bytes * layers
    if layout.flash_attention:
        return activations
    scores = (layout.micro_batch * (model.heads / layout.tp) * model.seq_len ** 2 * layers
              * (SCORES_FWD * (1 if layout.recompute == "none" else 2) + SCORES_BWD))
    return activations + scores


def loss_bytes_per_microbatch(model: ModelConfig, layout: Layout) -> float:
    """HBM bytes of the cross entropy on the last stage per micro-batch on one GPU: its
    b*s*V/tp logits (the output layer is vocab-parallel over TP) at 52 bytes each."""
    logits = layout.micro_batch * model.seq_len * model.vocab / layout.tp
    return (LOSS_FWD + LOSS_BWD) * logits


@dataclass(frozen=True)
class _Parts:
    """Per-GPU times: one slot's parts, and the once-per-iteration ones."""
    slots: float
    gemm: float  # at gemm_efficiency 1
    memory: float
    tp: float
    pp: float
    dp: float  # all of the DP traffic (before overlap)
    optimizer: float
    nodes: int


def _parts(model: ModelConfig, hw: Hardware, layout: Layout, terms: Terms) -> _Parts:
    if layout.tp > hw.gpus_per_node:
        raise ValueError(f"tp={layout.tp} spans nodes; the model puts TP on NVLink, so tp must "
                         f"be <= gpus_per_node={hw.gpus_per_node}")
    if model.layers % layout.pp:
        raise ValueError(f"layers={model.layers} is not a multiple of pp={layout.pp}")
    nodes = max(1, ceil(layout.gpus / hw.gpus_per_node))
    layers = model.layers / layout.pp
    flops = (stage_flops_per_token(model, layout, terms.stage_imbalance) * layout.micro_batch
             * model.seq_len / layout.tp)
    q = gemm_size_factor(model, layout, hw) if terms.gemm_size else 1.0
    gemm = flops / (hw.peak_flops * q)
    memory = (elementwise_bytes_per_microbatch(model, layout) / hw.hbm_bw
              if terms.memory else 0.0)
    if terms.loss:  # on the last stage, the slowest; spread over the stages without imbalance
        spread = 1 if terms.stage_imbalance else layout.pp
        memory += loss_bytes_per_microbatch(model, layout) / spread / hw.hbm_bw
    tp = tp_bytes_per_microbatch(model, layout) / hw.nvlink_bw
    if terms.latency and layout.tp > 1:
        tp += (tp_collectives_per_layer(layout.recompute) * layers
               * ring_latency(layout.tp, 1, hw))
    pp = pp_bytes_per_microbatch(model, layout) / hw.network_bw
    if terms.latency and layout.pp > 1:
        pp += 2 * (layout.virtual_stages * layout.pp - 1) / layout.pp * (
            NCCL_BASE_LATENCY + hw.network_latency_s)
    local_params = model.n_params / (layout.tp * layout.pp)
    per_node = dp_ranks_per_node(layout, hw) if terms.dp_nic_sharing else 1
    dp = dp_bytes_per_iteration(model, layout) / dp_bandwidth(layout, hw, per_node)
    if terms.latency and layout.dp > 1:
        dp_nodes = min(layout.dp, nodes) if per_node == 1 else ceil(layout.dp / per_node)
        dp += ceil(local_params / DP_BUCKET_PARAMS) * allreduce_latency(layout.dp, dp_nodes, hw)
    shard = layout.dp if layout.distributed_optimizer else 1
    optimizer = (local_params / shard * ADAM_BYTES_PER_PARAM / hw.hbm_bw
                 if terms.optimizer else 0.0)
    m = layout.micro_batches
    slots = m + (layout.pp - 1) / layout.virtual_stages
    if terms.uneven_bubble:
        slots += uneven_bubble_slots(layout.pp, layout.virtual_stages, m)
    return _Parts(slots, gemm, memory, (1 - layout.tp_overlap) * tp,
                  (1 - layout.pp_overlap) * pp, dp, optimizer, nodes)


def _straggle(hw: Hardware, nodes: int, terms: Terms) -> float:
    return 1 + hw.straggler * log(nodes) if terms.straggler else 1.0


def estimate(model: ModelConfig, hw: Hardware, layout: Layout,
             terms: Terms = ALL_TERMS) -> Estimate:
    """Iteration time, throughput, MFU and the breakdown of one layout on one machine."""
    p = _parts(model, hw, layout, terms)
    m = layout.micro_batches
    work = p.gemm / hw.gemm_efficiency + p.memory + p.tp + p.pp
    stretch = _straggle(hw, p.nodes, terms)
    dp_exposed = (1 - layout.dp_overlap) * p.dp
    if terms.dp_window and layout.dp_overlap > 0:
        window = work * (1 + min(m, layout.pp) * (layout.virtual_stages - 1)
                         / layout.virtual_stages)
        dp_exposed += max(0.0, layout.dp_overlap * p.dp - window)
    time = p.slots * work * stretch + dp_exposed + p.optimizer
    tokens_per_s = layout.global_batch * model.seq_len / time
    mfu = tokens_per_s * model.flops_per_token / (layout.gpus * hw.peak_flops)
    hfu = (tokens_per_s * model.hardware_flops_per_token(layout.recompute)
           / (layout.gpus * hw.peak_flops))
    parts = {"compute_s": m * (p.gemm / hw.gemm_efficiency + p.memory),
             "bubble_s": (p.slots - m) * work, "tp_exposed_s": m * p.tp,
             "pp_exposed_s": m * p.pp, "dp_exposed_s": dp_exposed,
             "sync_s": p.slots * work * (stretch - 1), "optimizer_s": p.optimizer}
    return Estimate(iteration_time_s=time, tokens_per_s=tokens_per_s, mfu=mfu, hfu=hfu,
                    **parts, breakdown=parts)


def fit_efficiency(model: ModelConfig, hw: Hardware, layout: Layout,
                   iteration_time_s: float, terms: Terms = ALL_TERMS) -> float:
    """The GEMM efficiency at which ``estimate`` gives the measured iteration time (the
    straggler constant held at ``hw.straggler``).

    Time is affine in 1/efficiency (the DP window aside, which the fit checks), so the fit is
    closed-form.
    """
    _check_positive("iteration_time_s", iteration_time_s)
    p = _parts(model, hw, layout, terms)
    stretch = _straggle(hw, p.nodes, terms)
    fixed = (1 - layout.dp_overlap) * p.dp + p.optimizer
    left_for_gemms = (iteration_time_s - fixed) / (p.slots * stretch) - p.memory - p.tp - p.pp
    if left_for_gemms <= 0:
        raise ValueError(f"iteration_time_s={iteration_time_s} is shorter than the modelled "
                         "communication and memory traffic alone; no efficiency fits")
    eff = p.gemm / left_for_gemms
    if eff > 1:
        raise ValueError(f"iteration_time_s={iteration_time_s} needs gemm_efficiency={eff:.3f} "
                         "> 1; the model's communication or FLOP count is off")
    fitted = replace(hw, gemm_efficiency=eff)
    if abs(estimate(model, fitted, layout, terms).iteration_time_s - iteration_time_s) > \
            1e-6 * iteration_time_s:
        raise ValueError("the DP window binds at this calibration row; fit a row where the "
                         "overlapped DP traffic fits its window")
    return eff


def fit_system(rows: list[tuple[ModelConfig, Layout, float]], hw: Hardware,
               terms: Terms = ALL_TERMS) -> tuple[float, float]:
    """(gemm_efficiency, straggler) fitted to one or two rows (model, layout, iteration time).

    Two rows of one model and layout at different node counts (a scaling pair: only DP and
    the batch differ): the pair that reproduces both exactly. Where that needs a negative
    straggler (the larger run relatively faster than the model allows), the straggler is 0 and
    the efficiency the one that minimises the rows' squared relative errors. Rows of two
    models or layouts cannot tell a straggler from whatever else differs between them (a
    TP split, a GEMM shape), so they fit the efficiency alone, as one row or the straggler term
    off do.
    """
    if not 1 <= len(rows) <= 2:
        raise ValueError(f"{len(rows)} calibration rows: a system fits one or two")
    if len(rows) == 1 or not terms.straggler or not is_scaling_pair(rows[0][:2], rows[1][:2]):
        return _least_squares_efficiency(rows, replace(hw, straggler=0.0), terms), 0.0
    from scipy.optimize import brentq

    (m1, l1, t1), (m2, l2, t2) = rows

    def mismatch(sigma: float) -> float:
        h = replace(hw, straggler=sigma)
        try:
            eff = fit_efficiency(m1, h, l1, t1, terms)
        except ValueError:  # sigma so large that the first row leaves no time for GEMMs
            return t2
        return estimate(m2, replace(h, gemm_efficiency=eff), l2, terms).iteration_time_s - t2

    if mismatch(0.0) >= 0:
        return _least_squares_efficiency(rows, replace(hw, straggler=0.0), terms), 0.0
    hi = 0.5
    while mismatch(hi) < 0:
        hi *= 2
        if hi > 16:
            raise ValueError("no straggler constant up to 16 fits the calibration rows")
    sigma = brentq(mismatch, 0.0, hi, xtol=1e-12)
    return fit_efficiency(m1, replace(hw, straggler=sigma), l1, t1, terms), sigma


def is_scaling_pair(a: tuple[ModelConfig, Layout], b: tuple[ModelConfig, Layout]) -> bool:
    """Whether two (model, layout) differ only in scale: the same model and layout but for DP
    and the global batch, at different DP."""
    (model_a, lay_a), (model_b, lay_b) = a, b
    return (model_a == model_b and lay_a.dp != lay_b.dp
            and replace(lay_a, dp=1, global_batch=lay_a.micro_batch)
            == replace(lay_b, dp=1, global_batch=lay_b.micro_batch))


def _least_squares_efficiency(rows: list[tuple[ModelConfig, Layout, float]], hw: Hardware,
                              terms: Terms) -> float:
    """The efficiency minimising the rows' squared relative time errors (exact for one row)."""
    if len(rows) == 1:
        model, layout, time = rows[0]
        return fit_efficiency(model, hw, layout, time, terms)
    from scipy.optimize import minimize_scalar

    def loss(eff: float) -> float:
        h = replace(hw, gemm_efficiency=eff)
        return sum(((estimate(m, h, lay, terms).iteration_time_s - t) / t) ** 2
                   for m, lay, t in rows)

    best = minimize_scalar(loss, bounds=(1e-3, 1.0), method="bounded",
                           options={"xatol": 1e-9})
    return float(best.x)


# --- hardware presets (datasheet; see the module docstring) ----------------------------------

# gemm_efficiency and straggler here are placeholders: a system's fit replaces them.
A100_CLUSTER = Hardware(peak_flops=312e12, gemm_efficiency=1.0, nvlink_bw=300e9,
                        network_bw=25e9, gpus_per_node=8, hbm_bw=2.039e12, sms=108)
H100_CLUSTER = Hardware(peak_flops=989e12, gemm_efficiency=1.0, nvlink_bw=450e9,
                        network_bw=50e9, gpus_per_node=8, hbm_bw=3.35e12, sms=132)
H200_CLUSTER = Hardware(peak_flops=989e12, gemm_efficiency=1.0, nvlink_bw=450e9,
                        network_bw=50e9, gpus_per_node=8, hbm_bw=4.8e12, sms=132)
HARDWARE = {"A100": A100_CLUSTER, "H100": H100_CLUSTER, "H200": H200_CLUSTER}
