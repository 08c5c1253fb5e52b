"""The steps of ``seedbench gpu-check`` (``suite.gpu.pack``), in the order they run. Each takes
the ``Pack`` and returns what ``steps.json`` keeps of it (``status`` when not ``ok``)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import platform
import sys
import sysconfig
import time
from dataclasses import asdict, replace
from itertools import product
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository
# What the suite needs beyond torch, triton and transformers (each a module it imports)
NEEDED = ("jsonschema", "yaml", "scipy", "pandas", "matplotlib", "jinja2", "threadpoolctl",
          "mlperf_loadgen", "snakemake")


def env(pack) -> dict[str, Any]:
    """Versions, the device, and every module the suite needs that does not import here."""
    import torch

    versions, missing = {"python": platform.python_version()}, []
    for name in ("torch", "triton", "transformers", *NEEDED):
        try:
            versions[name] = getattr(importlib.import_module(name), "__version__", "?")
        except ImportError as e:
            missing.append(f"{name} ({e})")
    device = (torch.cuda.get_device_name(0) if pack.sizes.device == "cuda" else
              platform.processor() or "cpu")
    from suite.baselines.registry import baselines

    detail = {"versions": versions, "device_name": device, "missing": missing,
              "baselines_registered": sorted(baselines.entry_points())}
    if pack.sizes.device == "cuda":
        detail["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    if missing:
        detail["status"] = "failed"
        detail["reason"] = ("missing: " + ", ".join(missing)
                            + " (carry their wheels: make gpu-wheels)")
    return detail


def kernels(pack) -> dict[str, Any]:
    """The Triton kernel tests, compiled for this GPU (the rehearsal: a subset, interpreted)."""
    import subprocess

    report = pack.out / "kernel_tests.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "test_triton_kernels.py"),
                           f"--junitxml={report}", *pack.sizes.kernel_tests],
                          env=pack.env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return {"summary": summary, **({} if done.returncode == 0 else
                                   {"status": "failed", "tail": done.stdout[-2000:]})}


def tune(pack) -> dict[str, Any]:
    """Time each candidate launch of the varlen attention at the MHA study's shapes (correct
    ones only: each is checked against torch first) and keep the fastest; later steps run with
    it through SEEDBENCH_TRITON_TUNING, and tuning.json records every measurement. Each
    variant is timed where it can run: the short kernel up to SHORT_TUNE_MAX keys (its key
    tile on chip), the long one everywhere; ``_choose`` picks each one's launch from the
    lengths it would serve."""
    import torch

    from reference_impl.kernels import triton_attention as ta

    device = torch.device(pack.sizes.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    cands = pack.sizes.extra.get("tune", TUNE_GPU if device.type == "cuda" else TUNE_CPU)
    rows = []
    for length in pack.sizes.tune_shapes:
        q, k, v, cu, expected = _attention_case(pack.sizes.batch, length, device, dtype)
        short = [("short", ta.Tuning(short_block_m=m, short_num_warps=w, short_num_warps_wide=w))
                 for m, w in product(cands["block_m"], cands["warps"])
                 if length <= SHORT_TUNE_MAX]
        long_ = [("long", ta.Tuning(block_m=m, long_block_n=n, num_warps=w))
                 for m, n, w in product(cands["block_m"], cands["long_block_n"], cands["warps"])]
        for variant, t in [*short, *long_]:
            block_m, block_n, warps = t.launch(variant, length)
            launch = {"length": length, "variant": variant, "block_m": block_m,
                      "block_n": block_n, "num_warps": warps}
            try:
                out = ta.triton_varlen_attention(q, k, v, cu, length, variant=variant, tuning=t)
                err = (out.float() - expected).abs().max().item()
                ms = _time_ms(lambda q=q, k=k, v=v, cu=cu, n=length, var=variant, t=t:
                              ta.triton_varlen_attention(q, k, v, cu, n, variant=var, tuning=t),
                              device)
            except Exception as e:  # noqa: BLE001 - a launch that does not fit is a data point
                rows.append({**launch, "error": f"{type(e).__name__}: {str(e)[:200]}"})
                continue
            ok = err <= (2e-2 if dtype == torch.float16 else 1e-4)
            rows.append({**launch, "ms": ms, "max_abs_err": err, "correct": ok})
    chosen = _choose(rows, ta.Tuning())
    path = pack.out / "tuning.json"
    path.write_text(json.dumps({"tuning": asdict(chosen), "device": pack.sizes.device,
                                "dtype": str(dtype), "batch": pack.sizes.batch,
                                "measurements": rows}, indent=1))
    pack.env[ta.TUNING_ENV] = str(path)
    timed = sum("ms" in r for r in rows)
    detail = {"tuning": asdict(chosen), "candidates_timed": timed,
              "incorrect": sum(r.get("correct") is False for r in rows)}
    if not timed:
        errors = sorted({r["error"] for r in rows if "error" in r})
        detail.update(status="failed", reason=f"no candidate ran: {errors[:3]}")
    return detail


SHORT_TUNE_MAX = 512  # the short kernel is timed up to here: twice the default crossover
TUNE_GPU = {"block_m": (32, 64, 128), "long_block_n": (32, 64, 128), "warps": (4, 8)}
TUNE_CPU = {"block_m": (16, 32), "long_block_n": (16,), "warps": (4,)}


def _attention_case(batch: int, length: int, device, dtype):
    """BERT-base heads (12 x 64) on a ByteTransformer length distribution, and the answer."""
    import torch

    from suite.workloads import varlen_lengths

    lengths = varlen_lengths(batch, length, "bytetransformer", seed=0)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(sum(lengths), 12, 64, generator=g).to(device, dtype)
               for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32,
                      device=device)
    expected = torch.empty(q.shape, dtype=torch.float32, device=device)
    for i in range(batch):
        s, e = cu[i].item(), cu[i + 1].item()
        expected[s:e] = torch.nn.functional.scaled_dot_product_attention(
            *(t[s:e].transpose(0, 1).float() for t in (q, k, v))).transpose(0, 1)
    return q, k, v, cu, expected


def _time_ms(fn, device) -> float:
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=10, rep=40))
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _under_load(fn, ms: float, device) -> dict[str, float]:
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


def _choose(rows: list[dict[str, Any]], default):
    """Each variant's fastest correct launch on the lengths it would serve, and the crossover.

    Long: the (block_m, block_n, warps) fastest summed over every length (it may serve any).
    Short: one block_m, with its warps chosen apart below 128 keys (a narrow key tile) and from
    128 (a wide one), each summed over the lengths of that tile only: the short kernel's launch
    is never the long winner's, nor chosen on lengths where it would not run. short_seq_max:
    the longest tuned length at which the chosen short launch beat the chosen long one (a power
    of two, at least 16). A class with no correct timing keeps ``default``'s values."""
    from reference_impl.kernels.triton_attention import Tuning

    timed = [r for r in rows if r.get("correct")]

    def fastest(candidates: list[dict[str, Any]], key) -> tuple[tuple | None, float]:
        """The key whose rows sum lowest, among keys timed at every length of the set, and
        that sum (None and infinity when no key was)."""
        lengths = {r["length"] for r in candidates}
        by_key: dict[tuple, dict[int, float]] = {}
        for r in candidates:
            by_key.setdefault(key(r), {})[r["length"]] = r["ms"]
        full = {k: sum(v.values()) for k, v in by_key.items() if set(v) == lengths}
        best = min(full, key=full.get, default=None)
        return best, full.get(best, math.inf)

    long_, _ = fastest([r for r in timed if r["variant"] == "long"],
                       lambda r: (r["block_m"], r["block_n"], r["num_warps"]))
    short_rows = [r for r in timed if r["variant"] == "short"]
    tiles = {name: rows for name, rows in (
        ("narrow", [r for r in short_rows if r["block_n"] < 128]),
        ("wide", [r for r in short_rows if r["block_n"] >= 128])) if rows}
    short = {}  # block_m -> (its time over every tile, the warps chosen per tile)
    for block_m in {r["block_m"] for r in short_rows}:
        picks = {name: fastest([r for r in tile if r["block_m"] == block_m],
                               lambda r: r["num_warps"]) for name, tile in tiles.items()}
        short[block_m] = (sum(ms for _, ms in picks.values()),
                          {name: warps for name, (warps, _) in picks.items()})
    short_m = min(short, key=lambda m: short[m][0], default=None)
    if long_ is None or short_m is None or short[short_m][0] == math.inf:
        return default
    warps = short[short_m][1]
    chosen = Tuning(block_m=long_[0], long_block_n=long_[1], num_warps=long_[2],
                    short_block_m=short_m,
                    short_num_warps=warps.get("narrow") or default.short_num_warps,
                    short_num_warps_wide=warps.get("wide") or default.short_num_warps_wide)
    ms = {}
    for r in timed:
        b_m, b_n, w = chosen.launch(r["variant"], r["length"])
        if (r["block_m"], r["block_n"], r["num_warps"]) == (b_m, b_n, w):
            ms[(r["length"], r["variant"])] = r["ms"]
    wins = [n for (n, v), t in ms.items() if v == "short" and t <= ms.get((n, "long"), math.inf)]
    short_max = 1 << max(wins).bit_length() - 1 if wins else 16
    return dataclasses.replace(chosen, short_seq_max=max(16, short_max))


