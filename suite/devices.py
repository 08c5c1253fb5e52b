"""Device and dtype names of configs and records -> torch objects, in one place.

A config names a device ("auto", "cpu", "cuda") and a dtype ("fp32", "fp16", "bf16"; "tf32" is
fp32 storage with TF32 matmuls, a peak measurement's dtype). A device that is asked for but
absent is ``Unavailable`` (the point cannot run on this machine), not a failure.
"""

from __future__ import annotations

import torch

from suite.records import Unavailable

TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
                "bf16": torch.bfloat16}
DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items() if name != "tf32"}


def torch_dtype(name: str) -> torch.dtype:
    if name not in TORCH_DTYPES:
        raise ValueError(f"dtype {name!r} is not one of {sorted(TORCH_DTYPES)}")
    return TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype {dtype} has no name here; named: {sorted(DTYPE_NAMES.values())}")
    return DTYPE_NAMES[dtype]


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """"auto" is CUDA when present, else CPU; on CUDA, a process's GPU is its local rank (modulo
    the GPUs visible)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise Unavailable("device 'cuda' requested but torch.cuda.is_available() is False")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    if name != "cpu":
        raise ValueError(f"device {name!r} is not one of ['auto', 'cpu', 'cuda']")
    return torch.device("cpu")
