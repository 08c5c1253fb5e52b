"""Theoretical fp32/fp64 FLOP/s peak of this CPU, with every input and where it came from.

peak = cores x FMA units per core x (vector bits / lane bits) x 2 FLOPs per FMA x clock.
A measured rate means something only next to a peak whose inputs can be checked: each input
carries its source, and one that cannot be known makes the result unknown with the reason,
since a guessed FMA count or clock would silently move every efficiency figure.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path

LANE_BITS = {"fp32": 32, "fp64": 64}
NOMINAL_SRC = ("nominal base clock in the CPU model name; turbo may exceed it, so measured rates "
               "can exceed this peak")
X86 = {"x86_64", "amd64", "i386", "i686"}
# Intel family-6 big cores with two 256-bit FMA pipes (ports 0 and 1), Haswell through Granite
# Rapids. Hybrid (Alder/Raptor/Meteor/Arrow/Lunar Lake) and Atom-class (Sierra Forest) parts are
# left out: their E-cores have 128-bit FMA pipes, so a per-core count would be a guess.
INTEL_2X256 = (0x3C, 0x3F, 0x45, 0x46, 0x3D, 0x47, 0x4F, 0x56, 0x4E, 0x5E, 0x55, 0x8E, 0x9E,
               0xA5, 0xA6, 0x66, 0x7D, 0x7E, 0x6A, 0x6C, 0x8C, 0x8D, 0xA7, 0x8F, 0xCF, 0xAD, 0xAE)
# (vendor, family, model ranges, {vector bits: full-width FMA issues per cycle}, source).
FMA_TABLE = [
    ("AuthenticAMD", 0x17, [(0x00, 0x2F)], {256: 1},
     "AMD Software Optimization Guide for Family 17h Processors (Zen/Zen+): two 128-bit FMA "
     "pipes, a 256-bit AVX op runs as two 128-bit halves"),
    ("AuthenticAMD", 0x17, [(0x30, 0xFF)], {256: 2}, "AMD Software Optimization Guide for "
     "Family 17h Models 30h and Greater (Zen 2): two 256-bit FMA pipes"),
    ("AuthenticAMD", 0x19, [(0x00, 0x0F), (0x20, 0x5F)], {256: 2},
     "AMD Software Optimization Guide for EPYC 7003 / Family 19h (Zen 3): two 256-bit FMA pipes"),
    ("AuthenticAMD", 0x19, [(0x10, 0x1F), (0x60, 0x7F), (0xA0, 0xAF)], {256: 2, 512: 1},
     "AMD Software Optimization Guide for Family 19h (Zen 4): two 256-bit FMA pipes, "
     "a 512-bit FMA occupies both"),
    ("GenuineIntel", 6, [(m, m) for m in INTEL_2X256], {256: 2}, "Intel 64 and IA-32 "
     "Architectures Optimization Reference Manual (Haswell onward): two 256-bit FMA units"),
]


def _fields(text: str) -> dict[str, str]:
    """'key : value' lines of the first block (one processor in /proc/cpuinfo)."""
    out: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in out:
            out[key.strip()] = value.strip()
    return out


def _num(text: str | None, kind: type) -> int | float | None:
    try:
        return kind(text)
    except (TypeError, ValueError):
        return None


def cpu_facts(cpuinfo_text: str | None = None, lscpu_text: str | None = None) -> dict:
    """Vendor, family, model, flags and clocks of this CPU (or of the given texts).

    None reads /proc/cpuinfo and runs `lscpu`; either may be missing (containers, macOS), and
    "" means "absent". The arch is lscpu's 'Architecture' when given, so texts from another
    machine describe that machine, else platform.machine().
    """
    if cpuinfo_text is None:
        cpuinfo_text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if lscpu_text is None:
        try:  # C locale: labels and decimal points are then the ones parsed below
            lscpu_text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                                        env={**os.environ, "LC_ALL": "C"}).stdout
        except (OSError, subprocess.SubprocessError):
            lscpu_text = ""
    ci, ls = _fields(cpuinfo_text), _fields(lscpu_text)
    model_name = ci.get("model name") or ls.get("Model name") or ""
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", model_name)
    return {"vendor": ci.get("vendor_id") or ls.get("Vendor ID") or "",
            "family": _num(ci.get("cpu family") or ls.get("CPU family"), int),
            "model": _num(ci.get("model") or ls.get("Model"), int), "model_name": model_name,
            "flags": sorted(set((ci.get("flags") or ls.get("Flags") or "").split())),
            "max_mhz": _num(ls.get("CPU max MHz"), float),
            "nominal_ghz": _num(nominal.group(1), float) if nominal else None,
            "arch": ls.get("Architecture") or platform.machine()}


# The vector ISA extensions a reader of a machines table looks for, widest first.
_ISA_NAMES = (("amx_tile", "AMX"), ("avx512f", "AVX-512"), ("avx512_vnni", "VNNI"),
              ("avx512_bf16", "BF16"), ("avx512_fp16", "FP16"), ("avx2", "AVX2"),
              ("fma", "FMA"), ("asimd", "NEON"), ("sve", "SVE"))


def isa_summary(facts: dict | None) -> str:
    """The vector extensions among a CPU's flags, e.g. 'AVX-512, VNNI, AVX2, FMA'."""
    flags = set((facts or {}).get("flags") or ())
    found = [name for flag, name in _ISA_NAMES if flag in flags]
    return ", ".join(found) if found else "not recorded"


