"""The element-wise epilogues ByteTransformer fuses: add-bias + residual + LayerNorm after a GEMM,
and bias + GELU after the FFN's first GEMM. Triton kernels on CUDA, PyTorch elsewhere."""

from __future__ import annotations

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "torch", "triton")


def _use_triton(x: torch.Tensor, backend: str) -> bool:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
    return backend == "triton" or (backend == "auto" and x.is_cuda)


def add_bias_residual_layernorm(x: torch.Tensor, bias: torch.Tensor | None,
                                residual: torch.Tensor, weight: torch.Tensor,
                                ln_bias: torch.Tensor, eps: float, *,
                                backend: str = "auto") -> torch.Tensor:
    """LayerNorm(x + bias + residual) over the last dim, in one pass over memory on GPU."""
    if _use_triton(x, backend):
        from reference_impl.kernels.triton_norm import triton_add_bias_residual_layernorm

        return triton_add_bias_residual_layernorm(x, bias, residual, weight, ln_bias, eps)
    y = x + residual if bias is None else torch.add(x, bias).add_(residual)
    return F.layer_norm(y, y.shape[-1:], weight, ln_bias, eps)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none", *,
              backend: str = "auto") -> torch.Tensor:
    """gelu(x + bias): the epilogue of the FFN's first GEMM."""
    if _use_triton(x, backend):
        from reference_impl.kernels.triton_gelu import triton_bias_gelu

        return triton_bias_gelu(x, bias, approximate)
    return F.gelu(x + bias, approximate=approximate)
