"""The time of one GEMM from its shape: tile and wave quantization, a short-K term, and the HBM
roofline; one fitted ceiling per system on top.

  time = max(FLOPs / (peak x q_tile x q_k), bytes / HBM bandwidth) / gemm_efficiency

- Tile quantization (NVIDIA, "Matrix Multiplication Background" User's Guide, DU-09799-001,
  Sec. 3.1): the output is computed in whole BM x BN tiles, so an M x N output costs
  ceil(M/BM) ceil(N/BN) tiles of work.
- Wave quantization (same guide, Sec. 3.2): the tiles run one per SM at a time, in waves of
  ``sms`` tiles (times the batch for batched GEMMs), so the work costs whole waves:
  q_tile = useful tiles' area / (waves x sms x BM x BN). The library (cuBLAS/CUTLASS) picks
  the tile of ``Hardware.tiles`` that wastes least (the guide: 256x128 and 128x256 are its
  efficient large tiles).
- Short K (CUTLASS's multistage mainloop, include/cutlass/gemm/threadblock/mma_multistage.h):
  a tile runs K / BK steps of its main loop, plus the prologue that fills the pipeline's
  ``stages - 1`` shared-memory buffers before the first step and an epilogue that writes the
  BM x BN accumulator (as many bytes as (BM BN) / ((BM + BN) BK) steps load). So
  q_k = K / (K + K0) with K0 = BK (stages - 1 + BM BN / ((BM + BN) BK)): 1 for deep K, 0.75
  at K = 640 on A100 (a 13B layer's attention output at TP 8), 0.4 at K = 128 (attention's
  Q K^T at head dim 128).
- Roofline: a GEMM also reads A and B and writes C once (2 bytes each) at HBM bandwidth; it is
  bound by the slower of the two (only thin GEMMs, e.g. a micro-batch of one short sequence,
  reach it).
- The backward of Y = X W (M x K times K x N) runs two GEMMs of the same FLOPs with other
  shapes: dX = dY W^T (output M x K, depth N) and dW = X^T dY (output K x N, depth M); each is
  quantized on its own shape.

``gemm_efficiency`` (the fitted ceiling: what the library reaches on a perfectly tiled, deep
GEMM, clocks and power included) is the only fitted number here.
"""

from __future__ import annotations

from math import ceil

from suite.scale.hardware import Hardware
from suite.scale.model import Gemm


def tile_efficiency(m: int, n: int, tile: tuple[int, int], sms: int, batch: int = 1) -> float:
    """Useful fraction of the tile work of ``batch`` M x N outputs in whole BM x BN tiles and
    whole waves over ``sms`` multiprocessors."""
    bm, bn = tile
    tiles = batch * ceil(m / bm) * ceil(n / bn)
    waves = ceil(tiles / sms)
    return batch * m * n / (waves * sms * bm * bn)


def k_efficiency(k: int, tile: tuple[int, int], hw: Hardware) -> float:
    """K / (K + K0), K0 the tile's prologue and epilogue in elements of K."""
    bm, bn = tile
    k0 = hw.k_step * (hw.pipeline_stages - 1 + bm * bn / ((bm + bn) * hw.k_step))
    return k / (k + k0)


def shape_efficiency(g: Gemm, hw: Hardware) -> float:
    """q_tile x q_k at the library's best tile for this shape."""
    return max(tile_efficiency(g.m, g.n, t, hw.sms, g.batch) * k_efficiency(g.k, t, hw)
               for t in hw.tiles)


def gemm_time(g: Gemm, hw: Hardware, element_bytes: int = 2) -> float:
    """Seconds of one GEMM at ceiling 1 (divide by ``hw.gemm_efficiency``)."""
    compute = g.flops / (hw.peak_flops * shape_efficiency(g, hw))
    traffic = g.batch * (g.m * g.k + g.k * g.n + g.m * g.n) * element_bytes / hw.hbm_rate
    return max(compute, traffic)


def backward_gemms(g: Gemm) -> tuple[Gemm, Gemm]:
    """The input-gradient and weight-gradient GEMMs of ``g``'s backward."""
    return (Gemm(f"{g.name}.dgrad", g.m, g.k, g.n, g.batch),
            Gemm(f"{g.name}.wgrad", g.k, g.n, g.m, g.batch))


def forward_backward_time(g: Gemm, hw: Hardware) -> tuple[float, float]:
    """(forward, backward) seconds of ``g`` at ceiling 1."""
    dgrad, wgrad = backward_gemms(g)
    return gemm_time(g, hw), gemm_time(dgrad, hw) + gemm_time(wgrad, hw)
