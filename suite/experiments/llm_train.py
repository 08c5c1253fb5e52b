"""MegaScale's training measurement: a GPT trained by one engine (``suite.trainers``) on one or
more ranks, timed per optimizer step, with MFU/HFU against a named peak.

Every rank runs this module (``command`` builds the launcher line)::

    python -m suite.experiments.llm_train --train-json JSON --trainer NAME \\
        --out RECORD.json --steplog STEPS.jsonl [--peak PEAK.json] [--check-steps K]

Flow of a run:

1. The process group comes from the launcher's environment (``RANK``, ``WORLD_SIZE``,
   ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``): gloo on CPU, nccl on CUDA. Without a launcher the
   run is one rank; an engine other than ``single`` then gets a one-rank gloo/nccl group.
2. Data: every rank draws the same seeded stream of *global* batches (``global_batch``
   sequences of ``seq_len``) and takes the contiguous block of rows ``[r*b, (r+1)*b)``,
   ``b = global_batch / world_size``. The global batch is thus the same whatever the world size,
   and an engine that averages the ranks' gradients computes the single-process step.
3. Correctness gate (``check_steps`` K > 0): rank 0 first trains the plain model in its own
   process (``single`` engine, fp32, same seed, so the same initial weights, same global
   batches) for K steps; then all ranks build the model and the engine and train K steps on the
   same batches. If any of the engine's K global-batch losses differs from the reference by more
   than ``TOLERANCE[dtype]`` (relative), or any pre-clip gradient norm by more than
   ``GRAD_NORM_TOLERANCE[dtype]``, the record is "incorrect" and nothing is timed. The
   check steps are not logged; the timed run continues from the checked state with the next
   batches (the check doubles as the engine's warm-up of lazy initialization).
4. ``steps`` logged steps, the first ``warmup_steps`` of them excluded from the statistics. A
   step is timed on rank 0 with ``perf_counter`` around ``train_step``; the step's end is
   synchronized across ranks without a barrier, because ``train_step`` returns the loss
   all-reduced after the optimizer step (``.item()`` waits for it, and for the GPU).
5. Rank 0 appends one line per step to the step log (``suite.steplog``) and writes the record.

MFU/HFU use ``suite.mfu.count_flops`` of the model's ``TransformerShape`` (no causal halving,
LM head included; the checkpointing mode is the recompute counted in HFU, as torch's
non-reentrant checkpoint runs it: without each block's MLP output projection) and a peak from the
JSON of ``seedbench peak``, never a guess: on CPU, the measured matmul peak of the run's dtype,
with all ranks' threads on a node together counted as ONE device (the peak was measured with the
machine's threads in one process; a bf16 run needs a measured bf16 entry); on CUDA the per-GPU
datasheet peak (else the measured one) times the world size. Without a peak file MFU is null
and the record says why.

Failures: any exception becomes a "failed" record written by rank 0. A rank other than 0 that
fails writes its reason to ``RECORD.json.rank<r>.error`` and exits with status 0, so that the
launcher does not kill rank 0 before it records the failure (its next collective fails on the
closed connection, or times out after ``timeout_s``), and rank 0's record includes that reason.
Rank 0 exits 1 once a failed record is written: torchrun then stops at once, where a clean exit
would wait at its exit barrier (5 minutes) for the agent of a node that died; the supervisor
(``suite.launch.run_isolated``) keeps that record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from reference_impl.gpt import GPT
from suite import env as envmod
from suite import steplog as sl
from suite.devices import resolve_device
from suite.launch.jobs import MODULE
from suite.measure.load import watched, with_noise
from suite.mfu import FlopCount, MfuFigure, mfu_figure
from suite.peak.schema import describe, efficiency, read_peak
from suite.launch.ports import free_port
from suite.records import (Record, Status, Unavailable, failed_record, new_record, outcome,
                           write_record)
from suite.measure.stats import summarize
from suite.resilience.monitor import THRESHOLD, ComputeTimer, find_stragglers, rank_table
from suite.trainers import registry as trainers
from suite.trainers.base import DistInfo, StepResult, Trainer, env_rank
from suite.trainers.config import TrainConfig
from suite.experiments import train_interface as ti
from suite.experiments.train_interface import DEFAULT_CHECK_STEPS, add_run_arguments

EXPERIMENT = "llm_train"
# Relative tolerances of the correctness gate against the fp32 single-process reference.
# fp32: engines differ from the reference only in summation order (gradient all-reduce, sharded
# norms): measured <= 1e-7 (loss) and <= 2e-7 (gradient norm) after 3 steps on CPU. bf16: the
# engine computes in bf16 (8 mantissa bits) against fp32; measured up to 1.5e-4 (loss) and 3e-3
# (norm) on a 2-layer GPT, growing with depth and width, hence 1e-2 and 5e-2. fp32 is the sharp
# check (it flags ZeRO + LAMB's per-partition trust ratio: 8e-4 loss, 7e-2 norm); bf16 only
# catches gross errors.
# The gradient norm is compared because Adam and LAMB are invariant to a constant gradient
# scale: a wrong average (a sum over ranks, a missing 1/world) leaves the losses untouched and
# shows only in the pre-clip norm.
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}
GRAD_NORM_TOLERANCE = {"fp32": 1e-3, "bf16": 5e-2}


# ----------------------------------------------------------------------------- data


def global_batches(cfg: TrainConfig) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The run's stream of global batches, on CPU, identical on every rank."""
    from suite.experiments.corpus import synthetic_batches, text_batches

    if cfg.data == "synthetic":
        return synthetic_batches(cfg.model.vocab_size, cfg.global_batch, cfg.seq_len, cfg.seed)
    return text_batches("train", cfg.global_batch, cfg.seq_len, cfg.seed)


