"""Baselines are found through the ``seedbench.baselines`` entry-point group; the built-in ones
are registered the same way in pyproject.toml, so a plugin package needs no change here."""

from __future__ import annotations

from suite.baselines.base import Baseline
from suite.plugins import Registry

GROUP = "seedbench.baselines"
_REGISTRY: Registry[Baseline] = Registry(GROUP, Baseline, kind="baseline")


def names() -> list[str]:
    return _REGISTRY.names()


def check_names(wanted: list[str] | tuple[str, ...]) -> None:
    """Refuse unknown names before any job starts (a typo should not cost a sweep)."""
    _REGISTRY.check_names(wanted)


def create(name: str) -> Baseline:
    return _REGISTRY.create(name)
