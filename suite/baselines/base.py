"""The Baseline contract: one system under test per framework, behind the same interface.

A baseline receives the suite's canonical HF PyTorch model (so every framework computes the same
function from the same weights), prepares its own form of it, then runs one padded batch at a
time and returns the last hidden state ``[B, S, H]``. Only valid positions are compared and timed
results are only kept after the correctness gate passes.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from suite.records import Unavailable  # defined torch-free there; re-exported for plugins
from suite.workloads import BertBatch

__all__ = ["Baseline", "FirstCalls", "Supports", "Unavailable"]


class FirstCalls:
    """Seconds of each batch shape's first call (``by_shape``: "BxS" -> s), where a system that
    traces or compiles per shape does it (the correctness gate's call, never a timed one);
    ``last``: the shape of the latest call."""

    def __init__(self) -> None:
        self.by_shape: dict[str, float] = {}
        self.last = ""

    def call(self, batch: BertBatch, fn: Callable[[], Any],
             wait: Callable[[Any], None] | None = None) -> Any:
        """``fn()``, timed when ``batch``'s shape is new; ``wait(out)`` then waits for work
        ``fn`` left queued (a GPU's) before the clock stops, on that call only."""
        self.last = "x".join(map(str, batch.input_ids.shape))
        if self.last in self.by_shape:
            return fn()
        start = time.perf_counter()
        out = fn()
        if wait is not None:
            wait(out)
        self.by_shape[self.last] = time.perf_counter() - start
        return out


@dataclass(frozen=True)
class Supports:
    tasks: tuple[str, ...] = ("bert-encoder",)
    devices: tuple[str, ...] = ("cpu", "cuda")
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")


class Baseline(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    padding_free: bool = False  # computes on valid tokens only (an instance may override)
    supports: ClassVar[Supports] = Supports()
    times_itself: ClassVar[bool] = False  # an external process: the suite cannot time ``run``

    def available(self) -> tuple[bool, str]:
        """(True, "") if this baseline can run here, else (False, why). Imports belong inside,
        so that a missing package is a reason, not a crash."""
        return True, ""

    def can_run(self, task: str, device: str, dtype: str) -> tuple[bool, str]:
        ok, why = self.available()
        if not ok:
            return ok, why
        for what, value, allowed in (("task", task, self.supports.tasks),
                                     ("device", device, self.supports.devices),
                                     ("dtype", dtype, self.supports.dtypes)):
            if value not in allowed:
                return False, f"{self.name} does not support {what} {value!r} (supports {allowed})"
        return True, ""

    @abstractmethod
    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        """Build this framework's form of ``model`` (an fp32 CPU HF ``BertModel``)."""

    @abstractmethod
    def run(self, batch: BertBatch) -> Any:
        """Forward one batch already on the device; return the last hidden state ``[B, S, H]``
        (a tensor or array). On a GPU it may return with its kernels still queued, as PyTorch
        does: whoever times it synchronizes (``suite.measure.timing``, the serving systems)."""

    def build(self, batch: BertBatch) -> None:
        """Work a system does once per batch shape before it can run one (a trace, say), done
        ahead of the shape's first call so that this call is a plain one: the correctness
        gate's, which is also the first warm-up call and the one whose GEMM library is
        observed. A system whose first call builds anyway (a compile, an XLA cluster) may
        leave it to that call; serving calls ``run`` alone, so ``run`` must build too."""
        return None

    def prepare_serving(self, max_batch: int, max_len: int) -> None:
        """Called by a serving run after ``prepare``, with the most requests a batch will hold
        and the longest request: work a system does per shape (a compile, a graph capture) may
        be done here, so that it does not land among LoadGen's latencies. By default nothing:
        each new shape's first call pays, and the run's ``shape_probes`` measure what."""
        return None

    def set_timing(self, policy: dict[str, Any]) -> None:
        """For ``times_itself`` baselines: the timing policy to apply (before the first run).
        The others time from outside and ignore it."""
        return None

    def reported_samples(self) -> list[float] | None:
        """For ``times_itself`` baselines: seconds per call, measured by the system itself in
        the same invocation whose output passed the correctness gate."""
        return None

    def details(self) -> dict[str, Any]:
        """Facts about the prepared system for the record (compile time, backend, ...)."""
        return {}
