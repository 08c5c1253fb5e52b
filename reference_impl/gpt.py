"""Decoder-only GPT for the MegaScale (and later Virtual Width Networks) training experiments.

One file, math in sight, in the spirit of nanoGPT's ``model.py``. The architecture knobs (GQA,
GELU or SwiGLU MLP, LayerNorm or RMSNorm, RoPE or learned positions, tied embeddings) and
MegaScale's algorithmic switches are fields of ``GPTConfig``; each switch is independent:

- ``parallel_block``: attention and MLP read the same normed input, ``x + attn(ln x) + mlp(ln x)``
  (one norm per block), and their input GEMMs are one (Q/K/V and MLP-up weights stacked);
- ``sliding_window``: token i attends to tokens ``i - window + 1 .. i`` (always causal), at a
  cost that grows with ``seq x window`` (``kernels.window_attention``);
- ``fused``: attention through ``F.scaled_dot_product_attention`` and the norms / bias+GELU through
  one kernel each (``reference_impl.kernels.fused``), versus the explicit unfused math;
- ``checkpointing``: ``"full"`` recomputes each whole block in backward, ``"selective"`` only the
  attention core ``(q, k, v) -> context`` (Korthikanti et al. 2022), the part whose activations
  grow with seq^2 but cost little to recompute.

``torch.compile`` is not a switch here: the trainer applies it to the model.

Each ``Block`` exposes its sub-layers without their residual add, ``block.attn_branch(x)`` and
``block.mlp_branch(x)``, so a Virtual Width Network can put its own residual around them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from reference_impl.configs import GPTConfig
from reference_impl.kernels.fused import add_bias_residual_layernorm, bias_gelu
from reference_impl.kernels.window_attention import (banded_attention, window_attention,
                                                     window_mask)

ROPE_BASE = 10000.0
NORM_EPS = 1e-5
INIT_STD = 0.02


def _epilogue_backend(*tensors: torch.Tensor) -> str:
    """Backend for ``kernels.fused``: the rule of its ``"auto"`` (Triton on CUDA, torch on CPU, so
    never the slow Triton interpreter on CPU), except while autograd records: the Triton epilogues
    have no backward and would silently cut the gradient, so training runs their torch form."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "torch"
    return "triton" if tensors[0].is_cuda else "torch"


# ----------------------------------------------------------------------------- norms


