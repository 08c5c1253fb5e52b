"""Padding removal: attention mask -> ``cu_seqlens`` and token indices, pack and unpack.

The packed layout is FlashAttention's varlen convention: the valid tokens of all sequences laid
end to end, ``(total_tokens, ...)``, with ``cu_seqlens`` (int32, ``B + 1``) marking where each
sequence starts. Masks must be right-padded (valid tokens first), as BERT tokenizers produce.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackInfo:
    """Where the valid tokens of a right-padded ``[B, S]`` batch live once packed."""

    indices: torch.Tensor  # (T,) int64 flat positions b * S + s of the valid tokens
    cu_seqlens: torch.Tensor  # (B + 1,) int32 prefix sum of the lengths
    seqlens: torch.Tensor  # (B,) int32
    max_seqlen: int  # longest valid length in the batch (0 when all are empty)
    batch_size: int
    padded_len: int  # S

    @property
    def total_tokens(self) -> int:
        return int(self.indices.numel())


def pack_info(attention_mask: torch.Tensor) -> PackInfo:
    """Prefix-sum a right-padded ``[B, S]`` 0/1 mask into the packed layout."""
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be [batch, seq], got shape "
                         f"{tuple(attention_mask.shape)}")
    mask = attention_mask.bool()
    batch_size, padded_len = mask.shape
    seqlens = mask.sum(dim=1, dtype=torch.int32)
    # Right padding means position s is valid iff s < length; anything else would be silently
    # mis-packed, so refuse it.
    positions = torch.arange(padded_len, device=mask.device)
    if not torch.equal(mask, positions[None, :] < seqlens[:, None]):
        raise ValueError("attention_mask must be right-padded: each row 1...1 then 0...0")
    cu_seqlens = torch.zeros(batch_size + 1, dtype=torch.int32, device=mask.device)
    cu_seqlens[1:] = torch.cumsum(seqlens, dim=0)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max()) if batch_size else 0
    return PackInfo(indices, cu_seqlens, seqlens, max_seqlen, batch_size, padded_len)


def pack(x: torch.Tensor, info: PackInfo) -> torch.Tensor:
    """``[B, S, ...] -> [T, ...]``: keep only the valid tokens."""
    return x.reshape(info.batch_size * info.padded_len, *x.shape[2:]).index_select(0, info.indices)


def unpack(x: torch.Tensor, info: PackInfo) -> torch.Tensor:
    """``[T, ...] -> [B, S, ...]`` with zeros at the padded positions."""
    out = x.new_zeros(info.batch_size * info.padded_len, *x.shape[1:])
    out.index_copy_(0, info.indices, x)
    return out.reshape(info.batch_size, info.padded_len, *x.shape[1:])


def packed_positions(info: PackInfo) -> torch.Tensor:
    """Position id of every packed token inside its own sequence (0 .. len-1)."""
    return (info.indices % info.padded_len) if info.padded_len else info.indices