def heldout_batches(cfg: TrainConfig) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed held-out set: the text corpus's held-out split, or synthetic tokens from another
    seed; the same batches for every run of the same seq_len and global batch."""
    from suite.experiments.corpus import synthetic_batches, text_batches

    if cfg.data == "synthetic":
        return synthetic_batches(cfg.model.vocab_size, cfg.global_batch, cfg.seq_len,
                                 seed=HELDOUT_SEED)
    return text_batches("val", cfg.global_batch, cfg.seq_len, seed=HELDOUT_SEED)


HELDOUT_SEED = 1_000_003


def rank_slice(batch: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank r's contiguous block of rows ``[r*b, (r+1)*b)`` of a global batch."""
    if batch.shape[0] % world_size:
        raise ValueError(f"global batch of {batch.shape[0]} rows does not split over "
                         f"{world_size} ranks")
    b = batch.shape[0] // world_size
    return batch[rank * b:(rank + 1) * b]


# ----------------------------------------------------------------------------- distributed


def rank_device(cfg: TrainConfig, local_rank: int) -> tuple[torch.device, str]:
    """This rank's device (made current on CUDA) and its collectives' backend."""
    device = resolve_device(cfg.device, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device, "nccl" if device.type == "cuda" else "gloo"


def init_distributed(cfg: TrainConfig, trainer: Trainer) -> tuple[DistInfo, bool, list[str]]:
    """The rank's DistInfo, whether this call created the process group (to destroy), and the
    environment variables it set (to remove again)."""
    rank, world, local = env_rank()
    device, backend = rank_device(cfg, local)
    if trainer.launcher == "single":
        if world != 1:
            raise ValueError(f"trainer {trainer.name!r} runs one process but WORLD_SIZE={world}; "
                             f"launch it without torchrun/deepspeed")
        return DistInfo.single(device), False, []
    tdist = torch.distributed
    timeout = timedelta(seconds=cfg.timeout_s)
    if tdist.is_initialized():
        return DistInfo(tdist.get_rank(), tdist.get_world_size(), local, device,
                        tdist.get_backend()), False, []
    env_set: list[str] = []
    if "MASTER_ADDR" in os.environ and "RANK" in os.environ:
        tdist.init_process_group(backend, timeout=timeout)
    else:  # no launcher: a one-rank group on a free local port
        tdist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}",
                                 rank=0, world_size=1, timeout=timeout)
        # DeepSpeed reads the launcher's variables even when the group exists
        for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
            if k not in os.environ:
                os.environ[k] = v
                env_set.append(k)
    return (DistInfo(tdist.get_rank(), tdist.get_world_size(), local, device, backend), True,
            env_set)