def peak(pack) -> dict[str, Any]:
    device = pack.sizes.device
    dtypes = ["fp16", "bf16"] if device == "cuda" else ["fp32"]
    out = pack.results / "peak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # on a GPU 5 repeats at 8k and 16k: the first H200 run's 2 at 4k and 8k (one product and a
    # host sync each) measured 667 TFLOP/s, below the 790 its own layer GEMMs reached
    args = ["peak", "--device", device, "--dtypes", *dtypes,
            "--repeats", "5" if device == "cuda" else "2",
            "--sizes", *map(str, pack.sizes.peak_sizes), "--out", str(out)]
    if device == "cpu":
        args += ["--libraries", "torch.matmul"]
    done = pack.seedbench(*args)
    if done.returncode != 0:
        return {"status": "failed", "reason": done.stderr[-1000:]}
    report = json.loads(out.read_text())
    return {**{dtype: {k: (v or {}).get("flops_per_s") for k, v in
                       report["peaks"][dtype].items() if k in ("measured", "datasheet")}
               for dtype in dtypes},
            "under_load": _peak_clocks(pack, dtypes)}


def _peak_clocks(pack, dtypes: list[str]) -> dict[str, Any]:
    """Per dtype, the largest peak size's product timed again here with the SM clock and board
    power NVML reads while it runs: whether the peak was measured below the clock the
    datasheet's rate assumes (the H200 run's peak fell short of its own layer GEMMs).
    {} off CUDA."""
    import torch

    from suite.devices import torch_dtype

    device = torch.device(pack.sizes.device)
    if device.type != "cuda":
        return {}
    n, out = max(pack.sizes.peak_sizes), {}
    for dtype in dtypes:
        a, b = (torch.randn(n, n, device=device, dtype=torch_dtype(dtype)) for _ in range(2))
        ms = _time_ms(lambda a=a, b=b: a @ b, device)
        out[dtype] = {"size": n, "ms": ms, "flops_per_s": 2 * n**3 / (ms / 1e3),
                      **_under_load(lambda a=a, b=b: a @ b, ms, device)}
        del a, b
    return out


