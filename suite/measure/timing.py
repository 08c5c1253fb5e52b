"""Wall-clock timing of a callable: warm-up, then repeat until a minimum count *and* a minimum
duration are reached, keeping every sample."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

from suite.measure.policy import TimingPolicy


def timer_name(device: torch.device) -> str:
    return "torch.cuda.Event" if device.type == "cuda" else "time.perf_counter"


def measure(fn: Callable[[], object], device: torch.device, policy: TimingPolicy,
            progress: Callable[[int], None] | None = None,
            observe: Callable[[Callable[[], object]], object] | None = None,
            calls_made: int = 0) -> list[float]:
    """Seconds per call of ``fn``. On CUDA, events around each call and a synchronize per
    sample; on CPU, ``perf_counter`` (CPU ops are synchronous).

    ``calls_made``: untimed calls of ``fn`` with these inputs already made (a correctness
    gate's): they count toward the policy's warm-up, which makes only the rest.
    ``observe(fn)`` makes the last warm-up call itself (e.g. with a library's verbose log on),
    so that what it watches costs no call of its own; with no warm-up it makes one more call
    after the timed ones."""
    warmup = max(0, policy.warmup - calls_made)
    for i in range(warmup):
        if observe is not None and i == warmup - 1:
            observe(fn)
        else:
            fn()
    synchronize(device)
    samples: list[float] = []
    started = time.perf_counter()
    while (len(samples) < policy.min_repeats
           or time.perf_counter() - started < policy.min_time_s) \
            and len(samples) < policy.max_repeats:
        samples.append(_time_once(fn, device))
        if progress is not None:
            progress(len(samples))
    if observe is not None and not warmup:
        observe(fn)
    return samples


def measure_back_to_back(fn: Callable[[], object], device: torch.device, per_call_s: float,
                         rounds: int = 5, round_s: float = 0.05) -> dict:
    """Seconds per call with the calls queued back to back: ``calls`` calls between two events
    (about ``round_s`` a round, 3 to 1000 calls), one wait at the end of each round. The
    per-call figure (``measure``) waits after every call, so each starts on an idle GPU and pays
    the host's launch path in full; here the host launches while the GPU works. Where the two
    differ, the host sets the per-call pace, not the GPU."""
    calls = min(1000, max(3, math.ceil(round_s / max(per_call_s, 1e-9))))
    synchronize(device)
    samples = [_time_once(lambda: _repeat(fn, calls), device) / calls for _ in range(rounds)]
    return {"calls_per_round": calls, "rounds": rounds, "samples": samples}


def _repeat(fn: Callable[[], object], calls: int) -> None:
    for _ in range(calls):  # each output dropped before the next call: memory stays one call's
        fn()


def _time_once(fn: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA launches are asynchronous; CPU work is
    done when the call returns)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
