"""The cluster-scale model's assumptions timed on this GPU: its GEMM-from-shape term, GEMMs beside
a communication kernel, SDPA's attention kernels, element-wise HBM bandwidth, a layer's fixed
time per micro-batch and what recompute costs, and the activation memory it charges."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from suite.gpu.steps.common import ROOT, time_ms, under_load


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
            ms = time_ms(lambda a=a, b=b: a @ b, device)
            row.update(ms=ms, tflops=shape.flops / ms / 1e9,
                       fraction_of_peak=shape.flops / (ms / 1e3) / hw.peak_flops,
                       **under_load(lambda a=a, b=b: a @ b, ms, device))
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
        forward_ms = time_ms(lambda: sdpa(*qkv, is_causal=True), device)
        out = sdpa(*qkv, is_causal=True)
    grad = torch.randn_like(out)
    backward_ms = time_ms(lambda: torch.autograd.grad(out, qkv, grad, retain_graph=True),
                           device)
    return forward_ms, backward_ms


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
            ms = time_ms(kernel, device)
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
                     "ms_per_layer": time_ms(step, device) / cfg.n_layer,
                     "model_ms_per_layer": 1e3 * layer_seconds(shape, layout, hw),
                     "recompute_ms_per_layer": time_ms(step_recomputed, device) / cfg.n_layer,
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
