"""Kernel micro-benchmarks of the ByteTransformer family, one (system, op, point) per record:

- ``bert_mha``: the reference's varlen attention against PyTorch's padded MHA (matmul + mask +
  softmax + matmul, the paper's PyTorch baseline) and padded SDPA, on BERT-base-shaped Q/K/V;
- ``bert_fused_ops``: add-bias + residual + LayerNorm and GEMM + bias + GELU, fused form against
  the unfused torch form, on the packed tokens of the batch.

Each system gets the layout it works on (packed or padded) prepared outside the timed call;
outputs are compared on valid tokens with a float64 computation before anything is timed.
"""

from __future__ import annotations

from dataclasses import asdict

import math
from typing import Any

import torch
import torch.nn.functional as F

from reference_impl.kernels import add_bias_residual_layernorm, bias_gelu, padded_attention
from reference_impl.kernels import varlen_attention
from reference_impl.packing import pack, pack_info, unpack
from suite import env as envmod
from suite.config import BertVarlenConfig
from suite.measure.correctness import TOLERANCE
from suite.devices import resolve_device, torch_dtype
from suite.experiments.bert_names import OPS, SYSTEMS
from suite.peak.schema import efficiency
from suite.measure.load import watched, with_noise
from suite.records import Record, Status, new_record, outcome
from suite.measure.stats import summarize
from suite.measure.timing import measure, timer_name
from suite.workloads import bert_batch, flop_bounds, varlen_lengths

BASELINE_OF = {"bert_mha": "padded-unfused", "bert_fused_ops": "unfused"}


def measure_point(cfg: BertVarlenConfig, experiment: str, subject: str | None, system: str,
                  batch_size: int, max_seq_len: int, peak: dict[str, Any] | None) -> Record:
    """The registry's runner for the kernel experiments: subject is the operator (default:
    the experiment's first)."""
    if experiment not in OPS:
        raise ValueError(f"experiment {experiment!r} is not one of {sorted(OPS)}")
    return run_kernel_point(cfg, experiment, subject or OPS[experiment][0], system, batch_size,
                            max_seq_len, peak)


def run_kernel_point(cfg: BertVarlenConfig, experiment: str, op: str, system: str,
                     batch_size: int, max_seq_len: int,
                     peak: dict[str, Any] | None = None) -> Record:
    if experiment not in OPS:
        raise ValueError(f"experiment {experiment!r} is not one of {sorted(OPS)}")
    point = {"batch_size": batch_size, "max_seq_len": max_seq_len, "op": op,
             "distribution": cfg.distribution, "seed": cfg.seed, "dtype": cfg.dtype}
    record = new_record(experiment, system, point, cfg.to_dict())
    with outcome(record):
        if op not in OPS[experiment]:
            raise KeyError(f"{experiment} op {op!r} is not one of {OPS[experiment]}")
        if system not in SYSTEMS[experiment]:
            raise KeyError(f"{experiment} system {system!r} is not one of {SYSTEMS[experiment]}")
        _run(record, cfg, op, system, batch_size, max_seq_len, peak)
    record.env = envmod.capture()
    return record


def _run(record: Record, cfg: BertVarlenConfig, op: str, system: str, batch_size: int,
         max_seq_len: int, peak: dict[str, Any] | None) -> None:
    threads = cfg.threads or envmod.usable_cores()
    torch.set_num_threads(threads)
    device = resolve_device(cfg.device)
    dtype = torch_dtype(cfg.dtype)
    lengths = varlen_lengths(batch_size, max_seq_len, cfg.distribution, seed=cfg.seed)
    mask = bert_batch(lengths, max_seq_len, 2, seed=cfg.seed).attention_mask.to(device)
    info = pack_info(mask)
    record.workload = {"lengths": lengths, "total_tokens": sum(lengths),
                       "padded_tokens": batch_size * max_seq_len,
                       **flop_bounds(lengths, max_seq_len)}
    gen = torch.Generator(device="cpu").manual_seed(cfg.seed)
    build = {"attention": _attention_case, "layernorm": _layernorm_case,
             "gemm_gelu": _gemm_gelu_case}[op]
    fn, expected, valid_of, useful_flops = build(cfg, system, info, lengths, gen, device, dtype)
    # Element-wise ops are memory-bound: their figure is the least traffic over time (read x and
    # the residual, write y), not FLOP/s.
    min_bytes = 3 * info.total_tokens * cfg.model.hidden * torch.finfo(dtype).bits // 8

    out = fn()
    got = valid_of(out).detach().to("cpu", torch.float64)
    err = (got - expected).abs().max().item() if expected.numel() else 0.0
    scale = expected.abs().max().item() if expected.numel() else 0.0
    tol = TOLERANCE[cfg.dtype]
    record.correctness = {"passed": err <= tol and bool(torch.isfinite(got).all()),
                          "max_abs_err": err, "max_rel_err": err / scale if scale else 0.0,
                          "tolerance_abs": tol, "reference": f"float64 torch {op}"}
    if not record.correctness["passed"]:
        record.status = Status.INCORRECT
        record.reason = f"max abs error {err:.3g} > tolerance {tol:g}"
        return

    with watched() as load:
        samples = measure(fn, device, cfg.timing)
    stats = summarize(samples)
    record.timing = with_noise({"unit": "s", "timer": timer_name(device), "threads": threads,
                                "device": str(device), "policy": cfg.timing.as_dict(),
                                "samples": samples, "stats": stats}, load)
    median = stats["median"]
    record.derived = {"latency_ms": median * 1e3, "tokens_per_s": sum(lengths) / median,
                      "padding_free": system == "varlen" if op == "attention" else None}
    if op == "attention" and system == "varlen":  # auto: Triton on CUDA, torch elsewhere
        record.derived["attention_backend"] = "triton" if device.type == "cuda" else "torch"
        if device.type == "cuda":
            from reference_impl.kernels.triton_attention import ACTIVE

            record.derived["triton_tuning"] = asdict(ACTIVE)
    if useful_flops:
        record.derived.update({"useful_flops": useful_flops,
                               "useful_flops_per_s": useful_flops / median,
                               **efficiency(useful_flops / median, peak, cfg.dtype, device.type)})
    else:
        record.derived["min_bytes_per_s"] = min_bytes / median
    record.status = Status.OK


