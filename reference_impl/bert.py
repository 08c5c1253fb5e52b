"""Padding-free BERT encoder (the ByteTransformer idea), in plain PyTorch.

The encoder packs the valid tokens of a right-padded batch once, runs every GEMM (QKV, attention
output, FFN) on those T tokens only, runs attention per sequence, and unpacks at the end. For a
batch whose lengths average 60% of the padded length, that skips about 40% of the GEMM work and
more of the attention work.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from reference_impl.kernels import varlen_attention
from reference_impl.packing import PackInfo, pack, pack_info, packed_positions, unpack

_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


class EncoderLayer(nn.Module):
    """Post-LN BERT layer on packed ``[T, H]`` tokens."""

    def __init__(self, hidden: int, heads: int, intermediate: int, eps: float, activation: str):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)  # Q, K, V fused into one GEMM
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln_attn = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, intermediate)
        self.ffn_out = nn.Linear(intermediate, hidden)
        self.ln_ffn = nn.LayerNorm(hidden, eps=eps)
        self.act = _ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor, info: PackInfo) -> torch.Tensor:
        tokens = x.shape[0]
        q, k, v = self.qkv(x).view(tokens, 3, self.heads, self.head_dim).unbind(1)
        ctx = varlen_attention(q, k, v, info.cu_seqlens, info.max_seqlen,
                               softmax_scale=1.0 / math.sqrt(self.head_dim))
        x = self.ln_attn(x + self.attn_out(ctx.reshape(tokens, -1)))
        return self.ln_ffn(x + self.ffn_out(self.act(self.ffn_in(x))))


class PaddingFreeBert(nn.Module):
    """BERT encoder that never computes on padding. Returns the last hidden state ``[B, S, H]``
    with zeros at padded positions."""

    def __init__(self, *, vocab_size: int, hidden: int, layers: int, heads: int, intermediate: int,
                 max_position: int, type_vocab_size: int, eps: float = 1e-12,
                 activation: str = "gelu"):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden={hidden} is not divisible by heads={heads}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is not one of {sorted(_ACTIVATIONS)}")
        self.word = nn.Embedding(vocab_size, hidden)
        self.position = nn.Embedding(max_position, hidden)
        self.token_type = nn.Embedding(type_vocab_size, hidden)
        self.ln_embed = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            EncoderLayer(hidden, heads, intermediate, eps, activation) for _ in range(layers))

    @classmethod
    def from_hf(cls, model: nn.Module) -> "PaddingFreeBert":
        """Copy the weights of a HF ``BertModel``; the result has its dtype and device."""
        cfg = model.config
        kind = getattr(cfg, "position_embedding_type", "absolute")
        if kind not in (None, "absolute"):
            raise ValueError(f"position_embedding_type={kind!r} unsupported; only 'absolute'")
        ref = next(model.parameters())
        self = cls(vocab_size=cfg.vocab_size, hidden=cfg.hidden_size, layers=cfg.num_hidden_layers,
                   heads=cfg.num_attention_heads, intermediate=cfg.intermediate_size,
                   max_position=cfg.max_position_embeddings, type_vocab_size=cfg.type_vocab_size,
                   eps=cfg.layer_norm_eps, activation=cfg.hidden_act).to(ref.device, ref.dtype)
        emb = model.embeddings
        with torch.no_grad():
            self.word.weight.copy_(emb.word_embeddings.weight)
            self.position.weight.copy_(emb.position_embeddings.weight)
            self.token_type.weight.copy_(emb.token_type_embeddings.weight)
            _copy_ln(self.ln_embed, emb.LayerNorm)
            for mine, theirs in zip(self.layers, model.encoder.layer):
                att = theirs.attention
                mine.qkv.weight.copy_(torch.cat([att.self.query.weight, att.self.key.weight,
                                                 att.self.value.weight]))
                mine.qkv.bias.copy_(torch.cat([att.self.query.bias, att.self.key.bias,
                                               att.self.value.bias]))
                _copy_linear(mine.attn_out, att.output.dense)
                _copy_ln(mine.ln_attn, att.output.LayerNorm)
                _copy_linear(mine.ffn_in, theirs.intermediate.dense)
                _copy_linear(mine.ffn_out, theirs.output.dense)
                _copy_ln(mine.ln_ffn, theirs.output.LayerNorm)
        return self.eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        info = pack_info(attention_mask)
        ids = pack(input_ids, info)
        types = torch.zeros_like(ids) if token_type_ids is None else pack(token_type_ids, info)
        x = self.word(ids) + self.position(packed_positions(info)) + self.token_type(types)
        x = self.ln_embed(x)
        for layer in self.layers:
            x = layer(x, info)
        return unpack(x, info)


def _copy_linear(dst: nn.Linear, src: nn.Linear) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _copy_ln(dst: nn.LayerNorm, src: nn.LayerNorm) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)