def _vector_bits(facts: dict) -> tuple[int | None, str]:
    """Widest vector FMA the flags allow (a VM may hide flags, which only lowers the peak)."""
    flags = set(facts.get("flags") or ())
    if (facts.get("arch") or "").lower() not in X86:
        return None, f"no vector-width rule for arch {facts.get('arch')!r} (x86 only)"
    if "avx512f" in flags:
        return 512, "cpu flag avx512f"
    if {"avx2", "fma"} <= flags:
        return 256, "cpu flags avx2 and fma (no avx512f)"
    return None, "none of the cpu flags avx512f, or avx2 with fma"


def _fma_units(facts: dict, bits: int | None) -> tuple[int | None, str]:
    """Full-width FMA issues per cycle, only where a vendor guide pins it for every SKU."""
    vendor, family, model = facts.get("vendor"), facts.get("family"), facts.get("model")
    if bits is None:
        return None, "depends on the vector width, which is unknown"
    if vendor == "GenuineIntel" and bits == 512:
        return None, ("Intel AVX-512 parts have 1 or 2 512-bit FMA units depending on the SKU "
                      "(Xeon Gold 5xxx vs 6xxx/Platinum...), not in cpuinfo: pass --fma-units")
    if vendor == "AuthenticAMD" and family == 0x1A:
        return None, ("AMD family 1Ah (Zen 5): client parts run 512-bit ops on 256-bit "
                      "datapaths, server parts on 512-bit ones; cpuinfo does not tell them "
                      "apart: pass --fma-units")
    for t_vendor, t_family, ranges, units, source in FMA_TABLE:
        if (vendor, family) == (t_vendor, t_family) and model is not None and \
                any(lo <= model <= hi for lo, hi in ranges) and bits in units:
            return units[bits], source
    return None, (f"no table entry for {vendor or 'unknown vendor'} family {family} model "
                  f"{model if model is None else hex(model)} at {bits} bits: pass --fma-units")


def theoretical_peak(dtype: str, cores: int, facts: dict | None = None,
                     fma_units: int | None = None, clock_ghz: float | None = None) -> dict:
    """Peak FLOP/s for ``dtype`` on ``cores`` cores; "flops_per_s" is None with a "reason" when
    any input is unknown. ``fma_units`` and ``clock_ghz`` override the derived values."""
    if cores < 1:
        raise ValueError(f"cores={cores} must be >= 1")
    facts = cpu_facts() if facts is None else facts
    lane = LANE_BITS.get(dtype)
    lane_src = (f"{dtype} is {lane}-bit" if lane else
                f"no formula kept for {dtype!r}: bf16/fp16 rates depend on AMX, avx512_bf16 "
                "or avx512_fp16 specifics")
    bits, bits_src = _vector_bits(facts)
    units, units_src = ((fma_units, "given by the user (--fma-units)") if fma_units is not None
                        else _fma_units(facts, bits))
    if clock_ghz is not None:
        clock, clock_src = clock_ghz, "given by the user (--clock-ghz)"
    elif facts.get("max_mhz"):
        clock, clock_src = facts["max_mhz"] / 1000, "lscpu CPU max MHz (max boost)"
    elif facts.get("nominal_ghz"):
        clock, clock_src = facts["nominal_ghz"], NOMINAL_SRC
    else:
        clock, clock_src = None, "no lscpu CPU max MHz and no '@ X.XXGHz' in the model name"
    inputs = {name: {"value": value, "source": source} for name, (value, source) in {
        "cores": (cores, "threads used (vCPUs in a VM may be SMT siblings on the host)"),
        "fma_units": (units, units_src), "vector_bits": (bits, bits_src),
        "lane_bits": (lane, lane_src), "clock_ghz": (clock, clock_src)}.items()}
    reason = "; ".join(f"{name}: {i['source']}" for name, i in inputs.items() if i["value"] is None)
    flops = None if reason else cores * units * (bits / lane) * 2 * clock * 1e9
    return {"flops_per_s": flops, "inputs": inputs, "reason": reason,
            "formula": f"cores x fma_units x (vector_bits / {lane or 'lane_bits'}) x 2 FLOPs "
                       "per FMA x clock_ghz x 1e9"}
