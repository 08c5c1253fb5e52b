"""Dynamic batching, the same policy for every system under test.

A batch leaves when it holds ``max_batch`` requests or when its oldest request has waited
``window_s`` (what a padded framework's server does: Triton's dynamic batcher, TorchServe's
``max_batch_delay``). With ``buckets`` (upper length bounds, e.g. 32, 64, 96, 128) requests
wait in the queue of the smallest bucket that holds them and a batch takes one bucket only:
the usual production mitigation of padding. Which of the ready batches goes first: the one
whose oldest request arrived first.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchPolicy:
    max_batch: int
    window_s: float
    buckets: tuple[int, ...] = ()  # upper length bounds; () = one queue

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch={self.max_batch} must be >= 1")
        if self.window_s < 0:
            raise ValueError(f"window_s={self.window_s} must be >= 0")
        if list(self.buckets) != sorted(set(self.buckets)) or any(b < 1 for b in self.buckets):
            raise ValueError(f"buckets={self.buckets} must be increasing positive lengths")

    def bucket(self, length: int) -> int:
        """The index of the queue a request of ``length`` waits in."""
        if not self.buckets:
            return 0
        i = bisect.bisect_left(self.buckets, length)
        if i == len(self.buckets):
            raise ValueError(f"length {length} exceeds the largest bucket {self.buckets[-1]}")
        return i


@dataclass(frozen=True)
class Request:
    key: object  # LoadGen's query sample id, or anything the caller matches responses by
    index: int  # the sample's index in the library
    length: int
    arrived: float


class BatchQueue:
    """Requests in, batches out; ``put`` from LoadGen's thread, ``take`` from the worker's."""

    def __init__(self, policy: BatchPolicy, clock=time.monotonic):
        self.policy = policy
        self.clock = clock
        self._queues = [deque() for _ in (policy.buckets or (0,))]
        self._cv = threading.Condition()
        self._closed = False

    def put(self, requests: list[tuple[object, int, int]]) -> None:
        """``(key, index, length)`` of each request, all arriving now."""
        now = self.clock()
        with self._cv:
            for key, index, length in requests:
                self._queues[self.policy.bucket(length)].append(Request(key, index, length, now))
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def ready(self, now: float) -> list[Request] | None:
        """The batch to run now, or None if every queue may still wait (no lock: callers
        hold it)."""
        heads = [(q[0].arrived, i) for i, q in enumerate(self._queues) if q]
        for _, i in sorted(heads):
            q = self._queues[i]
            if (len(q) >= self.policy.max_batch or now - q[0].arrived >= self.policy.window_s
                    or self._closed):
                return [q.popleft() for _ in range(min(len(q), self.policy.max_batch))]
        return None

    def take(self) -> list[Request] | None:
        """Block until a batch is due; None once closed and empty."""
        with self._cv:
            while True:
                now = self.clock()
                batch = self.ready(now)
                if batch:
                    return batch
                if self._closed:
                    return None
                oldest = min((q[0].arrived for q in self._queues if q), default=None)
                self._cv.wait(None if oldest is None
                              else max(oldest + self.policy.window_s - now, 0.0))
