"""Distributed training engines (plugins of the ``seedbench.trainers`` entry-point group) and
their registry, ``registry`` (``names``, ``check_names``, ``create``). The contract is
``suite.trainers.base.Trainer``; its names are loaded on first access, so that the registry (and
the workflow that checks names against it) can be imported without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from suite.plugins import Registry, lazy_exports

if TYPE_CHECKING:
    from suite.trainers.base import Trainer

GROUP = "seedbench.trainers"
registry: Registry[Trainer] = Registry(GROUP, "suite.trainers.base:Trainer", kind="trainer")

_BASE = ("DistInfo", "StepResult", "Trainer")
__all__ = ["GROUP", *_BASE, "registry"]

__getattr__, __dir__ = lazy_exports(globals(), _BASE, "suite.trainers.base")
