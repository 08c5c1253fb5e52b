"""Padding-free BERT-family encoder (the ByteTransformer design), with every optimization of the
paper as a switch.

With ``padding_free`` on, the valid tokens of a right-padded batch are packed once and every GEMM
(QKV, attention output, FFN) runs on those T tokens only; padding never comes back inside the
encoder. With it off, the same layers run on all B*S positions, as a padded framework does. The
other switches swap one unfused step for its fused form:

- ``fused_layernorm``: bias + residual + LayerNorm after each output GEMM in one kernel;
- ``fused_gemm_gelu``: the FFN's bias + GELU as the epilogue of its first GEMM;
- ``fused_mha``: varlen attention on the packed tokens (one fused kernel on GPU, length buckets on
  CPU) instead of matmul + mask + softmax + matmul on the padded batch;
- ``cpu_gemm``: on CPU, ``"onednn"`` runs every linear layer on oneDNN with its weight prepacked
  once and the epilogue (bias + GELU, bias + residual) fused as a post-op; ``"torch"`` keeps
  ``F.linear`` (MKL in x86 wheels, which takes a slow path on AMD CPUs); ``"auto"`` is oneDNN
  wherever it can run (CPU, fp32/bf16, no autograd), else torch. Ignored on GPUs.

The paper's ablation ladder (``LADDER``) turns them on one after another. HF ``BertModel``,
``AlbertModel`` (factorized embeddings, shared layers) and ``DistilBertModel`` map onto this one
encoder; ``DebertaV2Model`` (disentangled attention) has its own module in ``deberta.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from reference_impl.kernels import (add_bias_residual_layernorm, bias_gelu, bucket_plan,
                                    padded_attention, varlen_attention)
from reference_impl.kernels.cpu_linear import PackedWeights, dense, use_onednn
from reference_impl.packing import PackInfo, pack, packed_positions, packing_of, unpack
from reference_impl.switches import Switches

# HF activation name -> torch GELU approximation (BERT "gelu" is exact; ALBERT's "gelu_new" tanh)
_GELU = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}


class EncoderLayer(nn.Module):
    """Post-LN transformer layer on rows of tokens (packed ``[T, H]`` or padded ``[B*S, H]``)."""

    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float, activation: str):
        super().__init__()
        if activation not in _GELU:
            raise ValueError(f"activation={activation!r} is not one of {sorted(_GELU)}")
        self.heads, self.head_dim, self.eps = heads, hidden // heads, eps
        self.approximate = _GELU[activation]
        self.qkv = nn.Linear(hidden, 3 * hidden)  # Q, K, V fused into one GEMM
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln_attn = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, intermediate)
        self.ffn_out = nn.Linear(intermediate, hidden)
        self.ln_ffn = nn.LayerNorm(hidden, eps=eps)
        self.packed = PackedWeights()

    def forward(self, x: torch.Tensor, info: PackInfo, sw: Switches,
                plan: list | None = None) -> torch.Tensor:
        if use_onednn(sw.cpu_gemm, x, self.qkv.weight):
            return self._forward_onednn(x, info, sw, plan)
        x = self._norm_after(self.attn_out, self._attention(x, self.qkv(x), info, sw, plan), x,
                             self.ln_attn, sw)
        if sw.fused_gemm_gelu:
            h = bias_gelu(F.linear(x, self.ffn_in.weight), self.ffn_in.bias, self.approximate,
                          backend=sw.backend)
        else:
            h = F.gelu(self.ffn_in(x), approximate=self.approximate)
        return self._norm_after(self.ffn_out, h, x, self.ln_ffn, sw)

    def _norm_after(self, proj: nn.Linear, h: torch.Tensor, residual: torch.Tensor,
                    ln: nn.LayerNorm, sw: Switches) -> torch.Tensor:
        """LayerNorm(proj(h) + residual): fused epilogue, or GEMM+bias, add, LayerNorm apart."""
        if sw.fused_layernorm:
            return add_bias_residual_layernorm(F.linear(h, proj.weight), proj.bias, residual,
                                               ln.weight, ln.bias, self.eps, backend=sw.backend)
        return ln(proj(h) + residual)

    def _forward_onednn(self, x: torch.Tensor, info: PackInfo, sw: Switches,
                        plan: list | None) -> torch.Tensor:
        """The same layer with every GEMM on oneDNN (prepacked weights, fused epilogues)."""
        ctx = self._attention(x, dense(self.qkv, x, self.packed, "qkv"), info, sw, plan)
        x = self._norm_after_onednn(self.attn_out, "attn_out", ctx, x, self.ln_attn, sw)
        act = "gelu" if self.approximate == "none" else "gelu_tanh"
        if sw.fused_gemm_gelu:
            h = dense(self.ffn_in, x, self.packed, "ffn_in", activation=act)
        else:
            h = F.gelu(dense(self.ffn_in, x, self.packed, "ffn_in"), approximate=self.approximate)
        return self._norm_after_onednn(self.ffn_out, "ffn_out", h, x, self.ln_ffn, sw)

    def _norm_after_onednn(self, proj: nn.Linear, name: str, h: torch.Tensor,
                           residual: torch.Tensor, ln: nn.LayerNorm, sw: Switches
                           ) -> torch.Tensor:
        if sw.fused_layernorm:  # bias + residual as the GEMM's post-op, then one LayerNorm pass
            y = dense(proj, h, self.packed, name, residual=residual)
        else:
            y = dense(proj, h, self.packed, name) + residual
        return F.layer_norm(y, y.shape[-1:], ln.weight, ln.bias, self.eps)

    def _attention(self, x: torch.Tensor, qkv: torch.Tensor, info: PackInfo, sw: Switches,
                   plan: list | None) -> torch.Tensor:
        rows = x.shape[0]
        q, k, v = qkv.view(rows, 3, self.heads, self.head_dim).unbind(1)
        scale = 1.0 / math.sqrt(self.head_dim)
        if sw.fused_mha:
            if not sw.padding_free:  # the kernel wants the valid tokens: gather, then scatter
                q, k, v = (pack(t.view(info.batch_size, info.padded_len, *t.shape[1:]), info)
                           for t in (q, k, v))
            ctx = varlen_attention(q, k, v, info.cu_seqlens, info.max_seqlen,
                                   softmax_scale=scale, backend=sw.backend, plan=plan)
            if not sw.padding_free:
                ctx = unpack(ctx, info).flatten(0, 1)
        else:  # the padded, unfused form; a padding-free encoder re-pads for it (paper step 3)
            padded = [unpack(t, info) if sw.padding_free else
                      t.view(info.batch_size, info.padded_len, *t.shape[1:]) for t in (q, k, v)]
            mask = torch.arange(info.padded_len, device=x.device)[None, :] < \
                info.seqlens.to(x.device)[:, None]
            ctx = padded_attention(*padded, mask, softmax_scale=scale)
            ctx = pack(ctx, info) if sw.padding_free else ctx.flatten(0, 1)
        return ctx.reshape(rows, -1)


class PaddingFreeBert(nn.Module):
    """BERT-family encoder. ``forward`` returns the last hidden state ``[B, S, H]`` with zeros at
    padded positions, whatever the switches."""

    def __init__(self, *, vocab_size: int, hidden: int, layers: int, heads: int, intermediate: int,
                 max_position: int, type_vocab_size: int, eps: float = 1e-12,
                 activation: str = "gelu", embedding_size: int | None = None,
                 shared_layers: int | None = None, **switches):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden={hidden} is not divisible by heads={heads}")
        emb = embedding_size or hidden
        self.word = nn.Embedding(vocab_size, emb)
        self.position = nn.Embedding(max_position, emb)
        self.token_type = nn.Embedding(type_vocab_size, emb) if type_vocab_size else None
        self.ln_embed = nn.LayerNorm(emb, eps=eps)
        # ALBERT: embeddings of width E projected to H (a projection even where E == H)
        self.embed_proj = nn.Linear(emb, hidden) if embedding_size is not None else None
        # ALBERT shares one layer (or a few groups of layers) across depth
        unique = nn.ModuleList(EncoderLayer(hidden, heads, intermediate, eps, activation)
                               for _ in range(shared_layers or layers))
        self.layers = nn.ModuleList(unique[i * len(unique) // layers] for i in range(layers))
        self.switches = Switches(**switches)

    def configure(self, **switches) -> "PaddingFreeBert":
        """Change switches in place (weights stay): e.g. ``configure(fused_mha=False)``."""
        unknown = set(switches) - set(Switches.names())
        if unknown:
            raise ValueError(f"unknown switch(es) {sorted(unknown)}; valid: {Switches.names()}")
        self.switches = Switches(**{**self.switches.__dict__, **switches})
        return self

    @classmethod
    def from_hf(cls, model: nn.Module, **switches) -> nn.Module:
        """Copy a HF ``BertModel``, ``AlbertModel``, ``DistilBertModel`` or ``DebertaV2Model``;
        the result has the model's dtype and device."""
        kind = type(model).__name__
        if kind == "DebertaV2Model":
            from reference_impl.deberta import PaddingFreeDebertaV2

            sw = Switches(**switches)
            if sw != Switches(backend=sw.backend, cpu_gemm=sw.cpu_gemm):
                raise ValueError(f"DebertaV2Model runs padding-free with its own attention; "
                                 f"switches {switches} are not supported for it")
            return PaddingFreeDebertaV2.from_hf(model, cpu_gemm=sw.cpu_gemm)
        loaders = {"BertModel": _from_bert, "AlbertModel": _from_albert,
                   "DistilBertModel": _from_distilbert}
        if kind not in loaders:
            raise ValueError(f"unsupported model {kind}; supported: "
                             f"{sorted([*loaders, 'DebertaV2Model'])}")
        ref = next(model.parameters())
        ours = loaders[kind](cls, model, switches)
        return ours.to(ref.device, ref.dtype).eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                lengths: Sequence[int] | None = None) -> torch.Tensor:
        """``lengths``: each sequence's valid length, where the caller knows them (the mask is
        then trusted to match): the packing is planned on the host, with no read of the
        device before the first kernel (``packing.pack_info_from_lengths``)."""
        sw, info = self.switches, packing_of(attention_mask, lengths)
        if sw.padding_free:
            ids, pos = pack(input_ids, info), packed_positions(info)
            types = None if token_type_ids is None else pack(token_type_ids, info)
        else:  # every position, as a padded framework computes it
            ids = input_ids.flatten()
            pos = torch.arange(info.padded_len, device=ids.device).repeat(info.batch_size)
            types = None if token_type_ids is None else token_type_ids.flatten()
        x = self.rows(ids, pos, types, info)
        if sw.padding_free:
            return unpack(x, info)
        out = x.view(info.batch_size, info.padded_len, -1)
        return torch.where(attention_mask.bool()[..., None], out, 0.0)

    def rows(self, ids: torch.Tensor, pos: torch.Tensor, types: torch.Tensor | None,
             info: PackInfo) -> torch.Tensor:
        """The encoder on rows of tokens (packed ``[T]`` or padded ``[B*S]`` ids, their positions
        and token types) -> ``[rows, H]``. Attention reads only ``info.cu_seqlens`` and
        ``info.max_seqlen`` on the padding-free path, so rows no sequence covers are never
        attended to: ``graphs`` runs it on static buffers padded that way."""
        sw = self.switches
        x = self.word(ids) + self.position(pos)
        if self.token_type is not None:
            x = x + self.token_type(torch.zeros_like(ids) if types is None else types)
        x = self.ln_embed(x)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        # the attention buckets' indices, once for all layers (CPU varlen path only)
        plan = (bucket_plan(info.cu_seqlens) if sw.fused_mha and not x.is_cuda
                and sw.backend != "triton" else None)
        for layer in self.layers:
            x = layer(x, info, sw, plan)
        return x


