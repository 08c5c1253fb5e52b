"""Virtual Width Networks (Seed 2025, arXiv 2511.11238): a wide hidden state, a narrow backbone.

The token embedding has width ``D' = (n/m) D`` while every attention and MLP sub-layer still runs
at the backbone width ``D``. Between sub-layers the state lives at width ``D'``; a Generalized
Hyper-Connection (GHC) replaces each residual add and moves between the two widths.

Notation (one token; everything is applied position-wise). ``s = D/m`` is the segment size.
The over-width state ``H' in R^{n x s}`` is ``D'`` viewed as n segments, the backbone vector
``x in R^{m x s}`` is ``D`` viewed as m segments. Each sub-layer ``l`` (``T_l`` = ``attn_branch``
or ``mlp_branch`` of a ``gpt.Block``, pre-norm included, residual excluded) has
``A_l = [A_in | A_res]`` (``A_in in R^{n x m}``, ``A_res in R^{n x n}``) and ``B_l in R^{m x n}``:

    x      = A_in^T H'_{l-1}                              (m segments: the backbone input, width D)
    H'_l   = B_l^T T_l(x) + A_res^T H'_{l-1}              (n segments again, width D')

i.e. ``x[j] = sum_i A_in[i, j] H'[i]`` and
``H'_l[i] = sum_j B[j, i] T(x)[j] + sum_k A_res[k, i] H'[k]``.

Initialization (the paper's): ``A_in[i, j] = 1 iff i == j < m`` (the backbone reads the first m
segments), ``A_res = I_n``, ``B[j, i] = 1 iff i % m == j`` (segment i of the wide state receives
output segment ``i mod m``: the output is tiled cyclically over the n segments). With ``m == n``
(r = 1) that is ``A_in = B = A_res = I``, and the GHC is exactly the residual ``x + T(x)``.

Dynamic GHC (DGHC), in the Hyper-Connections form. Our exact equations, per position:

    N      = RMSNorm(H')                row-wise: each segment normalized over its s features,
                                        no affine weight (the projections below absorb it)
    A(H')  = A + s_A * tanh(N W_A / tau)     W_A in R^{s x (m+n)}: row i of A from segment i
    B(H')^T = B^T + s_B * tanh(N W_B / tau)  W_B in R^{s x m}:   column i of B from segment i
    tau    = sqrt(s) = sqrt(D/m)

Choices the paper leaves open, made here: the 1/tau sits inside the tanh; ``W_A``, ``W_B`` are
shared by all segments (as HC shares its projections over its n streams), so a row of A (a column
of B) differs between segments only through that segment's content; ``s_A``, ``s_B`` are two
learned scalars (HC's ``s_alpha``, ``s_beta``), initialized to 1; ``W_A``, ``W_B`` start at 0, so
a dynamic GHC computes exactly the static one at initialization. (Consequence: at init the
gradient reaching ``s_A``, ``s_B`` is exactly 0, since ``tanh(0) = 0``; it is nonzero once W
moves.) The dynamic matrices are computed in the state's dtype; elementwise work (norm, tanh) is
not in the FLOP counts of ``vwn_cost``.

Output path: ``logits = head(norm_f(W_reduce(GroupNorm_n(H'_L))))``, GroupNorm with n groups (one
per segment) and a per-channel affine over D', ``W_reduce: D' -> D`` without bias. Because of
that extra GroupNorm + W_reduce, a VWN with r = 1 is *not* the plain GPT end to end (``norm_f``
of a GroupNorm output differs from ``norm_f`` alone by the norms' eps); it is the plain GPT up to
the output path, which the tests check exactly.

Next-2-token prediction (``mtp=True``), as the paper specifies it: at the wide width, mixed by
a block-wise shared linear at the cost of r = 1, then one VWN layer. Our equations, for positions
t = 0 .. T-2, with ``H'_t`` the wide state after the last layer at t (width D', n segments of s)
and ``e_{t+1}`` the wide token embedding of token t+1 (the shared table, no position embedding):

    Z_t[i] = W_mtp [Norm_s(H'_t[i]) ; Norm_s(e_{t+1}[i])]    for each segment i = 1..n;
                                                            W_mtp: 2s -> s, no bias, shared
    Z      = VWNLayer(Z)                                    GHCs around one gpt.Block
    logits2_t = head(norm_f(W_reduce(GroupNorm_n(Z_t))))    the main model's output path, shared

    loss = CE(next token) + mtp_weight * CE(token after next)   (mtp_weight = 1: summed)

The block is one segment (s = D/m features), the unit every GHC moves: the linear and its two
norms are shared by the n segments, so their parameters are the same at every r of one m (those
of the r = 1 model), and their FLOPs grow with n as the wide state does. (A block of D features
would need n to be a multiple of m; the configs run r = 1.5.) The VWN layer's GHCs cost what a
backbone layer's do; the r = 1 baseline's are frozen at the identity, as in its backbone.

Embeddings: token (and, without RoPE, position) tables have width D'. The head cannot be tied to
a table of another width, so ``tied_embeddings=True`` needs ``m == n``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from reference_impl.configs import GPTConfig, VWNConfig
from reference_impl.gpt import INIT_STD, NORM_EPS, GPT, Block, Norm, embed


# ----------------------------------------------------------------------------- GHC


def ghc_init(m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's initial ``A = [A_in | A_res]`` (n x (m+n)) and ``B`` (m x n)."""
    A = torch.zeros(n, m + n)
    A[:m, :m] = torch.eye(m)  # A_in[i, j] = 1 iff i == j < m
    A[:, m:] = torch.eye(n)  # A_res = I
    B = torch.zeros(m, n)
    B[torch.arange(n) % m, torch.arange(n)] = 1.0  # B[j, i] = 1 iff i % m == j
    return A, B


