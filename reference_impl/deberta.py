"""Padding-free DeBERTa-v2/v3 encoder, in plain PyTorch.

Same idea as ``bert.py``: pack the valid tokens of a right-padded batch once, run every GEMM
(embedding projection, Q/K/V, attention output, FFN) on those T tokens only, run attention per
sequence, and unpack at the end with zeros at the padded positions.

What DeBERTa adds is disentangled attention. With ``delta(r) = clamp(bucket(r) + span, 0,
2 * span - 1)`` the row of the relative table for a (log-bucketed) distance r, the score of query
i for key j in one head is

    ( q_i . k_j                                  content -> content
    + q_i . Kr[delta(i - j)]       if "c2p"      content -> position
    + k_j . Qr[delta(i - j)]       if "p2c"      position -> content
    ) / sqrt(head_dim * (1 + number of pos_att_type entries))

where ``Kr`` and ``Qr`` are the relative embedding table projected by the key and query
projections (or by their own projections when ``share_att_key`` is off). HF writes the p2c index
as ``span - bucket(j - i)``, which is the same row because bucketing is odd; the code keeps HF's
form. Relative distances only involve positions inside one sequence, so on the packed layout they
are built per sequence: an l x l table for length l, shared by all sequences of that length and
by all layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from reference_impl.kernels.cpu_linear import PackedWeights, dense, use_onednn
from reference_impl.packing import PackInfo, pack, packed_positions, packing_of, unpack
from reference_impl.switches import check_cpu_gemm

# HF activation name -> the name ``dense`` fuses (oneDNN post-op on CPU, else applied after)
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "relu": "relu"}
_POS_ATT_TYPES = ("c2p", "p2c")
_NORM_REL_EBD = ("none", "layer_norm")


@dataclass(frozen=True)
class DebertaV2Dims:
    """The HF config resolved into exactly what the forward pass uses (defaults already applied,
    ``max_relative_positions < 1`` already replaced by ``max_position_embeddings``)."""

    vocab_size: int
    hidden: int
    embedding_size: int  # != hidden adds a bias-free projection after the embedding sum
    layers: int
    heads: int
    head_dim: int
    intermediate: int
    eps: float
    activation: str
    max_position: int  # rows of the absolute position table; 0 = no absolute positions
    type_vocab_size: int  # 0 = no token-type embeddings
    relative_attention: bool
    pos_att_type: tuple[str, ...]  # entries of ("c2p", "p2c")
    share_att_key: bool
    position_buckets: int  # <= 0: no log bucketing
    max_relative_positions: int
    norm_rel_ebd: bool  # LayerNorm over the relative embedding table

    @property
    def span(self) -> int:
        """Relative distances are clamped to [-span, span); the table has 2 * span rows."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

    @property
    def c2p(self) -> bool:
        return self.relative_attention and "c2p" in self.pos_att_type

    @property
    def p2c(self) -> bool:
        return self.relative_attention and "p2c" in self.pos_att_type

    @property
    def softmax_scale(self) -> float:
        """1 / sqrt(head_dim * (1 + len(pos_att_type))).

        HF counts ``pos_att_type`` even when ``relative_attention`` is off, and (like the
        original DeBERTa code) takes the square root in float32. We round the same way: in a
        float64 model a float64 root would put a relative error of up to ~6e-8 into every
        attention score and keep us from agreeing with HF to ~1e-15.
        """
        factor = 1 + sum(t in self.pos_att_type for t in _POS_ATT_TYPES)
        root = torch.tensor(float(self.head_dim * factor), dtype=torch.float32).sqrt()
        return 1.0 / float(root)


def log_bucket(rel: torch.Tensor, buckets: int, max_position: int) -> torch.Tensor:
    """DeBERTa's log bucketing of integer relative distances.

    Distances with ``|r| <= buckets // 2`` stay exact; larger ones are squeezed logarithmically
    so that ``max_position - 1`` lands near ``buckets - 1``. Computed in float32 like HF, so
    the rounding (and thus ``ceil``) matches it bit for bit.
    """
    mid = buckets // 2
    sign = torch.sign(rel)
    # Below mid the exact distance is used; mid - 1 there only keeps log() finite.
    abs_pos = torch.where(rel.abs() < mid, torch.full_like(rel, mid - 1), rel.abs())
    ratio = torch.log(abs_pos.to(torch.float32) / mid)
    log_max = torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float32))
    log_pos = torch.ceil(ratio / log_max * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, rel.to(torch.float32), log_pos * sign).long()


