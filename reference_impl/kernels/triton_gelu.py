"""Bias add + GELU fused into one Triton kernel: the epilogue of BERT's first FFN GEMM.

Why: with the GEMM run without its bias, ``gelu(x + bias)`` as two torch ops reads and writes the
``(T, intermediate)`` activation, the largest one in the layer, twice; fused it is read once and
written once.

``erf`` is ``tl.erf`` (libdevice's erf on CUDA); the interpreter implements it too, so the exact
GELU runs unchanged there. Triton has no core ``tanh``; the tanh form uses the identity
``0.5 * (1 + tanh(u)) = sigmoid(2u)``, which stays finite for large ``|u|``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_impl.kernels.triton_common import check_device, is_interpreted

APPROXIMATIONS = ("none", "tanh")
BLOCK_N_MAX = 1024  # columns per program; a row wider than this is split over programs


@triton.jit
def _bias_gelu_kernel(X, Bias, Y, stride_x, stride_y, n_cols,
                      TANH: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < n_cols
    x = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    x += tl.load(Bias + cols, mask=ok, other=0.0).to(tl.float32)
    if TANH:
        # 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        u = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2 / pi) = 0.79788...
        y = x * tl.sigmoid(2.0 * u)
    else:
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))  # 1 / sqrt(2) = 0.70710...
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=ok)


_INTERPRETED = is_interpreted(_bias_gelu_kernel)


def triton_bias_gelu(
    x: torch.Tensor, bias: torch.Tensor, approximate: str = "none"
) -> torch.Tensor:
    """``gelu(x + bias)`` in x's dtype; math in fp32.

    ``x``: ``(T, N)`` (any leading dims work), ``bias``: ``(N,)``. ``approximate``: ``"none"``
    (erf, torch's default and HF BERT's ``"gelu"``) or ``"tanh"`` (HF ``"gelu_new"``).
    """
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"approximate={approximate!r} is not one of {APPROXIMATIONS}")
    if x.dim() < 1 or bias.shape != x.shape[-1:]:
        raise ValueError(f"bias must have shape ({x.shape[-1] if x.dim() else '?'},) to match x "
                         f"{tuple(x.shape)}; got {tuple(bias.shape)}")
    check_device(_INTERPRETED, x, bias)

    n_cols = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    x2 = x.reshape(-1, n_cols)
    x2 = x2 if x2.stride(-1) == 1 else x2.contiguous()
    y2 = y.view(-1, n_cols)
    block_n = min(triton.next_power_of_2(n_cols), BLOCK_N_MAX)
    grid = (x2.shape[0], triton.cdiv(n_cols, block_n))
    _bias_gelu_kernel[grid](
        x2, bias.contiguous(), y2, x2.stride(0), y2.stride(0), n_cols,
        TANH=approximate == "tanh", BLOCK_N=block_n, num_warps=4,
    )
    return y
