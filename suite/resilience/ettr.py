"""How much of a cluster's time trains: the checkpoint interval and the effective training time
ratio (ETTR) from a failure rate and the costs of a checkpoint and of a recovery.

Failures are a Poisson process with mean time between failures ``M`` (the job's: a per-GPU
rate times the GPU count). A checkpoint stalls training ``delta`` seconds; a failure costs a
restart ``R`` (detection, restart, restore) and the work since the last durable checkpoint.

- Young (1974): ``tau = sqrt(2 delta M)``.
- Daly (2006, eq. 37), the higher-order estimate: ``tau = sqrt(2 delta M) [1 + sqrt(delta /
  2M) / 3 + (delta / 2M) / 9] - delta`` for ``delta < 2M``, else ``M``.
- Daly's expected wall time for ``T_s`` of work in segments of ``tau`` (his eq. 12):
  ``T_w = M e^{R/M} (e^{(tau + delta)/M} - 1) T_s / tau``; ETTR = ``T_s / T_w``.

Two-stage checkpointing stalls only for the snapshot, but a checkpoint is durable only once its
background write ends (``persist_s``): a failure in that window falls back one checkpoint
further. That is counted as ``persist_s`` more work lost per failure (added to ``R``) and as a
floor on the interval (a snapshot cannot be taken before the previous one is persisted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_interval(delta: float, mtbf: float) -> float:
    return math.sqrt(2 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    if delta >= 2 * mtbf:
        return mtbf
    x = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def ettr(tau: float, delta: float, restart: float, mtbf: float) -> float:
    """Daly's useful fraction of wall time: work ``tau`` per segment, stall ``delta`` per
    checkpoint, ``restart`` per failure, exponential failures of mean ``mtbf``."""
    if tau <= 0:
        raise ValueError(f"tau={tau!r}: the checkpoint interval must be > 0 s")
    return tau / (mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf))


@dataclass(frozen=True)
class Costs:
    """One checkpointing scheme's costs at the job's scale, in seconds."""
    stall_s: float  # training time lost per checkpoint
    persist_s: float  # from the checkpoint's start to durable (= stall for synchronous)
    recovery_s: float  # detection + restart + restore after a failure


@dataclass(frozen=True)
class Point:
    gpus: int
    mtbf_s: float
    interval_s: float
    ettr: float


def at_scale(costs: Costs, gpus: int, failures_per_gpu_hour: float) -> Point:
    """The Daly-optimal interval and its ETTR for ``gpus`` GPUs."""
    if gpus < 1 or failures_per_gpu_hour <= 0:
        raise ValueError(f"gpus={gpus!r} must be >= 1 and failures_per_gpu_hour="
                         f"{failures_per_gpu_hour!r} > 0")
    mtbf = 3600.0 / (failures_per_gpu_hour * gpus)
    restart = costs.recovery_s + (costs.persist_s - costs.stall_s)
    tau = max(daly_interval(costs.stall_s, mtbf), costs.persist_s - costs.stall_s, 1e-9)
    return Point(gpus, mtbf, tau, ettr(tau, costs.stall_s, restart, mtbf))
