"""Fused varlen multi-head attention in Triton, on the packed (padding-free) layout.

Why: the torch path runs one SDPA call per sequence, so a BERT batch costs B launches and every
launch sees one ragged length. Here one launch covers the whole batch: each program finds its own
sequence through ``cu_seqlens``, so no compute or memory goes to padding and nothing of size
S x S ever reaches global memory (softmax is done on chip with running max and sum, fp32).

Two variants, after ByteTransformer's split between a short-sequence fused MHA and a long one:

* ``short``: the whole K and V of a sequence is loaded on chip once and softmax is done in one
  pass (no loop over key blocks, no rescaling).
* ``long``: FlashAttention-style loop over key blocks with an online softmax.

Signature and layout follow FlashAttention's varlen API and ``attention.varlen_attention``.
Tensors on CPU only work under ``TRITON_INTERPRET=1``, which is how the tests run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from reference_impl.kernels.triton_common import check_device, is_interpreted

VARIANTS = ("auto", "short", "long")

TUNING_ENV = "SEEDBENCH_TRITON_TUNING"


@dataclass(frozen=True)
class Tuning:
    """The kernel's launch parameters. The defaults were chosen without a GPU; on one,
    ``seedbench gpu-check`` times candidates at the MHA study's shapes and writes the fastest
    as JSON to a file, which the variable ``SEEDBENCH_TRITON_TUNING`` names for later
    processes (read once, at import; the values in force are ``ACTIVE``).

    ``short_seq_max``: ``variant="auto"`` picks ``short`` up to this many keys, ``long`` beyond.
    The short variant holds a ``BLOCK_N x head_dim`` tile of K and of V (``BLOCK_N`` = the next
    power of two >= max_seqlen) plus a ``BLOCK_M x BLOCK_N`` fp32 score tile on chip at once: at
    256 keys and head_dim 128 in fp16, 2 x 64 KiB of K/V and a 64 x 256 fp32 score tile, about
    what one SM holds; longer sequences would spill, so the long variant's fixed key blocks win.
    Each variant has its own launch, tuned where it runs: ``short_block_m`` query rows per
    program, ``short_num_warps`` below 128 keys and ``short_num_warps_wide`` from 128;
    ``block_m``, ``long_block_n`` (keys per step of its loop) and ``num_warps`` for the long one.
    """
    block_m: int = 64
    long_block_n: int = 64
    num_warps: int = 4
    short_block_m: int = 64
    short_num_warps: int = 4
    short_num_warps_wide: int = 8
    short_seq_max: int = 256

    def __post_init__(self) -> None:
        for name in ("block_m", "long_block_n", "short_block_m", "short_seq_max"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 16 or value & (value - 1):
                raise ValueError(f"{name}={value!r} must be a power of two >= 16")
        for name in ("num_warps", "short_num_warps", "short_num_warps_wide"):
            if getattr(self, name) not in (1, 2, 4, 8, 16):
                raise ValueError(f"{name}={getattr(self, name)!r} is not one of 1, 2, 4, 8, 16")

    def launch(self, variant: str, max_seqlen: int) -> tuple[int, int, int]:
        """(BLOCK_M, BLOCK_N, num_warps) of ``variant`` ("short" or "long") at ``max_seqlen``."""
        if variant == "short":
            block_n = max(16, 1 << max(0, max_seqlen - 1).bit_length())  # tl.dot: dims >= 16
            warps = self.short_num_warps_wide if block_n >= 128 else self.short_num_warps
            return self.short_block_m, block_n, warps
        return self.block_m, self.long_block_n, self.num_warps


def load_tuning(path: str | None = None) -> Tuning:
    """The tuning in the JSON file ``path`` (default: the file ``SEEDBENCH_TRITON_TUNING``
    names), or the defaults when neither is given."""
    path = path or os.environ.get(TUNING_ENV)
    if not path:
        return Tuning()
    data = json.loads(Path(path).read_text())
    fields = {f.name for f in dataclasses.fields(Tuning)}
    unknown = sorted(set(data.get("tuning", data)) - fields)
    if unknown:
        raise ValueError(f"{path}: unknown tuning key(s) {unknown}; valid: {sorted(fields)}")
    return Tuning(**data.get("tuning", data))


ACTIVE = load_tuning()
SHORT_SEQ_MAX = ACTIVE.short_seq_max
BLOCK_M = ACTIVE.block_m  # query rows per program of the long variant
SHORT_BLOCK_M = ACTIVE.short_block_m  # and of the short one
LONG_BLOCK_N = ACTIVE.long_block_n  # keys per step of the long variant's loop
MAX_HEAD_DIM = 128  # head_dim is padded to a power of two (>= 16) on chip; 128 keeps tiles small

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_LOG2E = 1.4426950408889634  # softmax in base 2: exp(x) = exp2(x * log2(e)), exp2 is the fast op


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr):
    # UPCAST is set only under the interpreter for bfloat16, whose tl.dot multiplies the raw
    # uint16 bit patterns (triton-lang/triton#11584); the GPU does bf16 x bf16 -> fp32 natively.
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    else:
        return tl.dot(a, b)


@triton.jit
def _scores(q, k, offs_m, offs_n, seq_len, qk_scale, CAUSAL: tl.constexpr, UPCAST: tl.constexpr):
    # (BLOCK_M, BLOCK_N) scores in log2 units; keys past the sequence (or, causal, after the
    # query) get -inf so that exp2 turns them into exactly 0.
    s = _dot(q, tl.trans(k), UPCAST) * qk_scale
    keep = (offs_n < seq_len)[None, :]
    if CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None])
    return tl.where(keep, s, float("-inf"))


@triton.jit
def _varlen_attention_kernel(
    Q, K, V, Out, cu_seqlens, qk_scale,  # qk_scale = softmax_scale * log2(e)
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, SINGLE_PASS: tl.constexpr, UPCAST_DOT: tl.constexpr,
):
    block_m = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    seq_start = tl.load(cu_seqlens + seq)
    seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
    if block_m * BLOCK_M >= seq_len:  # this query block lies past the sequence (or it is empty)
        return

    # This (sequence, head)'s slice of each tensor; int64 since token * stride may pass 2^31.
    q_base = Q + seq_start.to(tl.int64) * stride_qt + head * stride_qh
    k_base = K + seq_start.to(tl.int64) * stride_kt + head * stride_kh
    v_base = V + seq_start.to(tl.int64) * stride_vt + head * stride_vh
    o_base = Out + seq_start.to(tl.int64) * stride_ot + head * stride_oh

    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query positions within the sequence
    offs_d = tl.arange(0, BLOCK_D)  # head_dim padded to a power of two, the pad masked off
    m_mask = (offs_m < seq_len)[:, None] & (offs_d < HEAD_DIM)[None, :]
    q = tl.load(q_base + offs_m[:, None] * stride_qt + offs_d[None, :], mask=m_mask, other=0.0)

    # Every live row keeps at least key 0 unmasked (causal: 0 <= query position), so the row
    # max is finite from the first key block on and no row ever computes -inf - -inf.
    if SINGLE_PASS:
        # short: all keys of the sequence in one tile, plain (not online) softmax.
        offs_n = tl.arange(0, BLOCK_N)
        n_mask = (offs_n < seq_len)[:, None] & (offs_d < HEAD_DIM)[None, :]
        k = tl.load(k_base + offs_n[:, None] * stride_kt + offs_d[None, :], mask=n_mask, other=0.0)
        v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], mask=n_mask, other=0.0)
        s = _scores(q, k, offs_m, offs_n, seq_len, qk_scale, CAUSAL, UPCAST_DOT)
        p = tl.exp2(s - tl.max(s, axis=1)[:, None])
        l_i = tl.sum(p, axis=1)
        acc = _dot(p.to(v.dtype), v, UPCAST_DOT)
    else:
        # long: key blocks of BLOCK_N; m_i is the running row max, l_i the running row sum of
        # exp2(s - m_i), acc the running sum of exp2(s - m_i) @ v. When the max grows, the old
        # l_i and acc are rescaled by exp2(m_old - m_new).
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        kv_end = seq_len
        if CAUSAL:  # keys after the block's last query are masked for every row: skip them
            kv_end = tl.minimum(seq_len, (block_m + 1) * BLOCK_M)
        for start_n in range(0, kv_end, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            n_mask = (offs_n < seq_len)[:, None] & (offs_d < HEAD_DIM)[None, :]
            k = tl.load(k_base + offs_n[:, None] * stride_kt + offs_d[None, :], n_mask, other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vt + offs_d[None, :], n_mask, other=0.0)
            s = _scores(q, k, offs_m, offs_n, seq_len, qk_scale, CAUSAL, UPCAST_DOT)
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)  # 0 on the first block (m_i = -inf)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, UPCAST_DOT)
            m_i = m_new

    out = acc / l_i[:, None]
    o_ptrs = o_base + offs_m[:, None] * stride_ot + offs_d[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=m_mask)


_INTERPRETED = is_interpreted(_varlen_attention_kernel)


def choose_variant(max_seqlen: int, tuning: Tuning | None = None) -> str:
    """The ``auto`` rule: ``short`` up to ``short_seq_max`` keys, ``long`` beyond."""
    return "short" if max_seqlen <= (tuning or ACTIVE).short_seq_max else "long"


def triton_varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    variant: str = "auto",
    tuning: Tuning | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale) v of each sequence with itself, ``(total_tokens, heads, head_dim)``.

    ``q``, ``k``, ``v``: packed ``(total_tokens, heads, head_dim)``, fp16, bf16 or fp32, one dtype.
    Strided views (e.g. slices of a fused QKV tensor) are used as they are when the last dim is
    contiguous. ``cu_seqlens``: int32 ``(B + 1,)`` prefix sums of the lengths, on the same device;
    ``cu_seqlens[-1]`` must equal ``total_tokens`` and ``max_seqlen`` must be at least the longest
    length (neither is checked: that would cost a device-to-host sync per call). ``causal`` masks
    keys after the query, positions counted from each sequence's start. ``softmax_scale`` defaults
    to ``1 / sqrt(head_dim)``. ``variant``: ``"short"``, ``"long"`` or ``"auto"`` (see
    ``Tuning.short_seq_max``); ``"short"`` is not refused above it, but its tiles may then not
    fit on a GPU. ``tuning``: launch parameters (default ``ACTIVE``). With fp32 inputs on a GPU
    the products run in TF32, Triton's default.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is not one of {VARIANTS}")
    if q.dim() != 3 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            f"q, k, v must share one (total_tokens, heads, head_dim) shape; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in _DTYPES:
        raise ValueError(
            f"q, k, v must share one dtype out of {_DTYPES}; got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    total_tokens, heads, head_dim = q.shape
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim={head_dim} is not supported: must be in 1..{MAX_HEAD_DIM}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1 or cu_seqlens.dtype != torch.int32:
        raise ValueError(
            f"cu_seqlens must be a 1-D int32 tensor of B + 1 prefix sums; got shape "
            f"{tuple(cu_seqlens.shape)}, dtype {cu_seqlens.dtype}"
        )
    max_seqlen = int(max_seqlen)
    if max_seqlen < 0:
        raise ValueError(f"max_seqlen={max_seqlen} must be >= 0")
    check_device(_INTERPRETED, q, k, v, cu_seqlens)

    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    batch = cu_seqlens.numel() - 1
    if total_tokens == 0 or batch == 0 or max_seqlen == 0 or heads == 0:
        return out

    tuning = tuning or ACTIVE
    if variant == "auto":
        variant = choose_variant(max_seqlen, tuning)
    block_m, block_n, warps = tuning.launch(variant, max_seqlen)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)

    grid = (triton.cdiv(max_seqlen, block_m), heads, batch)
    _varlen_attention_kernel[grid](
        q, k, v, out, cu_seqlens, float(softmax_scale) * _LOG2E,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
        SINGLE_PASS=variant == "short", UPCAST_DOT=_INTERPRETED and q.dtype == torch.bfloat16,
        num_warps=warps,
    )
    return out
