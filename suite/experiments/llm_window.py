"""Sliding-window attention against full causal attention, forward + backward, side by side
(MegaScale Sec. 3.1: a window makes attention's cost O(s w) instead of O(s^2)).

One job per point ``(seq_len, window)`` times every system in the same process, round-robin
(one forward+backward of each system per round), so the ratios compare samples taken under
the same conditions. It writes one record per system (``SYSTEMS``); each windowed system is
first checked against the masked dense attention in float64 (output and the gradients of q,
k and v) and is flagged ``incorrect``, not timed, when it differs. ``causal`` (SDPA's causal
kernel, no window) is the denominator and is checked against the dense causal reference.

- ``window-fused``: ``reference_impl.kernels.window_attention`` (the flash kernel's causal
  triangles on CPU, FlexAttention on CUDA): the band only;
- ``window-banded``: ``banded_attention``, blocks of explicit math (the unfused model's path);
- ``window-masked``: SDPA with a dense boolean mask: what the ladder's window step ran before
  it skipped work (every score computed, and on a GPU off the flash path).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from reference_impl.kernels.window_attention import (band_fraction, banded_attention,
                                                     window_attention, window_mask)
from suite import env as envmod
from suite.measure.load import watched, with_noise
from suite.measure.stats import ratio_of_medians_ci, summarize
from suite.experiments.llm_plan import WINDOW_EXPERIMENT as EXPERIMENT
from suite.experiments.llm_plan import WINDOW_SYSTEMS as SYSTEMS
from suite.records import Record, Status, new_record, outcome

DENOMINATOR = "causal"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# float64 reference: max |error| of the output and of each gradient, relative to the largest
# reference value, per timed dtype (fp32: summation order only; bf16: 8 mantissa bits)
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}


def attention_fn(system: str, window: int) -> Callable[..., torch.Tensor]:
    """``(q, k, v) -> out`` of one system at one window."""
    if system == "causal":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if system == "window-fused":
        return lambda q, k, v: window_attention(q, k, v, window)
    if system == "window-banded":
        return lambda q, k, v: banded_attention(q, k, v, window)
    if system == "window-masked":
        return lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=window_mask(q.shape[-2], window, q.device))
    raise ValueError(f"system={system!r} is not one of {SYSTEMS}")


def _inputs(point: dict[str, Any], device: torch.device, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    shape = (point["batch"], point["heads"], point["seq_len"], point["head_dim"])
    q, k, v, dout = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(4))
    return [t.to(device, dtype).requires_grad_(i < 3) for i, t in enumerate((q, k, v, dout))]


def _forward_backward(fn, q, k, v, dout) -> list[torch.Tensor]:
    out = fn(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return [out, *grads]


def reference(point: dict[str, Any], window: int | None, device: torch.device
              ) -> list[torch.Tensor]:
    """Output and q/k/v gradients of float64 SDPA with a dense mask: the window's, or the
    causal one (``window`` None)."""
    return _forward_backward(
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=window_mask(q.shape[-2], window, q.device)),
        *_inputs(point, device, torch.float64))


def check(system: str, point: dict[str, Any], device: torch.device, dtype: str,
          want: list[torch.Tensor]) -> dict[str, Any]:
    """The system's output and q/k/v gradients against ``want`` (``reference``) on the same
    inputs, each as max |error| over the reference's max |value|."""
    got = _forward_backward(attention_fn(system, point["window"]),
                            *_inputs(point, device, DTYPES[dtype]))
    errors = {name: float((g.detach().double() - w.detach()).abs().max()
                          / w.detach().abs().max())
              for name, g, w in zip(("out", "dq", "dk", "dv"), got, want)}
    worst = max(errors.values())
    window = None if system == DENOMINATOR else point["window"]
    return {"passed": worst <= TOLERANCE[dtype], "reference": (
                "float64 SDPA with a dense causal mask" if window is None else
                f"float64 SDPA with the dense window mask (window {window})"),
            "max_rel_err": worst, "rel_err": errors, "tolerance": TOLERANCE[dtype]}


def run_point(point: dict[str, Any], *, dtype: str = "fp32", repeats: int = 7, warmup: int = 1,
              systems: tuple[str, ...] = SYSTEMS, device: str = "cpu",
              config: dict[str, Any] | None = None) -> list[Record]:
    """One record per system at ``point`` (``seq_len, window, heads, head_dim, batch``)."""
    if DENOMINATOR not in systems:
        raise ValueError(f"systems={systems!r} must include the denominator {DENOMINATOR!r}")
    config = dict(config or {}, dtype=dtype, repeats=repeats, warmup=warmup, device=device)
    dev = torch.device(device)
    records = {s: new_record(EXPERIMENT, s, dict(point, dtype=dtype), config) for s in systems}
    timed: list[str] = []
    wanted: dict[int | None, list[torch.Tensor]] = {}
    for system, record in records.items():
        with outcome(record):
            window = None if system == DENOMINATOR else point["window"]
            if window not in wanted:
                wanted[window] = reference(point, window, dev)
            record.correctness = check(system, point, dev, dtype, wanted[window])
            if record.correctness["passed"]:
                timed.append(system)
                record.status = Status.OK
            else:
                record.status = Status.INCORRECT
                record.reason = (f"differs from the float64 reference by "
                                 f"{record.correctness['max_rel_err']:.3g} relative (tolerance "
                                 f"{TOLERANCE[dtype]:g}): not timed")
    wanted.clear()
    samples = _time(timed, point, dev, dtype, repeats, warmup) if DENOMINATOR in timed else None
    for record in records.values():
        if record.status != Status.OK:
            continue
        if samples is None:
            record.status = Status.FAILED
            record.reason = "the causal denominator failed its check: nothing timed"
            continue
        _fill(record, samples, point, dev)
    env = envmod.capture()
    for record in records.values():
        record.env = env
    return list(records.values())


def _time(systems, point, device, dtype, repeats, warmup) -> dict[str, Any]:
    """Round-robin timing: each round times one forward+backward of every system."""
    fns = {s: attention_fn(s, point["window"]) for s in systems}
    q, k, v, dout = _inputs(point, device, DTYPES[dtype])
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {s: [] for s in systems}
    with watched() as load:
        for r in range(warmup + repeats):
            for s, fn in fns.items():
                sync()
                t0 = time.perf_counter()
                _forward_backward(fn, q, k, v, dout)
                sync()
                if r >= warmup:
                    times[s].append(time.perf_counter() - t0)
    return {"times": times, "load": load}


def _fill(record: Record, samples: dict[str, Any], point: dict[str, Any],
          device: torch.device) -> None:
    times = samples["times"]
    own = times[record.system]
    if record.system == DENOMINATOR:  # itself: 1, no interval to speak of
        ratio, low, high = 1.0, None, None
    else:
        ratio, low, high = ratio_of_medians_ci(own, times[DENOMINATOR])
    record.timing = with_noise({"unit": "s", "timer": "time.perf_counter around forward + "
                                "backward (q, k, v gradients), round-robin with the other "
                                "systems", "device": str(device),
                                "threads": torch.get_num_threads(), "samples": own,
                                "stats": summarize(own)}, samples["load"])
    s, w = point["seq_len"], point["window"]
    record.derived = {
        "time_vs_causal": ratio, "time_vs_causal_ci": [low, high],
        "band_fraction": band_fraction(s, w),
        "band_fraction_note": "scores in the window's band over those of the causal triangle: "
                              "what a kernel that skips the rest can save",
        "denominator": "SDPA is_causal (no window), timed in the same rounds",
    }
