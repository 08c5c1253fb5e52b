import pytest
import torch

from suite.peak import datasheet_peak, measure_matmul_peak


@pytest.mark.parametrize("name, dtype, device, tflops", [
    ("NVIDIA H100 80GB HBM3", "bf16", "H100 SXM", 989),
    ("NVIDIA H100 PCIe", "bf16", "H100 PCIe", 756),
    ("NVIDIA H100 NVL", "bf16", "H100 NVL", 835),
    ("NVIDIA A100-SXM4-80GB", "fp16", "A100", 312),
    ("NVIDIA H200", "bf16", "H200", 989),
])
def test_datasheet_peak_of_known_gpus(name, dtype, device, tflops):
    peak = datasheet_peak(name, dtype)
    assert peak["device"] == device
    assert peak["flops_per_s"] == tflops * 1e12
    assert "datasheet" in peak["source"]


def test_no_datasheet_fallback_for_unknown_devices():
    assert datasheet_peak("AMD EPYC 7B13", "fp32") is None
    assert datasheet_peak("NVIDIA H200", "fp8") is None  # a known GPU, an unlisted dtype


def test_measured_peak_is_the_best_size():
    res = measure_matmul_peak("fp32", torch.device("cpu"), [64, 128], repeats=2, min_time_s=0.02)
    assert [p["size"] for p in res["per_size"]] == [64, 128]
    best = max(res["per_size"], key=lambda p: p["flops_per_s"])
    assert res["size"] == best["size"] and res["flops_per_s"] == best["flops_per_s"] > 0
    assert all(len(p["samples"]) == 2 for p in res["per_size"])


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype='int4' is not one of"):
        measure_matmul_peak("int4", torch.device("cpu"), [64])
    with pytest.raises(ValueError, match="tf32 is a CUDA"):
        measure_matmul_peak("tf32", torch.device("cpu"), [64])
