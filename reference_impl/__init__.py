"""Reference models and kernels. Imports nothing from ``suite``: the harness wraps this package
like any other framework.

Importing the package runs no torch code: ``Switches`` and ``LADDER`` are plain data
(``reference_impl.switches``), and the torch-backed exports are loaded on first access."""

from importlib import import_module

from reference_impl.switches import LADDER, Switches

_LAZY = {"PaddingFreeBert": "reference_impl.bert", "varlen_attention": "reference_impl.kernels",
         "PackInfo": "reference_impl.packing", "pack": "reference_impl.packing",
         "pack_info": "reference_impl.packing", "unpack": "reference_impl.packing"}

__all__ = ["LADDER", "PaddingFreeBert", "PackInfo", "Switches", "pack", "pack_info", "unpack",
           "varlen_attention"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
