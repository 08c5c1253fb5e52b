"""Which training runs the ``llm`` config section asks for, each as a complete train config.

The workflow has one job per run: ``results/<machine>/<experiment>/<label>/<trainer>.json`` (plus
its ``.steps.jsonl`` step log). Everything a run needs is in its ``train`` dict, so a job depends
on nothing but the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suite.config import ConfigError, validate
from suite.resilience.store import MODES  # the checkpoint modes, each a system
from suite.trainers.config import MODEL_KEYS  # GPTConfig's fields: model, not train

# MegaScale's ablation (Table 3) as switches of this suite, in the order. Each step keeps
# the previous ones. ``paper_steps``: Table 3 rows whose techniques this step corresponds to (the
# paper's gain for the step is the sum of theirs); the compile step has no row in the paper; the
# overlap step is data parallelism's (row 5): the tensor- and pipeline-parallel overlaps (rows 3,
# 4) have no engine here.
ABLATION: list[tuple[str, str, tuple[int, ...]]] = [
    ("baseline", "baseline (unfused, no overlap, AdamW)", (0,)),
    ("parallel_block", "+ parallel block (one input GEMM)", (1,)),
    ("sliding_window", "+ sliding window (band-only kernel)", (2,)),
    ("fused", "+ fused operators", (6,)),
    ("compile", "+ torch.compile", ()),
    ("overlap", "+ communication overlap", (5,)),
    ("lamb", "+ LAMB, larger batch", (8,)),
]
# The overlap step per ladder engine: the engine the steps before it run on (its overlap off)
# and what the step turns on. DDP's bucketed all-reduce overlapping backward is PyTorch's default
# and the baseline's; torch.distributed.pipelining's 1F1B fires each send with the next receive
# and waits on both, so it has no decoupled send/recv to switch: neither has an overlap step.
OVERLAP = {
    "fsdp2": ("fsdp2-noprefetch", "FSDP2 explicit all-gather prefetch of the next block, "
                                  "forward and backward (data parallelism, Table 3 row 5)"),
    "zero3": ("zero3-nooverlap", "DeepSpeed ZeRO-3 overlap_comm: parameter prefetch and "
                                 "gradient reduce beside compute (data parallelism, row 5)"),
}
NO_OVERLAP_STEP = {
    "ddp": "DDP's bucketed all-reduce overlapping backward is PyTorch's default and the "
           "baseline's; DDP has no other overlap to switch",
    "pipeline": "torch.distributed.pipelining's 1F1B fires each send with the next receive "
                "and waits on both: there is no decoupled send/recv (the paper's row 4) to "
                "switch; FSDP2 and ZeRO-3 prefetch are measured in llm_engines",
}
PIPELINE = "pipeline"


def mechanism(name: str, engine: str, paths: dict[str, str] | None, factor: float) -> str:
    """What ladder step ``name`` ran on ``engine``, in words (the report's column): the model's
    code paths as the run recorded them (``GPT.paths``; None for records from before they
    were recorded) and ``factor``, LAMB's batch multiplier."""
    unrecorded = "not recorded (a run from before the records named their code paths)"
    return {
        "baseline": f"unfused ops, AdamW, on {engine}",
        "parallel_block": paths["block"] if paths else unrecorded,
        "sliding_window": paths["attention"] if paths else unrecorded,
        "fused": "SDPA / flash attention, fused LayerNorm and bias + GELU",
        "compile": "torch.compile of each block",
        "overlap": OVERLAP[engine][1] if engine in OVERLAP else NO_OVERLAP_STEP.get(engine, ""),
        "lamb": (f"LAMB at {factor:g}x the batch: {factor:g}x the micro-batches, fewer bubbles"
                 if engine == PIPELINE else
                 f"LAMB at {factor:g}x the batch on {engine} (no pipeline: it only spreads "
                 f"fixed per-step costs)"),
    }[name]


SINGLE = "single"  # the one-process trainer: runs with nprocs 1
# llm_window's systems (suite.experiments.llm_window), timed side by side in one job that writes
# a record per system; "causal" (no window) is the denominator.
WINDOW_EXPERIMENT = "llm_window"
WINDOW_SYSTEMS = ("causal", "window-fused", "window-banded", "window-masked")


@dataclass(frozen=True)
class LlmJob:
    experiment: str
    label: str  # a model size, an ablation step, an optimizer setting
    trainer: str
    nprocs: int  # processes per node
    train: dict[str, Any]  # a complete suite.trainers.config.TrainConfig section
    check_steps: int = 3  # steps gated against the single-process reference before timing
    nnodes: int = 1

    @property
    def gpus_per_node(self) -> int:
        """GPUs the job needs on each node: one per process on cuda, none otherwise ("auto"
        asks for none: a scheduler cannot know what auto will find)."""
        return self.nprocs if self.train.get("device") == "cuda" else 0

    @property
    def gres(self) -> str:
        """The SLURM generic resource of each node (``--gres`` counts per node; ``--gpus``
        would count over all nodes of the job), empty without GPUs."""
        return f"gpu:{self.gpus_per_node}" if self.gpus_per_node else ""

    def path(self, results: str) -> str:
        return f"{results}/{self.experiment}/{self.label}/{self.trainer}.json"


def section(config: dict[str, Any]) -> dict[str, Any]:
    """The validated ``llm`` section with defaults, sizes named in experiments checked."""
    llm = validate({"llm": config.get("llm", {})})["llm"]
    names = sorted(llm["sizes"])
    wanted = [("llm.mfu.sizes", s) for s in llm["mfu"]["sizes"] if llm["mfu"]["enabled"]] + [
        (f"llm.{k}.size", llm[k]["size"]) for k in ("engines", "ablation", "pipeline", "loss")
        if llm[k]["enabled"]]
    for key, name in wanted:
        if name not in llm["sizes"]:
            raise ConfigError(f"{key}: model size {name!r} is not defined; llm.sizes has {names}")
    _check_loss(llm["loss"])
    _check_pipelines(llm)
    return llm


def _check_loss(lo: dict[str, Any]) -> None:
    """The loss sweep's rules the schema cannot state: equal tokens, equal budgets."""
    if not lo["enabled"]:
        return
    if lo["steps"] % lo["lamb_batch_multiplier"]:
        raise ConfigError(f"llm.loss.steps={lo['steps']} must be a multiple of "
                          f"lamb_batch_multiplier={lo['lamb_batch_multiplier']}: LAMB runs "
                          f"steps / multiplier at multiplier x the batch, AdamW's tokens")
    sweep = lo["lrs"]
    if len(sweep["adamw"]) != len(sweep["lamb"]):
        raise ConfigError(f"llm.loss.lrs: adamw {sweep['adamw']} has {len(sweep['adamw'])} "
                          f"learning rates, lamb {sweep['lamb']} {len(sweep['lamb'])}: the two "
                          f"sweeps must be as long (the same budget for each optimizer)")


def _check_pipelines(llm: dict[str, Any]) -> None:
    """Every pipeline run fits its ranks: a stage per rank needs a layer and a micro-batch."""
    stages = llm["nprocs"] * llm["nnodes"]
    piped = [("llm.pipeline", llm["pipeline"]["size"], llm["pipeline"]["micro_batches"])
             if llm["pipeline"]["enabled"] else None,
             ("llm.ablation", llm["ablation"]["size"], [llm["ablation"]["micro_batches"]])
             if llm["ablation"]["enabled"] and llm["ablation"]["trainer"] == PIPELINE else None]
    for key, size, counts in filter(None, piped):
        if llm["sizes"][size]["n_layer"] < stages:
            raise ConfigError(f"{key}.size: {size!r} has n_layer={llm['sizes'][size]['n_layer']}"
                              f"; it must have at least the {stages} pipeline stages' layers "
                              f"(one stage per rank)")
        if min(counts) < stages:
            raise ConfigError(f"{key}.micro_batches: {min(counts)} is fewer than the {stages} "
                              f"stages; 1F1B needs at least one micro-batch per stage")


def train_config(llm: dict[str, Any], size: str, **overrides: Any) -> dict[str, Any]:
    """Base train settings + the size's model + overrides (model fields go into ``model``)."""
    dims = dict(llm["sizes"][size])
    train = {**llm["train"], "device": llm["device"], "compile": False}
    for key in ("seq_len", "global_batch"):
        if key in dims:
            train[key] = dims.pop(key)
    model = {**llm["model"], **dims, "parallel_block": False, "sliding_window": None}
    for key, value in overrides.items():
        (model if key in MODEL_KEYS else train)[key] = value
    model["block_size"] = train["seq_len"]
    train["model"] = model
    return train




def ablation_overrides(llm: dict[str, Any], upto: int) -> dict[str, Any]:
    """The switches of ablation steps 0..upto, applied cumulatively. On the pipeline engine the
    LAMB step's larger batch is more micro-batches of the same size (fewer bubbles)."""
    a = llm["ablation"]
    base = llm["sizes"][a["size"]].get("global_batch", llm["train"]["global_batch"])
    out: dict[str, Any] = {"fused": False, "optimizer": "adamw"}
    if a["trainer"] == PIPELINE:
        out["micro_batches"] = a["micro_batches"]
    for name, _, _ in ABLATION[1:upto + 1]:
        if name == "parallel_block":
            out["parallel_block"] = True
        elif name == "sliding_window":
            out["sliding_window"] = a["sliding_window"]
        elif name == "fused":
            out["fused"] = True
        elif name == "compile":
            out["compile"] = True
        elif name == "lamb":
            out["optimizer"] = "lamb"
            out["global_batch"] = base * a["lamb_batch_multiplier"]
            if a["trainer"] == PIPELINE:
                out["micro_batches"] = a["micro_batches"] * a["lamb_batch_multiplier"]
    return out


def ablation_steps(trainer: str) -> list[tuple[int, str, str]]:
    """(step, name, engine) of each ladder step run on ``trainer``: the steps before the overlap
    step on the engine with its overlap off, the overlap step only where the engine has one."""
    off = OVERLAP.get(trainer, (trainer, ""))[0]
    overlap_at = next(i for i, (name, _, _) in enumerate(ABLATION) if name == "overlap")
    return [(i, name, off if i < overlap_at else trainer)
            for i, (name, _, _) in enumerate(ABLATION)
            if name != "overlap" or trainer in OVERLAP]


def jobs(config: dict[str, Any]) -> dict[str, list[LlmJob]]:
    """Runs per experiment; experiments without runs are left out."""
    llm = section(config)
    if not llm["enabled"]:
        return {}
    n, check = llm["nprocs"], llm["check_steps"]

    def job(experiment: str, label: str, trainer: str, train: dict[str, Any]) -> LlmJob:
        if trainer == SINGLE:  # one process on one node
            return LlmJob(experiment, label, trainer, 1, train, check)
        return LlmJob(experiment, label, trainer, n, train, check, llm["nnodes"])

    out: dict[str, list[LlmJob]] = {}
    if llm["mfu"]["enabled"]:
        out["llm_mfu"] = [job("llm_mfu", size, t, train_config(llm, size))
                          for size in llm["mfu"]["sizes"] for t in llm["mfu"]["trainers"]]
    if llm["engines"]["enabled"]:
        size = llm["engines"]["size"]
        out["llm_engines"] = [job("llm_engines", size, t, train_config(llm, size))
                              for t in llm["engines"]["trainers"]]
    if llm["ablation"]["enabled"]:
        a = llm["ablation"]
        out["llm_ablation"] = [
            job("llm_ablation", f"{i}-{name}", engine,
                train_config(llm, a["size"], **ablation_overrides(llm, i)))
            for i, name, engine in ablation_steps(a["trainer"])]
    if llm["pipeline"]["enabled"]:
        pp = llm["pipeline"]
        out["llm_pipeline"] = [
            job("llm_pipeline", f"m{m}", PIPELINE, train_config(
                llm, pp["size"], micro_batches=m, global_batch=m * pp["micro_batch_size"]))
            for m in pp["micro_batches"]]
    if llm["loss"]["enabled"]:
        lo = llm["loss"]
        size, k = lo["size"], lo["lamb_batch_multiplier"]
        base = llm["sizes"][size].get("global_batch", llm["train"]["global_batch"])
        # no gate (nothing is timed), a held-out loss at the end; the same tokens for both
        common = {"data": "text", "warmup_steps": 0, "eval_batches": lo["eval_batches"]}
        runs = {"adamw": (base, lo["steps"]), "lamb": (base * k, lo["steps"] // k)}
        out["llm_loss"] = [
            LlmJob("llm_loss", f"{opt}-b{batch}-lr{lr:g}-s{seed}", SINGLE, 1, train_config(
                llm, size, optimizer=opt, lr=lr, global_batch=batch, steps=steps, seed=seed,
                **common), 0)
            for opt, (batch, steps) in runs.items() for lr in lo["lrs"][opt]
            for seed in lo["seeds"]]
    return out


@dataclass(frozen=True)
class WindowJob:
    """One llm_window point: every system timed side by side, a record each."""
    point: dict[str, Any]  # seq_len, window, heads, head_dim, batch
    dtype: str
    repeats: int
    device: str

    @property
    def label(self) -> str:
        return f"s{self.point['seq_len']}-w{self.point['window']}"

    def paths(self, results: str) -> list[str]:
        return [f"{results}/{WINDOW_EXPERIMENT}/{self.label}/{s}.json" for s in WINDOW_SYSTEMS]


def window_jobs(config: dict[str, Any]) -> list[WindowJob]:
    """The llm_window points of the config (none when it or llm is off)."""
    llm = section(config)
    w = llm["window"]
    if not (llm["enabled"] and w["enabled"]):
        return []
    common = {k: w[k] for k in ("heads", "head_dim", "batch")}
    return [WindowJob(dict(common, seq_len=s, window=win), w["dtype"], w["repeats"],
                      llm["device"]) for s, win in w["points"]]


def trainers(config: dict[str, Any]) -> list[str]:
    """Every trainer name the config uses (checked against the registry before any job)."""
    return sorted({job.trainer for js in jobs(config).values() for job in js})


# llm_resilience (suite.experiments.llm_resilience): per trainer, three jobs, each writing the
# records its group names (faults: the uninterrupted run and one per fault kind).
RESILIENCE_EXPERIMENT = "llm_resilience"
CHECKPOINT_SYSTEMS = (*(f"checkpoint-{mode}" for mode in MODES), "checkpoint-nvrx-async")


@dataclass(frozen=True)
class ResilienceJob:
    trainer: str
    group: str  # checkpoint, faults or straggler
    nprocs: int
    train: dict[str, Any]  # the run's TrainConfig section
    spec: dict[str, Any]  # the group's settings (llm.resilience.<group>)

    @property
    def systems(self) -> tuple[str, ...]:
        if self.group == "checkpoint":
            return CHECKPOINT_SYSTEMS
        if self.group == "faults":
            return ("fault-none", *(f"fault-{k}" for k in self.spec["kinds"]))
        return ("straggler",)

    def folder(self, results: str) -> str:
        return f"{results}/{RESILIENCE_EXPERIMENT}/{self.trainer}"

    def paths(self, results: str) -> list[str]:
        return [f"{self.folder(results)}/{s}.json" for s in self.systems]


def resilience_jobs(config: dict[str, Any]) -> list[ResilienceJob]:
    """The llm_resilience jobs of the config (none when it or llm is off)."""
    llm = section(config)
    r = llm["resilience"]
    if not (llm["enabled"] and r["enabled"]):
        return []
    ranks = llm["nprocs"]
    for key, name in (("llm.resilience.size", r["size"]),
                      ("llm.resilience.checkpoint.size", r["checkpoint"]["size"])):
        if name not in llm["sizes"]:
            raise ConfigError(f"{key}: model size {name!r} is not defined; llm.sizes has "
                              f"{sorted(llm['sizes'])}")
    f, s = r["faults"], r["straggler"]
    c = r["checkpoint"]
    out = []
    for trainer in r["trainers"]:
        runs = {
            "checkpoint": (train_config(llm, c["size"], steps=c["steps"], warmup_steps=1,
                                        global_batch=c["global_batch"]), c),
            "faults": (train_config(llm, r["size"], steps=f["steps"], warmup_steps=1,
                                    timeout_s=f["timeout_s"]), f),
            "straggler": (train_config(llm, r["size"], steps=s["steps_per_phase"]
                                       * len(s["phases"]), warmup_steps=1, threads=1), s),
        }
        out += [ResilienceJob(trainer, group, c["nprocs"] or ranks if group == "checkpoint"
                              else ranks, train, spec)
                for group, (train, spec) in runs.items()]
    return out
