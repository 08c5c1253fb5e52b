"""Causal sliding-window attention whose cost grows with ``s * w``, not ``s^2``.

Query ``i`` attends keys ``i - w + 1 .. i``. A masked dense attention gets the same numbers but
computes all ``s x s`` scores (and on a GPU a dense mask takes SDPA off its flash path), so it
saves nothing; MegaScale's point is the O(s w) cost. Two forms, both equal to the masked
reference (``tests/test_window_attention.py``):

- ``banded_attention`` (explicit math, for the unfused model): the sequence is cut into blocks
  of ``w`` queries; each block scores its own ``w`` keys and the previous block's ``w`` (a
  ``w x 2w`` band instead of a ``w x s`` row), masked to the window. About ``2 s w`` scores.
- ``window_attention`` (the fused path): on CPU, two calls of PyTorch's flash-attention kernel
  per block, each on a triangle, merged through their log-sum-exps. With blocks of ``w``,
  query row ``r`` of block ``b`` sees keys ``r' <= r`` of its own block (a causal triangle) and
  keys ``r' >= r + 1`` of block ``b - 1`` (``r' > r``): reversing both the rows and the keys of
  that second part turns it into a causal triangle too, so both calls run the kernel's causal
  path, which skips the blocks above the diagonal: about ``s w`` scores, the band itself.
  The backward calls the kernel's backward on each part with the merged output and
  log-sum-exp, as ring attention does, so the gradient is exact. On CUDA the same band runs
  as FlexAttention with a sliding-window block mask (compiled; blocks outside the band are
  skipped).

``s = 8 w`` makes the band ``2w/s = 25%`` of the dense rows and ``~23%`` of the causal triangle.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F


def window_mask(seq_len: int, window: int | None, device: torch.device) -> torch.Tensor:
    """``(T, T)`` bool, True where query i may attend key j: ``i - window < j <= i``."""
    i = torch.arange(seq_len, device=device)[:, None]
    j = torch.arange(seq_len, device=device)[None, :]
    allowed = j <= i
    if window is not None:
        allowed &= j > i - window
    return allowed


def _blocks(x: torch.Tensor, w: int) -> torch.Tensor:
    """``(B, H, T, d)`` -> ``(B*H, nb, w, d)``, the sequence zero-padded at its end to whole
    blocks (padded keys come after every real query, so causality never lets them in)."""
    B, H, T, d = x.shape
    nb = -(-T // w)
    if nb * w != T:
        x = F.pad(x, (0, 0, 0, nb * w - T))
    return x.reshape(B * H, nb, w, d)


def _unblock(x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    B, H, T, d = shape
    return x.reshape(B, H, -1, d)[:, :, :T]


def banded_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                     scale: float | None = None) -> torch.Tensor:
    """Explicit-math windowed attention: per block of ``window`` queries, scores against the
    previous block's keys and its own (``w x 2w``), masked to the window. ``q, k, v``
    ``(B, H, T, d)`` with as many K/V heads as query heads."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    w = window
    qb, kb, vb = (_blocks(t, w) for t in (q, k, v))
    # keys of block b-1 then block b (block -1 is zeros, masked out below)
    kk = torch.cat([F.pad(kb, (0, 0, 0, 0, 1, 0))[:, :-1], kb], dim=2)
    vv = torch.cat([F.pad(vb, (0, 0, 0, 0, 1, 0))[:, :-1], vb], dim=2)
    scores = (qb @ kk.transpose(-2, -1)) * scale  # (BH, nb, w, 2w)
    scores = scores.masked_fill(~_band(w, q.device, qb.shape[1]), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ vv
    return _unblock(out, q.shape)


@lru_cache(maxsize=16)
def _band_cpu(w: int, nb: int) -> torch.Tensor:
    r = torch.arange(w)[:, None]  # query row in its block
    c = torch.arange(2 * w)[None, :] - w  # key position relative to the block's start
    allowed = (c <= r) & (c > r - w)
    first = allowed & (c >= 0)  # block 0 has no previous block
    return torch.stack([first] + [allowed] * (nb - 1))[None]  # (1, nb, w, 2w)


def _band(w: int, device: torch.device, nb: int) -> torch.Tensor:
    return _band_cpu(w, nb).to(device)


# ----------------------------------------------------------------------------- fused (CPU)


def _flash(q, k, v, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, True, scale=scale)


def _flash_backward(dout, q, k, v, out, lse, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        dout, q, k, v, out, lse, 0.0, True, scale=scale)


def _previous_part(x: torch.Tensor, queries: bool) -> torch.Tensor:
    """The second triangle's rows, reversed: queries ``0 .. w-2`` of blocks ``1..``, or keys
    ``1 .. w-1`` of blocks ``..-1`` (query ``w-1`` sees nothing of the previous block, key 0 of
    it no query of the next)."""
    part = x[:, 1:, :-1] if queries else x[:, :-1, 1:]
    return part.flip(-2)


class _WindowAttentionCPU(torch.autograd.Function):
    """Blocked (``(BH, nb, w, d)``) windowed attention as two causal flash calls."""

    @staticmethod
    def forward(ctx, qb, kb, vb, scale):
        out_a, lse_a = _flash(qb, kb, vb, scale)  # own block: causal triangle
        out, lse = out_a.clone(), lse_a.clone()
        if qb.shape[1] > 1 and qb.shape[2] > 1:  # a previous block, and a window of 2+
            qp, kp, vp = _previous_part(qb, True), _previous_part(kb, False), \
                _previous_part(vb, False)
            out_b, lse_b = _flash(qp, kp, vp, scale)
            out_b, lse_b = out_b.flip(-2), lse_b.flip(-1)
            la = lse_a[:, 1:, :-1]
            merged = torch.logaddexp(la, lse_b)
            acc = torch.promote_types(out.dtype, torch.float32)  # bf16 merged in fp32
            out[:, 1:, :-1] = (out_a[:, 1:, :-1].to(acc) * (la - merged).exp()[..., None]
                               + out_b.to(acc) * (lse_b - merged).exp()[..., None]
                               ).to(out.dtype)
            lse[:, 1:, :-1] = merged
        ctx.save_for_backward(qb, kb, vb, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        qb, kb, vb, out, lse = ctx.saved_tensors
        scale = ctx.scale
        dout = dout.contiguous()
        dq, dk, dv = _flash_backward(dout, qb, kb, vb, out, lse, scale)
        if qb.shape[1] > 1 and qb.shape[2] > 1:
            dq_b, dk_b, dv_b = _flash_backward(
                _previous_part(dout, True).contiguous(), _previous_part(qb, True).contiguous(),
                _previous_part(kb, False).contiguous(), _previous_part(vb, False).contiguous(),
                _previous_part(out, True).contiguous(),
                lse[:, 1:, :-1].flip(-1).contiguous(), scale)
            dq[:, 1:, :-1] += dq_b.flip(-2)
            dk[:, :-1, 1:] += dk_b.flip(-2)
            dv[:, :-1, 1:] += dv_b.flip(-2)
        return dq, dk, dv, None


# ----------------------------------------------------------------------------- fused (CUDA)


@lru_cache(maxsize=8)
def _flex_block_mask(seq_len: int, window: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    def in_window(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (kv_idx > q_idx - window)

    return create_block_mask(in_window, None, None, seq_len, seq_len, device=device)


@lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                     scale: float | None = None) -> torch.Tensor:
    """Fused windowed attention, ``q, k, v`` ``(B, H, T, d)`` with as many K/V heads as query
    heads; the band only is computed (see the module docstring for how, per device)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    T = q.shape[-2]
    if window >= T:  # the band covers the whole causal triangle
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if q.is_cuda:
        mask = _flex_block_mask(T, window, str(q.device))
        return _compiled_flex()(q, k, v, block_mask=mask, scale=scale)
    qb, kb, vb = (_blocks(t.contiguous(), window) for t in (q, k, v))
    return _unblock(_WindowAttentionCPU.apply(qb, kb, vb, scale), q.shape)


def band_fraction(seq_len: int, window: int) -> float:
    """Scores inside the band over those of the causal triangle (the work a skipping kernel
    can save): ``(w(w+1)/2 + (s-w) w) / (s(s+1)/2)``."""
    s, w = seq_len, min(window, seq_len)
    return (w * (w + 1) / 2 + (s - w) * w) / (s * (s + 1) / 2)
