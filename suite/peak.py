"""Achievable matmul throughput of this device, measured, next to the datasheet peak.

Efficiency figures divide by one of the two and say which: the datasheet number is what the
vendor promises, the measured one what this machine, thread count and library actually reach.
"""

from __future__ import annotations

import csv
import time
from typing import Any

import torch

from suite.env import REPO_ROOT

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
          "bf16": torch.bfloat16}
DATASHEET_CSV = REPO_ROOT / "results" / "paper" / "peak_flops_dense.csv"


def measure_matmul_peak(dtype: str, device: torch.device, sizes: list[int],
                        repeats: int = 3, min_time_s: float = 0.2) -> dict[str, Any]:
    """Best FLOP/s over square matmuls of the given sizes (best of ``repeats`` per size)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}")
    if dtype == "tf32" and device.type != "cuda":
        raise ValueError("tf32 is a CUDA tensor-core mode; on CPU measure fp32")
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    best: dict[str, Any] = {"flops_per_s": 0.0, "size": None}
    per_size = []
    for n in sizes:
        a = torch.randn(n, n, device=device).to(DTYPES[dtype])
        b = torch.randn(n, n, device=device).to(DTYPES[dtype])
        torch.matmul(a, b)  # warm-up: library init, autotuning
        rates = []
        for _ in range(repeats):
            calls, elapsed = _timed_calls(lambda: torch.matmul(a, b), device, min_time_s)
            rates.append(2 * n**3 * calls / elapsed)
        per_size.append({"size": n, "flops_per_s": max(rates), "samples": rates})
        if max(rates) > best["flops_per_s"]:
            best = {"flops_per_s": max(rates), "size": n}
    torch.backends.cuda.matmul.allow_tf32 = False
    return {"dtype": dtype, **best, "per_size": per_size}


def _timed_calls(fn, device: torch.device, min_time_s: float) -> tuple[int, float]:
    calls = 0
    _sync(device)
    t0 = time.perf_counter()
    while True:
        fn()
        calls += 1
        _sync(device)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time_s:
            return calls, elapsed


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def datasheet_peak(device_name: str, dtype: str) -> dict[str, Any] | None:
    """The vendor's dense peak for a known device name, or None (CPUs, unknown GPUs).

    Never falls back to another device's number: an unknown device has no datasheet peak.
    """
    rows = list(csv.DictReader(DATASHEET_CSV.open()))
    name = device_name.upper()
    if "H100" in name and not any(v in name for v in ("PCIE", "NVL")):
        name += " SXM"  # 'NVIDIA H100 80GB HBM3' is the SXM part
    matches = [r for r in rows if r["dtype"] == dtype
               and all(tok.upper() in name for tok in r["device"].split())]
    if not matches:
        return None
    row = max(matches, key=lambda r: len(r["device"]))
    return {"device": row["device"], "flops_per_s": float(row["peak_tflops"]) * 1e12,
            "source": row["source"]}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from suite.env import cpu_model

    return cpu_model()


def peak_report(dtypes: list[str], device: torch.device, sizes: list[int],
                repeats: int) -> dict[str, Any]:
    name = device_name(device)
    peaks = {}
    for dtype in dtypes:
        measured = measure_matmul_peak(dtype, device, sizes, repeats)
        peaks[dtype] = {"measured": measured, "datasheet": datasheet_peak(name, dtype)}
    return {"device": name, "device_type": device.type, "threads": torch.get_num_threads(),
            "peaks": peaks}
