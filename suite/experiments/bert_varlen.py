"""End-to-end BERT-family inference: one (system, batch size, max length) point -> one record.

Three experiments share this runner:

- ``bert_varlen``: registered baselines (frameworks) on BERT-base;
- ``bert_ablation``: the reference with the paper's optimizations turned on step by step
  (``reference_impl.LADDER``; baseline ``ladder-N`` is step N);
- ``bert_variants``: ALBERT, DistilBERT, DeBERTa, padded HF against padding-free;
- ``bert_fixed``: the frameworks again, every sequence at the full length (``fixed``
  distribution): the control where padding-free has no padding to skip.

Flow of one point: lengths -> padded batch -> canonical HF model -> float64 reference output ->
the system prepares itself -> correctness gate -> timing -> statistics and derived metrics.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from reference_impl import LADDER
from suite import env as envmod
from suite.baselines import Baseline, Unavailable
from suite.baselines.external import PREFIX as EXTERNAL_PREFIX, External, spec_from_config
from suite.baselines.reference import Reference
from suite.baselines.registry import baselines
from suite.measure.load import watched, with_noise
from suite.config import BertVarlenConfig
from suite.measure.correctness import compare
from suite.experiments.bert_names import ladder_name
from suite.mfu import bert_encoder_flops
from suite.models import KINDS, canonical_model
from suite.devices import resolve_device, torch_dtype
from suite.experiments import bert_oracle, registry
from suite.peak.libraries import observe_gemm_library
from suite.peak.schema import efficiency
from suite.records import Record, Status, new_record, outcome
from suite.measure.stats import summarize
from suite.measure.timing import measure, measure_back_to_back, timer_name
from suite.workloads import flop_bounds

# the registry's experiments this module runs (the others of the family: bert_kernels)
EXPERIMENTS = tuple(registry.oracle_experiments())
TASK = "bert-encoder"


def make_system(experiment: str, baseline: str, cfg: BertVarlenConfig) -> Baseline:
    """The system under test: a registered baseline, a step of the reference's ladder, or a
    configured external program (``external-<name>``)."""
    if experiment == "bert_ablation":
        steps = [ladder_name(i) for i in range(len(LADDER))]
        if baseline not in steps:
            raise KeyError(f"bert_ablation baseline {baseline!r} is not one of {steps}")
        # every step launched alike (eagerly): the ladder measures the paper's kernels
        return Reference(cuda_graphs=False, **asdict(LADDER[steps.index(baseline)][1]))
    if baseline.startswith(EXTERNAL_PREFIX):
        name = baseline.removeprefix(EXTERNAL_PREFIX)
        if name not in cfg.external:
            raise KeyError(f"baseline {baseline!r}: no program {name!r} under "
                           f"bert_varlen.external (configured: {sorted(cfg.external)})")
        return External(spec_from_config(name, cfg.external[name]), timeout_s=cfg.timeout_s)
    return baselines.create(baseline)


def distribution_of(cfg: BertVarlenConfig, experiment: str) -> str:
    return "fixed" if experiment == "bert_fixed" else cfg.distribution


def point_dict(cfg: BertVarlenConfig, batch_size: int, max_seq_len: int,
               model_kind: str = "bert", experiment: str = "bert_varlen") -> dict[str, Any]:
    return {"batch_size": batch_size, "max_seq_len": max_seq_len, "model": model_kind,
            "distribution": distribution_of(cfg, experiment), "seed": cfg.seed,
            "dtype": cfg.dtype}


def measure_point(cfg: BertVarlenConfig, experiment: str, subject: str | None, system: str,
                  batch_size: int, max_seq_len: int, peak: dict[str, Any] | None,
                  oracle_dir: Path | None = None) -> Record:
    """The registry's runner for the end-to-end experiments: subject is the model family."""
    return run_point(cfg, system, batch_size, max_seq_len, peak, experiment=experiment,
                     model_kind=subject or "bert", oracle_dir=oracle_dir)


def run_point(cfg: BertVarlenConfig, baseline: str, batch_size: int, max_seq_len: int,
              peak: dict[str, Any] | None = None, show_progress: bool = True, *,
              experiment: str = "bert_varlen", model_kind: str = "bert",
              oracle_dir: Path | None = None) -> Record:
    """Measure one point. Never raises for a problem of the system: the record says it.
    ``oracle_dir``: where the jobs of a point share its reference output (``bert_oracle``);
    without it the job computes its own and keeps it to itself."""
    return next(run_points(cfg, baseline, [(batch_size, max_seq_len)], peak, show_progress,
                           experiment=experiment, model_kind=model_kind, oracle_dir=oracle_dir))


