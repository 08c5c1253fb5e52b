"""Distributed training engines (plugins of the ``seedbench.trainers`` entry-point group) and
their registry. The contract is ``suite.trainers.base.Trainer``."""

from __future__ import annotations

from suite.plugins import Registry
from suite.trainers.base import DistInfo, StepResult, Trainer

GROUP = "seedbench.trainers"
registry: Registry[Trainer] = Registry(GROUP, Trainer, kind="trainer")


def names() -> list[str]:
    return registry.names()


def check_names(wanted: list[str] | tuple[str, ...]) -> None:
    registry.check_names(wanted)


def create(name: str) -> Trainer:
    return registry.create(name)


__all__ = ["GROUP", "DistInfo", "StepResult", "Trainer", "check_names", "create", "names",
           "registry"]
