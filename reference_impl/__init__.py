"""Reference models and kernels. Imports nothing from ``suite``: the harness wraps this package
like any other framework."""

from reference_impl.bert import LADDER, PaddingFreeBert, Switches
from reference_impl.kernels import varlen_attention
from reference_impl.packing import PackInfo, pack, pack_info, unpack

__all__ = ["LADDER", "PaddingFreeBert", "PackInfo", "Switches", "pack", "pack_info", "unpack",
           "varlen_attention"]
