"""Variable-length multi-head attention on the packed layout.

Signature follows FlashAttention's varlen API: q, k, v packed as ``(total_tokens, heads,
head_dim)`` plus ``cu_seqlens``. Backends:

- ``triton``: one fused kernel (``triton_attention``), online softmax, nothing S x S in memory.
- ``torch``: the CPU path. Sequences are sorted by length and cut into a few buckets whose padding
  stays under ``BUCKET_WASTE`` of the bucket's attention work; each bucket is one batched SDPA call
  with a key-padding mask. For the ByteTransformer length mix that is 2-4 calls instead of B.
  The gather/scatter indices of the buckets (``bucket_plan``) depend on ``cu_seqlens`` only: a
  model computes them once per forward and passes them to every layer, so no layer does
  per-sequence Python work.
- ``auto``: triton on CUDA, torch otherwise.

``padded_attention`` is the unfused baseline form (matmul + mask + softmax + matmul on the padded
batch), the paper's PyTorch attention; the model uses it when ``fused_mha`` is off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    plan: list[Bucket] | None = None,
) -> torch.Tensor:
    """Attention of every sequence with itself only; returns ``(total_tokens, heads, head_dim)``.
    ``plan``: ``bucket_plan(cu_seqlens)`` made once for many calls (torch backend)."""
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
    return _bucketed_attention(q, k, v, plan or bucket_plan(cu_seqlens), causal, softmax_scale)


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


@dataclass(frozen=True)
class Bucket:
    """Sequences attended in one batched call: ``index[i, p]`` is the packed row of position p
    of the bucket's sequence i; ``valid`` marks real positions (None: all sequences are as
    long as the longest); ``rows`` are the packed rows of the valid positions, in order;
    ``start``: when those rows are one contiguous run (equal lengths, neighbours in the batch:
    always for batch 1) its first row, so the bucket is a view, not a gather."""

    index: torch.Tensor  # (n, longest) int64; padded slots point at row 0
    valid: torch.Tensor | None  # (n, longest) bool
    rows: torch.Tensor  # (sum of lengths,) int64
    start: int | None = None


def bucket_plan(cu_seqlens: torch.Tensor, waste: float = BUCKET_WASTE) -> list[Bucket]:
    """Gather/scatter indices of the length buckets of a packed batch."""
    cu = cu_seqlens.to("cpu", torch.int64)
    lengths = (cu[1:] - cu[:-1]).tolist()
    device = cu_seqlens.device
    plan = []
    for group in length_buckets(lengths, waste):
        members = torch.tensor(group)
        lens, starts = cu[1:][members] - cu[:-1][members], cu[:-1][members]
        longest = int(lens[0])
        pos = torch.arange(longest)
        index = starts[:, None] + pos[None, :]
        if bool((lens == longest).all()):
            rows = index.flatten()
            run = bool((rows == torch.arange(int(rows[0]), int(rows[0]) + len(rows))).all())
            plan.append(Bucket(index.to(device), None, rows.to(device),
                               int(rows[0]) if run else None))
            continue
        valid = pos[None, :] < lens[:, None]
        plan.append(Bucket(index.where(valid, 0).to(device), valid.to(device),
                           index[valid].to(device)))
    return plan


def _bucketed_attention(q, k, v, plan: list[Bucket], causal, softmax_scale):
    out = torch.empty_like(q)
    for b in plan:
        n, longest = b.index.shape
        if b.start is not None:  # one contiguous run of rows: views, no gather, no scatter
            span = slice(b.start, b.start + n * longest)
            qs, ks, vs = (t[span].unflatten(0, (n, longest)).transpose(1, 2) for t in (q, k, v))
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=softmax_scale)
            out[span] = o.transpose(1, 2).flatten(0, 1)
            continue
        # one contiguous [n, heads, len, d] copy each: SDPA would make it anyway
        qs, ks, vs = (t[b.index].transpose(1, 2).contiguous() for t in (q, k, v))
        mask = None if b.valid is None else b.valid[:, None, None, :]  # keys only
        if causal:
            tril = torch.ones(longest, longest, dtype=torch.bool, device=q.device).tril()
            mask = tril if mask is None else mask & tril
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, scale=softmax_scale)
        o = o.transpose(1, 2)  # [n, len, heads, d]; padded query rows are dropped here
        out.index_copy_(0, b.rows, o.flatten(0, 1) if b.valid is None else o[b.valid])
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
