"""peak.json: reading every schema version, and efficiencies that name their denominators.

Schema 1 (``torch.matmul`` only) is upgraded on read to the shape of schema 2, so every reader
(records, MFU, tables, report) sees one layout. An efficiency is never a bare percentage: each
figure says which peak it divides by (the measured best and its library, each library, the
theoretical CPU peak, the datasheet peak) and how that peak was obtained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


def read_peak(source: str | Path | dict[str, Any] | None) -> dict[str, Any] | None:
    """peak.json (a path or its parsed dict) in the schema-2 layout; None stays None."""
    if source is None:
        return None
    peak = source if isinstance(source, dict) else json.loads(Path(source).read_text())
    version = peak.get("schema_version")
    if version not in READABLE_VERSIONS:
        raise ValueError(f"peak file schema_version={version!r} is not one of "
                         f"{list(READABLE_VERSIONS)} (re-run `seedbench peak`)")
    return peak if version == SCHEMA_VERSION else _upgrade_v1(peak)


def _upgrade_v1(peak: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 measured torch.matmul only and kept no library, ISA or theoretical peak."""
    lib = "cublas" if peak.get("device_type") == "cuda" else "torch.matmul"
    peaks = {}
    for dtype, entry in peak.get("peaks", {}).items():
        m = entry["measured"]
        peaks[dtype] = {
            "measured": {"library": lib, "flops_per_s": m["flops_per_s"], "size": m.get("size"),
                         "per_size": m.get("per_size", [])},
            "libraries": {lib: {"library": lib, "status": "ok", "reason": "", "dtype": dtype,
                                "flops_per_s": m["flops_per_s"], "size": m.get("size"),
                                "per_size": m.get("per_size", []), "version": None,
                                "isa": None, "isa_source": "not recorded (peak schema 1)"}},
            "theoretical": {"flops_per_s": None, "formula": "", "inputs": {},
                            "reason": "not recorded (peak schema 1)"},
            "datasheet": entry.get("datasheet"),
        }
    return {**peak, "schema_version": SCHEMA_VERSION, "upgraded_from": 1, "cpu": None,
            "peaks": peaks}


def measured_best(peak: dict[str, Any] | None, dtype: str, device_type: str
                  ) -> dict[str, Any] | None:
    """The measured peak (best library) of this dtype and device type, or None."""
    if peak is None or peak.get("device_type") != device_type:
        return None
    entry = peak.get("peaks", {}).get(dtype)
    return entry and entry.get("measured")


def describe(peak: dict[str, Any], dtype: str) -> str:
    """'measured fp32 GEMM peak: onednn 446.1 GFLOP/s, the best library (AMD EPYC ..., 2
    threads, seedbench peak)'."""
    m = peak["peaks"][dtype]["measured"]
    return (f"measured {dtype} GEMM peak: {m['library']} {m['flops_per_s'] / 1e9:.1f} GFLOP/s, "
            f"the best library ({peak['device']}, {peak['threads']} threads, seedbench peak)")


def efficiency(flops_per_s: float, peak: dict[str, Any] | None, dtype: str,
               device_type: str) -> dict[str, Any]:
    """``flops_per_s`` as a percentage of each denominator peak.json has, each named.

    ``pct_of_measured_peak`` divides by the best library (``measured_peak_library``);
    ``pct_of_library_peak`` by each library that ran; ``pct_of_theoretical_peak`` by the CPU's
    formula peak (None when an input is unknown); ``pct_of_datasheet_peak`` by the vendor's.
    """
    peak = read_peak(peak)
    best = measured_best(peak, dtype, device_type)
    if best is None:
        why = ("no peak file" if peak is None else
               f"the peak file is for {peak.get('device_type')!r}, this run is on "
               f"{device_type!r}" if peak.get("device_type") != device_type else
               f"the peak file has no successful {dtype} measurement")
        return {"pct_of_measured_peak": None,
                "peak_note": f"{why} (run seedbench peak --dtypes {dtype})"}
    entry = peak["peaks"][dtype]
    libs = {name: 100 * flops_per_s / e["flops_per_s"]
            for name, e in entry.get("libraries", {}).items() if e.get("flops_per_s")}
    theory = entry.get("theoretical") or {}
    sheet = entry.get("datasheet")
    return {
        "pct_of_measured_peak": 100 * flops_per_s / best["flops_per_s"],
        "measured_peak_flops_per_s": best["flops_per_s"],
        "measured_peak_library": best["library"],
        "pct_of_library_peak": libs,
        "pct_of_theoretical_peak": (100 * flops_per_s / theory["flops_per_s"]
                                    if theory.get("flops_per_s") else None),
        "theoretical_peak_flops_per_s": theory.get("flops_per_s"),
        "theoretical_peak_note": (theory.get("formula") if theory.get("flops_per_s")
                                  else theory.get("reason")),
        "pct_of_datasheet_peak": 100 * flops_per_s / sheet["flops_per_s"] if sheet else None,
        "datasheet_peak": sheet,
        "peak_note": describe(peak, dtype) + ("" if sheet else "; no datasheet peak"),
    }
