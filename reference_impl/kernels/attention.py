"""Variable-length multi-head attention on the packed layout.

Signature follows FlashAttention's varlen API: q, k, v packed as ``(total_tokens, heads,
head_dim)`` plus ``cu_seqlens``. Backends:

- ``triton``: one fused kernel (``triton_attention``), online softmax, nothing S x S in memory.
- ``torch``: the CPU path. Sequences are sorted by length and cut into a few buckets whose padding
  stays under ``BUCKET_WASTE`` of the bucket's attention work; each bucket is one batched SDPA call
  with a key-padding mask. For the ByteTransformer length mix that is 2-4 calls instead of B.
- ``auto``: triton on CUDA, torch otherwise.

``padded_attention`` is the unfused baseline form (matmul + mask + softmax + matmul on the padded
batch), the paper's PyTorch attention; the model uses it when ``fused_mha`` is off.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

BACKENDS = ("auto", "torch", "triton")
# A bucket may compute at most this much more attention work than its sequences need.
BUCKET_WASTE = 0.25


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
    if backend == "auto":
        backend = "triton" if q.is_cuda else "torch"
    if backend == "triton":
        from reference_impl.kernels.triton_attention import triton_varlen_attention

        return triton_varlen_attention(q, k, v, cu_seqlens, max_seqlen, causal=causal,
                                       softmax_scale=softmax_scale)
    return _bucketed_attention(q, k, v, cu_seqlens, causal, softmax_scale)


def length_buckets(lengths: list[int], waste: float = BUCKET_WASTE) -> list[list[int]]:
    """Group sequence indices (longest first) so that padding every sequence of a group to the
    group's longest adds at most ``waste`` to the group's sum of l^2 (attention work)."""
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    buckets: list[list[int]] = []
    for i in order:
        if buckets:
            group = buckets[-1]
            longest = lengths[group[0]]
            need = sum(lengths[j] ** 2 for j in group) + lengths[i] ** 2
            if longest ** 2 * (len(group) + 1) <= (1 + waste) * need:
                group.append(i)
                continue
        buckets.append([i])
    return buckets


def _bucketed_attention(q, k, v, cu_seqlens, causal, softmax_scale):
    starts = cu_seqlens[:-1].tolist()
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    out = torch.empty_like(q)
    for group in length_buckets(lengths):
        longest = lengths[group[0]]
        if all(lengths[i] == longest for i in group):
            # equal lengths: gather a dense [n, longest] index grid, no mask needed
            idx = torch.tensor([[starts[i] + p for p in range(longest)] for i in group],
                               device=q.device)
            qs, ks, vs = (t[idx].transpose(1, 2) for t in (q, k, v))  # [n, heads, len, d]
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=softmax_scale)
            out[idx] = o.transpose(1, 2)
            continue
        lens = torch.tensor([lengths[i] for i in group], device=q.device)
        pos = torch.arange(longest, device=q.device)
        valid = pos[None, :] < lens[:, None]  # [n, longest]
        base = torch.tensor([starts[i] for i in group], device=q.device)
        idx = (base[:, None] + pos[None, :]).where(valid, 0)
        qs, ks, vs = (t[idx].transpose(1, 2) for t in (q, k, v))
        mask = valid[:, None, None, :]  # keys only; padded queries are dropped below
        if causal:
            mask = mask & torch.ones(longest, longest, dtype=torch.bool,
                                     device=q.device).tril()
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=softmax_scale)
        out[idx[valid]] = o.transpose(1, 2)[valid]
    return out


def padded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     attention_mask: torch.Tensor, softmax_scale: float | None = None
                     ) -> torch.Tensor:
    """Unfused attention on a padded batch, ``[B, S, heads, d]`` in and out: Q K^T, add the
    key-padding mask, softmax, times V. Padded query rows hold garbage (as in any padded model)."""
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, S, d]
    scores = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    neg = torch.finfo(scores.dtype).min  # not -inf: an empty sequence must not produce NaN
    scores = scores.masked_fill(~attention_mask.bool()[:, None, None, :], neg)
    return torch.matmul(scores.softmax(dim=-1), vh).transpose(1, 2)