def _copy(dst: nn.Module, src: nn.Module) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _copy_qkv(dst: nn.Linear, q: nn.Linear, k: nn.Linear, v: nn.Linear) -> None:
    dst.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
    dst.bias.copy_(torch.cat([q.bias, k.bias, v.bias]))


def _copy_embeddings(ours: PaddingFreeBert, emb: nn.Module) -> None:
    ours.word.weight.copy_(emb.word_embeddings.weight)
    ours.position.weight.copy_(emb.position_embeddings.weight)
    if ours.token_type is not None:
        ours.token_type.weight.copy_(emb.token_type_embeddings.weight)
    _copy(ours.ln_embed, emb.LayerNorm)


def _absolute_positions_only(cfg) -> None:
    kind = getattr(cfg, "position_embedding_type", "absolute")
    if kind not in (None, "absolute"):
        raise ValueError(f"position_embedding_type={kind!r} unsupported; only 'absolute'")


@torch.no_grad()
def _from_bert(cls, model, switches) -> PaddingFreeBert:
    cfg = model.config
    _absolute_positions_only(cfg)
    ours = cls(vocab_size=cfg.vocab_size, hidden=cfg.hidden_size, layers=cfg.num_hidden_layers,
               heads=cfg.num_attention_heads, intermediate=cfg.intermediate_size,
               max_position=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
               eps=cfg.layer_norm_eps, activation=cfg.hidden_act, **switches)
    _copy_embeddings(ours, model.embeddings)
    for mine, theirs in zip(ours.layers, model.encoder.layer):
        att = theirs.attention
        _copy_qkv(mine.qkv, att.self.query, att.self.key, att.self.value)
        _copy(mine.attn_out, att.output.dense)
        _copy(mine.ln_attn, att.output.LayerNorm)
        _copy(mine.ffn_in, theirs.intermediate.dense)
        _copy(mine.ffn_out, theirs.output.dense)
        _copy(mine.ln_ffn, theirs.output.LayerNorm)
    return ours


