"""The LLM training run's config (``TrainConfig``): what a run section may hold and how it is
checked. Torch-free: the workflow plans runs from it (``MODEL_KEYS``), the engines are set up
with it, and the run (``suite.experiments.llm_train``) parses its section into it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from reference_impl.configs import GPTConfig
from suite.config import ConfigError, validate_section
from suite.mfu import FlopCount, TransformerShape, count_flops

# a section's types, ranges and choices (optimizer, dtype, data, device) are the schema's
# $defs.llm_run (suite.config.validate_section); OPTIMIZERS is what the engines build
OPTIMIZERS = ("adamw", "lamb")
# how suite.launch.command starts an engine's ranks (Trainer.launcher)
LAUNCHERS = ("torchrun", "deepspeed", "single")
# GPTConfig fields a section may set; dropout is left out: each rank would draw its own masks,
# and no engine could match the single-process reference.
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(GPTConfig) if f.name != "dropout")
DEFAULT_MODEL = {"n_layer": 4, "n_embd": 256, "n_head": 4, "vocab_size": 256}


@dataclass(frozen=True)
class TrainConfig:
    """The ``llm_train`` config section. ``model`` holds GPTConfig fields; ``block_size``
    defaults to ``seq_len``. ``global_batch`` is sequences per optimizer step over all ranks;
    ``steps`` counts the logged steps including ``warmup_steps``. ``threads`` per rank, 0 = the
    usable cores // world size. The learning rate is constant (no schedule)."""
    model: GPTConfig = field(default_factory=lambda: GPTConfig(**DEFAULT_MODEL, block_size=256))
    seq_len: int = 256
    global_batch: int = 8
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # 0 = no clipping (the norm is still logged)
    steps: int = 20
    warmup_steps: int = 5
    dtype: str = "fp32"
    data: str = "synthetic"
    seed: int = 0
    compile: bool = False
    ddp_overlap: bool = True  # ddp: all-reduce overlapping backward, or after it
    bucket_cap_mb: float = 25.0  # ddp bucket size (both overlap modes)
    micro_batches: int = 0  # pipeline: micro-batches per step, 0 = one per stage
    threads: int = 0
    device: str = "auto"
    timeout_s: float = 600.0  # collective timeout: how long a rank waits for a failed peer
    eval_batches: int = 0  # held-out batches evaluated after training (text: the held-out split)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        # mapping, unknown keys, seq_len and betas before they are used below
        validate_section(d, "llm_run", "llm_train")
        kw = dict(d)
        model = dict(DEFAULT_MODEL, **kw.pop("model", {}) or {})
        bad = sorted(set(model) - set(MODEL_KEYS))
        if bad:
            raise ConfigError(f"llm_train.model: unknown key(s) {bad}; valid: {list(MODEL_KEYS)}")
        model.setdefault("block_size", kw.get("seq_len", cls.seq_len))
        try:
            kw["model"] = GPTConfig(**model)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"llm_train.model: {e}") from None
        if "betas" in kw:
            kw["betas"] = tuple(float(b) for b in kw["betas"])
        return cls(**kw)

    def __post_init__(self) -> None:
        # types, ranges and choices: the schema's $defs.llm_run (the fields it shares with the
        # config's llm.train are that section's); by hand only the rules between fields
        validate_section({f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                          if f.name != "model"}, "llm_run", "llm_train")
        if self.warmup_steps >= self.steps:
            raise ConfigError(f"llm_train.warmup_steps={self.warmup_steps} must be < "
                              f"steps={self.steps}: no step would be measured")
        if self.seq_len > self.model.block_size:
            raise ConfigError(f"llm_train.seq_len={self.seq_len} exceeds "
                              f"model.block_size={self.model.block_size}")
        if self.data == "text" and self.model.vocab_size < 256:
            raise ConfigError(f"llm_train.data='text' is byte-tokenized (ids 0..255) but "
                              f"model.vocab_size={self.model.vocab_size} < 256")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["model"] = {k: v for k, v in dataclasses.asdict(self.model).items() if k in MODEL_KEYS}
        d["betas"] = list(self.betas)
        return d

    def shape(self) -> TransformerShape:
        m = self.model
        return TransformerShape(layers=m.layers, hidden=m.width, heads=m.heads,
                                kv_heads=m.kv_heads, head_dim=m.head_dim,
                                ffn_hidden=m.ffn_hidden, mlp=m.mlp, vocab=m.vocab,
                                seq_len=self.seq_len, sliding_window=m.sliding_window,
                                tied_embeddings=m.tied)

    def flops(self) -> FlopCount:
        # the reference GPT checkpoints with torch's non-reentrant checkpoint, which does not
        # re-run a block's MLP output projection (HFU counts what the hardware runs)
        return count_flops(self.shape(), causal_halving=False, include_embeddings=True,
                           recompute=self.model.checkpointing, recompute_early_stop=True)

    def size_label(self) -> str:
        m = self.model
        return f"gpt-{m.n_layer}L-{m.n_embd}d-{m.n_head}h"