class GHC(nn.Module):
    """One Generalized Hyper-Connection around one sub-layer (equations in the module doc)."""

    def __init__(self, m: int, n: int, segment: int, dynamic: bool = False,
                 trainable: bool = True):
        super().__init__()
        if dynamic and not trainable:
            raise ValueError("dynamic=True needs trainable=True (a frozen GHC is static)")
        self.m, self.n, self.segment, self.dynamic = m, n, segment, dynamic
        A, B = ghc_init(m, n)
        if trainable:
            self.A = nn.Parameter(A)  # static; no weight decay (see param_groups)
            self.B = nn.Parameter(B)
        else:
            self.register_buffer("A", A)
            self.register_buffer("B", B)
        if dynamic:
            self.W_A = nn.Parameter(torch.zeros(segment, m + n))
            self.W_B = nn.Parameter(torch.zeros(segment, m))
            self.s_A = nn.Parameter(torch.ones(()))
            self.s_B = nn.Parameter(torch.ones(()))
        self.tau = math.sqrt(segment)
        # A frozen GHC with m == n is the plain residual add; skip its identity matmuls so the
        # r = 1 baseline also costs what a plain transformer costs
        self.identity = not trainable and m == n

    def matrices(self, H: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``A`` and ``B^T``, per position ``(..., n, m+n)`` and ``(..., n, m)`` when dynamic,
        else the static ``(n, m+n)`` and ``(n, m)``. ``H`` is the state as ``(..., n, s)``."""
        A, Bt = self.A.to(H.dtype), self.B.t().to(H.dtype)
        if not self.dynamic:
            return A, Bt
        N = F.rms_norm(H, (self.segment,), eps=NORM_EPS)
        dA = torch.tanh(N @ self.W_A.to(H.dtype) / self.tau)
        dB = torch.tanh(N @ self.W_B.to(H.dtype) / self.tau)
        return A + self.s_A.to(H.dtype) * dA, Bt + self.s_B.to(H.dtype) * dB

    def forward(self, h: torch.Tensor,
                layer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``h (..., D')`` -> ``(..., D')``; ``layer`` maps ``(..., D)`` to ``(..., D)``."""
        m, n, s = self.m, self.n, self.segment
        if self.identity:  # frozen at the init with m == n: A_in = B = A_res = I
            return h + layer(h)
        H = h.unflatten(-1, (n, s))
        A, Bt = self.matrices(H)
        A_in, A_res = A[..., :m], A[..., m:]
        x = torch.einsum("...ij,...is->...js", A_in, H)  # A_in^T H': (..., m, s)
        y = layer(x.flatten(-2)).unflatten(-1, (m, s))
        out = torch.einsum("...ij,...js->...is", Bt, y)  # B^T T(x): (..., n, s)
        out = out + torch.einsum("...ki,...ks->...is", A_res, H)  # + A_res^T H'
        return out.flatten(-2)


class VWNLayer(nn.Module):
    """A ``gpt.Block`` whose two residual adds are GHCs."""

    def __init__(self, cfg: VWNConfig):
        super().__init__()
        self.block = Block(cfg)
        self.ghc_attn = GHC(cfg.m, cfg.n, cfg.segment, cfg.dynamic, cfg.ghc_trainable)
        self.ghc_mlp = GHC(cfg.m, cfg.n, cfg.segment, cfg.dynamic, cfg.ghc_trainable)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.ghc_attn(h, self.block.attn_branch)
        return self.ghc_mlp(h, self.block.mlp_branch)


class SegmentGroupNorm(nn.Module):
    """``nn.GroupNorm(n, D')`` on the last dim: each segment normalized (mean and variance over
    its s features), then a per-channel affine over all D'."""

    def __init__(self, groups: int, width: int):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = x.unflatten(-1, (self.groups, -1))
        g = F.layer_norm(g, g.shape[-1:], eps=NORM_EPS)
        return g.flatten(-2) * self.weight + self.bias


def _norm(cfg: GPTConfig, width: int) -> Norm:
    """A ``gpt.Norm`` of cfg's kind at another width (Norm reads only norm, fused, n_embd)."""
    return Norm(GPTConfig(n_embd=width, n_head=1, norm=cfg.norm, fused=cfg.fused))


class MTPModule(nn.Module):
    """Predicts token t+2 from the main model's wide state at t and the wide embedding of token
    t+1 (equations in the module doc)."""

    def __init__(self, cfg: VWNConfig):
        super().__init__()
        s = cfg.segment
        self.n, self.segment = cfg.n, s
        self.norm_h = _norm(cfg, s)
        self.norm_e = _norm(cfg, s)
        self.proj = nn.Linear(2 * s, s, bias=False)
        self.layer = VWNLayer(cfg)

    @property
    def block(self) -> Block:
        return self.layer.block

    def forward(self, h: torch.Tensor, e_next: torch.Tensor) -> torch.Tensor:
        """``h (B, T-1, D')`` wide state at t, ``e_next (B, T-1, D')`` -> ``(B, T-1, D')``, for
        the model's shared output path."""
        H = h.unflatten(-1, (self.n, self.segment))
        E = e_next.unflatten(-1, (self.n, self.segment))
        z = self.proj(torch.cat([self.norm_h(H), self.norm_e(E)], dim=-1))
        return self.layer(z.flatten(-2))


# ----------------------------------------------------------------------------- model


@dataclass
class LossParts:
    """``total = next_token + mtp_weight * next_2_token`` (``next_2_token`` None without MTP)."""

    total: torch.Tensor
    next_token: torch.Tensor
    next_2_token: torch.Tensor | None = None


class VWNGPT(nn.Module):
    """Token ids ``(B, T)`` -> next-token logits ``(B, T, vocab)`` (and the loss), with virtual
    width: wide embedding, GHC-wrapped ``gpt.Block`` layers, GroupNorm -> W_reduce -> norm -> head.
    """

    def __init__(self, cfg: VWNConfig):
        super().__init__()
        self.config = cfg
        D, Dw = cfg.n_embd, cfg.wide_embd
        self.wte = nn.Embedding(cfg.vocab_size, Dw)
        self.wpe = None if cfg.rope else nn.Embedding(cfg.block_size, Dw)
        self.drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(VWNLayer(cfg) for _ in range(cfg.n_layer))
        self.norm_out = SegmentGroupNorm(cfg.n, Dw)
        self.reduce = nn.Linear(Dw, D, bias=False)
        self.norm_f = Norm(cfg)
        self.lm_head = nn.Linear(D, cfg.vocab_size, bias=False)
        self.mtp = MTPModule(cfg) if cfg.mtp else None
        self.apply(GPT._init_weights)  # Linear / Embedding only: GHC matrices keep their init
        blocks = [layer.block for layer in self.layers] + ([self.mtp.block] if self.mtp else [])
        for block in blocks:  # GPT-2's depth-scaled init of the projections into the stream
            for proj in (block.attn.proj, block.mlp.down):
                nn.init.normal_(proj.weight, std=INIT_STD / math.sqrt(2 * cfg.n_layer))
        if cfg.tied_embeddings:  # only allowed when D' == D
            self.lm_head.weight = self.wte.weight

    def features(self, idx: torch.Tensor) -> torch.Tensor:
        """The wide state after the last layer, ``(B, T, D')`` (before the output path)."""
        h = embed(self, idx)
        full = self.config.checkpointing == "full" and torch.is_grad_enabled()
        for layer in self.layers:
            h = checkpoint(layer, h, use_reentrant=False) if full else layer(h)
        return h

    def output(self, wide: torch.Tensor) -> torch.Tensor:
        """Logits from a wide state: GroupNorm -> W_reduce -> norm -> head (the main model's
        path, which the MTP module shares)."""
        return self.lm_head(self.norm_f(self.reduce(self.norm_out(wide))))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                return_parts: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor | LossParts | None]:
        """``targets`` ``(B, T)`` of next tokens, -1 where no loss counts. Returns
        ``(logits, loss)`` like ``gpt.GPT``: ``loss`` the total (a scalar), or with
        ``return_parts`` a ``LossParts`` holding next-token and next-2-token losses apart.

        The MTP targets are ``targets[:, 1:]`` (the token after next for positions 0..T-2) and its
        input tokens ``idx[:, 1:]``; without targets the MTP module is not run."""
        wide = self.features(idx)
        logits = self.output(wide)
        if targets is None:
            return logits, None
        next_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1)
        parts = LossParts(total=next_token, next_token=next_token)
        if self.mtp is not None:
            if idx.shape[1] < 2:
                raise ValueError(f"mtp=True needs sequences of >= 2 tokens; got T={idx.shape[1]}")
            logits2 = self.output(self.mtp(wide[:, :-1], self.wte(idx[:, 1:])))
            parts.next_2_token = F.cross_entropy(logits2.flatten(0, 1),
                                                 targets[:, 1:].flatten(), ignore_index=-1)
            parts.total = next_token + self.config.mtp_weight * parts.next_2_token
        return logits, (parts if return_parts else parts.total)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count, a tied matrix once; ``non_embedding`` drops the lookup tables by
        ``gpt.GPT.num_params``'s rule (a tied token table stays: it is also the head GEMM)."""
        return GPT.num_params(self, non_embedding)


