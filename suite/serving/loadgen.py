"""One MLPerf LoadGen run of a scenario against a system under test, and its summary's numbers.

LoadGen (``mlperf_loadgen``, the ``mlcommons-loadgen`` wheel) issues the queries: one query of
every sample (Offline), one sample at a time, the next when the last completes (SingleStream),
or single samples at Poisson arrival times at a target QPS (Server). It decides VALID or
INVALID itself (Server: the p99 latency under the bound, enough queries, long enough) and
writes ``mlperf_log_summary.txt`` and ``mlperf_log_detail.txt``, kept beside the record.

A system is ``run_batch(indices) -> outputs``: the worker thread here takes batches from a
``batching.BatchQueue`` and completes their samples. StartTest blocks until every query is
complete, so it runs in a thread of its own and a run that outlives ``timeout_s`` raises
``ServingTimeout`` naming the scenario and the queries still outstanding; those are then
answered empty, so that LoadGen's own threads end (it has no way to stop a test) and the
process exits cleanly while the stuck system's thread is left behind.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from suite.serving.batching import BatchPolicy, BatchQueue

SCENARIOS = ("Offline", "SingleStream", "Server")
# LoadGen's summary keys this suite reads (the log keys are LoadGen's own words)
RESULT = "Result is"
SCHEDULED_QPS = "Scheduled samples per second"
OFFLINE_QPS = "Samples per second"
SINGLE_STREAM_QPS = "QPS w/ loadgen overhead"
PERCENTILES = {50: "50.00 percentile latency (ns)", 90: "90.00 percentile latency (ns)",
               99: "99.00 percentile latency (ns)"}
CONSTRAINTS = ("Min duration satisfied", "Min queries satisfied",
               "Performance constraints satisfied", "Early stopping satisfied")


class ServingTimeout(RuntimeError):
    pass


def loadgen_version() -> str:
    return metadata.version("mlcommons-loadgen")


@dataclass(frozen=True)
class RunSettings:
    """What one LoadGen run is asked for; ``target_qps`` is the Server's offered load (and
    the Offline's expected throughput, which sizes its one query)."""

    scenario: str
    target_qps: float = 100.0
    latency_bound_s: float = 0.1  # Server: the p99 bound
    min_duration_s: float = 5.0
    min_queries: int = 100
    seed: int = 0
    accuracy: bool = False  # LoadGen's AccuracyOnly mode: every sample issued once, untimed

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"scenario {self.scenario!r} is not one of {SCENARIOS}")
        if self.target_qps <= 0 or self.latency_bound_s <= 0 or self.min_duration_s < 0:
            raise ValueError(f"target_qps, latency_bound_s must be > 0 and min_duration_s >= 0: "
                             f"{self}")

    def loadgen(self):
        import mlperf_loadgen as lg

        s = lg.TestSettings()
        s.scenario = getattr(lg.TestScenario, self.scenario)
        s.mode = lg.TestMode.AccuracyOnly if self.accuracy else lg.TestMode.PerformanceOnly
        s.min_duration_ms = int(self.min_duration_s * 1000)
        s.min_query_count = self.min_queries
        s.server_target_qps = self.target_qps
        s.server_target_latency_ns = int(self.latency_bound_s * 1e9)
        s.offline_expected_qps = self.target_qps
        s.single_stream_expected_latency_ns = int(1e9 / self.target_qps)
        s.qsl_rng_seed = s.sample_index_rng_seed = s.schedule_rng_seed = self.seed
        return s


