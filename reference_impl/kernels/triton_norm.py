"""Add-bias + residual + LayerNorm fused into one Triton kernel.

Why: after BERT's attention-output and FFN-output GEMMs come a bias add, a residual add and a
LayerNorm. Run as three torch ops, the ``(T, H)`` activation goes through global memory three
times; here it is read once (x and residual) and written once, as ByteTransformer does. One
program normalizes one row, which fits on chip for BERT-sized hidden dims.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_impl.kernels.triton_common import check_device, is_interpreted

MAX_ROW_BYTES = 65536  # one program holds a whole row on chip; wider rows would need a loop


@triton.jit
def _add_bias_residual_layernorm_kernel(
    X, Bias, Residual, Weight, LnBias, Y,
    stride_x, stride_r, stride_y, hidden, eps,
    HAS_BIAS: tl.constexpr, BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)  # BLOCK_H is hidden rounded up to a power of two
    ok = cols < hidden

    # Statistics in fp32 whatever the input dtype.
    h = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        h += tl.load(Bias + cols, mask=ok, other=0.0).to(tl.float32)
    h += tl.load(Residual + row * stride_r + cols, mask=ok, other=0.0).to(tl.float32)

    mean = tl.sum(h, axis=0) / hidden
    centered = tl.where(ok, h - mean, 0.0)  # padded columns must not count in the variance
    var = tl.sum(centered * centered, axis=0) / hidden  # biased, as torch's LayerNorm
    rstd = 1.0 / tl.sqrt(var + eps)

    w = tl.load(Weight + cols, mask=ok, other=0.0).to(tl.float32)
    b = tl.load(LnBias + cols, mask=ok, other=0.0).to(tl.float32)
    y = centered * rstd * w + b
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=ok)


_INTERPRETED = is_interpreted(_add_bias_residual_layernorm_kernel)


def triton_add_bias_residual_layernorm(
    x: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor,
    weight: torch.Tensor,
    ln_bias: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """``LayerNorm(x + bias + residual) * weight + ln_bias`` over the last dim, in x's dtype.

    ``x`` and ``residual``: ``(T, H)`` (any leading dims work); ``bias``, ``weight``,
    ``ln_bias``: ``(H,)``. ``bias=None`` skips the bias add (a GEMM that already added it).
    """
    if x.dim() < 1 or residual.shape != x.shape:
        raise ValueError(
            f"x and residual must share one (T, H) shape; got {tuple(x.shape)} and "
            f"{tuple(residual.shape)}"
        )
    hidden = x.shape[-1]
    vectors = {"weight": weight, "ln_bias": ln_bias}
    if bias is not None:
        vectors["bias"] = bias
    for name, t in vectors.items():
        if t.shape != (hidden,):
            raise ValueError(f"{name} must have shape ({hidden},) to match x; got {tuple(t.shape)}")
    if not 1 <= hidden * x.element_size() <= MAX_ROW_BYTES:
        raise ValueError(
            f"hidden={hidden} ({x.dtype}) is not supported: a row must be 1..{MAX_ROW_BYTES} "
            f"bytes to fit on chip"
        )
    if eps < 0:
        raise ValueError(f"eps={eps} must be >= 0")
    check_device(_INTERPRETED, x, residual, *vectors.values())

    x2 = x.reshape(-1, hidden)
    r2 = residual.reshape(-1, hidden)
    x2, r2 = (t if t.stride(-1) == 1 else t.contiguous() for t in (x2, r2))
    weight, ln_bias = weight.contiguous(), ln_bias.contiguous()
    bias = bias.contiguous() if bias is not None else None
    y = torch.empty((x2.shape[0], hidden), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)

    block_h = triton.next_power_of_2(hidden)
    _add_bias_residual_layernorm_kernel[(x2.shape[0],)](
        x2, bias if bias is not None else x2,  # a dummy pointer when there is no bias, never read
        r2, weight, ln_bias, y,
        x2.stride(0), r2.stride(0), y.stride(0), hidden, float(eps),
        HAS_BIAS=bias is not None, BLOCK_H=block_h,
        num_warps=min(max(block_h // 256, 1), 8),
    )
    return y.reshape(x.shape)