def _gemm_operands(shape, device, dtype, g) -> tuple[Any, Any, dict[str, Any]]:
    """A and B of ``shape`` drawn on the device, and the product checked against fp32 (fp64 on
    the CPU): the row's relative error and whether it is correct."""
    import torch

    a = torch.randn(shape.m, shape.k, generator=g, device=device, dtype=dtype)
    b = torch.randn(shape.k, shape.n, generator=g, device=device, dtype=dtype)
    reference = a.double() @ b.double() if device.type == "cpu" else a.float() @ b.float()
    err = ((a @ b).to(reference.dtype) - reference).abs().max().item() / \
        reference.abs().max().item()
    del reference
    return a, b, {"m": shape.m, "n": shape.n, "k": shape.k, "name": shape.name,
                  "relative_error": err,
                  "correct": err <= (1e-2 if dtype != torch.float32 else 1e-4)}


def gemm_shapes(pack) -> dict[str, Any]:
    """The scale model's GEMM-from-shape term against this GPU: the layer GEMMs of the
    published H100 runs (``suite.scale.probe``), each checked against an fp32 product, timed,
    and set beside the model's predicted tile-and-K efficiency -> OUT/gemm_shapes.json (beside
    tuning.json: data for the model, not a record of the workflow)."""
    import torch

    from suite.scale import probe

    device = torch.device(pack.sizes.device)
    dtype, hw, runs = _probe_runs(pack)
    shapes = probe.probe_shapes(runs, hw, pack.sizes.extra.get("probe_shapes", 40))
    rows = []
    # drawn on the device: the largest operands hold billions of elements (drawn on the CPU,
    # they took most of the step's 171 s on the first H200 run)
    g = torch.Generator(device=device).manual_seed(0)
    for shape in shapes:
        a, b, row = _gemm_operands(shape, device, dtype, g)
        row["predicted_shape_efficiency"] = probe.shape_efficiency(shape, hw)
        if row["correct"]:
            ms = _time_ms(lambda a=a, b=b: a @ b, device)
            row.update(ms=ms, tflops=shape.flops / ms / 1e9,
                       fraction_of_peak=shape.flops / (ms / 1e3) / hw.peak_flops,
                       **_under_load(lambda a=a, b=b: a @ b, ms, device))
        rows.append(row)
        del a, b
    summary = probe.summarize(rows)
    report = {"gpu_preset": hw.name, "dtype": str(dtype), "peak_flops": hw.peak_flops,
              "summary": summary, "shapes": rows}
    (pack.out / "gemm_shapes.json").write_text(json.dumps(report, indent=1))
    wrong = sum(not r["correct"] for r in rows)
    return {**summary, "incorrect": wrong, **({"status": "failed"} if wrong else {})}


def overlap_interference(pack) -> dict[str, Any]:
    """What hidden communication costs the compute under it (``suite.gpu.interference``): the
    layer GEMMs of the published H100 runs, each checked, timed alone and beside a persistent
    copy kernel of 8, 16 and 32 blocks (NCCL's channels) -> OUT/overlap_interference.json. The
    rehearsal has no concurrent streams: it checks the copy kernel (interpreted) and says so."""
    import torch

    from suite.gpu import interference
    from suite.scale import probe

    device = torch.device(pack.sizes.device)
    dtype, hw, runs = _probe_runs(pack)
    ctas = tuple(pack.sizes.extra.get("overlap_ctas", (8, 16, 32)))
    # the copy first, on a length no block divides: a wrong copy would load the GEMMs wrongly
    src = torch.arange(3 * interference.COPY_BLOCK + 5, dtype=torch.float32, device=device)
    dst = torch.zeros_like(src)
    interference.side_copy(src, dst, 2, 2)
    report: dict[str, Any] = {"gpu_preset": hw.name, "dtype": str(dtype), "ctas": list(ctas),
                              "copy_kernel_correct": bool(torch.equal(src, dst))}
    rows = []
    if device.type != "cuda":
        report["unavailable"] = ("concurrent streams need CUDA: the rehearsal checks the copy "
                                 "kernel only")
    elif report["copy_kernel_correct"]:
        g = torch.Generator(device=device).manual_seed(0)
        for shape in probe.probe_shapes(runs, hw, pack.sizes.extra.get("overlap_shapes", 8)):
            a, b, row = _gemm_operands(shape, device, dtype, g)
            if row["correct"]:
                row.update(interference.measure(lambda a=a, b=b: a @ b, ctas,
                                                window_ms=50.0, copy_bytes=256 << 20))
            rows.append(row)
            del a, b
    report.update(summary=interference.summarize(rows, hw.sms), shapes=rows)
    (pack.out / "overlap_interference.json").write_text(json.dumps(report, indent=1))
    wrong = sum(not r["correct"] for r in rows) + (not report["copy_kernel_correct"])
    return {"copy_kernel_correct": report["copy_kernel_correct"], **report["summary"],
            "incorrect": wrong, **({"status": "failed"} if wrong else {})}


