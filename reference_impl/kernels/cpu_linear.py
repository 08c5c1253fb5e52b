"""Linear layers on CPU through oneDNN: weights reordered (prepacked) once, bias and the epilogue
(GELU, or the residual add before LayerNorm) fused into the GEMM as post-ops.

This is the path inductor's ``freezing`` takes on CPU. It matters because which GEMM library a
model reaches decides CPU speed: MKL (what ``F.linear`` calls in x86 wheels) takes a slow path on
AMD CPUs, oneDNN does not, and a prepacked weight skips the per-call reorder. The fused epilogue
saves a pass over the ``[T, 4H]`` FFN activation (GELU) and one over ``[T, H]`` (bias + residual).
Inference only: the oneDNN ops have no autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from reference_impl.switches import check_cpu_gemm

ONEDNN_DTYPES = (torch.float32, torch.bfloat16)


def onednn_usable(x: torch.Tensor, weight: torch.Tensor) -> tuple[bool, str]:
    """(True, "") if ``x @ weight.T`` can run on the oneDNN path, else (False, why)."""
    if x.device.type != "cpu":
        return False, f"tensors are on {x.device.type}, oneDNN linear is a CPU path"
    if not torch.backends.mkldnn.is_available():
        return False, "this torch build has no oneDNN (torch.backends.mkldnn.is_available())"
    if x.dtype not in ONEDNN_DTYPES:
        return False, f"dtype {x.dtype} (oneDNN linear here: {ONEDNN_DTYPES})"
    if torch.is_grad_enabled() and weight.requires_grad:
        return False, "autograd is on: the oneDNN linear ops have no backward"
    return True, ""


def use_onednn(cpu_gemm: str, x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether linear layers run on oneDNN for this input under the ``cpu_gemm`` setting:
    "torch" never, "auto" where it can (CPU, fp32/bf16, no autograd), "onednn" always on CPU
    (an error where it cannot). GPU tensors always take torch."""
    if check_cpu_gemm(cpu_gemm) == "torch" or x.is_cuda:
        return False
    ok, why = onednn_usable(x, weight)
    if cpu_gemm == "onednn" and not ok:
        raise ValueError(f"cpu_gemm='onednn' cannot run here: {why}; use 'auto' or 'torch'")
    return ok


class PackedWeights:
    """oneDNN-reordered copies of some ``nn.Linear`` weights, made on first use and made again
    whenever a weight changes (a new tensor, dtype or in-place version)."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple, torch.Tensor]] = {}

    def get(self, name: str, weight: torch.Tensor, rows_hint: int) -> torch.Tensor:
        key = (weight.data_ptr(), weight.dtype, weight._version, tuple(weight.shape))
        hit = self._cache.get(name)
        if hit is None or hit[0] != key:
            with torch.no_grad():
                packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows_hint)
            hit = self._cache[name] = (key, packed)
        return hit[1]


# activation name -> oneDNN post-op (name, algorithm); None is no activation
ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh"), "relu": ("relu", "")}


def dense(layer: nn.Linear, x: torch.Tensor, cache: PackedWeights | None, name: str, *,
          activation: str | None = None, residual: torch.Tensor | None = None) -> torch.Tensor:
    """``act(layer(x))`` or ``layer(x) + residual``: on oneDNN with the weight from ``cache``
    (prepacked once, epilogue fused), or on ``F.linear`` when ``cache`` is None."""
    if activation is not None and residual is not None:
        raise ValueError("dense fuses an activation or a residual add, not both")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not one of {sorted(ACTIVATIONS)}")
    if cache is None:
        y = F.linear(x, layer.weight, layer.bias)
        if residual is not None:
            return y.add_(residual)
        if activation is None:
            return y
        op, algorithm = ACTIVATIONS[activation]
        return F.relu(y) if op == "relu" else F.gelu(y, approximate=algorithm)
    packed = cache.get(name, layer.weight, x.shape[0])
    if residual is not None:
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, packed, layer.bias, "add")
    op, algorithm = ACTIVATIONS[activation] if activation else ("none", "")
    return torch.ops.mkldnn._linear_pointwise(x, packed, layer.bias, op, [], algorithm)
