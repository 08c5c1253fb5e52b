"""Baseline plugins: ``Baseline`` is the contract, ``registry.baselines`` finds them by entry
point. The contract's names are loaded on first access, so that the registry (and the workflow
that checks names against it) can be imported without torch."""

from suite.plugins import lazy_exports

__all__ = ["Baseline", "Supports", "Unavailable"]

__getattr__, __dir__ = lazy_exports(globals(), __all__, "suite.baselines.base")