def attention_kernels(pack) -> dict[str, Any]:
    """The attention kernels the scale model prices at a published fraction of peak: each of
    PyTorch's fused SDPA kernels (FlashAttention, cuDNN, memory-efficient), causal, head
    dimension 128, timed forward and backward at several lengths, each first checked against
    the unfused product in fp32 -> OUT/attention_kernels.json. A kernel this torch cannot run
    here is listed with the reason."""
    import torch
    from torch.nn.attention import SDPBackend

    from suite.scale import probe

    device = torch.device(pack.sizes.device)
    dtype, hw, _ = _probe_runs(pack)
    heads, head_dim = pack.sizes.extra.get("attention_heads", (16, 128))
    tokens = pack.sizes.extra.get("attention_tokens", 32768)
    kernels = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}
    g = torch.Generator().manual_seed(0)

    def inputs(batch: int, n: int, h: int) -> list[torch.Tensor]:
        return [torch.randn(batch, h, n, head_dim, generator=g).to(device, dtype)
                .requires_grad_() for _ in range(3)]

    rows, unavailable = [], {}
    for kernel, backend in kernels.items():
        qkv = inputs(1, min(pack.sizes.extra.get("attention_check_len", 1024), tokens), 2)
        try:
            got = _attention_outputs(backend, qkv)
        except RuntimeError as e:  # no kernel for this device, dtype or shape
            unavailable[kernel] = str(e).splitlines()[0][:300]
            continue
        expected = _attention_outputs(SDPBackend.MATH, [t.detach().float().requires_grad_()
                                                        for t in qkv])
        err = max((a.float() - b).abs().max().item() / b.abs().max().item()
                  for a, b in zip(got, expected))
        correct = err <= (2e-2 if dtype != torch.float32 else 1e-4)
        for n in pack.sizes.extra.get("attention_lengths", (2048, 8192, 32768)):
            batch = max(1, tokens // n)
            forward_flops, backward_flops = probe.attention_flops(batch, heads, n, head_dim)
            row = {"kernel": kernel, "batch": batch, "heads": heads, "seq": n,
                   "head_dim": head_dim, "relative_error": err, "correct": correct}
            if correct:
                forward_ms, backward_ms = _attention_ms(backend, inputs(batch, n, heads),
                                                        device)
                row.update(forward_ms=forward_ms, backward_ms=backward_ms,
                           forward_fraction_of_peak=forward_flops / (forward_ms / 1e3)
                           / hw.peak_flops,
                           backward_fraction_of_peak=backward_flops / (backward_ms / 1e3)
                           / hw.peak_flops)
            rows.append(row)
    summary = probe.attention_summary(rows, hw)
    report = {"gpu_preset": hw.name, "dtype": str(dtype), "peak_flops": hw.peak_flops,
              "torch": torch.__version__, "summary": summary, "unavailable": unavailable,
              "measurements": rows}
    (pack.out / "attention_kernels.json").write_text(json.dumps(report, indent=1))
    wrong = sorted({r["kernel"] for r in rows if not r["correct"]})
    return {**summary, "unavailable": unavailable, "incorrect": wrong,
            **({"status": "failed"} if wrong or not rows else {})}


def _streaming_kernels(n: int, hidden: int, device, dtype, g) -> list[tuple]:
    """(name, bytes moved, the kernel, its output's check) for the element-wise kinds the scale
    model prices at ``Hardware.hbm_rate``: a copy, an add, a cast to fp32, a LayerNorm over
    rows of ``hidden``; each check compares the output with fp32 arithmetic on the CPU."""
    import torch

    a, b = (torch.randn(n // hidden, hidden, generator=g, device=device, dtype=dtype)
            for _ in range(2))
    out, wide = torch.empty_like(a), torch.empty(a.shape, device=device, dtype=torch.float32)
    size = a.element_size() * n
    ref_a, ref_b = a[:64].float().cpu(), b[:64].float().cpu()
    norm = torch.nn.functional.layer_norm

    def close(got, want, tol):
        return (got[:64].float().cpu() - want).abs().max().item() <= tol * want.abs().max().item()

    tol = 1e-2 if dtype != torch.float32 else 1e-5
    return [
        ("copy", 2 * size, lambda: out.copy_(a), lambda: close(out, ref_a, 0)),
        ("add", 3 * size, lambda: torch.add(a, b, out=out),
         lambda: close(out, ref_a + ref_b, tol)),
        ("cast_fp32", size + 4 * n, lambda: wide.copy_(a), lambda: close(wide, ref_a, 0)),
        ("layer_norm", 2 * size, lambda: norm(a, (hidden,)),
         lambda: close(norm(a, (hidden,)), norm(ref_a, (hidden,)), tol)),
    ]


def hbm_bandwidth(pack) -> dict[str, Any]:
    """What the scale model's ``hbm_efficiency`` assumes (0.88 of the datasheet): the
    element-wise kernels it prices, each checked against fp32 and timed on tensors far larger
    than L2, their bytes over the time as a fraction of the preset's datasheet bandwidth ->
    OUT/hbm_bandwidth.json. The measured efficiency is the best of the copy, the add and the
    cast; LayerNorm (a reduction per row first) is recorded beside them."""
    import torch

    device = torch.device(pack.sizes.device)
    dtype, hw, _ = _probe_runs(pack)
    n = pack.sizes.extra.get("hbm_elements", 1 << 28)  # 512 MiB of bf16, 10x an H100's L2
    g = torch.Generator(device=device).manual_seed(0)
    rows = []
    for name, moved, kernel, check in _streaming_kernels(n, 4096 if n >= 1 << 20 else 64,
                                                         device, dtype, g):
        kernel()
        row = {"kernel": name, "elements": n, "bytes": moved, "correct": bool(check())}
        if row["correct"]:
            ms = _time_ms(kernel, device)
            row.update(ms=ms, gb_per_s=moved / ms / 1e6,
                       fraction_of_datasheet=moved / (ms / 1e3) / hw.hbm_bw)
        rows.append(row)
    timed = [r["fraction_of_datasheet"] for r in rows if "ms" in r and r["kernel"] != "layer_norm"]
    report = {"gpu_preset": hw.name, "dtype": str(dtype), "datasheet_hbm_bw": hw.hbm_bw,
              "assumed_hbm_efficiency": hw.hbm_efficiency,
              "measured_hbm_efficiency": max(timed) if timed else None, "kernels": rows}
    (pack.out / "hbm_bandwidth.json").write_text(json.dumps(report, indent=1))
    wrong = [r["kernel"] for r in rows if not r["correct"]]
    return {"assumed": hw.hbm_efficiency, "measured": report["measured_hbm_efficiency"],
            "incorrect": wrong, **({"status": "failed"} if wrong else {})}


def _attention_outputs(backend, qkv) -> list:
    """Causal SDPA on ``backend``: its output, and the gradients of q, k and v for one fixed
    upstream gradient (the correctness check compares all four)."""
    import torch
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    with sdpa_kernel(backend):
        out = sdpa(*qkv, is_causal=True)
    grad = torch.ones_like(out).cumsum(-1).remainder(3) - 1  # fixed, mixed signs, any dtype
    return [out.detach(), *torch.autograd.grad(out, qkv, grad)]


def _attention_ms(backend, qkv, device) -> tuple[float, float]:
    """(forward, backward) milliseconds of causal SDPA on ``backend``."""
    import torch
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    with sdpa_kernel(backend):
        forward_ms = _time_ms(lambda: sdpa(*qkv, is_causal=True), device)
        out = sdpa(*qkv, is_causal=True)
    grad = torch.randn_like(out)
    backward_ms = _time_ms(lambda: torch.autograd.grad(out, qkv, grad, retain_graph=True),
                           device)
    return forward_ms, backward_ms


def _probe_runs(pack):
    """(dtype, the GPU preset the model predicts for, the runs whose shapes are timed): on a
    GPU the published H100 runs, H200 (Hopper's 132 SMs) when the device is one; in the
    rehearsal two tiny layouts."""
    import torch

    from suite.scale.hardware import preset

    if pack.sizes.device == "cuda":
        from suite.scale.datasets import all_runs, load_paper

        name = "H200" if "H200" in torch.cuda.get_device_name(0) else "H100"
        runs = [r for r in all_runs(load_paper(ROOT / "results" / "paper"))
                if r.hardware.name == "H100"]
        return torch.bfloat16, preset(name), runs
    from suite.scale.layout import Layout
    from suite.scale.model import ModelConfig
    from suite.scale.runs import Run

    model = ModelConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128)
    hw = replace(preset("H100"), sms=4)
    runs = [Run("rehearsal", "rehearsal", f"tp{tp}", "g", model,
                Layout(tp=tp, pp=1, dp=1, micro_batch=1, global_batch=1), hw, None, None)
            for tp in (1, 2)]
    return torch.float32, hw, runs


def mha(pack) -> dict[str, Any]:
    statuses = pack.points(
        (f"{system} L={n}", lambda s=system, n=n: pack.point("bert_mha", s, n, subject="attention"))
        for n in pack.sizes.mha_lengths for system in ("varlen", "padded-unfused", "padded-sdpa"))
    try:
        importlib.import_module("flash_attn")
        statuses["flash_attn varlen"] = "importable, not a registered system yet"
    except ImportError:
        statuses["flash_attn varlen"] = "unavailable: flash_attn is not installed here"
    return _statuses(statuses)


def bert_grid(pack) -> dict[str, Any]:
    """The README's table: each system's grid in one process of its own."""
    timeouts = pack.sizes.extra.get("grid_timeout_s", {})
    return _statuses(pack.points((system, lambda s=system: pack.grid(s, timeouts.get(s, 150)))
                                 for system in pack.sizes.bert_systems))


def ladder(pack) -> dict[str, Any]:
    from reference_impl import LADDER
    from suite.experiments.bert_names import ladder_name

    n = pack.sizes.extra.get("ladder_length", pack.sizes.bert_lengths[0])
    steps = pack.sizes.extra.get("ladder_steps", range(len(LADDER)))
    return _statuses(pack.points(
        (ladder_name(i), lambda i=i: pack.point("bert_ablation", ladder_name(i), n))
        for i in steps))


def gpt(pack) -> dict[str, Any]:
    label = "gpt-1b" if pack.sizes.device == "cuda" else "gpt-tiny"
    out = pack.results / "llm_mfu" / label / "single.json"
    args = ["train", "llm_mfu", "--trainer", "single", "--label", label,
            "--train-json", json.dumps(pack.sizes.gpt), "--out", str(out),
            "--steplog", str(out.with_suffix("").with_suffix(".steps.jsonl")),
            "--timeout-s", "280"]
    if (pack.results / "peak.json").exists():
        args += ["--peak", str(pack.results / "peak.json")]
    done = pack.seedbench(*args, timeout=300)
    if not out.exists():
        return {"status": "failed", "reason": f"no record (exit {done.returncode}): "
                                              f"{done.stderr[-800:]}"}
    rec = json.loads(out.read_text())
    from suite.experiments import train_interface as ti

    derived = rec.get("derived") or {}
    mfu = derived.get(ti.MFU) or {}
    return {"record_status": rec["status"], "reason": rec.get("reason", "")[:500],
            "mfu_percent": mfu.get("percent"), "peak": mfu.get("peak_source"),
            "tokens_per_s": derived.get(ti.TOKENS_PER_S),
            **({} if rec["status"] == "ok" else {"status": "failed"})}


def window_attention(pack) -> dict[str, Any]:
    """MegaScale's sliding window on this GPU (``llm_window``): the band-only kernel
    (FlexAttention with a sliding-window block mask) against SDPA's causal flash kernel, forward
    + backward at s = 8w, each system checked against float64 masked attention first."""
    gpu = pack.sizes.device == "cuda"
    point = ({"seq_len": 8192, "window": 1024, "heads": 16, "head_dim": 128} if gpu else
             {"seq_len": 256, "window": 32, "heads": 2, "head_dim": 16})
    label = f"s{point['seq_len']}-w{point['window']}"
    out = pack.results / "llm_window" / label
    done = pack.seedbench("attention-window", *(f"--{k.replace('_', '-')}={v}"
                                                for k, v in point.items()),
                          "--dtype", "bf16" if gpu else "fp32", "--repeats", "10" if gpu else "2",
                          "--device", pack.sizes.device, "--out-dir", str(out), timeout=280)
    found = {}
    for path in sorted(out.glob("*.json")):
        rec = json.loads(path.read_text())
        found[path.stem] = {"status": rec["status"], "reason": rec.get("reason", "")[:300],
                            "time_vs_causal": (rec.get("derived") or {}).get("time_vs_causal")}
    if not found:
        return {"status": "failed", "reason": f"no records (exit {done.returncode}): "
                                              f"{done.stderr[-800:]}"}
    failed = any(r["status"] != "ok" for r in found.values())
    return {"systems": found, **({"status": "failed"} if failed else {})}


def resilience(pack) -> dict[str, Any]:
    """MegaScale's two-stage checkpoint on this GPU (``llm_resilience``): one rank of a 350M
    GPT (a 4 GiB fp32 + AdamW state) whose checkpoints take turns: a synchronous write, and a
    copy to host memory persisted in the background by a process and by a thread; the stall of
    each, fsynced. (The fault runs
    need two ranks, each on a GPU of its own.)"""
    gpu = pack.sizes.device == "cuda"
    model = ({"n_layer": 24, "n_embd": 1024, "n_head": 16} if gpu else
             {"n_layer": 1, "n_embd": 32, "n_head": 2})
    train = {"model": model, "seq_len": 256 if gpu else 16, "global_batch": 8 if gpu else 2,
             "steps": 20 if gpu else 11, "warmup_steps": 1, "device": pack.sizes.device}
    spec = {"every": 3, "steps": train["steps"], "global_batch": train["global_batch"],
            "nprocs": 1}
    out = pack.results / "llm_resilience" / "ddp"
    done = pack.seedbench("resilience", "checkpoint", "--trainer", "ddp", "--nprocs", "1",
                          "--train-json", json.dumps(train), "--spec-json", json.dumps(spec),
                          "--out-dir", str(out), timeout=280)
    found = {}
    for path in sorted(out.glob("checkpoint-*.json")):
        rec = json.loads(path.read_text())
        d = rec.get("derived") or {}
        found[path.stem] = {"status": rec["status"], "reason": rec.get("reason", "")[:300],
                            **{k: d.get(k) for k in ("stall_s", "persist_s", "state_bytes")}}
    if not found:
        return {"status": "failed", "reason": f"no records (exit {done.returncode}): "
                                              f"{done.stderr[-800:]}"}
    failed = any(r["status"] == "failed" for r in found.values())
    return {"systems": found, **({"status": "failed"} if failed else {})}


def serving(pack) -> dict[str, Any]:
    """Each system served for one repeat; per system its record's status, the highest VALID
    Server QPS with the p99 there, and Offline samples/s."""
    s = pack.sizes
    section = {"enabled": True, "model": s.bert_model, "dtype": s.bert_dtype,
               "device": s.device, "repeats": 1, **s.serving}
    found: dict[str, dict[str, Any]] = {}

    def serve(system: str) -> str:
        out = pack.results / "bert_serving" / system / "run0.json"
        done = pack.seedbench("serve", "bert_serving", "--system", system, "--section-json",
                              json.dumps(section), "--out", str(out),
                              timeout=section["timeout_s"] + 30)
        if not out.exists():
            raise RuntimeError(f"no record (exit {done.returncode}): {done.stderr[-500:]}")
        rec = json.loads(out.read_text())
        scenarios = (rec.get("derived") or {}).get("scenarios") or {}
        server, offline = scenarios.get("Server") or {}, scenarios.get("Offline") or {}
        found[system] = {"status": rec["status"], "reason": rec.get("reason", "")[:300],
                         "max_valid_qps": server.get("max_valid_qps"),
                         "p99_ms": (server.get("p99_s") or 0) * 1e3 or None,
                         "offline_samples_per_s": offline.get("samples_per_s"),
                         "shape_probes": (rec.get("derived") or {}).get("shape_probes")}
        return rec["status"]

    statuses = pack.points((system, lambda s=system: serve(s)) for system in section["systems"])
    for system, status in statuses.items():
        found.setdefault(system, {"status": status})
    return {"systems": found, **_statuses(statuses)}


def workflow(pack) -> dict[str, Any]:
    """The user's GPU path: Snakemake itself runs ``workflows/config/gpu.yaml`` (the rehearsal:
    the same config at tiny sizes, on CPU), a process per point as on any machine, then the
    table, figure and analysis. Its records go to ``OUT/workflow.tar.gz`` as the machine folder
    ``<machine>-workflow`` (publish it under that name, beside the pack's)."""
    import subprocess
    import tarfile

    import yaml

    name = f"{pack.machine}-workflow"
    where = pack.work / "workflow"
    (where / "results").mkdir(parents=True, exist_ok=True)
    paper = where / "results" / "paper"
    if not paper.exists():  # the papers' CSVs the analysis reads
        paper.symlink_to(ROOT / "results" / "paper")
    override: dict[str, Any] = {"machine": name}
    if pack.sizes.device != "cuda":
        override |= {"peak": {"dtypes": ["fp32"], "sizes": [64], "repeats": 1},
                     "bert_varlen": {"model": pack.sizes.bert_model, "device": "cpu",
                                     "dtype": "fp32", "batch_sizes": [2], "max_seq_lens": [16],
                                     "baselines": ["torch-eager", "reference"], "threads": 1,
                                     "timing": pack.sizes.timing}}
    (where / "override.yaml").write_text(yaml.safe_dump(override))
    targets = [f"results/{name}/bert_varlen/analysis.json",
               f"results/{name}/figures/bert_varlen.svg"]
    # the rules call the `seedbench` script, where pip put it for this Python
    scripts = {sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")}
    env = {**pack.env, "PATH": os.pathsep.join([*scripts, pack.env.get("PATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(where), "--profile", str(ROOT / "workflows/profiles/local"),
         "--configfile", str(ROOT / "workflows/config/gpu.yaml"), str(where / "override.yaml"),
         "--cores", "all", *targets],
        env=env, capture_output=True, text=True, cwd=where,
        timeout=max(60.0, pack.budget_s + 60 - pack.elapsed()))
    folder = where / "results" / name
    if folder.exists():
        with tarfile.open(pack.out / "workflow.tar.gz", "w:gz") as tar:
            tar.add(folder, arcname=name)
    records = sorted(str(p.relative_to(folder)) for p in folder.rglob("b*_l*.json")) \
        if folder.exists() else []
    summary = [line for line in done.stderr.splitlines() if line.startswith("[seedbench]")]
    out = {"machine_folder": name, "records": records, "progress": summary[-3:]}
    if done.returncode != 0:
        out |= {"status": "failed", "reason": f"snakemake exit {done.returncode}",
                "tail": done.stderr[-2000:]}
    return out


def _statuses(statuses: dict[str, str]) -> dict[str, Any]:
    """A step's points: it failed when any point failed or was incorrect (a skipped point,
    past the budget, is said by its status)."""
    bad = {k: v for k, v in statuses.items() if v.split(":")[0] in ("failed", "incorrect")}
    return {"records": statuses, **({"status": "failed"} if bad else {})}


# layer_intercept's and activation_memory's GPT blocks on the GPU (the gpt step's width)
LAYER_SIZES = {"layers": 4, "hidden": 2048, "heads": 16, "seq": 1024, "batches": (1, 2, 4, 8, 16)}


def _layer_runs_csv(path: Path, shape, hw, points: list[dict[str, Any]]) -> None:
    """layer_intercept's timings as layer rows of the scale model's runs CSV
    (``layer_time_ms``), without recompute and then with it: ``seedbench scale-model validate
    layer_runs.csv --calibrate "layer b16"`` fits a system for this GPU on one of them and
    predicts the others, the recomputed ones included."""
    import pandas as pd

    model = {"layers": shape.layers, "hidden": shape.hidden, "heads": shape.heads,
             "seq_len": shape.seq_len, "vocab": shape.vocab, "dropout": shape.dropout}
    runs = [{"id": f"layer b{p['batch']}{suffix}", "dataset": "layer_intercept", "gpu": hw.name,
             "sms": hw.sms, **model, "gpus": 1, "tp": 1, "pp": 1, "micro_batch": p["batch"],
             "global_batch": p["batch"], "attention": "flash2", "recompute": recompute,
             "recompute_early_stop": recompute == "full", "layer_time_ms": p[key]}
            for suffix, recompute, key in (("", "none", "ms_per_layer"),
                                           (" full", "full", "recompute_ms_per_layer"))
            for p in points]
    pd.DataFrame(runs).to_csv(path, index=False)


def layer_intercept(pack) -> dict[str, Any]:
    """Whether a layer costs a fixed time per micro-batch, which the scale model does not have
    (its layer time grows with the tokens, bar tile and wave quantization): a stack of GPT
    blocks (the gpt step's width, eager, fused kernels, bf16) checked against the same weights
    on the unfused path in fp32, then timed forward + backward at 1 to 16 sequences; a line
    through time against tokens (``scipy.stats.linregress``) gives the fixed part per layer
    (its intercept) beside the model's own line at ceiling 1 -> OUT/layer_intercept.json, and
    the timings as layer rows of the scale model's runs CSV -> OUT/layer_runs.csv. The same
    blocks with full recompute (torch's non-reentrant checkpoint, which stops early:
    ``recompute_early_stop``) are timed at each size too: what recompute costs over none,
    measured against what the model charges (``recompute_over_none``; llm-foundry's rows
    without recompute come out 4-7 points faster than its rows with it, which this tells
    apart from the trainer's costs around the layers)."""
    import torch
    from scipy.stats import linregress

    from reference_impl.configs import GPTConfig
    from reference_impl.gpt import Block
    from suite.scale.layout import Layout
    from suite.scale.model import ModelConfig
    from suite.scale.step import layer_seconds

    sizes = pack.sizes.extra.get("layer_intercept", LAYER_SIZES)
    device = torch.device(pack.sizes.device)
    dtype, hw, _ = _probe_runs(pack)
    cfg = GPTConfig(n_layer=sizes["layers"], n_embd=sizes["hidden"], n_head=sizes["heads"],
                    block_size=sizes["seq"])
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(*[Block(cfg) for _ in range(cfg.n_layer)]).to(device)
    unfused = torch.nn.Sequential(*[Block(replace(cfg, fused=False))
                                    for _ in range(cfg.n_layer)]).to(device)
    unfused.load_state_dict(blocks.state_dict())
    recomputed = torch.nn.Sequential(*[Block(replace(cfg, checkpointing="full"))
                                       for _ in range(cfg.n_layer)]).to(device)
    recomputed.load_state_dict(blocks.state_dict())
    x = torch.randn(2, sizes["seq"], cfg.n_embd, device=device)
    with torch.no_grad():
        expected = unfused(x)
        blocks.to(dtype)
        recomputed.to(dtype)
        got = blocks(x.to(dtype)).float()
    err = ((got - expected).abs().max() / expected.abs().max()).item()
    correct = err <= (5e-2 if dtype != torch.float32 else 1e-4)
    shape = ModelConfig(layers=cfg.n_layer, hidden=cfg.n_embd, heads=cfg.n_head,
                        seq_len=sizes["seq"], vocab=cfg.vocab_size, dropout=cfg.dropout > 0)
    rows = []
    for batch in sizes["batches"] if correct else ():
        x = torch.randn(batch, sizes["seq"], cfg.n_embd, device=device, dtype=dtype,
                        requires_grad=True)
        grad = torch.randn_like(x)

        def step(x=x, grad=grad, stack=blocks):
            stack(x).backward(grad)

        def step_recomputed(x=x, grad=grad):
            step(x, grad, recomputed)

        step()  # warm: kernels' first launches and allocations
        step_recomputed()

        layout = Layout(tp=1, pp=1, dp=1, micro_batch=batch, global_batch=batch,
                        attention="flash2")
        full = replace(layout, recompute="full", recompute_early_stop=True)
        rows.append({"batch": batch, "tokens": batch * sizes["seq"],
                     "ms_per_layer": _time_ms(step, device) / cfg.n_layer,
                     "model_ms_per_layer": 1e3 * layer_seconds(shape, layout, hw),
                     "recompute_ms_per_layer": _time_ms(step_recomputed, device) / cfg.n_layer,
                     "model_recompute_ms_per_layer": 1e3 * layer_seconds(shape, full, hw)})
    report = {"gpu_preset": hw.name, "dtype": str(dtype), **sizes, "relative_error": err,
              "correct": correct, "points": rows}
    if rows:
        report["recompute_over_none"] = [
            {"batch": r["batch"], "measured": r["recompute_ms_per_layer"] / r["ms_per_layer"],
             "model": r["model_recompute_ms_per_layer"] / r["model_ms_per_layer"]}
            for r in rows]
    if len(rows) >= 3:
        for key, name in (("ms_per_layer", "measured"), ("model_ms_per_layer", "model")):
            fit = linregress([r["tokens"] for r in rows], [r[key] for r in rows])
            report[name] = {"intercept_ms": fit.intercept, "ms_per_1k_tokens": 1e3 * fit.slope,
                            "r": fit.rvalue}
    (pack.out / "layer_intercept.json").write_text(json.dumps(report, indent=1))
    _layer_runs_csv(pack.out / "layer_runs.csv", shape, hw, rows)
    return {"correct": correct,
            **{k: report[k] for k in ("measured", "model", "recompute_over_none") if k in report},
            **({"status": "failed"} if not correct else {})}


def activation_memory(pack) -> dict[str, Any]:
    """What the memory model counts and what it leaves to ``RESERVE_BYTES``, on the GPU: a stack
    of GPT blocks (layer_intercept's sizes, bf16, the fused path) run forward + backward at 1 to
    8 sequences without and with full recompute; the bytes autograd saves for the backward
    (``suite.scale.probe.saved_activation_bytes``) beside the model's activation term, and the
    CUDA caching allocator's peak allocated and reserved bytes over the step (reserved over
    allocated: the cache the model does not count, which BLOOM's nvidia-smi readings hold)
    -> OUT/activation_memory.json."""
    import torch

    from reference_impl.configs import GPTConfig
    from reference_impl.gpt import Block
    from suite.scale.layout import Layout
    from suite.scale.memory import kept_per_layer, layer_activation_bytes
    from suite.scale.model import ModelConfig
    from suite.scale.probe import saved_activation_bytes

    sizes = pack.sizes.extra.get("layer_intercept", LAYER_SIZES)
    batches = pack.sizes.extra.get("memory_batches", (1, 2, 4, 8))
    device = torch.device(pack.sizes.device)
    cuda = device.type == "cuda"
    shape = ModelConfig(layers=sizes["layers"], hidden=sizes["hidden"], heads=sizes["heads"],
                        seq_len=sizes["seq"], vocab=100, dropout=False)
    rows = []
    for recompute in ("none", "full"):
        cfg = GPTConfig(n_layer=sizes["layers"], n_embd=sizes["hidden"], n_head=sizes["heads"],
                        block_size=sizes["seq"], checkpointing=recompute)
        torch.manual_seed(0)
        blocks = torch.nn.Sequential(*[Block(cfg) for _ in range(cfg.n_layer)]).to(
            device, torch.bfloat16)
        for batch in batches:
            x = torch.randn(batch, sizes["seq"], cfg.n_embd, device=device,
                            dtype=torch.bfloat16, requires_grad=True)
            layout = Layout(tp=1, pp=1, dp=1, micro_batch=batch, global_batch=batch,
                            attention="flash2", recompute=recompute)
            _, working = layer_activation_bytes(shape, layout)
            # kept through the forward; full recompute rebuilds one layer's ``working`` set
            # in the backward on top (the model counts it; autograd's hooks do not see it)
            row = {"recompute": recompute, "batch": batch,
                   "model_bytes": cfg.n_layer * kept_per_layer(shape, layout),
                   "model_recompute_bytes": working if recompute == "full" else 0,
                   "saved_bytes": saved_activation_bytes(blocks, x)}
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
                y = blocks(x)
                row["held_after_forward_bytes"] = torch.cuda.memory_allocated(device) - base
                y.backward(torch.ones_like(y))
                torch.cuda.synchronize(device)
                row["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
                row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
                row["base_allocated_bytes"] = base
                del y
            x.grad = None
            blocks.zero_grad(set_to_none=True)
            rows.append(row)
    ratios = sorted(r["saved_bytes"] / r["model_bytes"] for r in rows)
    report = {**sizes, "batches": list(batches), "points": rows,
              "saved_over_model_median": ratios[len(ratios) // 2]}
    if cuda:
        cache = sorted(r["peak_reserved_bytes"] / r["peak_allocated_bytes"] for r in rows)
        report["reserved_over_allocated_median"] = cache[len(cache) // 2]
    else:
        report["unavailable"] = "the caching allocator's statistics need CUDA"
    (pack.out / "activation_memory.json").write_text(json.dumps(report, indent=1))
    return {k: report[k] for k in ("saved_over_model_median", "reserved_over_allocated_median")
            if k in report}


# issue 50's steps (the grid, serving) right after what they run with (the tuning, the peak):
# a lease cut off keeps them; the first H200 run measured the later ones, and not serving
STEPS = (("env", env), ("kernels", kernels), ("tune", tune), ("peak", peak),
         ("bert_grid", bert_grid), ("serving", serving), ("workflow", workflow),
         ("mha", mha), ("gpt", gpt),
         ("window_attention", window_attention), ("resilience", resilience), ("ladder", ladder),
         ("attention_kernels", attention_kernels), ("hbm_bandwidth", hbm_bandwidth),
         ("gemm_shapes", gemm_shapes),
         ("overlap_interference", overlap_interference), ("layer_intercept", layer_intercept),
         ("activation_memory", activation_memory))
