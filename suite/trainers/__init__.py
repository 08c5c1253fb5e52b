"""Distributed training engines (plugins of the ``seedbench.trainers`` entry-point group) and
their registry, ``registry`` (``names``, ``check_names``, ``create``). The contract is
``suite.trainers.base.Trainer``; its names are loaded on first access, so that the registry (and
the workflow that checks names against it) can be imported without torch."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from suite.plugins import Registry

if TYPE_CHECKING:
    from suite.trainers.base import Trainer

GROUP = "seedbench.trainers"
registry: Registry[Trainer] = Registry(GROUP, "suite.trainers.base:Trainer", kind="trainer")

_BASE = ("DistInfo", "StepResult", "Trainer")
__all__ = ["GROUP", *_BASE, "registry"]


def __getattr__(name: str):
    if name in _BASE:
        value = getattr(import_module("suite.trainers.base"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_BASE))