def _broadcast(obj: Any, dist: DistInfo) -> Any:
    if not dist.distributed or dist.world_size == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def _gather(obj: Any, dist: DistInfo) -> list[Any]:
    if not dist.distributed or dist.world_size == 1:
        return [obj]
    out: list[Any] = [None] * dist.world_size
    torch.distributed.all_gather_object(out, obj)
    return out


# ----------------------------------------------------------------------------- measurements


def peak_memory(device: torch.device) -> tuple[int, str]:
    """This rank's peak memory in bytes, and what that number is."""
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device),
                "torch.cuda.max_memory_allocated (tensors of this rank's GPU)")
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return (kib * 1024, "ru_maxrss: high-water resident set of this rank's process (CPU; "
                        "includes the interpreter, and on rank 0 the reference run)")


@dataclass(frozen=True)
class Peak:
    """The denominator of MFU: per-device FLOP/s, device count, where it comes from."""
    flops_per_device: float
    n_devices: int
    source: str


def resolve_peak(peak: dict[str, Any] | None, dtype: str, device: torch.device,
                 world_size: int, threads_per_node: int, nodes: int = 1
                 ) -> tuple[Peak | None, str]:
    """The peak to divide by, and a note; (None, why) when there is none to use. On CPU each
    node (all its ranks' threads together) is one device."""
    if peak is None:
        return None, "no peak given (run `seedbench peak` and pass --peak): MFU not computed"
    peak = read_peak(peak)
    if peak.get("device_type") != device.type:
        return None, (f"peak file is for device_type={peak.get('device_type')!r}, the run is on "
                      f"{device.type!r}: MFU not computed")
    entry = peak.get("peaks", {}).get(dtype)
    if entry is None or not entry.get("measured"):
        return None, (f"peak file has no {dtype} entry with a measurement (has "
                      f"{sorted(peak.get('peaks', {}))}; run `seedbench peak --dtypes {dtype}`): "
                      "MFU not computed")
    name = peak.get("device", "?")
    if device.type == "cpu":
        measured = entry["measured"]["flops_per_s"]
        note = (f"CPU: the {threads_per_node} threads of a node's ranks count as one device "
                f"({nodes} node(s)), against the {describe(peak, dtype)}")
        if peak.get("threads") != threads_per_node:
            note += (f"; WARNING: the run uses {threads_per_node} threads per node, the peak was "
                     f"measured with {peak.get('threads')}")
        return Peak(measured, nodes, describe(peak, dtype)), note
    from suite.peak import datasheet_peak

    sheet = entry.get("datasheet") or datasheet_peak(name, dtype)
    if sheet:
        return (Peak(sheet["flops_per_s"], world_size,
                     f"{sheet['device']} {dtype} {sheet['source']}"),
                f"CUDA: datasheet peak per GPU x {world_size} GPUs")
    return (Peak(entry["measured"]["flops_per_s"], world_size, describe(peak, dtype)),
            f"CUDA: no datasheet peak for {name}; measured peak per GPU x {world_size} GPUs")


