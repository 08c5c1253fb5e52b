"""Variable-length batches: length distributions and padded BERT inputs built from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

DISTRIBUTIONS = ("bytetransformer", "uniform", "fixed", "longtail")


def varlen_lengths(batch_size: int, max_seq_len: int,
                   distribution: str | Sequence[int] = "bytetransformer",
                   seed: int = 0) -> list[int]:
    """Sequence lengths of one batch.

    - ``bytetransformer``: avg = max*60//100, lengths uniform on [2*avg - max, max], as the
      ByteTransformer benchmark draws them (mean length 60% of max).
    - ``uniform``: uniform on [1, max].
    - ``fixed``: every sequence has length max (no padding: where padding-free cannot help).
    - ``longtail``: log-normal with median max/8 and sigma 1, clipped to [1, max]; most sequences
      short, a few at the maximum (chat / search traffic).
    - an explicit list of lengths, one per sequence, each in [0, max].
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise ValueError(f"max_seq_len must be an integer >= 1, got {max_seq_len!r}")
    if not isinstance(distribution, str):
        lengths = [int(n) for n in distribution]
        if len(lengths) != batch_size:
            raise ValueError(f"explicit lengths {lengths} hold {len(lengths)} sequences, "
                             f"batch_size is {batch_size}")
        bad = [n for n in lengths if not 0 <= n <= max_seq_len]
        if bad:
            raise ValueError(f"explicit lengths {bad} lie outside [0, max_seq_len={max_seq_len}]")
        return lengths
    rng = np.random.default_rng(seed)
    if distribution == "bytetransformer":
        avg = max_seq_len * 60 // 100
        low = max(2 * avg - max_seq_len, 1)
        drawn = rng.integers(low, max_seq_len + 1, size=batch_size)
    elif distribution == "uniform":
        drawn = rng.integers(1, max_seq_len + 1, size=batch_size)
    elif distribution == "fixed":
        drawn = np.full(batch_size, max_seq_len)
    elif distribution == "longtail":
        drawn = np.clip(np.rint(rng.lognormal(np.log(max_seq_len / 8), 1.0, size=batch_size)),
                        1, max_seq_len)
    else:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {list(DISTRIBUTIONS)} "
                         "or an explicit list of lengths")
    return [int(n) for n in drawn]


@dataclass(frozen=True)
class BertBatch:
    """Right-padded BERT inputs, ``[B, S]`` each, as a tokenizer would hand them over."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    lengths: tuple[int, ...]

    def to(self, device: str | torch.device) -> "BertBatch":
        return BertBatch(self.input_ids.to(device), self.attention_mask.to(device),
                         self.token_type_ids.to(device), self.lengths)


def bert_batch(lengths: Sequence[int], max_seq_len: int, vocab_size: int,
               seed: int = 0) -> BertBatch:
    """Random token ids for the given lengths, padded on the right to ``max_seq_len``.

    Padding goes to ``max_seq_len`` (not to the longest sequence), as a serving system with a
    fixed input shape does and as the paper's padded baselines do. Token types mark a sentence
    pair: the first half of each sequence is segment 0, the rest segment 1.
    """
    lengths = tuple(int(n) for n in lengths)
    bad = [n for n in lengths if not 0 <= n <= max_seq_len]
    if bad:
        raise ValueError(f"lengths {bad} lie outside [0, max_seq_len={max_seq_len}]")
    gen = torch.Generator().manual_seed(seed)
    positions = torch.arange(max_seq_len)
    lens = torch.tensor(lengths, dtype=torch.long)
    mask = (positions[None, :] < lens[:, None]).long()
    # Ids from 1: 0 is BERT's [PAD].
    ids = torch.randint(1, vocab_size, (len(lengths), max_seq_len), generator=gen) * mask
    types = ((positions[None, :] >= (lens[:, None] + 1) // 2).long()) * mask
    return BertBatch(ids, mask, types, lengths)


def flop_bounds(lengths: Sequence[int], max_seq_len: int) -> dict[str, float]:
    """Upper bounds on what removing padding can save: padded work over useful work.

    GEMMs scale with tokens, sum(L) / sum(l_i); attention with squared lengths,
    sum(L^2) / sum(l_i^2).
    """
    n, s = len(lengths), max_seq_len
    useful = sum(lengths)
    useful_sq = sum(l * l for l in lengths)
    return {
        "gemm_flop_bound": n * s / useful if useful else float("inf"),
        "attention_flop_bound": n * s * s / useful_sq if useful_sq else float("inf"),
    }
