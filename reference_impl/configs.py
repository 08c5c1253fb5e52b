"""The GPT and Virtual Width Network configs: plain frozen dataclasses, no torch, so that a
harness can check a run's settings (and plan its jobs) without importing a model.
``reference_impl.gpt`` and ``reference_impl.vwn`` build the models from them."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

MLPS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
CHECKPOINTING = ("none", "selective", "full")


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50304
    n_layer: int = 12
    n_embd: int = 768
    n_head: int = 12
    n_kv_head: int | None = None  # GQA; None = n_head (multi-head attention)
    mlp: str = "gelu"
    ffn_dim: int | None = None  # None: 4*n_embd (gelu) or 2/3 of that rounded up to 64 (swiglu)
    norm: str = "layernorm"
    rope: bool = False  # False: learned absolute position embeddings
    tied_embeddings: bool = True
    block_size: int = 1024
    dropout: float = 0.0
    # MegaScale's switches
    parallel_block: bool = False
    sliding_window: int | None = None
    fused: bool = True
    checkpointing: str = "none"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_embd", "n_head", "block_size"):
            _check_positive_int(name, getattr(self, name))
        for name in ("n_kv_head", "ffn_dim", "sliding_window"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        for name, value, valid in (("mlp", self.mlp, MLPS), ("norm", self.norm, NORMS),
                                   ("checkpointing", self.checkpointing, CHECKPOINTING)):
            if value not in valid:
                raise ValueError(f"{name}={value!r} is not one of {valid}")
        for name in ("rope", "tied_embeddings", "parallel_block", "fused"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout!r} must be in [0, 1)")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")
        if self.n_head % self.kv_heads:
            divisors = [d for d in range(1, self.n_head + 1) if self.n_head % d == 0]
            raise ValueError(f"n_kv_head={self.n_kv_head} must divide n_head={self.n_head} "
                             f"(valid: {divisors})")
        if self.rope and self.head_dim % 2:
            raise ValueError(f"rope needs an even head_dim; n_embd={self.n_embd} / "
                             f"n_head={self.n_head} = {self.head_dim}")

    # The plain shape attributes (what an MFU counter reads), with defaults resolved.
    @property
    def layers(self) -> int:
        return self.n_layer

    @property
    def width(self) -> int:
        return self.n_embd

    @property
    def heads(self) -> int:
        return self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def ffn_hidden(self) -> int:
        if self.ffn_dim is not None:
            return self.ffn_dim
        if self.mlp == "gelu":
            return 4 * self.n_embd
        # SwiGLU has three matrices instead of two: 2/3 of 4*width keeps the parameter count,
        # rounded up to a multiple of 64 for GEMM-friendly shapes (as LLaMA does)
        return 64 * math.ceil(8 * self.n_embd // 3 / 64)

    @property
    def vocab(self) -> int:
        return self.vocab_size

    @property
    def tied(self) -> bool:
        return self.tied_embeddings


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")


@dataclass(frozen=True)
class VWNConfig(GPTConfig):
    """A ``GPTConfig`` (``n_embd`` = backbone width D) plus the virtual-width knobs.

    ``m``, ``n``: D is cut into m segments and the wide state has n of them, r = n/m (fractions
    allowed: (2, 3) is 1.5x). ``dynamic``: DGHC instead of static GHC. ``mtp``: next-2-token
    module, its loss weighted by ``mtp_weight``. ``ghc_trainable=False`` keeps every GHC at its
    initialization (buffers, not parameters): with ``m == n`` each is then exactly the residual
    add, which makes the r = 1 baseline of the experiments a plain pre-norm transformer with the
    same embedding, output path and MTP module as the wide models. ``tied_embeddings`` defaults
    to False here: the embedding is D' wide, the head D.
    """

    tied_embeddings: bool = False
    m: int = 1
    n: int = 1
    dynamic: bool = False
    mtp: bool = False
    mtp_weight: float = 1.0
    ghc_trainable: bool = True  # False: A, B stay at the init (with m == n: the plain residual)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("m", "n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive int")
        if self.n < self.m:
            raise ValueError(f"n={self.n} must be >= m={self.m} (the expansion r = n/m >= 1)")
        if self.n_embd % self.m:
            divisors = [d for d in range(1, self.n_embd + 1) if self.n_embd % d == 0]
            raise ValueError(f"m={self.m} must divide n_embd={self.n_embd} (valid m: {divisors})")
        for name in ("dynamic", "mtp", "ghc_trainable"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if not (isinstance(self.mtp_weight, (int, float)) and self.mtp_weight >= 0):
            raise ValueError(f"mtp_weight={self.mtp_weight!r} must be a number >= 0")
        if self.dynamic and not self.ghc_trainable:
            raise ValueError("dynamic=True needs ghc_trainable=True (a frozen GHC is static)")
        if self.parallel_block:
            raise ValueError("parallel_block=True is not supported: VWN puts one GHC around "
                             "each of attention and MLP in turn (use parallel_block=False)")
        if self.tied_embeddings and self.m != self.n:
            raise ValueError(f"tied_embeddings=True needs embedding width D'={self.wide_embd} "
                             f"equal to the head width D={self.n_embd}, i.e. m == n; got "
                             f"(m, n)=({self.m}, {self.n}) (use tied_embeddings=False)")

    @property
    def segment(self) -> int:
        """s = D / m, the size of every segment of both states."""
        return self.n_embd // self.m

    @property
    def wide_embd(self) -> int:
        """D' = (n / m) D = n s."""
        return self.n * self.segment

    @property
    def expansion(self) -> float:
        """r = n / m."""
        return self.n / self.m

    def backbone(self) -> GPTConfig:
        """The plain GPT with this backbone: the r = 1 baseline of the paper's comparisons."""
        return GPTConfig(**{f.name: getattr(self, f.name) for f in fields(GPTConfig)})
