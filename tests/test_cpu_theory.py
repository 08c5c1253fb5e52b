"""Theoretical CPU peak from fixed cpuinfo/lscpu texts: values known by hand, else reasons."""

import pytest

from suite.peak import cpu_theory as ct


def cpuinfo(vendor, family, model, name, flags):
    return (f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\nflags\t\t: {flags}\n\nprocessor\t: 1\nvendor_id\t: Other\n")


BASE = "fpu sse sse2 avx"
ZEN3 = cpuinfo("AuthenticAMD", 25, 1, "AMD EPYC 7B13 64-Core Processor", f"{BASE} fma avx2")
XEON = cpuinfo("GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
               f"{BASE} fma avx2 avx512f avx512dq")
LSCPU = "Architecture:        x86_64\nCPU max MHz:         3500.0000\nCPU min MHz: 1500.0000\n"


def test_facts_parse_first_processor():
    f = ct.cpu_facts(XEON, "")
    assert f["vendor"] == "GenuineIntel" and (f["family"], f["model"]) == (6, 85)
    assert f["nominal_ghz"] == 2.5 and f["max_mhz"] is None
    assert f["flags"] == sorted(f["flags"]) and "avx512f" in f["flags"]
    assert ct.cpu_facts(XEON, LSCPU)["max_mhz"] == 3500.0


def test_zen3_known():
    r = ct.theoretical_peak("fp32", 4, ct.cpu_facts(ZEN3, LSCPU))
    assert r["reason"] == ""
    assert r["flops_per_s"] == pytest.approx(4 * 2 * 8 * 2 * 3.5e9)  # 448 GFLOP/s
    assert r["inputs"]["fma_units"]["value"] == 2
    assert "Zen 3" in r["inputs"]["fma_units"]["source"]
    assert r["inputs"]["vector_bits"]["value"] == 256
    assert r["inputs"]["clock_ghz"]["source"] == "lscpu CPU max MHz (max boost)"
    assert "vCPU" in r["inputs"]["cores"]["source"]
    fp64 = ct.theoretical_peak("fp64", 4, ct.cpu_facts(ZEN3, LSCPU))
    assert fp64["flops_per_s"] == pytest.approx(224e9)


def test_intel_avx512_needs_sku():
    r = ct.theoretical_peak("fp32", 2, ct.cpu_facts(XEON, ""))
    assert r["flops_per_s"] is None and "SKU" in r["reason"]
    assert r["inputs"]["fma_units"]["value"] is None
    assert r["inputs"]["vector_bits"]["value"] == 512  # known inputs are still recorded
    assert r["inputs"]["clock_ghz"]["value"] == 2.5


def test_intel_avx512_user_fma_units():
    r = ct.theoretical_peak("fp32", 2, ct.cpu_facts(XEON, ""), fma_units=2)
    assert r["flops_per_s"] == pytest.approx(2 * 2 * 16 * 2 * 2.5e9)  # 320 GFLOP/s
    assert r["inputs"]["fma_units"]["source"] == "given by the user (--fma-units)"
    assert "nominal base clock" in r["inputs"]["clock_ghz"]["source"]
    r = ct.theoretical_peak("fp32", 2, ct.cpu_facts(XEON, ""), fma_units=2, clock_ghz=3.0)
    assert r["inputs"]["clock_ghz"]["source"] == "given by the user (--clock-ghz)"
    assert r["flops_per_s"] == pytest.approx(384e9)


def test_lscpu_max_preferred_over_model_name():
    r = ct.theoretical_peak("fp32", 1, ct.cpu_facts(XEON, LSCPU), fma_units=1)
    assert r["inputs"]["clock_ghz"]["value"] == 3.5
    assert r["flops_per_s"] == pytest.approx(1 * 1 * 16 * 2 * 3.5e9)


def test_no_clock_unknown():
    r = ct.theoretical_peak("fp32", 4, ct.cpu_facts(ZEN3, ""))
    assert r["flops_per_s"] is None and "clock_ghz" in r["reason"]
    assert r["inputs"]["clock_ghz"]["value"] is None
    assert r["inputs"]["fma_units"]["value"] == 2


def test_bf16_unknown():
    r = ct.theoretical_peak("bf16", 4, ct.cpu_facts(ZEN3, LSCPU))
    assert r["flops_per_s"] is None and "no formula kept" in r["reason"]


def test_aarch64_unknown():
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"
    facts = ct.cpu_facts(arm, "Architecture: aarch64\nCPU max MHz: 3000.0000\n")
    assert facts["arch"] == "aarch64" and facts["vendor"] == ""
    r = ct.theoretical_peak("fp32", 4, facts)
    assert r["flops_per_s"] is None and "aarch64" in r["reason"]


@pytest.mark.parametrize("vendor,family,model,flags,units", [
    ("AuthenticAMD", 0x17, 0x01, "fma avx2", 1),            # Zen: 256-bit as 2 x 128
    ("AuthenticAMD", 0x17, 0x31, "fma avx2", 2),            # Zen 2
    ("AuthenticAMD", 0x19, 0x11, "fma avx2 avx512f", 1),    # Zen 4 at 512 bits
    ("AuthenticAMD", 0x1A, 0x02, "fma avx2 avx512f", None),  # Zen 5: not told apart
    ("GenuineIntel", 6, 0x3F, "fma avx2", 2),               # Haswell-EP
    ("GenuineIntel", 6, 0x97, "fma avx2", None),            # Alder Lake: hybrid
    ("GenuineIntel", 6, 0x3F, "avx", None),                 # no avx2/fma: width unknown
])
def test_fma_table(vendor, family, model, flags, units):
    facts = ct.cpu_facts(cpuinfo(vendor, family, model, "X", f"{BASE} {flags}"), LSCPU)
    r = ct.theoretical_peak("fp32", 1, facts)
    assert r["inputs"]["fma_units"]["value"] == units
    assert (r["flops_per_s"] is None) == (units is None)
    assert (r["reason"] == "") == (units is not None)


def test_facts_this_machine():
    f = ct.cpu_facts()
    assert isinstance(f, dict) and "vendor" in f and isinstance(f["flags"], list)
    assert ct.theoretical_peak("fp32", 1, f)["formula"]