def utilization(tokens_per_s: float, flops: FlopCount, peak: Peak | None
                ) -> tuple[MfuFigure | None, MfuFigure | None]:
    if peak is None or not tokens_per_s > 0 or not math.isfinite(tokens_per_s):
        return None, None
    common = dict(n_devices=peak.n_devices, peak_flops=peak.flops_per_device,
                  peak_source=peak.source)
    return (mfu_figure(tokens_per_s, flops.model_flops_per_token, flops.formula, kind="MFU",
                       **common),
            mfu_figure(tokens_per_s, flops.hardware_flops_per_token, flops.formula, kind="HFU",
                       **common))


# ----------------------------------------------------------------------------- the run


def build_model(cfg: TrainConfig, device: torch.device) -> GPT:
    """The same initial weights on every rank and in the reference: seeded CPU init."""
    torch.manual_seed(cfg.seed)
    return GPT(cfg.model).to(device)


def reference_steps(cfg: TrainConfig, steps: int, device: torch.device
                    ) -> list[StepResult]:
    """Losses and gradient norms of the plain single-process fp32 model on the first ``steps``
    global batches."""
    from suite.trainers.single import SingleTrainer

    ref_cfg = dataclasses.replace(cfg, dtype="fp32", compile=False)
    trainer = SingleTrainer()
    trainer.setup(build_model(ref_cfg, device), ref_cfg, DistInfo.single(device))
    stream = global_batches(cfg)
    results = []
    for _ in range(steps):
        x, y = next(stream)
        results.append(trainer.train_step(x.to(device), y.to(device)))
    return results


def _max_diffs(got: list[float], want: list[float]) -> tuple[float, float]:
    diffs = [abs(a - b) for a, b in zip(got, want)]
    rels = [d / max(abs(b), 1e-12) for d, b in zip(diffs, want)]
    return (max(diffs, default=0.0), max(rels, default=0.0))


def compare_steps(engine: list[StepResult], reference: list[StepResult],
                  dtype: str) -> dict[str, Any]:
    """The gate's verdict: losses and gradient norms within their relative tolerances."""
    losses, ref_losses = [r.loss for r in engine], [r.loss for r in reference]
    norms, ref_norms = [r.grad_norm for r in engine], [r.grad_norm for r in reference]
    abs_loss, rel_loss = _max_diffs(losses, ref_losses)
    abs_norm, rel_norm = _max_diffs(norms, ref_norms)
    finite = all(math.isfinite(v) for v in losses + norms)
    return {"passed": (finite and rel_loss <= TOLERANCE[dtype]
                       and rel_norm <= GRAD_NORM_TOLERANCE[dtype]),
            "check_steps": len(reference),
            "engine_losses": losses, "reference_losses": ref_losses,
            "max_abs_diff": abs_loss, "max_rel_diff": rel_loss,
            "tolerance_rel": TOLERANCE[dtype],
            "engine_grad_norms": norms, "reference_grad_norms": ref_norms,
            "grad_norm_max_rel_diff": rel_norm,
            "grad_norm_tolerance_rel": GRAD_NORM_TOLERANCE[dtype],
            "reference": "single-process plain model, fp32, same seed and global batches"}


def error_path(out: str | os.PathLike, rank: int) -> Path:
    return Path(f"{out}.rank{rank}.error")


