"""What the pack's steps share: the repository's root, a GPU-aware timer, the clock and power
read under a kernel's load, and a step's outcome from its points' statuses."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]  # the repository


def time_ms(fn, device) -> float:
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=40))
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def under_load(fn, ms: float, device) -> dict[str, float]:
    """The SM clock (MHz) and board power (W) NVML reads while ``fn`` (``ms`` each) runs for
    about 0.2 s: whether a GEMM ran below the clock its peak assumes (the H200 run measured
    large GEMMs at a lower fraction of peak than medium ones). {} off CUDA or without NVML."""
    if device.type != "cuda":
        return {}
    try:
        import pynvml
    except ImportError:
        return {}
    import torch

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        for _ in range(max(2, math.ceil(200 / max(ms, 1e-3)))):
            fn()
        time.sleep(0.05)  # read under load: the queue holds about 0.2 s of work
        reading = {"sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                   "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3}
        torch.cuda.synchronize(device)
        return reading
    finally:
        pynvml.nvmlShutdown()


def outcome(statuses: dict[str, str]) -> dict[str, Any]:
    """A step's points: it failed when any point failed or was incorrect (a skipped point,
    past the budget, is said by its status)."""
    bad = {k: v for k, v in statuses.items() if v.split(":")[0] in ("failed", "incorrect")}
    return {"records": statuses, **({"status": "failed"} if bad else {})}
