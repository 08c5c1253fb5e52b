"""A decoder-only transformer as the scale model sees it: its shape, the GEMMs one TP rank runs
per layer, its FLOPs and its parameters.

One description serves the FLOP count (MFU), the GEMM timing (``suite.scale.gemm``), the
parameter count (communication, optimizer, memory): GPT-3 (MHA, GELU MLP of 4h, learned
positions, LayerNorm, dropout) and Llama (GQA, SwiGLU of any width, RoPE, RMSNorm, no dropout,
untied head) are two settings of the same fields.

FLOPs count matmuls only (2 per multiply-add), attention as the dense s x s product, as
Megatron's formula does (``suite.mfu.megatron_flops_per_token`` equals ``flops_per_token`` for
a GPT shape; ``suite.mfu.count_flops`` for any shape). What a causal kernel skips is a matter of
time, not of the model FLOPs MFU counts (``suite.scale.step``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from reference_impl.configs import NORMS

from suite.scale.checks import check_bool, check_choice, check_positive_int



@dataclass(frozen=True)
class Gemm:
    """One (batched) GEMM: ``batch`` products of an M x K by a K x N matrix."""
    name: str
    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer. ``kv_heads`` < ``heads`` is grouped-query attention;
    ``ffn_hidden`` defaults to 4h; ``gated_mlp`` is SwiGLU/GeGLU (three matrices)."""
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = True
    position_embeddings: bool = True  # learned (GPT); False: rotary, no parameters
    dropout: bool = True
    norm: str = "layernorm"
    activation_bytes: int = 2

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "activation_bytes"):
            check_positive_int(name, getattr(self, name))
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        check_positive_int("kv_heads", self.kv_heads)
        check_positive_int("ffn_hidden", self.ffn_hidden)
        if self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be a multiple of heads={self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} must be a multiple of "
                             f"kv_heads={self.kv_heads} (grouped-query attention)")
        for name in ("gated_mlp", "tied_embeddings", "position_embeddings", "dropout"):
            check_bool(name, getattr(self, name))
        check_choice("norm", self.norm, NORMS)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    def check_tp(self, tp: int) -> None:
        """Megatron's TP split: heads, kv heads (or kv heads replicated when fewer than tp)
        and the FFN width over the ranks."""
        if self.heads % tp:
            raise ValueError(f"heads={self.heads} is not a multiple of tp={tp}")
        if self.kv_heads % tp and tp % self.kv_heads:
            raise ValueError(f"kv_heads={self.kv_heads} neither splits over nor divides tp={tp}")
        if self.ffn_hidden % tp:
            raise ValueError(f"ffn_hidden={self.ffn_hidden} is not a multiple of tp={tp}")

    def layer_gemms(self, micro_batch: int, tp: int) -> list[Gemm]:
        """The forward GEMMs of one layer on one TP rank for a micro-batch of b sequences:
        QKV (column-parallel), attention scores and P V (per local head), the attention output
        (row-parallel), the MLP up (and gate) and down projections."""
        tokens, d, s = micro_batch * self.seq_len, self.head_dim, self.seq_len
        heads = self.heads // tp
        kv = max(1, self.kv_heads // tp)
        ffn = self.ffn_hidden // tp
        return [Gemm("qkv", tokens, (heads + 2 * kv) * d, self.hidden),
                Gemm("scores", s, s, d, micro_batch * heads),
                Gemm("context", s, d, s, micro_batch * heads),
                Gemm("attn_out", tokens, self.hidden, heads * d),
                Gemm("mlp_up", tokens, ffn * (self.mlp_matrices - 1), self.hidden),
                Gemm("mlp_down", tokens, self.hidden, ffn)]

    def logits_gemm(self, micro_batch: int, tp: int) -> Gemm:
        """The output layer on one TP rank (vocab-parallel)."""
        return Gemm("logits", micro_batch * self.seq_len, ceil(self.vocab / tp), self.hidden)

    @property
    def flops_per_token(self) -> float:
        """Model FLOPs per trained token (forward + backward = 3 x forward, no recompute, dense
        attention): what MFU counts."""
        return 3 * (self.layers * self.layer_forward_flops_per_token()
                    + self.logits_gemm(1, 1).flops / self.seq_len)

    def layer_forward_flops_per_token(self, attention_only: bool = False) -> float:
        gemms = self.layer_gemms(1, 1)
        if attention_only:
            gemms = [g for g in gemms if g.name in ("scores", "context")]
        return sum(g.flops for g in gemms) / self.seq_len

    def hardware_flops_per_token(self, recompute: str) -> float:
        """FLOPs the GPUs run per token: full recompute adds one forward of every layer,
        selective one forward of attention's score and P V products (the output layer is never
        recomputed). What HFU counts."""
        extra = {"none": 0.0, "full": self.layers * self.layer_forward_flops_per_token(),
                 "selective": self.layers * self.layer_forward_flops_per_token(True)}
        if recompute not in extra:
            raise ValueError(f"recompute={recompute!r} is not one of {list(extra)}")
        return self.flops_per_token + extra[recompute]

    @property
    def layer_params(self) -> float:
        """Weights and biases of one layer (biases only with LayerNorm models, as GPT has them;
        Llama-style RMSNorm models have none)."""
        h, d = self.hidden, self.head_dim
        qkv = h * (self.heads + 2 * self.kv_heads) * d
        mlp = self.mlp_matrices * h * self.ffn_hidden
        weights = qkv + h * h + mlp
        if self.norm == "rmsnorm":
            return float(weights + 2 * h)
        biases = (self.heads + 2 * self.kv_heads) * d + h + self.ffn_hidden * (
            self.mlp_matrices - 1) + h
        return float(weights + biases + 4 * h)

    @property
    def embedding_params(self) -> float:
        """Token (and learned position) embeddings; the output head when untied; the final
        norm (a weight, and a bias for LayerNorm)."""
        h = self.hidden
        positions = self.seq_len * h if self.position_embeddings else 0
        head = 0 if self.tied_embeddings else self.vocab * h
        norm = h if self.norm == "rmsnorm" else 2 * h
        return float(self.vocab * h + positions + head + norm)

    @property
    def n_params(self) -> float:
        return self.layers * self.layer_params + self.embedding_params
