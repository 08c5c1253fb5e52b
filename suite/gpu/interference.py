"""What a hidden collective costs the compute it hides under, measured on one GPU.

The scale model prices hidden communication (FSDP's prefetched all-gathers, Megatron's DP
overlap) by the SMs it holds: the collective is itself a kernel, NCCL runs each ring channel as
one resident thread block, which holds an SM and moves data through HBM while the GEMM beside
it runs on the rest (a GEMM sized to one wave then spills into a second, which the model does
not count). With c of the GPU's SMs held for the whole GEMM, the model's GEMM takes
sms / (sms - c) of its time: a slowdown of c / (sms - c) (``Hardware.collective_sm_share``).
Lee et al. 2025 (arXiv 2507.03114) measure compute slowed by 18.9% on average (40% at most)
when overlapped, on A100, H100, MI250 and MI210.

One GPU has no peer to talk to, so the stand-in is the part that touches the GEMM: a persistent
copy kernel of ``ctas`` blocks (as many as NCCL's channels) on a side stream, streaming a buffer
through HBM for longer than the GEMMs run. Each GEMM is timed alone and beside it, both with
CUDA events over the same repetitions; the slowdown is their ratio minus one.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Any

COPY_BLOCK = 4096  # elements per block step: 8 KiB of bf16, a few memory transactions per warp
LEE_2025_MEAN_SLOWDOWN = 0.189  # arXiv 2507.03114: compute slowdown when overlapped, average


def _copy_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def copy(src, dst, n, rounds, BLOCK: tl.constexpr):
        """Block ``pid`` copies every ``num_programs``-th BLOCK of ``src`` to ``dst``, ``rounds``
        times: a fixed number of resident blocks, as NCCL's channels are."""
        pid, programs = tl.program_id(0), tl.num_programs(0)
        for _ in range(rounds):
            for start in range(pid * BLOCK, n, programs * BLOCK):
                offsets = start + tl.arange(0, BLOCK)
                mask = offsets < n
                tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)

    return copy


_KERNEL = None


def side_copy(src, dst, ctas: int, rounds: int) -> None:
    """Launch the persistent copy of ``src`` into ``dst`` (same size) on ``ctas`` blocks."""
    global _KERNEL
    if src.shape != dst.shape or ctas < 1 or rounds < 1:
        raise ValueError(f"side_copy needs equal shapes (got {tuple(src.shape)} and "
                         f"{tuple(dst.shape)}), ctas >= 1 (got {ctas}) and rounds >= 1 "
                         f"(got {rounds})")
    if _KERNEL is None:
        _KERNEL = _copy_kernel()
    _KERNEL[(ctas,)](src, dst, src.numel(), rounds, BLOCK=COPY_BLOCK)


def _events_ms(launch, reps: int, side_launch=None) -> tuple[float, float]:
    """(ms per ``launch`` over ``reps`` on the current stream, ms from their start until
    ``side_launch`` ended on a side stream that waited for that start; 0 without one)."""
    import torch

    main = torch.cuda.current_stream()
    start, done, side_done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    start.record(main)
    if side_launch is not None:
        side = torch.cuda.Stream()
        side.wait_event(start)
        with torch.cuda.stream(side):
            side_launch()
            side_done.record(side)
    for _ in range(reps):
        launch()
    done.record(main)
    torch.cuda.synchronize()
    return start.elapsed_time(done) / reps, (start.elapsed_time(side_done)
                                             if side_launch is not None else 0.0)


def plan(once_ms: float, window_ms: float, round_ms: float) -> tuple[int, int]:
    """(GEMM repetitions filling ``window_ms``, at least 3; copy rounds lasting 1.5x as long)."""
    reps = max(3, math.ceil(window_ms / once_ms))
    return reps, max(1, math.ceil(1.5 * reps * once_ms / round_ms))


def beside(alone_ms: float, together_ms: float, reps: int, copy_ms: float, round_ms: float,
           copy_bytes: int) -> dict[str, Any]:
    """One block count's entry: the GEMM's ms beside the copy, the slowdown, the copy's rate
    alone (read + write), and whether the copy outlasted the GEMMs (else the slowdown is
    understated: ``summarize`` leaves the entry out)."""
    return {"ms": together_ms, "slowdown": together_ms / alone_ms - 1,
            "copy_gbps_alone": 2 * copy_bytes / round_ms / 1e6,
            "covered": copy_ms >= reps * together_ms}


def measure(gemm, ctas_list: tuple[int, ...], window_ms: float, copy_bytes: int) -> dict[str, Any]:
    """One GEMM alone and beside the copy at each block count (CUDA only)."""
    import torch

    src = torch.empty(copy_bytes // 2, dtype=torch.bfloat16, device="cuda").uniform_()  # 2 B each
    dst = torch.empty_like(src)
    gemm()  # warm: cuBLAS's plan for this shape, and the copy kernel's compile
    side_copy(src, dst, ctas_list[0], 1)
    once, _ = _events_ms(gemm, 3)
    row: dict[str, Any] = {"beside": {}}
    for ctas in ctas_list:
        _, round_ms = _events_ms(lambda: None, 1, lambda c=ctas: side_copy(src, dst, c, 1))
        reps, rounds = plan(once, window_ms, round_ms)
        alone, _ = _events_ms(gemm, reps)
        together, copy_ms = _events_ms(gemm, reps, lambda c=ctas, r=rounds:
                                       side_copy(src, dst, c, r))
        row["beside"][str(ctas)] = {"alone_ms": alone, **beside(
            alone, together, reps, copy_ms, round_ms, copy_bytes)}
    return row


def summarize(rows: list[dict[str, Any]], sms: int) -> dict[str, Any]:
    """Per block count, the median, smallest and largest slowdown over the shapes the copy
    covered, beside Lee et al.'s average and what the model assumes on ``sms`` SMs."""
    by_ctas: dict[str, list[float]] = {}
    for row in rows:
        for ctas, beside in row.get("beside", {}).items():
            if beside["covered"]:
                by_ctas.setdefault(ctas, []).append(beside["slowdown"])
    return {"slowdown_by_ctas": {c: {"median": median(s), "min": min(s), "max": max(s),
                                     "shapes": len(s)} for c, s in by_ctas.items()},
            "lee_2025_mean": LEE_2025_MEAN_SLOWDOWN,
            "model_assumes": {c: int(c) / (sms - int(c)) if int(c) < sms else math.inf
                              for c in by_ctas}}
