"""The per-rank step monitor (MegaScale Sec. 4.2's CUDA-event timer, on CPU a monotonic clock)
and the straggler finder.

A synchronous data-parallel step takes as long on every rank: the fast ranks wait for the slow
one inside the collectives. What differs is each rank's own compute, which ``ComputeTimer``
times without the waits:

- on CPU, from the kernel's scheduler statistics of the rank's main thread, which computes
  (``/proc/self/task/<tid>/schedstat``): the time it ran plus the time it was ready to run but
  waited for its core. A rank blocked in a collective sleeps and counts nothing; a rank whose
  core is shared with another process counts its time in the run queue, so it reads slow the
  way a slow GPU's kernels do. (Timing the forward from Python hooks was tried first: a 1 ms
  forward mostly fits inside one scheduler slice of the competing process and read the same on
  both ranks; summing every thread counted gloo's own threads queueing beside it.) With more
  than one intra-op thread the others' share is not counted: the straggler runs use one.
- on CUDA, events around each transformer block's children (norms, attention, MLP) in the
  forward, read after the step (no sync inside it); an engine's collectives (FSDP2's all-gather
  in the block's own pre-hook, DDP's all-reduce in backward) fall outside.

``find_stragglers`` names the ranks whose median compute is ``THRESHOLD`` times the median of
the other ranks' medians or more.
"""

from __future__ import annotations

import statistics
import threading
from pathlib import Path
from collections.abc import Iterable, Mapping, Sequence

# A rank is named when its compute is at least this many times the others' (the goal: every
# rank slowed 1.5x or more is named; a rank at 1.25x the others is already a quarter slower).
THRESHOLD = 1.25


class ComputeTimer:
    """This rank's compute since the last ``take`` (see the module docstring)."""

    def __init__(self, blocks: Iterable, cuda: bool = False):
        self.cuda, self.pairs, self.handles = cuda, [], []
        self._open: object | None = None
        if cuda:
            for block in blocks:
                for child in block.children():
                    self.handles.append(child.register_forward_pre_hook(self._start))
                    self.handles.append(child.register_forward_hook(self._stop))
        self.tid = threading.get_native_id()
        self._last = 0.0 if cuda else scheduled_s(self.tid)

    def _start(self, module, args) -> None:
        import torch

        self._open = torch.cuda.Event(enable_timing=True)
        self._open.record()

    def _stop(self, module, args, output) -> None:
        import torch

        if self._open is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.pairs.append((self._open, end))
            self._open = None

    def take(self) -> float:
        """Seconds of compute since the last call (CUDA: after the step's own sync)."""
        if self.cuda:
            total = sum(a.elapsed_time(b) / 1e3 for a, b in self.pairs)
            self.pairs = []
            return total
        now = scheduled_s(self.tid)
        total, self._last = now - self._last, now
        return total

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []


def scheduled_s(tid: int) -> float:
    """Seconds thread ``tid`` of this process has run or waited in a run queue (Linux
    schedstat: on-CPU ns, run-queue wait ns, slices)."""
    on_cpu, waiting, _ = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
    return (int(on_cpu) + int(waiting)) / 1e9


def rank_table(compute: Mapping[int, Sequence[float]], step_s: Sequence[float]
               ) -> list[dict[str, float]]:
    """Per rank: median compute per step, the median step, and the rest (waiting in
    collectives, the parts not timed)."""
    step = statistics.median(step_s) if step_s else float("nan")
    out = []
    for rank in sorted(compute):
        c = statistics.median(compute[rank]) if compute[rank] else float("nan")
        out.append({"rank": rank, "compute_s": c, "step_s": step, "other_s": step - c})
    return out


def find_stragglers(compute: Mapping[int, Sequence[float]], threshold: float = THRESHOLD
                    ) -> tuple[list[int], dict[int, float]]:
    """(ranks named, each rank's median compute over the median of the others' medians)."""
    medians = {r: statistics.median(v) for r, v in compute.items() if v}
    ratios: dict[int, float] = {}
    for r, m in medians.items():
        others = [v for q, v in medians.items() if q != r]
        if others and statistics.median(others) > 0:
            ratios[r] = m / statistics.median(others)
    return sorted(r for r, x in ratios.items() if x >= threshold), ratios
