"""Variable-length multi-head attention on the packed layout.

Signature follows FlashAttention's varlen API: q, k, v packed as ``(total_tokens, heads,
head_dim)`` plus ``cu_seqlens``. This is the plain PyTorch path (one SDPA call per sequence); the
fused Triton kernels are added behind ``backend`` without changing the signature.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "torch")


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Attention of every sequence with itself only; returns ``(total_tokens, heads, head_dim)``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not one of {BACKENDS}")
    if q.dim() != 3 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            f"q, k, v must share one (total_tokens, heads, head_dim) shape; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        if end == start:
            continue
        # (len, heads, d) -> (heads, len, d): SDPA batches over heads.
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=softmax_scale)
        out[start:end] = o.transpose(0, 1)
    return out
