"""What this machine can do in GEMMs: every reachable library measured, a theoretical CPU peak
derived, and the datasheet peak of known GPUs.

An efficiency is only as honest as its denominator. ``torch.matmul`` alone is not the machine: on
an AMD CPU with AVX-512 it takes MKL's slow path and oneDNN runs 2x faster, so a framework on oneDNN
would show as "133% of peak". ``seedbench peak`` therefore times each library in its own process
(``libraries``), keeps each one's version and ISA, calls the best "the measured peak", and records
a theoretical peak from cpuinfo where every input of its formula is known (``cpu_theory``).
``schema`` reads peak.json (any schema version) and turns a FLOP/s figure into efficiencies that
name their denominators.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from suite.env import cpu_model, usable_cores
from suite.peak.libraries import CPU_LIBRARIES, GPU_LIBRARIES, measure_library
from suite.peak.schema import SCHEMA_VERSION

DATASHEET_CSV = Path(__file__).parent.parent / "data" / "peak_flops_dense.csv"  # package data


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


def gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def peak_report(dtypes: list[str], device_type: str, sizes: list[int], repeats: int,
                threads: int | None = None, libraries: list[str] | None = None,
                min_time_s: float = 0.2, fma_units: int | None = None,
                clock_ghz: float | None = None) -> dict[str, Any]:
    """The peak.json body (schema ``SCHEMA_VERSION``): per dtype, every library's entry, the
    best of them as ``measured``, the theoretical CPU peak and the datasheet peak."""
    from suite.peak.cpu_theory import cpu_facts, theoretical_peak

    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type={device_type!r} is not one of ['cpu', 'cuda']")
    threads = threads or usable_cores()
    names = libraries or list(CPU_LIBRARIES if device_type == "cpu" else GPU_LIBRARIES)
    name = gpu_name() if device_type == "cuda" else cpu_model()
    if name is None:
        raise ValueError("device_type='cuda' but torch sees no CUDA device")
    facts = cpu_facts()
    peaks = {}
    for dtype in dtypes:
        entries = {lib: measure_library(lib, dtype, sizes, repeats, min_time_s, threads)
                   for lib in names}
        ok = [e for e in entries.values() if e["status"] == "ok"]
        best = max(ok, key=lambda e: e["flops_per_s"]) if ok else None
        theory = (theoretical_peak(dtype, threads, facts, fma_units, clock_ghz)
                  if device_type == "cpu" else
                  {"flops_per_s": None, "formula": "", "inputs": {},
                   "reason": "GPUs: see the datasheet peak"})
        peaks[dtype] = {
            "measured": best and {k: best[k] for k in ("library", "flops_per_s", "size",
                                                        "per_size")},
            "libraries": entries,
            "theoretical": theory,
            "datasheet": datasheet_peak(name, dtype) if device_type == "cuda" else None,
        }
    return {"schema_version": SCHEMA_VERSION, "device": name, "device_type": device_type,
            "threads": threads, "cpu": facts, "peaks": peaks}