@torch.no_grad()
def _from_albert(cls, model, switches) -> PaddingFreeBert:
    cfg = model.config
    _absolute_positions_only(cfg)
    if cfg.inner_group_num != 1:
        raise ValueError(f"AlbertConfig.inner_group_num={cfg.inner_group_num} unsupported; "
                         "only 1 (every released ALBERT)")
    ours = cls(vocab_size=cfg.vocab_size, hidden=cfg.hidden_size, layers=cfg.num_hidden_layers,
               heads=cfg.num_attention_heads, intermediate=cfg.intermediate_size,
               max_position=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
               eps=cfg.layer_norm_eps, activation=cfg.hidden_act,
               embedding_size=cfg.embedding_size, shared_layers=cfg.num_hidden_groups, **switches)
    _copy_embeddings(ours, model.embeddings)
    if ours.embed_proj is not None:
        _copy(ours.embed_proj, model.encoder.embedding_hidden_mapping_in)
    unique = list(dict.fromkeys(ours.layers))  # shared modules, in depth order
    for mine, group in zip(unique, model.encoder.albert_layer_groups):
        theirs = group.albert_layers[0]
        att = theirs.attention
        _copy_qkv(mine.qkv, att.query, att.key, att.value)
        _copy(mine.attn_out, att.dense)
        _copy(mine.ln_attn, att.LayerNorm)
        _copy(mine.ffn_in, theirs.ffn)
        _copy(mine.ffn_out, theirs.ffn_output)
        _copy(mine.ln_ffn, theirs.full_layer_layer_norm)
    return ours


@torch.no_grad()
def _from_distilbert(cls, model, switches) -> PaddingFreeBert:
    cfg = model.config  # sinusoidal positions live in the same table: copying it is exact
    ours = cls(vocab_size=cfg.vocab_size, hidden=cfg.dim, layers=cfg.n_layers,
               heads=cfg.n_heads, intermediate=cfg.hidden_dim,
               max_position=cfg.max_position_embeddings, type_vocab_size=0, eps=1e-12,
               activation=cfg.activation, **switches)
    _copy_embeddings(ours, model.embeddings)
    for mine, theirs in zip(ours.layers, model.transformer.layer):
        att = theirs.attention
        _copy_qkv(mine.qkv, att.q_lin, att.k_lin, att.v_lin)
        _copy(mine.attn_out, att.out_lin)
        _copy(mine.ln_attn, theirs.sa_layer_norm)
        _copy(mine.ffn_in, theirs.ffn.lin1)
        _copy(mine.ffn_out, theirs.ffn.lin2)
        _copy(mine.ln_ffn, theirs.output_layer_norm)
    return ours
