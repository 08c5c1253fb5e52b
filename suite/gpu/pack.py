"""The GPU half of the suite in one short accelerator lease (``seedbench gpu-check``), and its
CPU rehearsal (``--dry``, run by ``make test`` so the pack cannot rot between leases).

Why: accelerator time comes as one lease of minutes on a bare machine with its own torch, triton
and transformers and no package registry (``make gpu-check`` says how the project is installed
there). So the GPU work is this one prepared script: steps in order of importance, so that a run
cut off still leaves the most important results, each through the suite's own CLI (records as
the workflow writes them), each step's outcome and time in ``steps.json``:

  env        versions, the GPU, what the suite could not import
  tune       the varlen attention's launch parameters timed at the MHA shapes -> tuning.json,
             which every later step runs with (``SEEDBENCH_TRITON_TUNING``; a second call
             with the first's ``--work`` keeps it, and the records, and runs what was cut off)
  peak       the GPU's GEMM peak (cuBLAS) beside its datasheet peak
  bert_grid  the ByteTransformer README's table on this GPU: end-to-end BERT-base fp16 at b1 and
             b16 x 64-1024, the reference (CUDA graphs) against the bar it must clear
             (torch.compile with CUDA graphs), SDPA and the original ByteTransformer,
             one process per system with all its points (each gated, then timed per call
             and back to back)
  serving    BERT-base served under MLPerf LoadGen in fp16: padded and length-bucketed
             dynamic batching against padding-free packing (graphed, and eager), three runs
             (the goal's pair first), Offline and the highest Server QPS VALID at a p99 bound;
             and each system's first and second call at four batch shapes it has not run
             (what a new shape costs it)
  bert_grid_more  the same table for the other systems: the reference launched eagerly,
             torch.compile, JAX/XLA, HF eager, torch-nested, FasterTransformer and
             DeepSpeed-Inference
  kernels    the Triton kernel tests, compiled for the GPU (no interpreter; every point above
             is gated against float64 already)
  mha        varlen Triton vs padded matmul+mask+softmax+matmul vs padded SDPA, b16 x 128-1024
  gpt        a ~1B-parameter GPT trained in bf16 on one GPU: MFU against the datasheet peak
  ladder     the ByteTransformer ablation ladder at one point
  attention_kernels  SDPA's FlashAttention, cuDNN and memory-efficient kernels, causal, head
             dimension 128, 2k-32k tokens, forward and backward as fractions of peak beside
             the fractions the scale model assumes
  hbm_bandwidth  a copy, an add, a cast to fp32 and a LayerNorm on 512 MiB tensors: the
             fraction of the datasheet HBM bandwidth element-wise kernels reach, beside the
             scale model's ``hbm_efficiency`` (0.88)
  gemm_shapes  the scale model's GEMM-from-shape term: the layer GEMMs of the published H100
             runs timed in bf16 beside the model's predicted efficiency (``suite.scale.probe``),
             with the SM clock and board power NVML reads under each
  overlap_interference  the same GEMMs alone and beside a persistent copy kernel of 8, 16
             and 32 blocks (NCCL's channels) on a side stream: what hidden communication costs
             the compute under it, which the scale model takes as nothing
  layer_intercept  GPT blocks timed forward + backward at 1 to 16 sequences: the fixed time a
             layer costs per micro-batch (the intercept of time against tokens), which the
             scale model does not have; and with full recompute, what it costs over none
             beside what the model charges
  activation_memory  the same blocks' activations as autograd keeps them beside the memory
             model's term, and the caching allocator's reserved over allocated peak (what the
             model leaves to its fixed reserve), without and with full recompute

A step that would start past the time budget is recorded as skipped. Records go under
``<machine>/...`` (the workflow's layout and machine name, e.g. ``1x-nvidia-h200``), packed into
``OUT/results.tar.gz`` after every step: the lease returns only a few files, and a cut-off run
keeps what it had.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository
BUDGET_S = 480.0  # the goal: the whole pack within 8 minutes of device wall time


@dataclass(frozen=True)
class Sizes:
    """What each step runs: the GPU's sizes, or the rehearsal's tiny ones."""
    device: str
    bert_dtype: str
    bert_model: dict[str, int]
    mha_lengths: tuple[int, ...]
    bert_lengths: tuple[int, ...]
    batch: int
    bert_systems: tuple[str, ...]  # the grid's systems the goals are judged on (bert_grid)
    grid: dict[str, tuple[int, ...]]  # the README table's batch sizes and lengths
    gpt: dict[str, Any]
    timing: dict[str, float]
    tune_shapes: tuple[int, ...]
    kernel_tests: tuple[str, ...] = ()
    peak_sizes: tuple[int, ...] = (4096, 8192)
    serving: dict[str, Any] = field(default_factory=dict)  # the bert_serving section's sizes
    extra: dict[str, Any] = field(default_factory=dict)
    bert_systems_more: tuple[str, ...] = ()  # the grid's other systems (bert_grid_more)


GPU = Sizes(
    device="cuda", bert_dtype="fp16",
    bert_model={"layers": 12, "hidden": 768, "heads": 12, "intermediate": 3072,
                "vocab_size": 30522},
    mha_lengths=(128, 256, 512, 1024), bert_lengths=(128, 1024), batch=16,
    # every system of the README grid, each that cannot run here a record saying why, in the
    # order the goals need them (a lease cut off keeps the first). bert_grid, before serving:
    # the reference, the bar it must clear (torch.compile with CUDA graphs), the fastest eager
    # framework, the original ByteTransformer (~5 min on the first H200 run's numbers: ~25 s a
    # system, torch.compile a few compiles of ~40 s). bert_grid_more, after serving: the
    # reference launched eagerly (the launches' share), the compilers, HF eager, torch-nested;
    # DeepSpeed last (it compiles its ops first, minutes)
    bert_systems=("reference", "torch-compile-cudagraphs", "torch-sdpa",
                  "external-bytetransformer"),
    bert_systems_more=("reference-eager", "torch-compile", "jax-xla", "torch-eager",
                       "torch-nested", "external-fastertransformer", "deepspeed-inference"),
    # the ByteTransformer README's table (b1 and b16; every other of its lengths up to 1024)
    grid={"batch_sizes": (1, 16), "max_seq_lens": (64, 128, 256, 512, 1024)},
    # ~1.2B parameters (24 x 12 x 2048^2 + embeddings), 2048 tokens, 8 sequences per step
    gpt={"model": {"n_layer": 24, "n_embd": 2048, "n_head": 16, "vocab_size": 50304,
                   "fused": True},
         "seq_len": 2048, "global_batch": 8, "steps": 14, "warmup_steps": 4, "dtype": "bf16",
         "compile": True, "device": "cuda"},
    timing={"warmup": 3, "min_repeats": 10, "min_time_s": 0.3},
    tune_shapes=(64, 128, 256, 512, 1024),  # 64: the short kernel's narrow key tile
    peak_sizes=(8192, 16384),
    # a padded fp16 BERT-base batch of 32 x 128 takes a few ms on a Hopper GPU: a 50 ms p99
    # bound leaves room to batch; every Server trial issues 4000 queries, each system's alike
    # (1-4 s at the loads a Hopper serves), Offline runs >= 2 s: ~30 s a run on an H200. Three
    # runs for the claims' intervals: the goal's pair (the graphed reference, padded SDPA) all
    # three first (extra's serving_first), then the others (the eager reference: the launches'
    # share)
    serving={"systems": ["packed-reference", "padded-torch-sdpa", "bucketed-torch-sdpa",
                         "packed-reference-eager"], "repeats": 3,
             "library_size": 2048, "latency_bound_ms": 50, "min_duration_s": 2.0,
             "min_queries": 4000,
             "batching": {"Offline": {"max_batch": 64, "window_ms": 2},
                          "Server": {"max_batch": 32, "window_ms": 2}},
             "search": {"max_trials": 5, "rel_tol": 0.15, "start": 0.5, "step": 1.5},
             "timeout_s": 120, "shape_probes": 4},
    # DeepSpeed compiles its inference ops (nvcc) on the first init_inference of the lease; the
    # original ByteTransformer's front converts the weights for each point; torch.compile
    # compiles a shape statically, the next one with dynamic sizes, b1 apart (size 1 is
    # specialized): about four compiles
    extra={"ladder_length": 256,
           "grid_timeout_s": {"deepspeed-inference": 360, "external-bytetransformer": 240,
                              "torch-compile-cudagraphs": 240, "torch-compile": 240},
           "serving_first": 2},
)
REHEARSAL = Sizes(
    device="cpu", bert_dtype="fp32",
    bert_model={"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "vocab_size": 100},
    mha_lengths=(16, 32), bert_lengths=(16,), batch=2,
    bert_systems=("reference", "reference-eager"),
    bert_systems_more=("torch-eager", "torch-nested"),
    grid={"batch_sizes": (1, 2), "max_seq_lens": (16,)},
    gpt={"model": {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 256},
         "seq_len": 16, "global_batch": 2, "steps": 3, "warmup_steps": 1, "dtype": "fp32",
         "device": "cpu", "threads": 1},
    timing={"warmup": 1, "min_repeats": 2, "min_time_s": 0.0},
    tune_shapes=(16,),
    kernel_tests=("-k", "matches_reference and not bf16"),
    peak_sizes=(64,),
    serving={"systems": ["padded-torch-eager", "packed-reference"], "max_len": 16,
             "library_size": 32, "buckets": [8, 16], "min_duration_s": 0.2, "threads": 1,
             "gate_requests": 4, "search": {"max_trials": 2}, "timeout_s": 60,
             "shape_probes": 2},
    extra={"ladder_steps": (0, 5),  # the first and the last step: the same path, less time
           "probe_shapes": 6, "attention_heads": (2, 16), "attention_tokens": 64,
           "hbm_elements": 1 << 16,
           "attention_lengths": (16, 32), "attention_check_len": 16,
           "overlap_ctas": (2,),
           "layer_intercept": {"layers": 1, "hidden": 32, "heads": 2, "seq": 16,
                               "batches": (1, 2, 4)},
           "memory_batches": (1, 2)},
)


class Pack:
    """One run of the pack: the steps' outcomes, the time budget, the files written.

    ``resume``: the working folder is an earlier call's (``--work``): a point whose record it
    holds is kept, not run again, unless the record says ``failed``; the tuning and the peak it
    holds are kept too. So a second call on the same machine runs what the first cut off."""

    def __init__(self, out: Path, work: Path, sizes: Sizes, budget_s: float,
                 resume: bool = False):
        self.out, self.work, self.sizes, self.budget_s = out, work, sizes, budget_s
        from suite.env import machine_slug

        self.machine = machine_slug()  # e.g. 1x-nvidia-h200: the folder make report shows
        self.results = work / self.machine
        self.resume = resume
        self.kept_records: list[str] = []  # kept from an earlier call
        self.started = time.monotonic()
        self.steps: list[dict[str, Any]] = []
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if sizes.device == "cpu":
            self.env["TRITON_INTERPRET"] = "1"
        from reference_impl.kernels.triton_attention import TUNING_ENV

        if resume and self.tuning_file.exists():  # the earlier call's tune, for every step
            self.env.setdefault(TUNING_ENV, str(self.tuning_file))

    @property
    def tuning_file(self) -> Path:
        return self.work / "tuning.json"

    def kept(self, *records: Path) -> list[str] | None:
        """When resuming: the statuses of the records an earlier call wrote at ``records``, if
        it wrote every one and none says ``failed`` (they are kept, not run again); else None:
        run them."""
        if not self.resume:
            return None
        statuses = []
        for record in records:
            status = json.loads(record.read_text())["status"] if record.exists() else "failed"
            if status == "failed":
                return None
            statuses.append(status)
        self.kept_records += [str(r.relative_to(self.work)) for r in records]
        return statuses

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, name: str, fn) -> None:
        if self.elapsed() > self.budget_s:
            self.steps.append({"step": name, "status": "skipped",
                               "reason": f"budget of {self.budget_s:g} s spent"})
        else:
            t0 = time.monotonic()
            try:
                detail = fn() or {}
                status = detail.pop("status", "ok")
            except Exception as e:  # noqa: BLE001 - a step's failure is recorded, the pack goes on
                status, detail = "failed", {"reason": f"{type(e).__name__}: {e}"}
            self.steps.append({"step": name, "status": status,
                               "seconds": round(time.monotonic() - t0, 1), **detail})
        print(f"[gpu-check] {name}: {self.steps[-1]['status']} "
              f"({self.elapsed():.0f} s elapsed)", file=sys.stderr, flush=True)
        self.save()

    def save(self) -> None:
        (self.out / "steps.json").write_text(json.dumps(
            {"budget_s": self.budget_s, "elapsed_s": round(self.elapsed(), 1),
             "device": self.sizes.device, "work": str(self.work), "resumed": self.resume,
             "records_kept": self.kept_records, "steps": self.steps}, indent=1))
        if self.results.exists():
            with tarfile.open(self.out / "results.tar.gz", "w:gz") as tar:
                tar.add(self.results, arcname=self.machine)

    def points(self, labelled: Iterable[tuple[str, Callable[[], str]]]) -> dict[str, Any]:
        """A step's points, one at a time: ``(label, call)``, the call returning its record's
        status. A point that raises (no record, a timeout) is that point's failure, not the
        step's, so the points before it keep their statuses; once the budget is spent the
        rest are skipped, each named; and the results are packed after every point, so a
        lease cut off mid-step still returns what finished."""
        statuses: dict[str, str] = {}
        for label, call in labelled:
            if self.elapsed() > self.budget_s:
                statuses[label] = f"skipped: budget of {self.budget_s:g} s spent"
                continue
            try:
                statuses[label] = call()
            except subprocess.TimeoutExpired as e:
                statuses[label] = f"failed: timed out after {e.timeout:.0f} s"
            except Exception as e:  # noqa: BLE001 - one point's failure, recorded
                statuses[label] = f"failed: {type(e).__name__}: {str(e)[:300]}"
            self.save()
        return statuses

    def seedbench(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """One suite command; it may run past the budget by a minute at most (the lease's
        command limit is what must not be crossed)."""
        left = max(30.0, self.budget_s + 60 - self.elapsed())
        return subprocess.run([sys.executable, "-m", "suite.cli", *args], env=self.env,
                              capture_output=True, text=True, timeout=min(timeout, left))

    def section(self, **extra: Any) -> str:
        """The bert_varlen section every BERT point of the pack runs with; the external
        programs are paper.yaml's (on a GPU: the original ByteTransformer, if built)."""
        s = self.sizes
        from suite.config import load

        external = (load(ROOT / "workflows" / "config" / "paper.yaml")["bert_varlen"]["external"]
                    if s.device == "cuda" else {})
        return json.dumps({"model": s.bert_model, "external": external,
                           "batch_sizes": sorted({s.batch, *s.grid["batch_sizes"]}),
                           "max_seq_lens": sorted({*s.bert_lengths, *s.grid["max_seq_lens"]}),
                           "device": s.device,
                           "dtype": s.bert_dtype, "timing": s.timing, "timeout_s": 240,
                           "baselines": [*s.bert_systems, *s.bert_systems_more], **extra})

    def grid(self, system: str, timeout_s: float = 150) -> str:
        """Every point of the grid of one system, in one process (``seedbench grid``), the
        points' oracles and model shared with the other systems' grids; its status: ``ok``,
        or each other status with its points."""
        s = self.sizes
        out = self.results / "bert_varlen" / "bert" / system
        args = ["grid", "bert_varlen", "--system", system,
                "--batch-sizes", *map(str, s.grid["batch_sizes"]),
                "--max-seq-lens", *map(str, s.grid["max_seq_lens"]),
                "--section-json", self.section(), "--out-dir", str(out),
                "--oracle-dir", str(self.work / "oracles"), "--timeout-s", f"{timeout_s:g}"]
        if (self.results / "peak.json").exists():
            args += ["--peak", str(self.results / "peak.json")]
        paths = [out / f"b{b}_l{n}.json" for b in s.grid["batch_sizes"]
                 for n in s.grid["max_seq_lens"]]
        # one process runs every point: kept only when every point's record is
        exit_code = "kept" if self.kept(*paths) else self.seedbench(
            *args, timeout=timeout_s + 30).returncode  # its own limit comes first
        found: dict[str, list[str]] = {}
        for b in s.grid["batch_sizes"]:
            for n in s.grid["max_seq_lens"]:
                path = out / f"b{b}_l{n}.json"
                rec = json.loads(path.read_text()) if path.exists() else {
                    "status": "failed", "reason": f"no record (exit {exit_code})"}
                why = f": {rec.get('reason', '')[:120]}" if rec["status"] != "ok" else ""
                found.setdefault(rec["status"], []).append(f"b{b} L{n}{why}")
        if set(found) == {"ok"}:
            return "ok"
        return "; ".join(f"{status}: " + ", ".join(points) for status, points in
                         sorted(found.items(), key=lambda kv: kv[0] == "ok"))

    def point(self, experiment: str, system: str, length: int, subject: str | None = None
              ) -> str:
        out = (self.results / experiment / (subject or "bert") / system
               / f"b{self.sizes.batch}_l{length}.json")
        args = ["run", experiment, "--system", system, "--batch-size", str(self.sizes.batch),
                "--max-seq-len", str(length), "--section-json", self.section(),
                "--out", str(out)]
        if subject:
            args += ["--subject", subject]
        if (self.results / "peak.json").exists():
            args += ["--peak", str(self.results / "peak.json")]
        kept = self.kept(out)
        if kept:
            return kept[0]
        done = self.seedbench(*args)
        if not out.exists():
            raise RuntimeError(f"{experiment} {system} L={length}: no record "
                               f"(exit {done.returncode}): {done.stderr[-500:]}")
        return json.loads(out.read_text())["status"]