def run_training(section: dict[str, Any] | TrainConfig, trainer: str | Trainer,
                 steplog: str | os.PathLike, *, peak: dict[str, Any] | None = None,
                 check_steps: int = DEFAULT_CHECK_STEPS, experiment: str = EXPERIMENT,
                 out: str | os.PathLike | None = None, label: str | None = None,
                 hold: list[Any] | None = None) -> Record | None:
    """Run on this rank; rank 0 returns the record (any status), other ranks None.

    ``trainer`` is a registered name or an instance (tests pass unregistered ones). ``out`` is
    only used to find other ranks' error files. ``hold``: a list the engine goes into after
    the run instead of being freed, for a process that leaves with ``os._exit`` (``main``).
    Freeing a DDP model while a gloo thread cleans up its last work can deadlock: the freeing
    thread holds the GIL and waits for the group's lock, the gloo thread holds that lock and
    waits for the GIL (seen in a warm-forked rank, which then never exited).
    """
    rank = env_rank()[0]
    name = trainer if isinstance(trainer, str) else trainer.name
    raw = section.to_dict() if isinstance(section, TrainConfig) else section
    # the run's name in its experiment (a size, an ablation step): the record carries it, so
    # no later stage has to read it off a path
    record = new_record(experiment, name, {} if label is None else {"label": label}, raw)
    dist: DistInfo | None = None
    owns_group, env_set = False, []
    engine: Trainer | None = None
    try:
        with outcome(record, traceback_limit=12):
            cfg = section if isinstance(section, TrainConfig) else TrainConfig.from_dict(section)
            record.config = cfg.to_dict()
            if (isinstance(check_steps, bool) or not isinstance(check_steps, int)
                    or check_steps < 0):
                raise ValueError(f"check_steps={check_steps!r} must be an int >= 0")
            engine = trainers.create(trainer) if isinstance(trainer, str) else trainer
            ok, why = engine.available()
            if not ok:
                raise Unavailable(why)
            dist, owns_group, env_set = init_distributed(cfg, engine)
            rank = dist.rank
            _train(record, cfg, engine, dist, steplog, peak, check_steps)
        raised = record.status == Status.FAILED and "traceback" in record.derived
        if raised and rank != 0 and out is not None:  # rank 0 collects these into its record
            path = error_path(out, rank)
            path.write_text(f"rank {rank}: {record.reason}\n{record.derived['traceback']}")
            print(f"[rank {rank}] failed: {record.reason} (reason in {path})", file=sys.stderr)
    finally:
        if engine is not None:
            try:
                engine.teardown()
            except Exception:  # noqa: BLE001 - a teardown error must not hide the run's result
                pass
            if hold is not None:
                hold.append(engine)
        if owns_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for k in env_set:
            os.environ.pop(k, None)
    if rank != 0:
        return None
    if record.status == Status.FAILED and out is not None:
        others = sorted(Path(out).parent.glob(Path(out).name + ".rank*.error"))
        if others:
            record.derived["other_ranks"] = [p.read_text() for p in others]
            record.reason += " | " + " | ".join(p.read_text().splitlines()[0] for p in others)
            for p in others:
                p.unlink(missing_ok=True)
    record.env = envmod.capture()
    return record