class Norm(nn.Module):
    """LayerNorm (weight and bias) or RMSNorm (weight only), fused or as explicit math."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.kind, self.fused = cfg.norm, cfg.fused
        self.weight = nn.Parameter(torch.ones(cfg.n_embd))
        self.bias = nn.Parameter(torch.zeros(cfg.n_embd)) if cfg.norm == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "layernorm":
            if self.fused:
                return _fused_layer_norm(x, self.weight, self.bias)
            mean = x.mean(-1, keepdim=True)
            var = (x - mean).pow(2).mean(-1, keepdim=True)  # biased, as LayerNorm
            return (x - mean) * torch.rsqrt(var + NORM_EPS) * self.weight + self.bias
        if self.fused:
            return F.rms_norm(x, x.shape[-1:], self.weight, NORM_EPS)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight


def _fused_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    backend = _epilogue_backend(x, weight, bias)
    if backend == "torch":  # what kernels.fused runs on this path, minus a residual we lack
        return F.layer_norm(x, x.shape[-1:], weight, bias, NORM_EPS)
    # A pre-LN block has no residual to fold in: a zero row broadcast with stride 0 costs no
    # memory traffic in the kernel.
    zero = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device).expand_as(x)
    return add_bias_residual_layernorm(x, None, zero, weight, bias, NORM_EPS, backend=backend)


# ----------------------------------------------------------------------------- attention


def rope_cos_sin(seq_len: int, head_dim: int,
                 device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables ``(seq, head_dim)`` of rotary embeddings, computed in fp32 so that the
    angles stay exact whatever dtype the model runs in."""
    inv_freq = ROPE_BASE ** (-torch.arange(0, head_dim, 2, device=device,
                                           dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)  # the two halves rotate as pairs (i, i + d/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x_i, x_{i+d/2})`` of ``x (B, H, T, d)`` by its position's angle."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


class CausalSelfAttention(nn.Module):
    """Causal (optionally sliding-window) multi-head attention with grouped K/V heads.
    ``own_input=False`` (a parallel block): the block computes the Q/K/V projection in its fused
    input GEMM and calls ``attend``."""

    def __init__(self, cfg: GPTConfig, own_input: bool = True):
        super().__init__()
        self.cfg = cfg
        self.n_head, self.n_kv_head, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        # Q, K, V in one GEMM: n_head query heads, n_kv_head key and value heads
        self.in_dim = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
        self.qkv = nn.Linear(cfg.n_embd, self.in_dim) if own_input else None
        self.proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.n_embd)  # residual projection
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(self.qkv(x))

    def attend(self, qkv: torch.Tensor) -> torch.Tensor:
        """Attention from the projected ``(B, T, in_dim)`` Q/K/V, through the output
        projection."""
        B, T, _ = qkv.shape
        q, k, v = qkv.split([self.n_head * self.head_dim,
                             self.n_kv_head * self.head_dim,
                             self.n_kv_head * self.head_dim], dim=-1)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, d)
        k = k.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)  # (B, H_kv, T, d)
        v = v.view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)
        if self.cfg.rope:
            cos, sin = rope_cos_sin(T, self.head_dim, qkv.device)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.cfg.checkpointing == "selective" and torch.is_grad_enabled():
            y = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            y = self.core(q, k, v)
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)
        return self.resid_dropout(self.proj(y))

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T / sqrt(d) + mask) v: the part selective checkpointing recomputes. A
        window computes its band only (``kernels.window_attention``): fused, the flash kernel's
        triangles (FlexAttention on CUDA); unfused, blocks of explicit math."""
        T, window = q.shape[-2], self.cfg.sliding_window
        dropout = self.cfg.dropout if self.training else 0.0
        if window is not None and window >= T:
            window = None  # the band covers the whole causal triangle
        if window is not None and dropout == 0.0:
            groups = self.n_head // self.n_kv_head
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
            return (window_attention if self.cfg.fused else banded_attention)(q, k, v, window)
        if self.cfg.fused:  # (a window here only with dropout, which the band kernels lack)
            mask = None if window is None else window_mask(T, window, q.device)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=mask is None,
                enable_gqa=self.n_kv_head != self.n_head)
        groups = self.n_head // self.n_kv_head
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # (B, H, T, T)
        scores = scores.masked_fill(~window_mask(T, window, q.device), float("-inf"))
        probs = F.dropout(torch.softmax(scores, dim=-1), dropout, self.training)
        return probs @ v


# ----------------------------------------------------------------------------- MLP


class MLP(nn.Module):
    """``down(gelu(up x))``, or SwiGLU ``down(silu(gate x) * up x)``. ``own_input=False`` (a
    parallel block): the block computes ``up x`` in its fused input GEMM and calls
    ``activate_down``."""

    def __init__(self, cfg: GPTConfig, own_input: bool = True):
        super().__init__()
        self.kind, self.fused = cfg.mlp, cfg.fused
        # swiglu: gate and up
        self.in_dim = 2 * cfg.ffn_hidden if cfg.mlp == "swiglu" else cfg.ffn_hidden
        self.up = nn.Linear(cfg.n_embd, self.in_dim) if own_input else None
        self.down = nn.Linear(cfg.ffn_hidden, cfg.n_embd)  # residual projection
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "gelu" and self.fused:  # the GEMM without its bias: see activate_down
            return self.activate_down(F.linear(x, self.up.weight), self.up.bias)
        return self.activate_down(self.up(x))

    def activate_down(self, z: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The activation and the down projection of ``z = x up^T`` (plus ``bias`` when given:
        fused GELU adds it in its epilogue, bias + GELU as one kernel)."""
        if self.kind == "gelu" and self.fused and bias is not None:
            h = bias_gelu(z, bias, backend=_epilogue_backend(z, bias))
        else:
            z = z if bias is None else z + bias
            if self.kind == "gelu":
                h = (F.gelu(z) if self.fused else
                     0.5 * z * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0)))))  # exact GELU
            else:
                gate, up = z.chunk(2, dim=-1)
                h = (F.silu(gate) if self.fused else gate * torch.sigmoid(gate)) * up
        return self.dropout(self.down(h))


# ----------------------------------------------------------------------------- block and model


