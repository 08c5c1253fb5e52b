"""Baseline plugins: ``Baseline`` is the contract, ``registry.baselines`` finds them by entry
point. The contract's names are loaded on first access, so that the registry (and the workflow
that checks names against it) can be imported without torch."""

from importlib import import_module

__all__ = ["Baseline", "Supports", "Unavailable"]


def __getattr__(name: str):
    if name in __all__:
        value = getattr(import_module("suite.baselines.base"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