def _train(record: Record, cfg: TrainConfig, engine: Trainer, dist: DistInfo,
           steplog_path: str | os.PathLike, peak_file: dict[str, Any] | None,
           check_steps: int) -> None:
    """The run: the correctness gate over the first steps, then the timed steps, then the
    record's timing and derived figures."""
    device, world, rank = dist.device, dist.world_size, dist.rank
    shard, shards = engine.data_parallel(dist)
    if cfg.global_batch % shards:
        raise ValueError(f"global_batch={cfg.global_batch} is not divisible by the "
                         f"{shards} data-parallel ranks")
    threads = cfg.threads or max(1, envmod.usable_cores() // world)
    torch.set_num_threads(threads)
    _describe(record, cfg, engine, world, shards)

    reference = None
    if check_steps and rank == 0:  # before the engine exists: nothing else runs meanwhile
        reference = reference_steps(cfg, check_steps, device)
    if device.type == "cuda":  # the engine's peak, not the reference's
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)

    model = build_model(cfg, device)
    record.point["n_params"] = model.num_params(non_embedding=False)
    engine.setup(model, cfg, dist)
    stream = global_batches(cfg)

    def next_local() -> tuple[torch.Tensor, torch.Tensor]:
        x, y = next(stream)
        return (rank_slice(x, shard, shards).to(device, non_blocking=True),
                rank_slice(y, shard, shards).to(device, non_blocking=True))

    if not _gate(record, cfg, engine, dist, next_local, reference, check_steps):
        return
    nodes = max(1, world // int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    peak, peak_note = resolve_peak(peak_file, cfg.dtype, device, world, threads * world // nodes,
                                   nodes=nodes)
    # the per-rank monitor; not inside compiled blocks on CUDA (its event hooks would break
    # the graph: the CPU timer reads the scheduler, outside the model)
    timer = (None if device.type == "cuda" and cfg.compile else
             ComputeTimer(model.blocks, cuda=device.type == "cuda"))
    times, losses, norms, load, compute = _timed_steps(cfg, engine, dist, next_local, peak,
                                                       steplog_path, timer)
    mem_per_rank = _gather(peak_memory(device)[0], dist)
    per_rank = dict(enumerate(_gather(compute[cfg.warmup_steps:], dist)))
    eval_loss = _eval_loss(cfg, engine, dist)

    samples = times[cfg.warmup_steps:]
    stats = summarize(samples)
    record.timing = with_noise({"unit": "s", "timer": "time.perf_counter on rank 0 around "
                                "train_step (ends on the all-reduced loss)",
                                "threads_per_rank": threads, "device": str(device),
                                "warmup_steps": cfg.warmup_steps,
                                "warmup_samples": times[:cfg.warmup_steps], "samples": samples,
                                "stats": stats}, load)
    tokens_per_step = cfg.global_batch * cfg.seq_len
    tokens_per_s = tokens_per_step / stats["median"]
    flops = cfg.flops()
    m, h = utilization(tokens_per_s, flops, peak)
    mem_bytes, mem_kind = peak_memory(device)
    record.derived = {
        ti.TOKENS_PER_S: tokens_per_s,
        ti.TOKENS_PER_STEP: tokens_per_step,
        ti.FLOPS_PER_TOKEN: flops.model_flops_per_token,
        ti.HARDWARE_FLOPS_PER_TOKEN: flops.hardware_flops_per_token,
        ti.FLOP_FORMULA: flops.formula,
        ti.MFU: m.as_dict() if m else None,
        ti.HFU: h.as_dict() if h else None,
        ti.PEAK_DEVICES: peak.n_devices if peak else None,
        ti.PEAK_NOTE: peak_note,
        # MFU against every denominator peak.json has (each library, theoretical), per device
        ti.MFU_DENOMINATORS: (efficiency(tokens_per_s * flops.model_flops_per_token
                                         / peak.n_devices, peak_file, cfg.dtype, device.type)
                              if peak else None),
        ti.PEAK_MEM_BYTES: mem_bytes,
        ti.PEAK_MEM_BYTES_PER_RANK: mem_per_rank,
        ti.PEAK_MEM_KIND: mem_kind,
        ti.FIRST_LOSS: losses[0], ti.FINAL_LOSS: losses[-1],
        ti.EVAL_LOSS: eval_loss, ti.EVAL_BATCHES: cfg.eval_batches,
        ti.TOKENS_SEEN: tokens_per_step * cfg.steps,
        ti.FINAL_GRAD_NORM: norms[-1],
        ti.LOSSES_FINITE: all(math.isfinite(v) for v in losses),
        ti.STEPLOG: str(steplog_path),
        ti.TRAINER: engine.details(),
        ti.MODEL_PATHS: model.paths(cfg.seq_len),
        **_monitor(per_rank, samples, same_work=shards == world),
    }
    record.status = Status.OK


def _monitor(per_rank: dict[int, list[float]], steps: list[float], same_work: bool
             ) -> dict[str, Any]:
    """The per-rank monitor's table and the stragglers it names: only among ranks that do the
    same work (a pipeline's stages differ by design); nothing on CUDA with compiled blocks."""
    if not any(per_rank.values()):
        return {ti.RANK_TABLE: None, ti.STRAGGLERS: None}
    if not same_work:
        return {ti.RANK_TABLE: rank_table(per_rank, steps),
                ti.STRAGGLERS: {"named": None, "why": "the ranks do different work (stages)"}}
    named, ratios = find_stragglers(per_rank)
    return {ti.RANK_TABLE: rank_table(per_rank, steps),
            ti.STRAGGLERS: {"named": named, "ratios": {str(r): x for r, x in ratios.items()},
                            "threshold": THRESHOLD}}


