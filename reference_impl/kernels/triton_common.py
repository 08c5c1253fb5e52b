"""What the Triton kernel modules share: whether kernels run interpreted, and the device check."""

from __future__ import annotations

import torch
import triton


def is_interpreted(kernel) -> bool:
    """``triton.jit`` returns an InterpretedFunction instead of a JITFunction under
    ``TRITON_INTERPRET=1`` (read when the kernel is decorated)."""
    return not isinstance(kernel, triton.JITFunction)


def check_device(interpreted: bool, *tensors: torch.Tensor) -> None:
    devices = {t.device for t in tensors}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device; got {sorted(map(str, devices))}")
    device = devices.pop()
    if device.type != "cuda" and not interpreted:
        raise RuntimeError(
            f"Triton kernels need CUDA tensors, got device {device}; CPU tensors work only when "
            f"TRITON_INTERPRET=1 is set before triton is imported"
        )
