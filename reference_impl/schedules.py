"""Learning-rate schedules as plain functions ``step -> multiplier of the peak LR``.

Usable as ``torch.optim.lr_scheduler.LambdaLR(opt, make_schedule("wsd", total_steps=...))``;
``step`` counts optimizer steps from 0 (LambdaLR's ``last_epoch``).

Warm-up, shared by all: ``(step + 1) / warmup_steps`` for ``step < warmup_steps``, so the first
step already moves (no wasted step at LR 0) and step ``warmup_steps - 1`` runs at the peak.

- ``constant``: warm-up, then 1.
- ``cosine``: warm-up, then ``min + (1 - min) (1 + cos(pi p)) / 2`` with
  ``p = (step - warmup) / (total - warmup)``, reaching ``min_lr_ratio`` at ``step = total``.
- ``wsd`` (warm-up, stable, decay): 1 until ``decay_start = total - decay_fraction * total``
  (= ``(1 - decay_fraction) total``), then over ``p = (step - decay_start) / (total -
  decay_start)`` a decay ``min + (1 - min) f(p)`` with ``f`` = ``1 - p`` (linear),
  ``(1 + cos(pi p)) / 2`` (cosine), ``1 - sqrt(p)`` (sqrt); ``exp`` is geometric,
  ``min_lr_ratio ** p``, so it needs ``min_lr_ratio > 0``.

Past ``total_steps`` the multiplier stays at its final value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

SCHEDULES = ("constant", "cosine", "wsd")
DECAY_SHAPES = ("linear", "cosine", "sqrt", "exp")


def _int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r} must be an int >= {low}")


def _ratio(name: str, value, low_open: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        0.0 < value <= 1.0 if low_open else 0.0 <= value <= 1.0)
    if not ok:
        raise ValueError(f"{name}={value!r} must be in {'(0, 1]' if low_open else '[0, 1]'}")


def _warmup(step: int, warmup_steps: int) -> float | None:
    _int("step", step, 0)
    _int("warmup_steps", warmup_steps, 0)
    return (step + 1) / warmup_steps if step < warmup_steps else None


def constant(step: int, *, warmup_steps: int = 0) -> float:
    """Linear warm-up to 1, then 1."""
    w = _warmup(step, warmup_steps)
    return 1.0 if w is None else w


def cosine(step: int, *, total_steps: int, warmup_steps: int = 0,
           min_lr_ratio: float = 0.0) -> float:
    """Linear warm-up, then a half cosine from 1 to ``min_lr_ratio`` at ``total_steps``."""
    _int("total_steps", total_steps, 1)
    _int("warmup_steps", warmup_steps, 0)
    _ratio("min_lr_ratio", min_lr_ratio)
    if warmup_steps > total_steps:
        raise ValueError(f"warmup_steps={warmup_steps!r} must be <= total_steps={total_steps}")
    w = _warmup(step, warmup_steps)
    if w is not None:
        return w
    span = total_steps - warmup_steps
    p = 1.0 if span == 0 else min(1.0, (step - warmup_steps) / span)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))


def wsd(step: int, *, total_steps: int, warmup_steps: int = 0, decay_fraction: float = 0.1,
        shape: str = "linear", min_lr_ratio: float = 0.0) -> float:
    """Warm-up, stable at 1, and a decay over the last ``decay_fraction`` of ``total_steps``."""
    _int("total_steps", total_steps, 1)
    _int("warmup_steps", warmup_steps, 0)
    _ratio("decay_fraction", decay_fraction, low_open=True)
    _ratio("min_lr_ratio", min_lr_ratio)
    if shape not in DECAY_SHAPES:
        raise ValueError(f"shape={shape!r} is not one of {DECAY_SHAPES}")
    if shape == "exp" and min_lr_ratio <= 0.0:
        raise ValueError(f"shape='exp' decays geometrically to min_lr_ratio and needs "
                         f"min_lr_ratio > 0; got min_lr_ratio={min_lr_ratio!r}")
    decay_start = total_steps - decay_fraction * total_steps
    if warmup_steps > decay_start:
        raise ValueError(f"warmup_steps={warmup_steps!r} overlaps the decay, which starts at "
                         f"step {decay_start:g} = (1 - decay_fraction={decay_fraction}) * "
                         f"total_steps={total_steps}")
    w = _warmup(step, warmup_steps)
    if w is not None:
        return w
    if step <= decay_start:
        return 1.0
    p = min(1.0, (step - decay_start) / (total_steps - decay_start))
    if shape == "exp":
        return min_lr_ratio ** p
    f = {"linear": 1.0 - p, "cosine": 0.5 * (1.0 + math.cos(math.pi * p)),
         "sqrt": 1.0 - math.sqrt(p)}[shape]
    return min_lr_ratio + (1.0 - min_lr_ratio) * f


def make_schedule(kind: str, **kwargs) -> Callable[[int], float]:
    """``kind`` in ``SCHEDULES`` with its keyword arguments bound, for ``LambdaLR``. The
    arguments are checked here, once, by evaluating step 0."""
    table = {"constant": constant, "cosine": cosine, "wsd": wsd}
    if kind not in table:
        raise ValueError(f"kind={kind!r} is not one of {SCHEDULES}")
    fn = partial(table[kind], **kwargs)
    fn(0)
    return fn
