"""Which training runs the ``llm`` config section asks for, each as a complete train config.

The workflow has one job per run: ``results/<machine>/<experiment>/<label>/<trainer>.json`` (plus
its ``.steps.jsonl`` step log). Everything a run needs is in its ``train`` dict, so a job depends
on nothing but the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suite.config import ConfigError, validate
from suite.trainers.config import MODEL_KEYS  # GPTConfig's fields: model, not train

# MegaScale's ablation (Table 3) as switches of this suite, in the order. Each step keeps
# the previous ones. ``paper_steps``: Table 3 rows whose techniques this step corresponds to (the
# paper's gain for the step is the sum of theirs); the compile step has no row in the paper.
ABLATION: list[tuple[str, str, tuple[int, ...]]] = [
    ("baseline", "baseline (unfused, no overlap, AdamW)", (0,)),
    ("parallel_block", "+ parallel block", (1,)),
    ("sliding_window", "+ sliding window", (2,)),
    ("fused", "+ fused operators", (6,)),
    ("compile", "+ torch.compile", ()),
    ("overlap", "+ communication overlap", (3, 4, 5)),
    ("lamb", "+ LAMB, larger batch", (8,)),
]
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
        (f"llm.{k}.size", llm[k]["size"]) for k in ("engines", "ablation", "loss")
        if llm[k]["enabled"]]
    for key, name in wanted:
        if name not in llm["sizes"]:
            raise ConfigError(f"{key}: model size {name!r} is not defined; llm.sizes has {names}")
    return llm


def train_config(llm: dict[str, Any], size: str, **overrides: Any) -> dict[str, Any]:
    """Base train settings + the size's model + overrides (model fields go into ``model``)."""
    dims = dict(llm["sizes"][size])
    train = {**llm["train"], "device": llm["device"], "compile": False, "ddp_overlap": True}
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
    """The switches of ablation steps 0..upto, applied cumulatively."""
    a = llm["ablation"]
    out: dict[str, Any] = {"fused": False, "ddp_overlap": False, "optimizer": "adamw"}
    for name, _, _ in ABLATION[1:upto + 1]:
        if name == "parallel_block":
            out["parallel_block"] = True
        elif name == "sliding_window":
            out["sliding_window"] = a["sliding_window"]
        elif name == "fused":
            out["fused"] = True
        elif name == "compile":
            out["compile"] = True
        elif name == "overlap":
            out["ddp_overlap"] = True
        elif name == "lamb":
            out["optimizer"] = "lamb"
            base = llm["sizes"][a["size"]].get("global_batch", llm["train"]["global_batch"])
            out["global_batch"] = base * a["lamb_batch_multiplier"]
    return out


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
            job("llm_ablation", f"{i}-{name}", a["trainer"],
                train_config(llm, a["size"], **ablation_overrides(llm, i)))
            for i, (name, _, _) in enumerate(ABLATION)]
    if llm["loss"]["enabled"]:
        lo = llm["loss"]
        size, k = lo["size"], lo["lamb_batch_multiplier"]
        base = llm["sizes"][size].get("global_batch", llm["train"]["global_batch"])
        # no gate (nothing is timed), a held-out loss at the end; the same tokens for both
        common = {"data": "text", "warmup_steps": 0, "eval_batches": lo["eval_batches"]}
        out["llm_loss"] = [
            LlmJob("llm_loss", f"adamw-b{base}", SINGLE, 1, train_config(
                llm, size, optimizer="adamw", lr=lo["lr"], steps=lo["steps"], **common), 0),
            LlmJob("llm_loss", f"lamb-b{base * k}", SINGLE, 1, train_config(
                llm, size, optimizer="lamb", lr=lo["lamb_lr"], global_batch=base * k,
                steps=max(1, lo["steps"] // k), **common), 0),
        ]
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