@dataclass(frozen=True)
class AttentionGroup:
    """All sequences of one length l: one batched attention call."""

    tokens: torch.Tensor  # (n, l) packed token indices, one row per sequence
    c2p_index: torch.Tensor | None  # (l, l) [query i, key j] -> row of Kr (counted from rows.start)
    p2c_index: torch.Tensor | None  # (l, l) [key j, query i] -> row of Qr (counted from rows.start)
    rows: slice  # the rows of the 2 * span relative table these l x l distances can reach


def attention_groups(info: PackInfo, dims: DebertaV2Dims) -> list[AttentionGroup]:
    """Group the packed sequences by length and build each length's relative-position table once
    (it depends only on l, so all sequences of that length and all layers share it)."""
    device = info.cu_seqlens.device
    starts = info.cu_seqlens[:-1].long()
    groups = []
    for length in sorted(set(info.seqlens.tolist()) - {0}):
        ar = torch.arange(length, device=device)
        tokens = starts[info.seqlens == length, None] + ar
        c2p_index = p2c_index = None
        rows = slice(0, 0)
        if dims.relative_attention:
            rel = ar[:, None] - ar[None, :]  # rel[a, b] = a - b
            if dims.position_buckets > 0:
                rel = log_bucket(rel, dims.position_buckets, dims.max_relative_positions)
            span = dims.span
            c2p = (rel + span).clamp(0, 2 * span - 1)  # at [query i, key j]: delta(i - j)
            p2c = (span - rel).clamp(0, 2 * span - 1)  # at [key j, query i]: span - bucket(j - i)
            # Only rows between the smallest and largest index are ever gathered; projecting
            # against those instead of all 2 * span rows saves work when l << span.
            lo = int(torch.minimum(c2p.min(), p2c.min()))
            hi = int(torch.maximum(c2p.max(), p2c.max())) + 1
            rows = slice(lo, hi)
            c2p_index, p2c_index = c2p - lo, p2c - lo
        groups.append(AttentionGroup(tokens, c2p_index, p2c_index, rows))
    return groups


class DisentangledAttention(nn.Module):
    """DeBERTa self-attention on packed ``[T, H]`` tokens, each sequence attending to itself."""

    def __init__(self, dims: DebertaV2Dims):
        super().__init__()
        self.dims = dims
        inner = dims.heads * dims.head_dim
        self.query = nn.Linear(dims.hidden, inner)
        self.key = nn.Linear(dims.hidden, inner)
        self.value = nn.Linear(dims.hidden, inner)
        # Without share_att_key the relative table gets its own projections.
        own = not dims.share_att_key
        self.pos_key = nn.Linear(dims.hidden, inner) if dims.c2p and own else None
        self.pos_query = nn.Linear(dims.hidden, inner) if dims.p2c and own else None

    def forward(self, x: torch.Tensor, rel_table: torch.Tensor | None,
                groups: list[AttentionGroup], packed: PackedWeights | None) -> torch.Tensor:
        d = self.dims

        def split(t: torch.Tensor) -> torch.Tensor:  # (N, heads, d)
            return t.view(t.shape[0], d.heads, d.head_dim)

        q, k, v = (split(dense(getattr(self, n), x, packed, n)) for n in ("query", "key", "value"))
        if d.c2p:  # Kr: the relative table through the key projection, (heads, 2 * span, d)
            pos_k = split((self.key if self.pos_key is None else self.pos_key)(rel_table))
            pos_k = pos_k.transpose(0, 1)
        if d.p2c:  # Qr: through the query projection
            pos_q = split((self.query if self.pos_query is None else self.pos_query)(rel_table))
            pos_q = pos_q.transpose(0, 1)

        ctx = torch.zeros_like(q)
        for g in groups:
            # (n, heads, l, d): the n sequences of this length, side by side.
            qs, ks, vs = (t[g.tokens].transpose(1, 2) for t in (q, k, v))
            n, _, length, _ = qs.shape
            scores = qs @ ks.transpose(-1, -2)
            if d.c2p:  # q_i . Kr[delta(i - j)]
                c2p = qs @ pos_k[:, g.rows].transpose(-1, -2)  # (n, heads, l, rows)
                scores = scores + c2p.gather(-1, g.c2p_index.expand(n, d.heads, length, length))
            if d.p2c:  # k_j . Qr[span - bucket(j - i)]: gathered as [j, i], transposed to [i, j]
                p2c = ks @ pos_q[:, g.rows].transpose(-1, -2)
                p2c = p2c.gather(-1, g.p2c_index.expand(n, d.heads, length, length))
                scores = scores + p2c.transpose(-1, -2)
            probs = (scores * d.softmax_scale).softmax(dim=-1)
            ctx[g.tokens] = (probs @ vs).transpose(1, 2)
        return ctx.view(x.shape[0], d.heads * d.head_dim)