def embed(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    """Token (+ learned position) embeddings after dropout, for any model with ``config``,
    ``wte``, ``wpe`` (None with RoPE) and ``drop``; refuses sequences beyond ``block_size``."""
    T = idx.shape[1]
    if T > model.config.block_size:
        raise ValueError(f"sequence length {T} exceeds block_size={model.config.block_size}")
    x = model.wte(idx)
    if model.wpe is not None:
        x = x + model.wpe(torch.arange(T, device=idx.device))
    return model.drop(x)


class Block(nn.Module):
    """Pre-norm transformer block. ``forward`` adds the residuals; the branches alone are
    ``attn_branch`` and ``mlp_branch``.

    A parallel block (PaLM, MegaScale) reads one norm's output into both branches, so their
    input GEMMs are one: ``in_proj`` holds the Q/K/V and MLP-up weights stacked, one GEMM of
    width ``qkv + ffn`` instead of two narrower ones."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        parallel = cfg.parallel_block
        self.norm1 = Norm(cfg)
        self.attn = CausalSelfAttention(cfg, own_input=not parallel)
        self.norm2 = None if parallel else Norm(cfg)  # parallel: one norm feeds both
        self.mlp = MLP(cfg, own_input=not parallel)
        self.in_proj = (nn.Linear(cfg.n_embd, self.attn.in_dim + self.mlp.in_dim)
                        if parallel else None)

    def _fused_input(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                     torch.Tensor, torch.Tensor]:
        """The parallel block's one input GEMM (no bias) on the shared norm's output, split into
        the Q/K/V and MLP-up parts, with their biases."""
        z = F.linear(h, self.in_proj.weight)
        split = [self.attn.in_dim, self.mlp.in_dim]
        z_attn, z_mlp = z.split(split, dim=-1)
        b_attn, b_mlp = self.in_proj.bias.split(split)
        return z_attn, b_attn, z_mlp, b_mlp

    def attn_branch(self, x: torch.Tensor) -> torch.Tensor:
        """attn(norm1(x)), without the residual."""
        if self.in_proj is None:
            return self.attn(self.norm1(x))
        z_attn, b_attn, _, _ = self._fused_input(self.norm1(x))
        return self.attn.attend(z_attn + b_attn)

    def mlp_branch(self, x: torch.Tensor) -> torch.Tensor:
        """mlp(norm2(x)) (norm1 in a parallel block), without the residual."""
        if self.in_proj is None:
            return self.mlp(self.norm2(x))
        _, _, z_mlp, b_mlp = self._fused_input(self.norm1(x))
        return self.mlp.activate_down(z_mlp, b_mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.checkpointing == "full" and torch.is_grad_enabled():
            return checkpoint(self._residual_forward, x, use_reentrant=False)
        return self._residual_forward(x)

    def _residual_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.in_proj is not None:  # x + attn(ln x) + mlp(ln x): one norm, one input GEMM
            z_attn, b_attn, z_mlp, b_mlp = self._fused_input(self.norm1(x))
            return x + self.attn.attend(z_attn + b_attn) + self.mlp.activate_down(z_mlp, b_mlp)
        x = x + self.attn_branch(x)
        return x + self.mlp_branch(x)


class GPT(nn.Module):
    """Token ids ``(B, T)`` -> next-token logits ``(B, T, vocab)`` (and the mean loss)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = None if cfg.rope else nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = Norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        # GPT-2: the projections that write into the residual stream are scaled down so that
        # the stream's variance does not grow with depth
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp.down):
                nn.init.normal_(proj.weight, std=INIT_STD / math.sqrt(2 * cfg.n_layer))
        if cfg.tied_embeddings:
            self.lm_head.weight = self.wte.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``targets`` ``(B, T)`` of next tokens, -1 where no loss counts."""
        x = embed(self, idx)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
        return logits, loss

    def paths(self, seq_len: int) -> dict[str, str]:
        """Which code runs the attention and the blocks at ``seq_len``, in words (records keep
        it: what a run measured, whatever the code does later)."""
        cfg = self.config
        w = cfg.sliding_window
        if w is not None and w < seq_len:
            attention = (f"window {w}, the band only: " + (
                "flash-kernel triangles on CPU, FlexAttention on CUDA" if cfg.fused
                else "blocks of explicit math"))
        else:
            attention = "causal, " + ("SDPA" if cfg.fused else "explicit math, masked")
        block = ("parallel: one norm, Q/K/V and MLP-up as one GEMM" if cfg.parallel_block
                 else "sequential: attention then MLP")
        return {"attention": attention, "block": block}

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count, a tied matrix once. ``non_embedding`` keeps only the weights that do
        arithmetic (the 6N of a FLOP count): it drops the position table and the token table,
        both mere lookups, except a tied token table, which is also the output GEMM (nanoGPT's
        rule)."""
        n = sum(p.numel() for p in self.parameters())  # parameters() yields a tied tensor once
        if non_embedding:
            if self.wpe is not None:
                n -= self.wpe.weight.numel()
            if not self.config.tied_embeddings:
                n -= self.wte.weight.numel()
        return n
