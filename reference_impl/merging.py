"""Checkpoint merging in pre-training (PMA; Li et al. 2025, "Model Merging in Pre-training of
Large Language Models", arXiv 2505.12082).

N checkpoints ``C_1 .. C_N`` in training order (``C_N`` the newest) merge into one model:

- SMA (simple moving average): ``M = (1/N) sum_i C_i``;
- WMA (weighted moving average): ``M = sum_i w_i C_i`` with ``w_i = i / sum_j j = 2i / (N(N+1))``,
  the newest heaviest;
- EMA (exponential moving average), recursive: ``M_1 = C_1``,
  ``M_i = alpha C_i + (1 - alpha) M_{i-1}``; in closed form ``w_1 = (1-alpha)^(N-1)``,
  ``w_i = alpha (1-alpha)^(N-i)`` for ``i >= 2`` (the weights sum to 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

METHODS = ("sma", "ema", "wma")


def _check(method: str, alpha: float) -> None:
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not one of {METHODS}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha={alpha!r} must be in (0, 1]")


def merge_weights(n: int, method: str = "sma", alpha: float = 0.2) -> list[float]:
    """The effective weight of each of ``n`` checkpoints (oldest first) under ``method``; they
    sum to 1. ``alpha`` is EMA's (checked for every method, so a typo never passes silently)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be a positive int (the number of checkpoints)")
    _check(method, alpha)
    if method == "sma":
        return [1.0 / n] * n
    if method == "wma":
        total = n * (n + 1) / 2
        return [i / total for i in range(1, n + 1)]
    return [(1.0 - alpha) ** (n - 1)] + [alpha * (1.0 - alpha) ** (n - i) for i in range(2, n + 1)]


def merge_checkpoints(state_dicts: Sequence[Mapping[str, torch.Tensor]], method: str = "sma",
                      alpha: float = 0.2) -> dict[str, torch.Tensor]:
    """Merge state dicts given in training order (the last is the newest).

    Floating tensors are merged in float64 and cast back to their dtype; everything else (integer
    and bool buffers such as step counters or masks, non-tensor entries) is taken from the newest
    checkpoint. All checkpoints must have the same keys, shapes and dtypes."""
    _check(method, alpha)
    if len(state_dicts) == 0:
        raise ValueError("state_dicts is empty: need at least one checkpoint to merge")
    first, newest = state_dicts[0], state_dicts[-1]
    for index, sd in enumerate(state_dicts):
        missing, extra = set(first) - set(sd), set(sd) - set(first)
        if missing or extra:
            key = sorted(missing or extra)[0]
            where = "missing from" if missing else "not in checkpoint 0 but in"
            raise ValueError(f"key {key!r} is {where} checkpoint {index} (of {len(state_dicts)}); "
                             f"all checkpoints must have the same keys")
        for key, value in sd.items():
            ref = first[key]
            if isinstance(value, torch.Tensor) != isinstance(ref, torch.Tensor):
                raise ValueError(f"key {key!r}: checkpoint {index} holds a "
                                 f"{type(value).__name__}, checkpoint 0 a {type(ref).__name__}")
            if not isinstance(value, torch.Tensor):
                continue
            if value.shape != ref.shape:
                raise ValueError(f"key {key!r}: shape {tuple(value.shape)} in checkpoint {index} "
                                 f"!= {tuple(ref.shape)} in checkpoint 0")
            if value.dtype != ref.dtype:
                raise ValueError(f"key {key!r}: dtype {value.dtype} in checkpoint {index} "
                                 f"!= {ref.dtype} in checkpoint 0")
    weights = merge_weights(len(state_dicts), method, alpha)
    merged: dict[str, torch.Tensor] = {}
    for key in first:
        value = newest[key]
        if not (isinstance(value, torch.Tensor) and value.is_floating_point()):
            merged[key] = value
            continue
        device = value.device
        if method == "ema":  # the recursion itself, as the paper writes it
            acc = state_dicts[0][key].to(device=device, dtype=torch.float64)
            for sd in state_dicts[1:]:
                acc = alpha * sd[key].to(device=device, dtype=torch.float64) + (1.0 - alpha) * acc
        else:
            acc = torch.zeros(value.shape, dtype=torch.float64, device=device)
            for w, sd in zip(weights, state_dicts):
                acc += w * sd[key].to(device=device, dtype=torch.float64)
        merged[key] = acc.to(value.dtype)
    return merged