class EncoderLayer(nn.Module):
    """Post-LN DeBERTa layer on packed ``[T, H]`` tokens (same shape as BERT's)."""

    def __init__(self, dims: DebertaV2Dims):
        super().__init__()
        self.attn = DisentangledAttention(dims)
        self.attn_out = nn.Linear(dims.heads * dims.head_dim, dims.hidden)
        self.ln_attn = nn.LayerNorm(dims.hidden, eps=dims.eps)
        self.ffn_in = nn.Linear(dims.hidden, dims.intermediate)
        self.ffn_out = nn.Linear(dims.intermediate, dims.hidden)
        self.ln_ffn = nn.LayerNorm(dims.hidden, eps=dims.eps)
        self.act = _ACTIVATIONS[dims.activation]
        self.packed = PackedWeights()

    def forward(self, x: torch.Tensor, rel_table: torch.Tensor | None,
                groups: list[AttentionGroup], onednn: bool) -> torch.Tensor:
        """``onednn``: every GEMM on oneDNN, bias + activation / residual fused (CPU)."""
        p = self.packed if onednn else None
        x = self.ln_attn(dense(self.attn_out, self.attn(x, rel_table, groups, p), p, "attn_out",
                               residual=x))
        h = dense(self.ffn_in, x, p, "ffn_in", activation=self.act)
        return self.ln_ffn(dense(self.ffn_out, h, p, "ffn_out", residual=x))


class PaddingFreeDebertaV2(nn.Module):
    """DeBERTa-v2 encoder that never computes on padding. Returns the last hidden state
    ``[B, S, H]`` with zeros at padded positions."""

    def __init__(self, dims: DebertaV2Dims, cpu_gemm: str = "auto"):
        super().__init__()
        self.cpu_gemm = check_cpu_gemm(cpu_gemm)  # as in bert.Switches: oneDNN linear layers
        if dims.activation not in _ACTIVATIONS:
            raise ValueError(f"activation={dims.activation!r} is not one of {sorted(_ACTIVATIONS)}")
        self.dims = dims
        e = dims.embedding_size
        self.word = nn.Embedding(dims.vocab_size, e)
        self.position = nn.Embedding(dims.max_position, e) if dims.max_position else None
        self.token_type = nn.Embedding(dims.type_vocab_size, e) if dims.type_vocab_size else None
        self.embed_proj = nn.Linear(e, dims.hidden, bias=False) if e != dims.hidden else None
        self.ln_embed = nn.LayerNorm(dims.hidden, eps=dims.eps)
        self.rel_embeddings = (nn.Parameter(torch.zeros(2 * dims.span, dims.hidden))
                               if dims.relative_attention else None)
        self.ln_rel = (nn.LayerNorm(dims.hidden, eps=dims.eps)
                       if dims.relative_attention and dims.norm_rel_ebd else None)
        self.layers = nn.ModuleList(EncoderLayer(dims) for _ in range(dims.layers))

    @classmethod
    def from_hf(cls, model: nn.Module, cpu_gemm: str = "auto") -> "PaddingFreeDebertaV2":
        """Copy the weights of a HF ``DebertaV2Model``; the result has its dtype and device and is
        in eval mode. Settings this encoder does not implement raise ``ValueError``."""
        dims = _dims_from_config(model.config)
        if getattr(model, "z_steps", 0) > 1:
            raise ValueError(f"z_steps={model.z_steps} unsupported; only z_steps <= 1 "
                             "(the plain encoder)")
        ref = next(model.parameters())
        self = cls(dims, cpu_gemm).to(ref.device, ref.dtype)
        emb, enc = model.embeddings, model.encoder
        with torch.no_grad():
            self.word.weight.copy_(emb.word_embeddings.weight)
            if self.position is not None:
                self.position.weight.copy_(emb.position_embeddings.weight)
            if self.token_type is not None:
                self.token_type.weight.copy_(emb.token_type_embeddings.weight)
            if self.embed_proj is not None:
                self.embed_proj.weight.copy_(emb.embed_proj.weight)
            _copy_ln(self.ln_embed, emb.LayerNorm)
            if self.rel_embeddings is not None:
                self.rel_embeddings.copy_(enc.rel_embeddings.weight[: 2 * dims.span])
            if self.ln_rel is not None:
                _copy_ln(self.ln_rel, enc.LayerNorm)
            for mine, theirs in zip(self.layers, enc.layer):
                att = theirs.attention
                _copy_linear(mine.attn.query, att.self.query_proj)
                _copy_linear(mine.attn.key, att.self.key_proj)
                _copy_linear(mine.attn.value, att.self.value_proj)
                if mine.attn.pos_key is not None:
                    _copy_linear(mine.attn.pos_key, att.self.pos_key_proj)
                if mine.attn.pos_query is not None:
                    _copy_linear(mine.attn.pos_query, att.self.pos_query_proj)
                _copy_linear(mine.attn_out, att.output.dense)
                _copy_ln(mine.ln_attn, att.output.LayerNorm)
                _copy_linear(mine.ffn_in, theirs.intermediate.dense)
                _copy_linear(mine.ffn_out, theirs.output.dense)
                _copy_ln(mine.ln_ffn, theirs.output.LayerNorm)
        return self.eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                lengths: Sequence[int] | None = None) -> torch.Tensor:
        """``[B, S]`` ids and right-padded 0/1 mask -> ``[B, S, H]``. Token types default to 0
        and, as in HF, are ignored when the model has no token-type embeddings. ``lengths``:
        as for ``PaddingFreeBert.forward``."""
        info = packing_of(attention_mask, lengths)
        ids = pack(input_ids, info)
        x = self.word(ids)
        if self.position is not None:
            x = x + self.position(packed_positions(info))
        if self.token_type is not None:
            types = torch.zeros_like(ids) if token_type_ids is None else pack(token_type_ids, info)
            x = x + self.token_type(types)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        # HF multiplies by the mask here; every packed token is valid, so that is a no-op.
        x = self.ln_embed(x)

        rel_table = self.rel_embeddings
        if self.ln_rel is not None:
            rel_table = self.ln_rel(rel_table)
        groups = attention_groups(info, self.dims)
        onednn = bool(self.layers) and use_onednn(self.cpu_gemm, x, self.layers[0].ffn_in.weight)
        for layer in self.layers:
            x = layer(x, rel_table, groups, onednn)
        return unpack(x, info)