def run(out: Path, dry: bool = False, budget_s: float = BUDGET_S,
        only: list[str] | None = None, work: Path | None = None) -> dict[str, Any]:
    """Every step in order (or those named in ``only``); returns the contents of
    ``steps.json``. ``work``: the working folder (records, oracles, the tuning); an existing
    one is an earlier call's, resumed (``Pack``); default a fresh temporary one."""
    from suite.gpu.steps import STEPS

    names = [name for name, _ in STEPS]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise ValueError(f"gpu-check steps {unknown}: not steps of the pack; its steps: {names}")
    out.mkdir(parents=True, exist_ok=True)
    if dry:  # the autotune runs in this process: Triton must be interpreted before its import
        os.environ["TRITON_INTERPRET"] = "1"
    # the records are written outside OUT: a lease returns only a few files from there
    resume = work is not None and Path(work).is_dir()
    work = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="seedbench-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    pack = Pack(out, work.resolve(), REHEARSAL if dry else GPU, budget_s, resume=resume)
    if not dry and not _has_cuda():
        pack.steps.append({"step": "env", "status": "failed",
                           "reason": "no CUDA device: run with --dry to rehearse on CPU"})
        pack.save()
        return json.loads((out / "steps.json").read_text())
    for name, fn in STEPS:
        if only is None or name in only:
            pack.step(name, lambda fn=fn: fn(pack))
    return json.loads((out / "steps.json").read_text())


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
