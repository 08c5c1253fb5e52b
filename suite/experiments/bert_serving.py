"""BERT served under MLPerf LoadGen: one (system, repeat) -> one record.

The system (``padded-X``, ``bucketed-X``, ``packed-reference`` or ``packed-reference-eager``:
``suite.serving.systems``) is prepared for the largest batch and longest request it will see
(``Baseline.prepare_serving``: the graphed reference captures its buckets there), then gated:
a sample of the library's requests issued by LoadGen's accuracy mode, in the batches its policy
forms, against the float64 oracle of each request alone; a wrong system is ``incorrect`` and
not timed. Then each configured scenario runs through LoadGen
(``suite.serving.point``), Offline first: its samples/s is where the Server's search starts.
LoadGen's logs go beside the record (``<record>.loadgen/<scenario>/``). Repeat ``k`` runs
LoadGen with seeds ``seed + k``; the library (lengths, tokens) and the weights stay those of
``seed``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from suite import env as envmod
from suite.baselines import Unavailable
from suite.devices import resolve_device, torch_dtype
from suite.experiments.bert_oracle import reference_output
from suite.experiments.bert_varlen import TASK
from suite.models import canonical_model
from suite.records import Record, Status, new_record, outcome
from suite.serving import loadgen
from suite.serving.config import SECTION, ServingConfig, parse_system
from suite.serving.point import ServingPlan, measure, probe_shapes
from suite.serving.requests import request_lengths
from suite.serving.systems import RequestLibrary, ServingSystem, create_baseline, policy_for

EXPERIMENT = SECTION


def logs_of(out: str | Path) -> Path:
    """Where the LoadGen logs of the record at ``out`` go."""
    out = Path(out)
    return out.with_name(out.stem + ".loadgen")


def measure_point(section: dict[str, Any], system: str, repeat: int, out: Path) -> Record:
    """The registry's runner (``seedbench serve``); never raises for a problem of the
    system: the record says it."""
    cfg = ServingConfig.from_dict(section)
    batching, baseline = parse_system(system)
    point = {"system": system, "batching": batching, "baseline": baseline, "repeat": repeat,
             "max_len": cfg.max_len, "lengths": cfg.lengths, "dtype": cfg.dtype}
    record = new_record(EXPERIMENT, system, point, cfg.to_dict())
    with outcome(record):
        _run(record, cfg, batching, baseline, repeat, logs_of(out))
    record.env = envmod.capture()
    return record


def _run(record: Record, cfg: ServingConfig, batching: str, baseline: str, repeat: int,
         logs: Path) -> None:
    threads = cfg.threads or envmod.usable_cores()
    torch.set_num_threads(threads)
    device = resolve_device(cfg.device)
    sut = create_baseline(batching, baseline)
    ok, why = sut.can_run(TASK, device.type, cfg.dtype)
    if not ok:
        raise Unavailable(why)
    lengths = request_lengths(cfg.library_size, cfg.max_len, cfg.lengths, seed=cfg.seed)
    record.workload = {"lengths": lengths, "library_size": len(lengths),
                       "mean_length": sum(lengths) / len(lengths), "max_length": max(lengths)}
    model = canonical_model("bert", cfg.dims, cfg.max_len, seed=cfg.seed)
    library = RequestLibrary(lengths, cfg.max_len, cfg.dims.vocab_size, seed=cfg.seed)
    sut.prepare(model, device, torch_dtype(cfg.dtype))
    sut.prepare_serving(max(b["max_batch"] for b in cfg.batching.values()), cfg.max_len)

    def system(scenario: str) -> ServingSystem:
        b = cfg.batching[scenario]
        return ServingSystem(record.system, sut,
                             policy_for(batching, b["max_batch"], b["window_ms"] / 1000,
                                        cfg.buckets), library, device)

    scenarios = [s for s in loadgen.SCENARIOS if s in cfg.scenarios]  # Offline first
    sample = list(range(min(cfg.gate_requests, len(library))))
    oracle = reference_output(model, library.batch(sample), device)
    run_timeout_s = cfg.timeout_s / 4  # one LoadGen run's limit: a hang fails the point first
    record.correctness = system(scenarios[-1]).check(sample, oracle, cfg.dtype,
                                                     logs / "accuracy", run_timeout_s)
    if not record.correctness["passed"]:
        record.status, record.reason = Status.INCORRECT, record.correctness["reason"]
        return

    probes = probe_shapes(system("Server"), cfg.shape_probes,
                          seen={library.lengths[i] for i in sample})
    results: dict[str, Any] = {}
    for scenario in scenarios:
        plan = ServingPlan(scenario, latency_bound_s=cfg.latency_bound_ms / 1000,
                           min_duration_s=cfg.min_duration_s, min_queries=cfg.min_queries,
                           max_trials=cfg.search["max_trials"], rel_tol=cfg.search["rel_tol"],
                           start=cfg.search["start"], step=cfg.search["step"],
                           timeout_s=run_timeout_s, seed=cfg.seed + repeat)
        offline = results.get("Offline", {}).get("samples_per_s")
        results[scenario] = measure(system(scenario), plan, logs / scenario,
                                    first_qps=offline if scenario == "Server" else None)
    record.timing = {"timer": f"MLPerf LoadGen {loadgen.loadgen_version()}", "unit": "s",
                     "threads": threads, "device": str(device)}
    record.derived = {"scenarios": results, "system": sut.details(),
                      **({"shape_probes": probes} if probes else {})}
    invalid = [s for s, r in results.items() if not r["valid"]]
    record.status = Status.OK
    record.reason = (f"INVALID in {invalid}: see derived.scenarios' LoadGen reasons"
                     if invalid else "")
