"""Argument checks shared by the scale model's dataclasses: each error names the value and what
would be valid."""

from __future__ import annotations

import math
from numbers import Integral, Real


def check_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"{name}={value!r} must be an integer >= 0")


def check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive number")


def check_fraction(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value <= 1:
        raise ValueError(f"{name}={value!r} must be a fraction in [0, 1]")


def check_bool(name: str, value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be a bool")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {list(choices)}")
