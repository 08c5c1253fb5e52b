"""Padding removal: attention mask -> ``cu_seqlens`` and token indices, pack and unpack.

The packed layout is FlashAttention's varlen convention: the valid tokens of all sequences laid
end to end, ``(total_tokens, ...)``, with ``cu_seqlens`` (int32, ``B + 1``) marking where each
sequence starts. Masks must be right-padded (valid tokens first), as BERT tokenizers produce.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def pack_info_from_lengths(lengths: Sequence[int], padded_len: int,
                           device: torch.device | str | None = None) -> PackInfo:
    """The same layout, built on the host from lengths the caller already knows. ``pack_info``
    reads the device three times (the right-padding check, ``nonzero``, the longest length), so
    on a GPU every forward waited for the queue to drain before launching its first kernel;
    this reads nothing back: the index tensors are made on the host and copied without a
    wait (from pinned memory on CUDA)."""
    lengths = [int(n) for n in lengths]
    bad = [n for n in lengths if not 0 <= n <= padded_len]
    if bad:
        raise ValueError(f"lengths {bad} lie outside [0, padded_len={padded_len}]")
    seqlens = torch.tensor(lengths, dtype=torch.int32)
    cu_seqlens = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu_seqlens[1:] = torch.cumsum(seqlens, dim=0)
    indices = torch.cat([torch.arange(n, dtype=torch.int64) + b * padded_len
                         for b, n in enumerate(lengths)] or [torch.zeros(0, dtype=torch.int64)])
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        indices, cu_seqlens, seqlens = (t.pin_memory().to(device, non_blocking=True)
                                        for t in (indices, cu_seqlens, seqlens))
    return PackInfo(indices, cu_seqlens, seqlens, max(lengths, default=0), len(lengths),
                    padded_len)


def packing_of(attention_mask: torch.Tensor, lengths: Sequence[int] | None = None) -> PackInfo:
    """A forward's packing: from ``lengths`` on the host where the caller knows them, else
    read from the mask."""
    if lengths is None:
        return pack_info(attention_mask)
    if attention_mask.dim() != 2 or attention_mask.shape[0] != len(lengths):
        raise ValueError(f"{len(lengths)} lengths for an attention_mask of shape "
                         f"{tuple(attention_mask.shape)}: one per row of [batch, seq]")
    return pack_info_from_lengths(lengths, attention_mask.shape[1], attention_mask.device)


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
