"""Baselines are found through the ``seedbench.baselines`` entry-point group; the built-in ones
are registered the same way in pyproject.toml, so a plugin package needs no change here.

``baselines`` is the registry (``names``, ``check_names``, ``create``). Importing this module
imports no framework: the ``Baseline`` class is loaded with the first baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from suite.plugins import Registry

if TYPE_CHECKING:
    from suite.baselines.base import Baseline

GROUP = "seedbench.baselines"
baselines: Registry[Baseline] = Registry(GROUP, "suite.baselines.base:Baseline", kind="baseline")