# ----------------------------------------------------------------------------- weight decay


def no_weight_decay_params(model: nn.Module) -> list[nn.Parameter]:
    """Parameters to exempt from weight decay: the static GHC matrices A and B (decay would pull
    the identity-like routing towards 0) and the dynamic scales s_A, s_B, plus every parameter
    of fewer than 2 dims (norm weights and biases, Linear biases). The dynamic projections
    W_A, W_B, the embeddings and all other matrices decay."""
    exempt = {id(getattr(mod, name)) for mod in model.modules() if isinstance(mod, GHC)
              for name in ("A", "B", "s_A", "s_B") if hasattr(mod, name)}
    return [p for p in model.parameters() if id(p) in exempt or p.dim() < 2]


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two optimizer groups, ``[decay, no_decay]`` (no_decay as ``no_weight_decay_params``); a
    tied tensor appears once."""
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay={weight_decay!r} must be >= 0")
    exempt = {id(p) for p in no_weight_decay_params(model)}
    params = list(model.parameters())
    return [{"params": [p for p in params if id(p) not in exempt], "weight_decay": weight_decay},
            {"params": [p for p in params if id(p) in exempt], "weight_decay": 0.0}]


# ----------------------------------------------------------------------------- overhead


@dataclass(frozen=True)
class VWNCost:
    """Parameter counts and forward FLOPs per token of one VWN configuration, and of the plain
    GPT with the same backbone (``baseline_*``). FLOPs count matmuls only (2 per multiply-add):
    norms, tanh, softmax and adds are left out. Attention scores count ``4 T D`` per layer and
    token (QK^T and PV over a full, not causal-halved, window of ``T = min(seq_len, window)``)."""

    params_embedding: int  # token (+ position) tables, width D'
    params_backbone: int  # the n_layer gpt.Blocks
    params_ghc: int  # static A, B (+ W_A, W_B, s_A, s_B) of the backbone's 2 n_layer GHCs
    params_output: int  # GroupNorm + W_reduce + final norm + head (0 for the head when tied)
    params_mtp: int  # MTP module, its VWN layer's GHCs included (its output path is shared)
    flops_backbone: int
    flops_ghc: int
    flops_output: int  # W_reduce + head
    flops_mtp: int  # projection + VWN layer + the shared output path
    baseline_params: int
    baseline_flops: int

    @property
    def params_total(self) -> int:
        return (self.params_embedding + self.params_backbone + self.params_ghc
                + self.params_output + self.params_mtp)

    @property
    def flops_total(self) -> int:
        return self.flops_backbone + self.flops_ghc + self.flops_output + self.flops_mtp

    @property
    def flops_overhead(self) -> float:
        """Extra forward FLOPs per token relative to the baseline, e.g. 0.05 = 5 %."""
        return self.flops_total / self.baseline_flops - 1.0

    @property
    def params_overhead(self) -> float:
        return self.params_total / self.baseline_params - 1.0


def _norm_params(cfg: GPTConfig, width: int) -> int:
    return 2 * width if cfg.norm == "layernorm" else width


def _block_params(cfg: GPTConfig) -> int:
    D, qkv = cfg.n_embd, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    n_in = 2 * cfg.ffn_hidden if cfg.mlp == "swiglu" else cfg.ffn_hidden
    norms = (1 if cfg.parallel_block else 2) * _norm_params(cfg, D)
    attn = D * qkv + qkv + cfg.heads * cfg.head_dim * D + D
    mlp = D * n_in + n_in + cfg.ffn_hidden * D + D
    return norms + attn + mlp


def _block_flops(cfg: GPTConfig, seq_len: int) -> int:
    D, qkv = cfg.n_embd, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    n_in = 2 * cfg.ffn_hidden if cfg.mlp == "swiglu" else cfg.ffn_hidden
    span = seq_len if cfg.sliding_window is None else min(seq_len, cfg.sliding_window)
    gemms = D * qkv + cfg.heads * cfg.head_dim * D + D * n_in + cfg.ffn_hidden * D
    return 2 * gemms + 4 * span * cfg.heads * cfg.head_dim


def vwn_cost(cfg: VWNConfig, seq_len: int | None = None) -> VWNCost:
    """Counts for ``cfg`` at ``seq_len`` (default ``block_size``); see ``VWNCost``.

    Per GHC and token, static: ``A_in^T H'`` n m s, ``A_res^T H'`` n n s, ``B^T y`` m n s
    multiply-adds, so ``2 n s (2m + n)`` FLOPs; dynamic adds the projections ``N W_A``, ``N W_B``,
    n s (m + n + m) multiply-adds: the same again. There are 2 GHCs per layer."""
    T = cfg.block_size if seq_len is None else seq_len
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"seq_len={seq_len!r} must be a positive int")
    D, Dw, V, m, n, s = cfg.n_embd, cfg.wide_embd, cfg.vocab_size, cfg.m, cfg.n, cfg.segment
    L = cfg.n_layer
    positions = 0 if cfg.rope else cfg.block_size
    block_p, block_f = _block_params(cfg), _block_flops(cfg, T)
    head_p = 0 if cfg.tied_embeddings else V * D
    ghc_p = (n * (m + n) + m * n if cfg.ghc_trainable else 0) + (
        (s * (2 * m + n) + 2) if cfg.dynamic else 0)
    identity = not cfg.ghc_trainable and m == n  # GHC.identity: the plain residual add
    ghc_f = 0 if identity else 2 * n * s * (2 * m + n) * (2 if cfg.dynamic else 1)
    mtp_p = mtp_f = 0
    if cfg.mtp:
        mtp_p = 2 * _norm_params(cfg, s) + 2 * s * s + block_p + 2 * ghc_p
        mtp_f = n * 2 * (2 * s * s) + block_f + 2 * ghc_f + 2 * Dw * D + 2 * D * V
    base = cfg.backbone()
    base_head = 0 if base.tied_embeddings else V * D
    return VWNCost(
        params_embedding=(V + positions) * Dw,
        params_backbone=L * block_p,
        params_ghc=2 * L * ghc_p,
        params_output=2 * Dw + Dw * D + _norm_params(cfg, D) + head_p,
        params_mtp=mtp_p,
        flops_backbone=L * block_f,
        flops_ghc=2 * L * ghc_f,
        flops_output=2 * Dw * D + 2 * D * V,
        flops_mtp=mtp_f,
        baseline_params=(V + positions) * D + L * _block_params(base) + _norm_params(base, D)
        + base_head,
        baseline_flops=L * _block_flops(base, T) + 2 * D * V,
    )
