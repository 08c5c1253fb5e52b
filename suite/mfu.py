"""FLOP formulas. Efficiency figures count matmul FLOPs only (2 per multiply-add), the
convention of MFU accounting; LayerNorm, softmax and element-wise work are left out."""

from __future__ import annotations

from collections.abc import Sequence


def bert_encoder_flops(layers: int, hidden: int, intermediate: int,
                       lengths: Sequence[int]) -> float:
    """Matmul FLOPs of a BERT encoder forward over sequences of the given lengths.

    Per layer and token: QKV 2*3h^2, attention output 2*h^2, FFN 2*2*h*i. Per layer and
    sequence of length l: Q K^T and P V, 2*2*l^2*h. Pass the true lengths for the useful work,
    or the padded lengths for what a padded implementation computes.
    """
    tokens = sum(lengths)
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 4 * hidden * sum(l * l for l in lengths)
    return float(layers * (per_token * tokens + attention))
