"""GPU presets for the cluster-scale model: datasheet numbers, the GEMM library's tiles, and the
two numbers a system fits (``gemm_efficiency``, ``straggler``).

Sources: NVIDIA A100 Tensor Core GPU datasheet (bf16 dense 312 TFLOP/s; HBM2e 2,039 GB/s for
the 80 GB SXM part, HBM2 1,555 GB/s for the 40 GB; NVLink 3 600 GB/s both directions; 108 SMs,
"NVIDIA A100 Tensor Core GPU Architecture" whitepaper); NVIDIA H100 datasheet (SXM5: bf16
dense 989 TFLOP/s, HBM3 3.35 TB/s, 80 GB, NVLink 4 900 GB/s both directions; 132 SMs, "NVIDIA
H100 Tensor Core GPU Architecture" whitepaper); NVIDIA H200 datasheet (the H100's compute,
HBM3e 4.8 TB/s, 141 GB). Networks: DGX A100 / SuperPOD nodes carry 8 x 200 Gb/s HDR
InfiniBand (25 GB/s per GPU), DGX H100 / H200 nodes 8 x 400 Gb/s NDR (50 GB/s per GPU).
NVLink at the link rate. NCCL's own topology model takes 80% of it (src/graph/topo.h:
``SM80_NVLINK_BW`` 20 GB/s of an A100 link's 25, ``SM90_NVLINK_BW`` 20.6 of an H100's;
NVIDIA/nccl#1054), and nccl-tests' all-reduce on 8 A100s reports 200-235 GB/s busbw. Priced
at NCCL's rate (240 and 371 GB/s), Korthikanti et al.'s Table 4, which times a 22B layer's
forward (its TP all-reduces exposed) and backward (hidden) apart, fits worse: its ten passes
from 1.4% to 2.2% mean error, every forward 1.6-2.9% too slow; their iterations (5.3 -> 3.9%)
and BLOOM's search (Spearman 0.20 -> 0.37) fit better, Narayanan's worse (3.5 -> 4.4%). With
the one direct measurement of exposed TP against it, the link rate stays.
Latencies: NCCL's tuning model (src/graph/tuning.cc, Simple protocol).

HBM: the datasheet bandwidth is the interface's peak, which no kernel reaches. Every HBM-bound
time (element-wise kernels, the loss, the optimizer, FSDP's copies, a thin GEMM's roofline) is
priced at ``hbm_efficiency`` of it, 0.88 on every preset: a read kernel on an A100-80GB SXM
reaches 1.80 TB/s of the 2.04, 88% by Nsight Compute's count too, and the best kernel of an NVIDIA
GTC talk about 90% (NVIDIA developer forums, "Trouble to Reach Peak Bandwidth of A100");
on H100 SXM torchao's quantization kernels, streaming bf16 in and fp8 out, reach 2.63-2.79 of
the 3.35 TB/s (79-83%; pytorch/ao benchmarks/prototype/blockwise_fp8_training, 2026-03), and its
roofline model takes 92% for large Triton point-wise kernels on Meta's 2.4 TB/s H100 variant
(torchao/testing/training/roofline_utils.py, ``pct_achievable_mem_bw``). One value, measured on a
listed GPU, not fitted; ``seedbench gpu-check``'s hbm_bandwidth step measures it on the GPU it
runs on. Memory capacity is unaffected.

A fabric whose NCCL transport falls short of the NICs' line rate is described by what it was
measured to do, ``network_busbw``: the bus bandwidth of an all-reduce across nodes at large
messages (nccl-tests' busbw; the rate of each link of the ring). It caps every transfer that
crosses nodes, per communicator, below the NIC figure; on InfiniBand clusters the measurement is
about the nodes' NIC sum and the cap never binds. BigScience measured 40.8 Gb/s (5.1 GB/s) on
Jean Zay's A100 nodes, whose 4 x 100 Gb/s Omni-Path links promise 50 GB/s per node
(bigscience-workshop/bigscience, experiments/bandwidth/all_reduce_bench-a100-n4.txt: 32 ranks on
4 nodes, 4 GB fp32, NCCL 2.10.3, the version BLOOM trained with).

GEMM tiles: NVIDIA's "Matrix Multiplication Background" guide (DU-09799-001, Sec. 2.3) lists
cuBLAS's tensor-core tiles (256x128, 128x256, 128x128, ... 64x64) and says the large ones are
the efficient choice for large GEMMs; the model takes the two 32K-element tiles and lets the
library pick whichever wastes less. The K step (64 bf16 elements) and the software pipeline's
depth are CUTLASS's defaults for bf16 tensor-op GEMMs: 3 stages on sm80
(include/cutlass/gemm/device/default_gemm_configuration.h), 4 on sm90 (the collective builder's
stage count at this tile with 228 KB of shared memory).

FlashAttention's throughput (fraction of peak, head dimension 128, causal, as training runs it)
depends on the sequence: each block of query rows pays a fixed overhead besides its keys (loading
Q, writing O and its statistics; in the backward the preprocessing of dO and O, the conversion of
dQ's fp32 accumulator, the diagonal blocks the causal mask half wastes), which a long sequence
amortizes and a short one does not. So the fraction at sequence s is

  f(s) = f_inf (s/2) / (s/2 + K0)

(s/2: the keys a causal query row sees on average; K0 the overhead in keys), the form of the GEMM
model's short-K term (``suite.scale.gemm``). The lent H200's attention_kernels step
(``results/published/1x-nvidia-h200/gpu-check/attention_kernels.json``: 2k, 8k and 32k tokens)
gives it for both kernels it measured, within 0.01 at every length (a test re-fits them):
FlashAttention-2 (SDPA's flash backend) f_inf 0.34 / 0.33 forward / backward, K0 110 / 470;
cuDNN's fused attention 0.66 / 0.55, K0 240 / 300. Per kernel kind
(``suite.scale.layout.ATTENTION``), f_inf and K0:
- ``flash2``, FlashAttention-2: on A100 f_inf up to 73% forward, 63% backward (Dao 2023, arXiv
  2307.08691, Sec. 4.1, its longest sequences); on H100/H200 the H200's 34% / 33% (the
  FlashAttention-3 paper's benchmarks of it, Shah et al. 2024, arXiv 2407.08608, about 35% /
  30%). K0 the H200's on every GPU: the same kernel, whose overheads are work of the same kind
  as its main loop.
- ``flash``, the architecture's best kernel: FlashAttention-2 on Ampere; on Hopper the kernels
  written for it (FlashAttention-3: up to 75% forward in bf16, about half the peak backward,
  non-causal; cuDNN's fused attention, which Transformer Engine runs, on par in that paper's
  Fig. 5/6), at cuDNN's measured causal f_inf and K0. (75% forward at any length until the
  twelfth round; then the H200's median over the three lengths, 63% / 50%, until the
  fourteenth.)
- ``flash1``, the generation before FlashAttention-2 (FlashAttention-1, and the Triton kernel of
  its time, ``flash_attn_triton``, that llm-foundry runs as ``attn_impl: triton``): half of
  FlashAttention-2's f_inf on the same GPU, its K0. Dao 2023 measures FlashAttention-2 "around
  2x faster" than FlashAttention-1, and 1.3-1.5x (forward) and 2x (backward) faster than
  FlashAttention in Triton, on A100 (Sec. 4.1). Neither generation has Hopper's instructions
  (wgmma, TMA), so the ratio is taken to hold on Hopper too.

A collective that runs beside compute takes SMs from it: NCCL runs one CTA per channel, and a
cuBLAS/CUTLASS GEMM CTA at these tiles fills most of an SM's shared memory, so the two do not
share an SM and the compute runs on the SMs the channels leave. The channels a ring collective
holds, from NCCL 2.18's topology search (src/graph/search.cc, ``ncclTopoCompute``; its
connect.cc, ``ncclTopoPostset``, doubles whatever the search found):
- within a DGX/HGX node, ``nccl_channels_node``: rings at the first speed of the intra-node array
  (40 GB/s sm80, 60 sm90) fill the NVLink rate NCCL assigns (12 x 20 GB/s on A100, 18 x 20 on
  H100): 6 channels; ``ncclTopoCompute`` duplicates them (bwIntra >= 25, and >= 50 on sm90): 12;
  the postset doubles: 24.
- across nodes with one NIC per GPU, ``nccl_channels_network``: one ring per NIC at the first
  inter-node speed the NIC carries (24 GB/s HDR on A100, 48 NDR on H100): 8 channels, which
  ``ncclTopoCompute`` leaves (bwIntra < 25; on sm90 bwIntra < 50 with more than 4 channels) and
  the postset doubles: 16.
So compute beside a collective inside a node loses 24/108 = 22% (A100) or 24/132 = 18% (H100)
of its rate, across nodes 15% or 12%. Lee et al. measure compute beside communication 18.9%
slower on average, 40% at most, on 4 A100s and H100s ("Characterizing Compute-Communication
Overlap in GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114). Not priced: the HBM
the collective moves (2-3x its rate, NCCL's maintainer in NVIDIA/nccl#1428) and the last wave of
a GEMM whose tiles no longer fit the SMs that are left.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from numbers import Integral, Real

from suite.scale.checks import check_positive, check_positive_int
from suite.scale.layout import FLASH_KINDS

FA2_K0 = (110.0, 470.0)  # FlashAttention-2's overhead in keys, forward and backward (H200)
CUDNN_K0 = (240.0, 300.0)  # cuDNN's fused attention's (H200)
GiB = 1024 ** 3  # "80 GB" A100s and H100s hold 80 GiB of HBM; the H200's 141 GB are decimal


@dataclass(frozen=True)
class Hardware:
    """Per-GPU peak and bandwidths (bytes/s, one direction) and the cluster's node shape.

    ``gemm_efficiency`` (the ceiling a system's GEMMs reach at a perfectly tiled, deep shape)
    and ``straggler`` are the two numbers fitted per system; the rest are datasheet values."""
    name: str
    peak_flops: float
    nvlink_bw: float
    network_bw: float
    hbm_bw: float
    hbm_bytes: float
    sms: int
    tiles: tuple[tuple[int, int], ...] = ((128, 256), (256, 128), (128, 128))
    k_step: int = 64
    pipeline_stages: int = 3
    flash_fwd: float = 0.73  # f_inf of each tiled kernel kind, forward and backward
    flash_bwd: float = 0.63
    flash2_fwd: float = 0.73
    flash2_bwd: float = 0.63
    flash1_fwd: float = 0.365
    flash1_bwd: float = 0.315
    flash_k0: tuple[float, float] = FA2_K0  # (forward, backward) overhead in keys: K0
    flash2_k0: tuple[float, float] = FA2_K0
    flash1_k0: tuple[float, float] = FA2_K0
    gpus_per_node: int = 8
    nccl_channels_node: int = 24  # CTAs (SMs) a ring collective holds within a node
    nccl_channels_network: int = 16  # ... and across nodes (one NIC per GPU)
    nvlink_latency_s: float = 3.4e-6
    network_latency_s: float = 9.6e-6
    network_busbw: float | None = None  # measured cross-node all-reduce busbw; None: NIC rate
    hbm_efficiency: float = 0.88  # the fraction of hbm_bw streaming kernels reach
    gemm_efficiency: float = 1.0
    straggler: float = 0.0

    @property
    def hbm_rate(self) -> float:
        """Bytes/s an HBM-bound kernel moves: ``hbm_bw`` x ``hbm_efficiency``."""
        return self.hbm_bw * self.hbm_efficiency

    def collective_sm_share(self, nodes: int) -> float:
        """The fraction of the SMs a ring collective over ``nodes`` nodes holds while it runs,
        which the compute beside it loses (all of them on a GPU with no more SMs than
        channels: hiding then buys nothing)."""
        check_positive_int("nodes", nodes)
        channels = self.nccl_channels_network if nodes > 1 else self.nccl_channels_node
        return min(1.0, channels / self.sms)

    def flash_fractions(self, kind: str, seq_len: int | None = None) -> tuple[float, float]:
        """(forward, backward) fraction of peak of a ``flash``, ``flash2`` or ``flash1`` kernel
        at ``seq_len`` tokens, causal (None: f_inf, a long sequence's)."""
        if kind not in FLASH_KINDS:
            raise ValueError(f"attention={kind!r} is not a tiled kernel; one of {FLASH_KINDS}")
        peak = getattr(self, f"{kind}_fwd"), getattr(self, f"{kind}_bwd")
        if seq_len is None:
            return peak
        check_positive_int("seq_len", seq_len)
        return tuple(f * (seq_len / 2) / (seq_len / 2 + k0)
                     for f, k0 in zip(peak, getattr(self, f"{kind}_k0")))

    def __post_init__(self) -> None:
        for name in ("peak_flops", "nvlink_bw", "network_bw", "hbm_bw", "hbm_bytes",
                     "nvlink_latency_s", "network_latency_s"):
            check_positive(name, getattr(self, name))
        if self.network_busbw is not None:
            check_positive("network_busbw", self.network_busbw)
        for kind in FLASH_KINDS:
            check_positive(f"{kind}_fwd", getattr(self, f"{kind}_fwd"))
            check_positive(f"{kind}_bwd", getattr(self, f"{kind}_bwd"))
            k0 = getattr(self, f"{kind}_k0")
            if len(k0) != 2 or not all(isinstance(x, Real) and x >= 0 for x in k0):
                raise ValueError(f"{kind}_k0={k0!r} must be (forward, backward) keys >= 0")
        for name in ("sms", "k_step", "pipeline_stages", "gpus_per_node", "nccl_channels_node",
                     "nccl_channels_network"):
            check_positive_int(name, getattr(self, name))
        if not self.tiles or any(len(t) != 2 or not all(isinstance(x, Integral) and x > 0
                                                        for x in t) for t in self.tiles):
            raise ValueError(f"tiles={self.tiles!r} must be (M, N) pairs of positive integers")
        for name in ("hbm_efficiency", "gemm_efficiency"):
            check_positive(name, getattr(self, name))
            if getattr(self, name) > 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be in (0, 1]")
        if isinstance(self.straggler, bool) or not isinstance(self.straggler, Real) or \
                self.straggler < 0:
            raise ValueError(f"straggler={self.straggler!r} must be a number >= 0")


A100_80GB = Hardware("A100-80GB", peak_flops=312e12, nvlink_bw=300e9, network_bw=25e9,
                     hbm_bw=2.039e12, hbm_bytes=80 * GiB, sms=108)
A100_40GB = Hardware("A100-40GB", peak_flops=312e12, nvlink_bw=300e9, network_bw=25e9,
                     hbm_bw=1.555e12, hbm_bytes=40 * GiB, sms=108)
H100_SXM = Hardware("H100", peak_flops=989e12, nvlink_bw=450e9, network_bw=50e9,
                    hbm_bw=3.35e12, hbm_bytes=80 * GiB, sms=132, pipeline_stages=4,
                    flash_fwd=0.66, flash_bwd=0.55, flash_k0=CUDNN_K0,
                    flash2_fwd=0.34, flash2_bwd=0.33, flash1_fwd=0.17, flash1_bwd=0.165)
H200_SXM = replace(H100_SXM, name="H200", hbm_bw=4.8e12, hbm_bytes=141e9)  # H100's compute
# "A100" is the 80 GB part: the published A100 runs (Selene, MegaScale) used it.
HARDWARE: dict[str, Hardware] = {"A100": A100_80GB, "A100-80GB": A100_80GB,
                                 "A100-40GB": A100_40GB, "H100": H100_SXM, "H200": H200_SXM}


def preset(name: str) -> Hardware:
    """A preset by name; the error lists the valid ones."""
    try:
        return HARDWARE[name]
    except KeyError:
        raise ValueError(f"GPU preset {name!r} is not one of {sorted(HARDWARE)}") from None
