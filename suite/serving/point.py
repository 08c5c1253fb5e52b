"""One serving measurement of one system: the scenario's LoadGen run(s) and what they found.

- Offline: one run, sized at twice a first throughput guess (a few batches of the library) so
  that it lasts at least LoadGen's minimum duration, and run again larger where it ended early
  all the same (``_long_enough``); samples/s.
- SingleStream: one run sized the same way; the 90th percentile latency (LoadGen's metric).
- Server: ``search.max_valid_qps`` from ``start`` x a first guess (the Offline samples/s when
  given, else the throughput a few batches of the library show), every trial a LoadGen run of
  ``min_queries`` queries with its logs in a folder of its own (``qps-<load>``, a retry's
  ``qps-<load>-retry``); the answer is the highest VALID offered load and the p99 latency
  LoadGen measured there.

Every result names LoadGen's version, the settings and VALID/INVALID with LoadGen's reasons.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from suite.serving import loadgen
from suite.serving.search import Trial, max_valid_qps
from suite.serving.systems import ServingSystem


@dataclass(frozen=True)
class ServingPlan:
    scenario: str
    latency_bound_s: float = 0.1  # Server: the p99 bound
    min_duration_s: float = 2.0
    min_queries: int = 500  # Server: every trial's query count (a VALID p99 needs ~460)
    max_trials: int = 6
    rel_tol: float = 0.1
    start: float = 0.5  # Server: the first offered load, as a fraction of the first guess
    step: float = 2.0  # Server: the factor between loads until the knee is bracketed
    timeout_s: float = 300.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.scenario not in loadgen.SCENARIOS:
            raise ValueError(f"scenario {self.scenario!r} is not one of {loadgen.SCENARIOS}")


def throughput_guess(system: ServingSystem, batches: int = 3) -> float:
    """Samples/s of a few full batches taken in library order (an untimed first guess that
    sizes LoadGen's runs; LoadGen's own runs are the measurement)."""
    n, size = len(system.library), system.policy.max_batch
    groups = [[(k * size + j) % n for j in range(size)] for k in range(batches + 1)]
    system.run_batch(groups[0])  # warm-up
    start = time.perf_counter()
    for g in groups[1:]:
        system.run_batch(g)
    return batches * size / (time.perf_counter() - start)


def probe_shapes(system: ServingSystem, count: int, seen: set[int] = frozenset()
                 ) -> list[dict[str, Any]]:
    """``count`` batches of shapes the system has not run, each called twice and both calls
    timed: a padded framework may pay per new (batch size, longest request) for plans,
    compilation or allocation, which LoadGen's latencies then carry. The k-th batch holds
    ``max_batch / 2**k`` requests (at least 1) with its longest at a spread-out length not in
    ``seen`` (the lengths the gate ran) where the library has one."""
    lengths = system.library.lengths
    fresh = sorted(set(lengths) - set(seen)) or sorted(set(lengths))
    probes = []
    for k in range(count):
        longest = fresh[(len(fresh) - 1) * (count - k) // (count + 1)]
        size = max(1, system.policy.max_batch >> k)
        top = lengths.index(longest)
        rest = [i for i, n in enumerate(lengths) if n <= longest and i != top][:size - 1]
        batch, calls = [top, *rest], []
        for _ in range(2):
            start = time.perf_counter()
            system.run_batch(batch)
            calls.append(time.perf_counter() - start)
        probes.append({"batch": len(batch), "longest": longest,
                       "tokens": sum(lengths[i] for i in batch),
                       "first_s": calls[0], "second_s": calls[1]})
    return probes


SIZING_ATTEMPTS = 3
ENDED_EARLY = ["Min duration satisfied"]


def _long_enough(one, target_qps: float, logs: Path
                 ) -> tuple[loadgen.RunResult, list[dict[str, Any]]]:
    """An Offline or SingleStream run sized from a throughput guess: LoadGen issues
    ``target x min_duration`` samples, so a system faster than the guess finishes early and the
    run is INVALID for its duration alone, its number unusable. Run again, asked for twice what
    it did, up to SIZING_ATTEMPTS runs; the last run's logs stay, each attempt is listed."""
    attempts = []
    for _ in range(SIZING_ATTEMPTS):
        result = one(target_qps, logs)
        attempts.append({"target_qps": target_qps, "valid": result.valid,
                         "reasons": result.reasons, "qps": result.qps()})
        if result.valid or result.reasons != ENDED_EARLY or not result.qps():
            break
        target_qps = max(2 * target_qps, 2 * result.qps())
    return result, attempts


def measure(system: ServingSystem, plan: ServingPlan, logs: Path,
            first_qps: float | None = None) -> dict[str, Any]:
    lengths = system.library.lengths
    guess = first_qps or throughput_guess(system)

    def settings(qps: float) -> loadgen.RunSettings:
        # Offline is one query of many samples: its length is the duration's, not a count's.
        # A Server trial issues exactly min_queries queries at any load (no minimum duration):
        # LoadGen's early stopping allows more queries over the bound the more it sees (none
        # of 500, 77 of 10,000), so a count that grew with the load would hold a slower system,
        # offered less, to a stricter test.
        server = plan.scenario == "Server"
        return loadgen.RunSettings(plan.scenario, target_qps=qps,
                                   latency_bound_s=plan.latency_bound_s,
                                   min_duration_s=0.0 if server else plan.min_duration_s,
                                   min_queries=1 if plan.scenario == "Offline"
                                   else plan.min_queries, seed=plan.seed)

    def one(qps: float, folder: Path) -> loadgen.RunResult:
        return loadgen.run(settings(qps), lengths, system.run_batch, system.policy, folder,
                           timeout_s=plan.timeout_s)

    out: dict[str, Any] = {"loadgen_version": loadgen.loadgen_version(), "plan": asdict(plan),
                           "policy": asdict(system.policy), "first_qps": guess}
    if plan.scenario != "Server":
        result, attempts = _long_enough(one, guess * 2, logs)
        return {**out, "result": result.as_dict(), "valid": result.valid,
                "samples_per_s": result.qps(), "p90_s": result.latency_s(90),
                "attempts": attempts}
    runs: dict[float, loadgen.RunResult] = {}  # the latest run at each load (a retry's)

    def trial(qps: float) -> Trial:
        retry = "-retry" if qps in runs else ""
        runs[qps] = r = one(qps, logs / f"qps-{qps:.6g}{retry}")
        measured = {k: v for k, v in r.as_dict().items()
                    if k not in ("scenario", "latency_bound_s", "target_qps", "qps")}
        return Trial(qps, r.valid, {**measured, "scheduled_qps": r.qps()})

    search = max_valid_qps(trial, guess * plan.start, rel_tol=plan.rel_tol,
                           max_trials=plan.max_trials, step=plan.step)
    best = runs.get(search.best_qps)
    return {**out, "search": search.as_dict(), "valid": best is not None,
            "max_valid_qps": search.best_qps,
            "p99_s": best.latency_s(99) if best else None,
            "result": best.as_dict() if best else None}