def _dims_from_config(cfg) -> DebertaV2Dims:
    """Resolve a ``DebertaV2Config`` the way HF's modules read it, refusing what we lack."""
    conv = getattr(cfg, "conv_kernel_size", 0)
    if conv > 0:
        raise ValueError(f"conv_kernel_size={conv} unsupported (the ConvLayer after layer 0); "
                         "only conv_kernel_size=0")
    if not isinstance(cfg.hidden_act, str) or cfg.hidden_act not in _ACTIVATIONS:
        raise ValueError(f"hidden_act={cfg.hidden_act!r} unsupported; "
                         f"one of {sorted(_ACTIVATIONS)}")
    pos_att_type = cfg.pos_att_type or ()
    if isinstance(pos_att_type, str):  # the config splits "p2c|c2p" only when it is built
        pos_att_type = pos_att_type.lower().split("|")
    pos_att_type = tuple(x.strip() for x in pos_att_type)
    if any(t not in _POS_ATT_TYPES for t in pos_att_type):
        raise ValueError(f"pos_att_type={list(pos_att_type)!r} unsupported; "
                         f"only entries of {list(_POS_ATT_TYPES)}")
    norm = [x.strip() for x in getattr(cfg, "norm_rel_ebd", "none").lower().split("|")]
    if any(x not in _NORM_REL_EBD for x in norm):
        raise ValueError(f"norm_rel_ebd={cfg.norm_rel_ebd!r} unsupported; "
                         f"'|'-joined entries of {list(_NORM_REL_EBD)}")
    heads = cfg.num_attention_heads
    if cfg.hidden_size % heads:
        raise ValueError(f"hidden_size={cfg.hidden_size} is not divisible by "
                         f"num_attention_heads={heads}")
    max_rel = getattr(cfg, "max_relative_positions", -1)
    return DebertaV2Dims(
        vocab_size=cfg.vocab_size,
        hidden=cfg.hidden_size,
        embedding_size=getattr(cfg, "embedding_size", None) or cfg.hidden_size,
        layers=cfg.num_hidden_layers,
        heads=heads,
        head_dim=getattr(cfg, "attention_head_size", cfg.hidden_size // heads),
        intermediate=cfg.intermediate_size,
        eps=cfg.layer_norm_eps,
        activation=cfg.hidden_act,
        max_position=(cfg.max_position_embeddings
                      if getattr(cfg, "position_biased_input", True) else 0),
        type_vocab_size=max(cfg.type_vocab_size, 0),
        relative_attention=bool(getattr(cfg, "relative_attention", False)),
        pos_att_type=pos_att_type,
        share_att_key=bool(getattr(cfg, "share_att_key", False)),
        position_buckets=getattr(cfg, "position_buckets", -1),
        max_relative_positions=max_rel if max_rel >= 1 else cfg.max_position_embeddings,
        norm_rel_ebd="layer_norm" in norm,
    )


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _copy_ln(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)
