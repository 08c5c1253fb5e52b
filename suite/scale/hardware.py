"""GPU presets for the cluster-scale model: datasheet numbers, the GEMM library's tiles, and the
two numbers a system fits (``gemm_efficiency``, ``straggler``).

Sources: NVIDIA A100 Tensor Core GPU datasheet (bf16 dense 312 TFLOP/s; HBM2e 2,039 GB/s for
the 80 GB SXM part, HBM2 1,555 GB/s for the 40 GB; NVLink 3 600 GB/s both directions; 108 SMs,
"NVIDIA A100 Tensor Core GPU Architecture" whitepaper); NVIDIA H100 datasheet (SXM5: bf16
dense 989 TFLOP/s, HBM3 3.35 TB/s, 80 GB, NVLink 4 900 GB/s both directions; 132 SMs, "NVIDIA
H100 Tensor Core GPU Architecture" whitepaper); NVIDIA H200 datasheet (the H100's compute,
HBM3e 4.8 TB/s, 141 GB). Networks: DGX A100 / SuperPOD nodes carry 8 x 200 Gb/s HDR
InfiniBand (25 GB/s per GPU), DGX H100 / H200 nodes 8 x 400 Gb/s NDR (50 GB/s per GPU).
Latencies: NCCL's tuning model (src/graph/tuning.cc, Simple protocol).

GEMM tiles: NVIDIA's "Matrix Multiplication Background" guide (DU-09799-001, Sec. 2.3) lists
cuBLAS's tensor-core tiles (256x128, 128x256, 128x128, ... 64x64) and says the large ones are
the efficient choice for large GEMMs; the model takes the two 32K-element tiles and lets the
library pick whichever wastes less. The K step (64 bf16 elements) and the software pipeline's
depth are CUTLASS's defaults for bf16 tensor-op GEMMs: 3 stages on sm80
(include/cutlass/gemm/device/default_gemm_configuration.h), 4 on sm90 (the collective builder's
stage count at this tile with 228 KB of shared memory).

FlashAttention's throughput (fraction of peak, forward and backward, head dim 128 and the long
sequences of training), for the ``flash`` kernel and the ``flash1`` generation before it:
- A100: FlashAttention-2 (Dao 2023, arXiv 2307.08691, Sec. 4.1: up to 73% forward, 63%
  backward); FlashAttention-1 at half that (the same paper: FlashAttention-2 is about 2x
  FlashAttention, which reaches 25-40% of peak).
- H100/H200: the Hopper kernels (FlashAttention-3, Shah et al. 2024, arXiv 2407.08608: up to 75%
  forward in bf16, about half the peak backward; cuDNN's fused attention, which Transformer
  Engine runs, is on par in its Fig. 5/6); FlashAttention-2 on Hopper reaches about 35% forward
  and 30% backward (the same paper's benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

from suite.scale.checks import check_positive, check_positive_int

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
    flash_fwd: float = 0.73
    flash_bwd: float = 0.63
    flash1_fwd: float = 0.365
    flash1_bwd: float = 0.315
    gpus_per_node: int = 8
    nvlink_latency_s: float = 3.4e-6
    network_latency_s: float = 9.6e-6
    gemm_efficiency: float = 1.0
    straggler: float = 0.0

    def flash_fractions(self, kind: str) -> tuple[float, float]:
        """(forward, backward) fraction of peak of a ``flash`` or ``flash1`` kernel."""
        return (self.flash_fwd, self.flash_bwd) if kind == "flash" else (self.flash1_fwd,
                                                                          self.flash1_bwd)

    def __post_init__(self) -> None:
        for name in ("peak_flops", "nvlink_bw", "network_bw", "hbm_bw", "hbm_bytes",
                     "nvlink_latency_s", "network_latency_s"):
            check_positive(name, getattr(self, name))
        for name in ("flash_fwd", "flash_bwd", "flash1_fwd", "flash1_bwd"):
            check_positive(name, getattr(self, name))
        for name in ("sms", "k_step", "pipeline_stages", "gpus_per_node"):
            check_positive_int(name, getattr(self, name))
        if not self.tiles or any(len(t) != 2 or not all(isinstance(x, Integral) and x > 0
                                                        for x in t) for t in self.tiles):
            raise ValueError(f"tiles={self.tiles!r} must be (M, N) pairs of positive integers")
        check_positive("gemm_efficiency", self.gemm_efficiency)
        if self.gemm_efficiency > 1:
            raise ValueError(f"gemm_efficiency={self.gemm_efficiency!r} must be in (0, 1]")
        if isinstance(self.straggler, bool) or not isinstance(self.straggler, Real) or \
                self.straggler < 0:
            raise ValueError(f"straggler={self.straggler!r} must be a number >= 0")


A100_80GB = Hardware("A100-80GB", peak_flops=312e12, nvlink_bw=300e9, network_bw=25e9,
                     hbm_bw=2.039e12, hbm_bytes=80 * GiB, sms=108)
A100_40GB = Hardware("A100-40GB", peak_flops=312e12, nvlink_bw=300e9, network_bw=25e9,
                     hbm_bw=1.555e12, hbm_bytes=40 * GiB, sms=108)
H100_SXM = Hardware("H100", peak_flops=989e12, nvlink_bw=450e9, network_bw=50e9,
                    hbm_bw=3.35e12, hbm_bytes=80 * GiB, sms=132, pipeline_stages=4,
                    flash_fwd=0.75, flash_bwd=0.5, flash1_fwd=0.35, flash1_bwd=0.3)
H200_SXM = Hardware("H200", peak_flops=989e12, nvlink_bw=450e9, network_bw=50e9,
                    hbm_bw=4.8e12, hbm_bytes=141e9, sms=132, pipeline_stages=4,
                    flash_fwd=0.75, flash_bwd=0.5, flash1_fwd=0.35, flash1_bwd=0.3)
# "A100" is the 80 GB part: the published A100 runs (Selene, MegaScale) used it.
HARDWARE: dict[str, Hardware] = {"A100": A100_80GB, "A100-80GB": A100_80GB,
                                 "A100-40GB": A100_40GB, "H100": H100_SXM, "H200": H200_SXM}


def preset(name: str) -> Hardware:
    """A preset by name; the error lists the valid ones."""
    try:
        return HARDWARE[name]
    except KeyError:
        raise ValueError(f"GPU preset {name!r} is not one of {sorted(HARDWARE)}") from None
