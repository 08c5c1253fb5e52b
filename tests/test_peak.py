import importlib.util
import json

import pytest
import torch

from suite.peak import datasheet_peak, libraries, peak_report
from suite.peak.libraries import CPU_LIBRARIES, isa_of, measure_library, parse_verbose
from suite.peak.schema import SCHEMA_VERSION, efficiency, read_peak


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


TINY = dict(sizes=[128], repeats=1, min_time_s=0.02, threads=1)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class _Clock:
    """A stand-in for ``time.perf_counter`` that moves only when a stand-in GEMM runs."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_peak_is_2_n_cubed_per_call_over_the_elapsed_time(monkeypatch):
    """The denominator of every "% of measured peak": a stand-in library whose n x n x n
    product takes exactly 2 n^3 / rate seconds on a stubbed clock must measure that rate at
    every size, and the best size must win. Mutations tried: n**2 for n**3, the factor 2
    dropped, the calls not counted, min for max over rounds or sizes; each fails."""
    clock = _Clock()
    rates = {64: 5e9, 128: 8e9, 256: 6e9}  # FLOP/s of each size (the middle one is best)

    def fake(dtype, n, threads):
        def call():
            clock.now += 2 * n**3 / rates[n]
        return call

    monkeypatch.setattr(libraries.time, "perf_counter", clock)
    monkeypatch.setitem(libraries.FACTORIES, "stand-in", fake)
    got = libraries.time_library("stand-in", "fp32", sizes=list(rates), repeats=3,
                                 min_time_s=0.01, threads=1)
    for entry in got["per_size"]:
        assert entry["flops_per_s"] == pytest.approx(rates[entry["size"]], rel=1e-9)
        assert len(entry["samples"]) == 3
    assert (got["size"], got["flops_per_s"]) == (128, pytest.approx(8e9, rel=1e-9))


def test_the_best_round_of_a_size_is_its_rate(monkeypatch):
    """Rounds of one size at different speeds (a noisy machine): the best is the rate."""
    clock, seconds = _Clock(), iter([0.02, 0.01, 0.04, 0.04])  # warm-up, then three rounds

    def fake(dtype, n, threads):
        def call():
            clock.now += next(seconds)
        return call

    monkeypatch.setattr(libraries.time, "perf_counter", clock)
    monkeypatch.setitem(libraries.FACTORIES, "stand-in", fake)
    got = libraries.time_library("stand-in", "fp32", sizes=[100], repeats=3, min_time_s=0.005,
                                 threads=1)
    assert got["per_size"][0]["samples"] == pytest.approx([2e6 / 0.01, 2e6 / 0.04, 2e6 / 0.04])
    assert got["flops_per_s"] == pytest.approx(2e6 / 0.01)


@pytest.mark.parametrize("library", CPU_LIBRARIES)
def test_every_cpu_library_measures_in_its_own_process(library):
    needs = {"tensorflow": "tensorflow", "onnxruntime": "onnxruntime"}.get(library)
    if needs and not _installed(needs):
        pytest.skip(f"{needs} is not installed (pip install -e '.[frameworks,onnx]')")
    e = measure_library(library, "fp32", **TINY)
    assert e["status"] == "ok", e["reason"]
    assert e["flops_per_s"] > 0 and e["size"] == 128 and len(e["per_size"][0]["samples"]) == 1
    assert e["version"] and e["isa_source"]  # where the ISA fact (or its absence) comes from
    if library in ("torch.matmul", "onednn", "numpy"):
        assert e["isa"], e["isa_source"]
    assert e["process_start"] == "warm fork"  # the timed run: forked by a warm server


def test_a_peak_child_past_its_time_limit_fails_with_the_reason(monkeypatch):
    for warm in ("1", "0"):
        monkeypatch.setenv("SEEDBENCH_WARM", warm)
        e = measure_library("numpy", "fp32", sizes=[512], repeats=1000, min_time_s=30.0,
                            threads=1, timeout_s=5.0)
        assert e["status"] == "failed" and e["reason"] == "timed out after 5 s", warm


def test_cublas_without_a_gpu_is_unavailable_with_the_reason():
    if torch.cuda.is_available():
        e = measure_library("cublas", "fp32", **TINY)
        assert e["status"] == "ok" and e["flops_per_s"] > 0
    else:
        e = measure_library("cublas", "fp32", **TINY)
        assert e["status"] == "unavailable" and "CUDA" in e["reason"]
        assert e["flops_per_s"] is None


def test_a_dtype_a_library_lacks_is_unavailable_not_faked():
    e = measure_library("numpy", "bf16", **TINY)
    assert e["status"] == "unavailable" and "bf16" in e["reason"]
    assert measure_library("torch.matmul", "tf32", **TINY)["status"] == "unavailable"


def test_bad_library_and_dtype_name_the_valid_ones():
    with pytest.raises(ValueError, match="library='mkl' is not one of"):
        measure_library("mkl", "fp32", **TINY)
    with pytest.raises(ValueError, match="dtype='int4' is not one of"):
        measure_library("onednn", "int4", **TINY)


MKL_BANNER = ("MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 "
              "architecture Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled "
              "processors, Lnx 2.45GHz lp64 gnu_thread\n"
              "MKL_VERBOSE SGEMM(N,N,256,256,256,...) 8.54ms CNR:OFF Dyn:1 FastMM:1 TID:0 NThr:2\n")
ONEDNN_LOG = ("onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa710)\n"
              "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost\n"
              "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32 dst:f32,,,1.0\n"
              "onednn_verbose,v1,primitive,exec,cpu,inner_product,brg_matmul:avx512_core,"
              "forward_inference,src:f32,,,mb256ic256oc256,3.07\n")


def test_verbose_banners_give_the_isa_each_library_ran():
    v = parse_verbose(MKL_BANNER + ONEDNN_LOG)
    assert v["mkl"] == {"version": "oneMKL 2024.0 Update 2",
                        "isa": "Intel(R) 64 architecture Intel(R) Advanced Vector Extensions 2 "
                               "(Intel(R) AVX2) enabled processors"}
    assert v["onednn"] == {"isa": "Intel AVX-512 with Intel DL Boost", "version": "v3.12.0",
                           "gemm_implementation": ["brg_matmul:avx512_core"]}
    isa, source = isa_of("onednn", v, {})
    assert "brg_matmul:avx512_core" in isa and "ONEDNN_VERBOSE" in source
    assert "AVX2" in isa_of("torch.matmul", v, {})[0]
    # TensorFlow that printed oneDNN's banner but ran no oneDNN GEMM: Eigen, ISA not claimed
    only_info = parse_verbose(ONEDNN_LOG.splitlines()[1])
    assert isa_of("tensorflow", only_info, {})[0] is None


def test_peak_report_calls_the_best_library_the_measured_peak():
    rep = peak_report(["fp32"], "cpu", [128], 1, threads=1, libraries=["torch.matmul", "onednn"],
                      min_time_s=0.02)
    assert rep["schema_version"] == SCHEMA_VERSION and rep["threads"] == 1
    fp32 = rep["peaks"]["fp32"]
    best = max(fp32["libraries"].values(), key=lambda e: e["flops_per_s"])
    assert fp32["measured"]["library"] == best["library"]
    assert fp32["measured"]["flops_per_s"] == best["flops_per_s"]
    assert set(fp32["theoretical"]) >= {"flops_per_s", "formula", "inputs", "reason"}
    assert rep["cpu"]["flags"]


V1 = {"schema_version": 1, "device": "AMD EPYC 7B13", "device_type": "cpu", "threads": 2,
      "peaks": {"fp32": {"measured": {"dtype": "fp32", "flops_per_s": 66e9, "size": 2048,
                                      "per_size": [{"size": 2048, "flops_per_s": 66e9,
                                                    "samples": [66e9]}]},
                         "datasheet": None}}}


def _v2(libs: dict[str, float], theory: float | None = None) -> dict:
    best = max(libs, key=libs.get)
    return {"schema_version": 2, "device": "AMD EPYC 9B45", "device_type": "cpu", "threads": 2,
            "peaks": {"fp32": {
                "measured": {"library": best, "flops_per_s": libs[best], "size": 2048,
                             "per_size": []},
                "libraries": {k: {"library": k, "status": "ok", "flops_per_s": v}
                              for k, v in libs.items()},
                "theoretical": {"flops_per_s": theory, "formula": "2 x 2 x 16 x 2 x 3.5e9",
                                "inputs": {}, "reason": "" if theory else "fma_units unknown"},
                "datasheet": None}}}


def test_schema_1_reads_as_schema_2_with_torch_matmul_as_its_library():
    peak = read_peak(V1)
    assert peak["schema_version"] == 2 and peak["upgraded_from"] == 1
    fp32 = peak["peaks"]["fp32"]
    assert fp32["measured"]["library"] == "torch.matmul"
    assert fp32["libraries"]["torch.matmul"]["flops_per_s"] == 66e9
    assert fp32["theoretical"]["flops_per_s"] is None
    eff = efficiency(33e9, peak, "fp32", "cpu")
    assert eff["pct_of_measured_peak"] == pytest.approx(50)
    assert eff["measured_peak_library"] == "torch.matmul"


def test_schema_reader_takes_a_path_and_refuses_unknown_versions(tmp_path):
    path = tmp_path / "peak.json"
    path.write_text(json.dumps(V1))
    assert read_peak(path)["peaks"]["fp32"]["measured"]["flops_per_s"] == 66e9
    assert read_peak(None) is None
    with pytest.raises(ValueError, match="schema_version=3 is not one of \\[1, 2\\]"):
        read_peak({**V1, "schema_version": 3})


def test_efficiency_names_every_denominator():
    peak = _v2({"torch.matmul": 197e9, "onednn": 446e9, "numpy": 241e9}, theory=512e9)
    eff = efficiency(223e9, peak, "fp32", "cpu")
    assert eff["pct_of_measured_peak"] == pytest.approx(50)
    assert eff["measured_peak_library"] == "onednn"
    assert eff["pct_of_library_peak"]["torch.matmul"] == pytest.approx(100 * 223 / 197)
    assert eff["pct_of_theoretical_peak"] == pytest.approx(100 * 223 / 512)
    assert "onednn 446.0 GFLOP/s" in eff["peak_note"]
    unknown = efficiency(223e9, _v2({"onednn": 446e9}), "fp32", "cpu")
    assert unknown["pct_of_theoretical_peak"] is None
    assert unknown["theoretical_peak_note"] == "fma_units unknown"


def test_efficiency_without_a_usable_peak_says_why():
    assert "no peak file" in efficiency(1e9, None, "fp32", "cpu")["peak_note"]
    assert "'cpu'" in efficiency(1e9, read_peak(V1), "fp32", "cuda")["peak_note"]
    assert "no successful bf16" in efficiency(1e9, read_peak(V1), "bf16", "cpu")["peak_note"]


def test_observed_gemm_library_counts_what_each_call_reached():
    from suite.peak.libraries import observe_gemm_library

    a = torch.randn(64, 64)
    packed = torch.ops.mkldnn._reorder_linear_weight(a, 64)
    mkl = observe_gemm_library(lambda: torch.mm(a, a))
    onednn = observe_gemm_library(
        lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], ""))
    none = observe_gemm_library(lambda: a + a)
    if torch.backends.mkl.is_available():  # x86 wheels: torch.mm is MKL's sgemm
        assert mkl["mkl_gemm_calls"] >= 1 and mkl["summary"] == "MKL"
    assert onednn["onednn_gemm_calls"] == 1 and onednn["mkl_gemm_calls"] == 0
    assert onednn["summary"] == "oneDNN" and onednn["onednn_implementations"]
    assert none["mkl_gemm_calls"] == none["onednn_gemm_calls"] == 0
    assert "neither" in none["summary"]
