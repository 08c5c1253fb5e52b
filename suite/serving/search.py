"""The highest offered load (Server QPS) whose LoadGen run is VALID, by a bounded search.

Validity is taken as monotone in the offered load (a system that meets its p99 bound at some
QPS meets it below). From a first guess the search multiplies or divides by ``step`` (2 unless
told) until one run is VALID and one INVALID, then bisects that bracket geometrically until its
ends are within ``rel_tol`` of each other or ``max_trials`` runs are spent. Every trial is
kept: the record shows how the answer was reached, and the trials are the latency-vs-load curve
of the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Trial:
    qps: float
    valid: bool
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Search:
    best_qps: float | None  # the highest VALID offered load found (None: none was valid)
    bracket: tuple[float | None, float | None]  # (highest valid, lowest invalid)
    trials: list[Trial]

    def as_dict(self) -> dict[str, Any]:
        return {"best_qps": self.best_qps, "bracket": list(self.bracket),
                "trials": [{**t.detail, "qps": t.qps, "valid": t.valid} for t in self.trials]}


def max_valid_qps(trial: Callable[[float], Trial], first_qps: float, *, rel_tol: float = 0.1,
                  max_trials: int = 8, step: float = 2.0, floor_qps: float = 1e-3) -> Search:
    """``trial(qps)`` runs one Server test at that offered load."""
    if first_qps <= 0 or rel_tol <= 0 or max_trials < 1 or step <= 1:
        raise ValueError(f"first_qps={first_qps}, rel_tol={rel_tol} must be > 0, "
                         f"max_trials={max_trials} >= 1 and step={step} > 1")
    trials: list[Trial] = []
    valid_hi: float | None = None  # highest valid load so far
    invalid_lo: float | None = None  # lowest invalid load so far

    def probe(qps: float) -> None:
        nonlocal valid_hi, invalid_lo
        t = trial(qps)
        trials.append(t)
        if t.valid:
            valid_hi = qps if valid_hi is None else max(valid_hi, qps)
        else:
            invalid_lo = qps if invalid_lo is None else min(invalid_lo, qps)

    qps = first_qps
    while len(trials) < max_trials:
        probe(qps)
        if valid_hi is not None and invalid_lo is not None:
            break
        qps = qps * step if invalid_lo is None else qps / step
        if qps < floor_qps:
            break
    while (len(trials) < max_trials and valid_hi is not None and invalid_lo is not None
           and invalid_lo / valid_hi - 1 > rel_tol):
        probe(math.sqrt(valid_hi * invalid_lo))
    return Search(valid_hi, (valid_hi, invalid_lo), trials)
