"""BERT on PyTorch nested tensors (jagged layout): padding-free with stock PyTorch ops.

The forward is written here over the HF ``BertModel``'s own modules (its Linear, LayerNorm and
Embedding weights), nanoGPT style: embeddings of the valid tokens only, packed into a jagged
``[B, j, H]`` nested tensor, then every layer runs on it: Linear, LayerNorm and GELU act on the
packed values, attention is ``F.scaled_dot_product_attention`` on ``[B, heads, j, d]``, which
attends within each sequence, so no mask and no padding is ever computed. The result is padded
back to ``[B, S, H]`` with zeros at padding.

Sequences of length 0 are left out of the nested tensor (the fused CUDA attention kernels
refuse empty components) and come back as all-zero rows.

Why it is slow on a GPU (120-128 ms at b16 on an H200 at both L128 and L1024, where HF eager
takes 6-27 ms): the jagged layout is a Python tensor subclass, so every op on it passes through
its ``__torch_function__`` and ``__torch_dispatch__`` in Python (argument normalization,
wrapping a new subclass instance): about 10,000 Python calls per layer, 122,000 per BERT-base
forward whatever the lengths, measured on CPU (``build`` counts them; the record keeps the count
as ``python_calls_per_forward``). The host takes that long to queue the work, and the GPU waits.
"""

from __future__ import annotations

import copy
import sys

import torch
import torch.nn.functional as F

from suite.baselines.base import Baseline
from suite.models import uses_token_types
from suite.workloads import BertBatch


def self_attention(layer, x: torch.Tensor, n_head: int) -> torch.Tensor:
    """Multi-head self-attention of one BERT layer on a jagged ``[B, j, H]`` tensor."""
    attn = layer.attention.self

    def heads(t: torch.Tensor) -> torch.Tensor:  # [B, j, H] -> [B, heads, j, d]
        # A fresh Linear output is contiguous as [B, j, heads, d], which the CPU (math) path of
        # jagged SDPA requires of q/k/v "after transposing".
        return t.unflatten(-1, (n_head, -1)).transpose(1, 2)

    q, k, v = heads(attn.query(x)), heads(attn.key(x)), heads(attn.value(x))
    y = F.scaled_dot_product_attention(q, k, v)  # non-causal: every token sees its sequence
    y = y.transpose(1, 2).flatten(-2)  # [B, j, H]
    out = layer.attention.output
    return out.LayerNorm(out.dense(y) + x)


def feed_forward(layer, x: torch.Tensor) -> torch.Tensor:
    h = layer.intermediate.intermediate_act_fn(layer.intermediate.dense(x))
    return layer.output.LayerNorm(layer.output.dense(h) + x)


class TorchNested(Baseline):
    """Padding-free: only valid tokens are embedded, multiplied and attended (jagged layout)."""

    name = "torch-nested"
    description = "BERT forward on PyTorch nested tensors (jagged layout), padding-free"
    padding_free = True

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        import transformers as tf

        if type(model) is not tf.BertModel:
            raise TypeError(f"torch-nested implements BertModel only, got {type(model).__name__}")
        self.model = copy.deepcopy(model).to(device, dtype).eval()
        self.n_head = model.config.num_attention_heads
        self.hidden = model.config.hidden_size
        self.token_types = uses_token_types(model)

    def embed(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """Word + position + token-type embeddings, then LayerNorm, of valid tokens: ``[T, H]``."""
        emb = self.model.embeddings
        valid = mask.bool()
        positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)[valid]
        x = emb.word_embeddings(ids[valid]) + emb.position_embeddings(positions)
        if self.token_types:
            x = x + emb.token_type_embeddings(types[valid])
        return emb.LayerNorm(x)

    def build(self, batch: BertBatch) -> None:
        """One untimed call with Python's profile hook counting the calls the forward makes
        (Python functions and builtins): the host's share of the work, the cause of this
        system's time on a GPU (module docstring). The hook costs only this call."""
        calls = 0

        def count(frame, event, arg) -> None:
            nonlocal calls
            calls += event in ("call", "c_call")

        sys.setprofile(count)
        try:
            self.run(batch)
        finally:
            sys.setprofile(None)
        self.python_calls = calls

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        B, S = batch.input_ids.shape
        out = torch.zeros(B, S, self.hidden, device=batch.input_ids.device,
                          dtype=self.model.embeddings.word_embeddings.weight.dtype)
        lengths = [int(n) for n in batch.lengths]
        rows = [i for i, n in enumerate(lengths) if n > 0]  # empty sequences stay zero
        if not rows:
            return out
        keep = torch.tensor(rows, device=batch.input_ids.device)
        lens = [lengths[i] for i in rows]
        values = self.embed(batch.input_ids[keep], batch.attention_mask[keep],
                            batch.token_type_ids[keep])
        offsets = torch.tensor([0, *lens], device=values.device).cumsum(0)
        x = torch.nested.nested_tensor_from_jagged(values, offsets, min_seqlen=min(lens),
                                                   max_seqlen=max(lens))  # [b, j, H]
        for layer in self.model.encoder.layer:
            x = feed_forward(layer, self_attention(layer, x, self.n_head))
        out[keep] = x.to_padded_tensor(0.0, output_size=(len(rows), S, self.hidden))
        return out

    def details(self) -> dict:
        return {"layout": "jagged", "attention": "F.scaled_dot_product_attention (nested)",
                "python_calls_per_forward": getattr(self, "python_calls", None),
                "host_cost": "each op on the jagged tensor subclass is dispatched in Python"}
