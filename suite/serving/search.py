"""The highest offered load (Server QPS) whose LoadGen run is VALID, by a bounded search.

Validity is taken as monotone in the offered load (a system that meets its p99 bound at some
QPS meets it below). From a first guess the search multiplies or divides by ``step`` (2 unless
told) until one run is VALID and one INVALID, then bisects that bracket geometrically until its
ends are within ``rel_tol`` of each other or ``max_trials`` runs are spent.

One INVALID run does not cap the answer on its own: a run can miss its bound by chance (a
noisy neighbour, a collection pause), and a search that believed it would report the knee below
the truth for good (a true 1000 QPS was reported as 632 after one noisy INVALID at 700). So the
load at the top of the final bracket is run a second time before the search stops: it caps the
answer once two runs there were INVALID, and one VALID run makes it VALID, moving the bracket
up (the search then goes on from there).

Every trial is kept, retries marked: the record shows how the answer was reached, and the
trials are the latency-vs-load curve of the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CONFIRMATIONS = 2  # INVALID runs at one load before it caps the answer


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


class _Runs:
    """What the trials so far say of each load."""

    def __init__(self) -> None:
        self.at: dict[float, list[bool]] = {}

    def add(self, qps: float, valid: bool) -> None:
        self.at.setdefault(qps, []).append(valid)

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest load with a VALID run, lowest load above it with INVALID runs only): the
        knee lies between. The search only ever runs loads outside or inside this bracket, so
        no INVALID load lies below a VALID one."""
        valid_hi = max((q for q, v in self.at.items() if any(v)), default=None)
        invalid = [q for q, v in self.at.items()
                   if not any(v) and (valid_hi is None or q > valid_hi)]
        return valid_hi, min(invalid, default=None)


def max_valid_qps(trial: Callable[[float], Trial], first_qps: float, *, rel_tol: float = 0.1,
                  max_trials: int = 8, step: float = 2.0, floor_qps: float = 1e-3) -> Search:
    """``trial(qps)`` runs one Server test at that offered load. Each trial's ``detail`` gains
    ``attempt`` (1, or 2 for a retry of the same load)."""
    if first_qps <= 0 or rel_tol <= 0 or max_trials < 1 or step <= 1:
        raise ValueError(f"first_qps={first_qps}, rel_tol={rel_tol} must be > 0, "
                         f"max_trials={max_trials} >= 1 and step={step} > 1")
    trials: list[Trial] = []
    runs = _Runs()

    def next_load() -> float | None:
        valid_hi, invalid_lo = runs.bracket()
        if valid_hi is None and invalid_lo is None:
            return first_qps
        if invalid_lo is None:
            return valid_hi * step
        if valid_hi is None:
            lower = invalid_lo / step
            return lower if lower >= floor_qps else None
        if invalid_lo / valid_hi - 1 > rel_tol:
            return math.sqrt(valid_hi * invalid_lo)
        if len(runs.at[invalid_lo]) < CONFIRMATIONS:
            return invalid_lo  # the knee's top, once more before it caps the answer
        return None

    while len(trials) < max_trials:
        qps = next_load()
        if qps is None:
            break
        t = trial(qps)
        runs.add(qps, t.valid)
        trials.append(Trial(t.qps, t.valid, {**t.detail, "attempt": len(runs.at[qps])}))
    valid_hi, invalid_lo = runs.bracket()
    return Search(valid_hi, (valid_hi, invalid_lo), trials)