def _describe(record: Record, cfg: TrainConfig, engine: Trainer, world: int,
              shards: int) -> None:
    """The record's point and workload: what was trained, on how many ranks, how split
    (``shards``: the data-parallel ranks that split each global batch's rows)."""
    flops = cfg.flops()
    record.point = {**record.point, "model": cfg.size_label(), "seq_len": cfg.seq_len,
                    "global_batch": cfg.global_batch, "world_size": world, "dtype": cfg.dtype,
                    "trainer": engine.name, "data": cfg.data}
    record.workload = {"tokens_per_step": cfg.global_batch * cfg.seq_len,
                       "micro_batch": cfg.global_batch // shards,
                       "flops_per_token": {"model": flops.model_flops_per_token,
                                           "hardware": flops.hardware_flops_per_token,
                                           "formula": flops.formula},
                       "rank_slice": ("contiguous rows [r*b, (r+1)*b) of each global batch"
                                      if shards > 1 else "every rank sees the whole batch"),
                       # torchrun's agents, one per node (1 without a launcher)
                       "nodes": int(os.environ.get("GROUP_WORLD_SIZE", "1")),
                       "launcher": launcher_of(os.environ)}


def launcher_of(env) -> str:
    """Which launcher started this rank, from what each sets in its ranks' environment."""
    if "TORCHELASTIC_RUN_ID" in env:
        return "torchrun"
    if "CROSS_SIZE" in env:  # deepspeed.launcher.launch
        return "deepspeed"
    return "none (one process)" if "WORLD_SIZE" not in env else "unknown"


def _gate(record: Record, cfg: TrainConfig, engine: Trainer, dist: DistInfo, next_local,
          reference, check_steps: int) -> bool:
    """The engine's first ``check_steps`` steps against the single-process reference's (rank 0
    judges, every rank learns the verdict); False when it differs: the record says so."""
    if not check_steps:
        record.correctness = {"passed": None, "check_steps": 0,
                              "note": "correctness gate skipped (--check-steps 0)"}
        return True
    checked = [engine.train_step(*next_local()) for _ in range(check_steps)]
    verdict = compare_steps(checked, reference, cfg.dtype) if dist.rank == 0 else None
    verdict = _broadcast(verdict, dist)
    record.correctness = verdict
    if verdict["passed"]:
        return True
    record.status = Status.INCORRECT
    record.reason = (f"{engine.name} differs from the single-process reference over the "
                     f"first {check_steps} steps: loss by {verdict['max_rel_diff']:.3g} "
                     f"relative (max |diff| {verdict['max_abs_diff']:.3g}; tolerance "
                     f"{TOLERANCE[cfg.dtype]:g}), gradient norm by "
                     f"{verdict['grad_norm_max_rel_diff']:.3g} relative (tolerance "
                     f"{GRAD_NORM_TOLERANCE[cfg.dtype]:g})")
    record.derived[ti.TRAINER] = engine.details()
    return False