def run_points(cfg: BertVarlenConfig, baseline: str, points: Iterable[tuple[int, int]],
               peak: dict[str, Any] | None = None, show_progress: bool = True, *,
               experiment: str = "bert_varlen", model_kind: str = "bert",
               oracle_dir: Path | None = None) -> Iterator[Record]:
    """A record per ``(batch_size, max_seq_len)`` point, all of one system in this process:
    the system is made and prepared once, at the first point, then every point is gated and
    timed as ``run_point`` does it (the GPU pack's grid: a process start, a model build and a
    compile paid once per system, not once per point). Each record says how many points its
    process measured before it (``timing.process_points_before``; the workflow runs a process
    per point: 0)."""
    if experiment not in EXPERIMENTS:
        raise ValueError(f"experiment {experiment!r} is not one of {EXPERIMENTS}")
    if model_kind not in KINDS:
        raise ValueError(f"model kind {model_kind!r} is not one of {KINDS}")
    session = _Session(experiment, baseline, cfg)
    for before, (batch_size, max_seq_len) in enumerate(points):
        point = point_dict(cfg, batch_size, max_seq_len, model_kind, experiment)
        if experiment == "bert_ablation" and baseline.startswith("ladder-"):
            step = int(baseline.removeprefix("ladder-"))
            point["step"] = LADDER[step][0] if 0 <= step < len(LADDER) else "?"
        record = new_record(experiment, baseline, point, cfg.to_dict())
        with outcome(record):
            _run(record, cfg, session, batch_size, max_seq_len, peak, show_progress,
                 model_kind, oracle_dir)
        if record.timing:
            record.timing["process_points_before"] = before
        record.env = envmod.capture()
        yield record


@dataclass
class _Session:
    """The system under test of one process's points: made, and prepared, at most once."""
    experiment: str
    baseline: str
    cfg: BertVarlenConfig
    made: Baseline | None = None
    prepared: bool = False

    def system(self) -> Baseline:
        if self.made is None:
            self.made = make_system(self.experiment, self.baseline, self.cfg)
        return self.made