@dataclass
class RunResult:
    settings: RunSettings
    valid: bool
    reasons: list[str]  # the constraints LoadGen found unmet ("" when VALID)
    summary: dict[str, str]
    logs: Path
    batches: list[tuple[int, ...]] = field(default_factory=list)  # each batch's lengths

    @property
    def sizes(self) -> list[int]:
        return [len(b) for b in self.batches]

    def tokens(self) -> dict[str, Any]:
        """The valid tokens of the batches run, the tokens they hold padded to each batch's
        longest request, and the ratio: what a padded system computes per token served, and
        so the most that computing only valid tokens can gain where work grows with tokens."""
        real = sum(sum(b) for b in self.batches)
        padded = sum(len(b) * max(b) for b in self.batches)
        return {"real_tokens": real, "padded_tokens": padded,
                "padded_per_real": padded / real if real else None}

    def number(self, key: str) -> float | None:
        value = self.summary.get(key)
        return None if value is None else float(value)

    def latency_s(self, p: int) -> float | None:
        ns = self.number(PERCENTILES[p])
        return None if ns is None else ns / 1e9

    def qps(self) -> float | None:
        """Offline: samples/s; Server: the scheduled QPS; SingleStream: queries/s (one sample
        each, LoadGen's overhead included)."""
        key = {"Server": SCHEDULED_QPS, "SingleStream": SINGLE_STREAM_QPS}
        return self.number(key.get(self.settings.scenario, OFFLINE_QPS))

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.settings.scenario, "target_qps": self.settings.target_qps,
                "latency_bound_s": self.settings.latency_bound_s, "valid": self.valid,
                "reasons": self.reasons, "qps": self.qps(),
                **{f"p{p}_s": self.latency_s(p) for p in PERCENTILES},
                "mean_batch": sum(self.sizes) / len(self.sizes) if self.batches else None,
                **self.tokens(),
                "logs": str(self.logs)}


def parse_summary(text: str) -> tuple[bool, list[str], dict[str, str]]:
    """VALID or not, the unmet constraints, and every ``key : value`` line of a summary."""
    summary = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([^:]+?)\s*:\s*(.+?)\s*$", line)
        if m:
            summary.setdefault(m.group(1), m.group(2))
    if RESULT not in summary:
        raise ValueError("not a LoadGen summary: no 'Result is' line")
    unmet = [c for c in CONSTRAINTS if summary.get(c, "Yes").upper().startswith("NO")]
    return summary[RESULT] == "VALID", unmet, summary


def run(settings: RunSettings, lengths: Sequence[int], run_batch: Callable[[list[int]], Any],
        policy: BatchPolicy, logs: Path, timeout_s: float = 600.0) -> RunResult:
    """One LoadGen run: ``lengths`` is the sample library (one length per sample), every batch
    the policy forms goes to ``run_batch(sample indices)``; LoadGen's logs go to ``logs``."""
    import mlperf_loadgen as lg

    logs.mkdir(parents=True, exist_ok=True)
    queue = BatchQueue(policy)
    batches: list[tuple[int, ...]] = []
    outstanding: dict[int, int] = {}  # LoadGen's sample id -> library index, not yet complete
    lock = threading.Lock()
    abandoned = threading.Event()
    failure: list[BaseException] = []

    def complete(ids: list[int]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(i, 0, 0) for i in ids])

    def issue(samples) -> None:
        with lock:
            if abandoned.is_set():  # given up: answer at once so that LoadGen can finish
                complete([s.id for s in samples])
                return
            outstanding.update((s.id, s.index) for s in samples)
        queue.put([(s.id, s.index, lengths[s.index]) for s in samples])

    def work() -> None:
        while (batch := queue.take()) is not None:
            try:
                run_batch([r.index for r in batch])
            except BaseException as e:  # complete them anyway: LoadGen would wait forever
                failure.append(e)
            with lock:
                if abandoned.is_set():
                    return
                batches.append(tuple(r.length for r in batch))
                for r in batch:
                    outstanding.pop(r.key, None)
                complete([r.key for r in batch])

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    sut = lg.ConstructSUT(issue, lambda: None)
    n = len(lengths)
    qsl = lg.ConstructQSL(n, n, lambda s: None, lambda s: None)
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(logs)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False
    test = threading.Thread(target=lg.StartTestWithLogSettings,
                            args=(sut, qsl, settings.loadgen(), log_settings), daemon=True)
    test.start()
    test.join(timeout_s)
    timed_out = None
    if test.is_alive():  # LoadGen cannot be stopped: answer what it waits for, empty
        with lock:
            abandoned.set()
            timed_out = len(outstanding)
            complete(list(outstanding))
            outstanding.clear()
        test.join()
    queue.close()
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    if timed_out is not None:
        raise ServingTimeout(f"{settings.scenario}: LoadGen still waited after {timeout_s:g} s; "
                             f"{timed_out} queries outstanding")
    worker.join()
    if failure:
        raise failure[0]
    if settings.accuracy:  # no performance result to judge: every sample was answered
        return RunResult(settings, True, [], {}, logs, batches)
    valid, reasons, summary = parse_summary((logs / "mlperf_log_summary.txt").read_text())
    return RunResult(settings, valid, reasons, summary, logs, batches)