def _timed_steps(cfg: TrainConfig, engine: Trainer, dist: DistInfo, next_local, peak,
                 steplog_path: str | os.PathLike, timer: ComputeTimer | None = None):
    """``cfg.steps`` timed optimizer steps (rank 0 logs each): their times, losses and gradient
    norms, the machine's load while they ran, and this rank's compute per step (``timer``)."""
    device, rank = dist.device, dist.rank
    tokens_per_step = cfg.global_batch * cfg.seq_len
    flops = cfg.flops()
    writer = sl.StepLogWriter(steplog_path) if rank == 0 else None
    times, losses, norms, compute = [], [], [], []
    if timer is not None:
        timer.take()  # from here
    # the load on this rank's machine while the steps run; the launcher's other ranks (each in a
    # session of its own under torchrun) are this run's work, not another program's
    launched = "TORCHELASTIC_RUN_ID" in os.environ or dist.world_size > 1
    with watched(family_of=os.getppid() if launched else None) as load:
        try:
            for step in range(cfg.steps):
                x, y = next_local()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                result = engine.train_step(x, y)  # ends on the all-reduced loss's .item()
                dt = time.perf_counter() - t0
                times.append(dt)
                if timer is not None:
                    compute.append(timer.take())
                losses.append(result.loss)
                norms.append(result.grad_norm)
                if writer is not None:
                    tps = tokens_per_step / dt
                    m, h = utilization(tps, flops, peak)
                    writer.write(sl.step_line(**{
                        sl.STEP: step,
                        sl.PHASE: sl.WARMUP if step < cfg.warmup_steps else sl.MEASURE,
                        sl.STEP_TIME_S: dt, sl.TOKENS_PER_S: tps,
                        sl.MFU: m.value if m else None, sl.HFU: h.value if h else None,
                        sl.PEAK_MEM_BYTES: peak_memory(device)[0], sl.LOSS: result.loss,
                        sl.GRAD_NORM: result.grad_norm, sl.LR: cfg.lr}))
        finally:
            if writer is not None:
                writer.close()
            if timer is not None:
                timer.remove()
    return times, losses, norms, load, compute


def _eval_loss(cfg: TrainConfig, engine: Trainer, dist: DistInfo) -> float | None:
    """The held-out loss after the timed steps (so evaluation costs nothing in them)."""
    if not cfg.eval_batches:
        return None
    held_out = heldout_batches(cfg)
    values = []
    shard, shards = engine.data_parallel(dist)
    for _ in range(cfg.eval_batches):
        x, y = next(held_out)
        values.append(engine.eval_loss(rank_slice(x, shard, shards).to(dist.device),
                                       rank_slice(y, shard, shards).to(dist.device)))
    return sum(values) / len(values)


# ----------------------------------------------------------------------------- CLI


_HELD_UNTIL_EXIT: list[Any] = []  # what ``main`` never frees: see ``run_training``'s ``hold``


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.splitlines()[0])
    add_run_arguments(p)
    p.add_argument("--experiment", default=EXPERIMENT, help="experiment name in the record")
    args = p.parse_args(argv)
    rank = env_rank()[0]
    if rank == 0:
        args.out.unlink(missing_ok=True)
    error_path(args.out, rank).unlink(missing_ok=True)
    peak = None
    try:
        section = json.loads(args.train_json)
        peak = read_peak(args.peak)
    except (OSError, ValueError) as e:
        if rank != 0:
            return 0
        section = {"_unparsed": args.train_json}
        record = failed_record(args.experiment, args.trainer,
                               {} if args.label is None else {"label": args.label}, section,
                               f"{type(e).__name__}: {e}")
    else:
        record = run_training(section, args.trainer, args.steplog, peak=peak,
                              check_steps=args.check_steps, experiment=args.experiment,
                              out=args.out, label=args.label, hold=_HELD_UNTIL_EXIT)
    if record is None:  # not rank 0
        return 0
    write_record(record, args.out)
    summary = f"{args.out}: {record.status.value} {record.reason[:300]}"
    if record.status == Status.OK:
        d = record.derived
        mfu = f"{d['mfu']['percent']:.2f}%" if d["mfu"] else "n/a"
        summary += (f" tokens/s={d['tokens_per_s']:.1f} MFU={mfu} "
                    f"step={record.timing['stats']['median'] * 1e3:.1f} ms")
    print(summary, file=sys.stderr)
    return 1 if record.status == Status.FAILED else 0


if __name__ == "__main__":
    code = main()
    # The record and the step log are closed by now. Interpreter teardown of the engines'
    # communication threads (gloo, DeepSpeed) sometimes aborts a finished run ("terminate called
    # without an active exception", exit 250), which would turn an ok record into a failed one:
    # leave without running C++ static destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