def _randn(shape, gen, device, dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(device, dtype)


def _attention_case(cfg, system, info, lengths, gen, device, dtype):
    heads, d = cfg.model.heads, cfg.model.hidden // cfg.model.heads
    q, k, v = (_randn((info.total_tokens, heads, d), gen, device, dtype) for _ in range(3))
    scale = 1.0 / math.sqrt(d)
    expected = torch.cat([_attention64(q[s:e], k[s:e], v[s:e], scale) for s, e in
                          zip(info.cu_seqlens[:-1].tolist(), info.cu_seqlens[1:].tolist())])
    mask = info.seqlens.to(device)[:, None] > torch.arange(info.padded_len, device=device)
    if system == "varlen":
        fn = lambda: varlen_attention(q, k, v, info.cu_seqlens, info.max_seqlen,  # noqa: E731
                                      softmax_scale=scale)
        valid_of = lambda out: out  # noqa: E731
    else:
        qp, kp, vp = (unpack(t, info) for t in (q, k, v))  # [B, S, heads, d]
        if system == "padded-unfused":
            fn = lambda: padded_attention(qp, kp, vp, mask, softmax_scale=scale)  # noqa: E731
        else:
            sdpa_mask = mask[:, None, None, :]
            fn = lambda: F.scaled_dot_product_attention(  # noqa: E731
                *(t.transpose(1, 2) for t in (qp, kp, vp)), attn_mask=sdpa_mask,
                scale=scale).transpose(1, 2)
        valid_of = lambda out: pack(out, info)  # noqa: E731
    flops = 4 * heads * d * sum(n * n for n in lengths)
    return fn, expected, valid_of, flops


def _attention64(q, k, v, scale) -> torch.Tensor:
    q, k, v = (t.to("cpu", torch.float64) for t in (q, k, v))
    p = (torch.einsum("qhd,khd->hqk", q, k) * scale).softmax(-1)
    return torch.einsum("hqk,khd->qhd", p, v)


def _layernorm_case(cfg, system, info, lengths, gen, device, dtype):
    h = cfg.model.hidden
    x, res = (_randn((info.total_tokens, h), gen, device, dtype) for _ in range(2))
    bias, w, b = (_randn((h,), gen, device, dtype) for _ in range(3))
    eps = 1e-12
    y64 = x.double().cpu() + bias.double().cpu() + res.double().cpu()
    expected = F.layer_norm(y64, (h,), w.double().cpu(), b.double().cpu(), eps)
    if system == "fused":
        fn = lambda: add_bias_residual_layernorm(x, bias, res, w, b, eps)  # noqa: E731
    else:
        fn = lambda: F.layer_norm((x + bias) + res, (h,), w, b, eps)  # noqa: E731
    return fn, expected, (lambda out: out), 0.0


def _gemm_gelu_case(cfg, system, info, lengths, gen, device, dtype):
    h, inter = cfg.model.hidden, cfg.model.intermediate
    x = _randn((info.total_tokens, h), gen, device, dtype)
    w = _randn((inter, h), gen, device, dtype) / math.sqrt(h)
    bias = _randn((inter,), gen, device, dtype)
    expected = F.gelu(F.linear(x.double().cpu(), w.double().cpu(), bias.double().cpu()))
    if system == "fused":
        fn = lambda: bias_gelu(F.linear(x, w), bias)  # noqa: E731
    else:
        fn = lambda: F.gelu(F.linear(x, w, bias))  # noqa: E731
    return fn, expected, (lambda out: out), 2.0 * info.total_tokens * h * inter