def _run(record: Record, cfg: BertVarlenConfig, session: _Session, batch_size: int,
         max_seq_len: int, peak: dict[str, Any] | None, show_progress: bool,
         model_kind: str, oracle_dir: Path | None) -> None:
    system = session.system()
    threads = cfg.threads or envmod.usable_cores()
    torch.set_num_threads(threads)
    distribution = record.point["distribution"]
    lengths, batch = bert_oracle.point_inputs(cfg, distribution, batch_size, max_seq_len)
    record.workload = {"lengths": lengths, "total_tokens": sum(lengths),
                       "padded_tokens": batch_size * max_seq_len,
                       **flop_bounds(lengths, max_seq_len)}

    device = resolve_device(cfg.device)
    ok, why = system.can_run(TASK, device.type, cfg.dtype)
    if not ok:
        raise Unavailable(why)

    # the run's shared folder also keeps the models: built by a point's first job, loaded by
    # the rest (the oracle's fingerprint sums the weights, so a model that loaded differently
    # from how it was built would not pass for the oracle's)
    model = canonical_model(model_kind, cfg.model, cfg.max_len, seed=cfg.seed,
                            cache=Path(oracle_dir) / "models" if oracle_dir else None)
    if oracle_dir is None:
        reference = bert_oracle.reference_output(model, batch, device)
        source = "computed by this job"
    else:
        reference, source = bert_oracle.shared(
            Path(oracle_dir) / record.experiment / model_kind / f"b{batch_size}_l{max_seq_len}.pt",
            bert_oracle.fingerprint(cfg, distribution, model_kind, lengths, batch, model),
            lambda: bert_oracle.reference_output(model, batch, device))
    if not session.prepared:  # the system's own form of the model, once per process
        system.prepare(model, device, torch_dtype(cfg.dtype))
        session.prepared = True
    if system.times_itself:
        system.set_timing(cfg.timing.as_dict())
    dev_batch = batch.to(device)
    system.build(dev_batch)

    # The gate's call is the first warm-up call too, and on CPU the one whose GEMM library
    # (torch's MKL or oneDNN, from their verbose logs) is observed: no call of its own
    gate: dict[str, Any] = {}

    def gate_call() -> None:
        gate["output"] = system.run(dev_batch)

    gemm_library = None
    if device.type == "cpu" and not system.times_itself:
        gemm_library = observe_gemm_library(gate_call)
    else:
        gate_call()
    check = compare(gate["output"], reference, batch.attention_mask, cfg.dtype)
    record.correctness = {**check, "reference_source": source}
    if not check["passed"]:
        record.status, record.reason = Status.INCORRECT, check["reason"]
        return

    label = f"{record.system} {model_kind} b={batch_size} L={max_seq_len}"
    progress = _progress_printer(label) if show_progress else None
    queued: dict[str, Any] = {}  # the calls timed back to back, where the policy asks
    if system.times_itself:  # the gate's invocation also timed itself: no load watched
        samples, timer, load = system.reported_samples(), f"reported by {record.system}", None
        stats = summarize(samples)
    else:
        with watched() as load:
            samples = measure(lambda: system.run(dev_batch), device, cfg.timing, progress,
                              calls_made=1)
            stats = summarize(samples)
            if cfg.timing.times_back_to_back(device.type):
                queued = measure_back_to_back(lambda: system.run(dev_batch), device,
                                              stats["median"])
                queued["stats"] = summarize(queued["samples"])
        timer = timer_name(device)
    untimed = ({} if system.times_itself else
               {"untimed_calls": {"correctness_gate": 1,
                                  "warmup": max(0, cfg.timing.warmup - 1)}})
    record.timing = with_noise({"unit": "s", "timer": timer, "threads": threads,
                                "device": str(device), "policy": cfg.timing.as_dict(),
                                **untimed, "samples": samples, "stats": stats,
                                **({"back_to_back": queued} if queued else {})}, load)
    record.derived = {**derived_metrics(cfg, model, lengths, max_seq_len, stats["median"],
                                        system.padding_free, device, peak),
                      **back_to_back_metrics(queued, stats["median"]),
                      "system": system.details()}
    if gemm_library:
        record.derived["gemm_library"] = gemm_library
    record.status, record.reason = Status.OK, ""


def encoder_shape(model: torch.nn.Module) -> tuple[int, int, int]:
    """(layers, hidden, intermediate) of any of the canonical HF encoders."""
    c = model.config
    if hasattr(c, "n_layers"):  # DistilBERT
        return c.n_layers, c.dim, c.hidden_dim
    return c.num_hidden_layers, c.hidden_size, c.intermediate_size


def derived_metrics(cfg: BertVarlenConfig, model: torch.nn.Module, lengths: list[int],
                    max_seq_len: int, median_s: float, padding_free: bool,
                    device: torch.device, peak: dict[str, Any] | None) -> dict[str, Any]:
    """Matmul FLOPs of the encoder layers (embeddings and DeBERTa's relative-position terms are
    left out, so for DeBERTa the efficiency figures are a lower bound)."""
    n_layers, hidden, inter = encoder_shape(model)  # ALBERT: depth, its layers being shared
    useful = bert_encoder_flops(n_layers, hidden, inter, lengths)
    padded = bert_encoder_flops(n_layers, hidden, inter, [max_seq_len] * len(lengths))
    out: dict[str, Any] = {
        "latency_ms": median_s * 1e3,
        "tokens_per_s": sum(lengths) / median_s,
        "useful_flops": useful,
        "executed_flops": useful if padding_free else padded,
        "useful_flops_per_s": useful / median_s,
        "padding_free": padding_free,
    }
    out.update(efficiency(out["useful_flops_per_s"], peak, cfg.dtype, device.type))
    return out


def back_to_back_metrics(queued: dict[str, Any], per_call_s: float) -> dict[str, Any]:
    """The back-to-back time per call beside the per-call latency, and the share of a call the
    host's launch path adds when every call starts on an idle device."""
    if not queued:
        return {}
    b2b = queued["stats"]["median"]
    return {"back_to_back_ms": b2b * 1e3, "launch_share": max(0.0, 1 - b2b / per_call_s)}


def _progress_printer(label: str):
    def show(n: int) -> None:
        if n == 1 or n % 10 == 0:
            print(f"[{label}] sample {n}", file=sys.stderr, flush=True)
    return show
