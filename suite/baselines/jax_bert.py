"""A BERT encoder written in JAX and compiled by XLA (``jax.jit``), padded: the XLA compiler
among the paper's competitors on any machine JAX runs on (TensorFlow's XLA needs TensorFlow,
which the GPU machines here lack; JAX is on them).

The same function as ``tensorflow_bert`` from the same weights (``bert_weights``), written as a
few plain functions: embeddings -> LayerNorm; each layer a fused QKV dense, per-head
softmax(q k^T / sqrt(d) + key-mask bias) v, output dense, LayerNorm(x + .), then dense, exact
(erf) GELU, dense, LayerNorm(x + .). Every sequence is computed at the padded length. In fp16 and
bf16 the LayerNorm statistics and the softmax run in fp32, as torch's kernels do.

``jax.jit`` compiles the whole encoder once per batch shape (the first call, timed apart as
``first_call_s``). JAX is imported on first use with its GPU memory preallocation off, so it
shares the GPU with torch (the oracle, the inputs).
"""

from __future__ import annotations

import importlib.util
import math
import os
from functools import partial
from typing import Any

import torch

from suite.baselines.base import Baseline, FirstCalls, Supports
from suite.baselines.bert_weights import bert_weights
from suite.workloads import BertBatch


def _import_jax():
    # by default XLA takes 75% of the GPU's memory at its first use, leaving torch too little
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    return jax


def encoder(weights: dict[str, Any], input_ids, token_type_ids, attention_mask, *, heads: int,
            eps: float):
    """``[B, S]`` int inputs -> the last hidden state ``[B, S, H]`` in the weights' dtype."""
    import jax
    import jax.numpy as jnp

    dtype = weights["word"].dtype

    def dense(x, wb):
        w, b = wb
        return x @ w + b

    def layer_norm(x, gb):
        gamma, beta = gb
        x32 = x.astype(jnp.float32)
        mean = x32.mean(-1, keepdims=True)
        var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
        return ((x32 - mean) * jax.lax.rsqrt(var + eps)).astype(dtype) * gamma + beta

    def attention(x, bias, layer):
        b, s, hidden = x.shape
        d = hidden // heads
        q, k, v = dense(x, layer["qkv"]).reshape(b, s, 3, heads, d).transpose(2, 0, 3, 1, 4)
        scores = (q @ k.swapaxes(-1, -2)).astype(jnp.float32) * (1.0 / math.sqrt(d)) + bias
        context = jax.nn.softmax(scores, axis=-1).astype(dtype) @ v  # [B, heads, S, d]
        return dense(context.transpose(0, 2, 1, 3).reshape(b, s, hidden), layer["attn_out"])

    seq = input_ids.shape[1]
    x = (weights["word"][input_ids] + weights["token_type"][token_type_ids]
         + weights["position"][:seq][None])
    x = layer_norm(x, weights["embed_norm"])
    # additive key mask [B, 1, 1, S] in fp32: 0 on valid keys, the most negative fp32 on padding
    bias = jnp.where(attention_mask[:, None, None, :] > 0, 0.0, jnp.finfo(jnp.float32).min)
    for layer in weights["layers"]:
        x = layer_norm(x + attention(x, bias, layer), layer["attn_norm"])
        h = jax.nn.gelu(dense(x, layer["ffn_in"]), approximate=False)
        x = layer_norm(x + dense(h, layer["ffn_out"]), layer["ffn_norm"])
    return x


class JaxXla(Baseline):
    name = "jax-xla"
    description = ("BERT encoder written in JAX (HF weights), XLA-compiled (jax.jit), padded to "
                   "max_seq_len")
    supports = Supports(devices=("cpu", "cuda"), dtypes=("fp32", "fp16", "bf16"))

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("jax") is None:
            return False, "jax is not installed"
        try:
            _import_jax()
        except Exception as e:  # noqa: BLE001 - a broken install is a reason, not a crash
            return False, f"jax cannot be imported: {type(e).__name__}: {e}"
        return True, ""

    def can_run(self, task: str, device: str, dtype: str) -> tuple[bool, str]:
        ok, why = super().can_run(task, device, dtype)
        if ok and device == "cuda":
            jax = _import_jax()
            try:
                jax.devices("gpu")
            except RuntimeError as e:
                return False, f"device 'cuda' requested but JAX sees no GPU (a CPU jaxlib?): {e}"
        return ok, why

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        jax = self.jax = _import_jax()
        import jax.numpy as jnp

        self.device = jax.devices("gpu" if device.type == "cuda" else "cpu")[device.index or 0]
        jdtype = {torch.float32: jnp.float32, torch.float16: jnp.float16,
                  torch.bfloat16: jnp.bfloat16}[dtype]
        self.weights = jax.tree_util.tree_map(lambda a: jax.device_put(a.astype(jdtype),
                                                                       self.device),
                                              bert_weights(model))
        self.fn = jax.jit(partial(encoder, heads=model.config.num_attention_heads,
                                  eps=model.config.layer_norm_eps))
        self.first_calls = FirstCalls()

    def run(self, batch: BertBatch) -> torch.Tensor:
        """The inputs reach JAX and the output torch through DLPack (no host copy on a GPU).
        Each call waits for its result: JAX queues on its own streams, which torch's events
        do not see, so back to back here is call after call."""
        from jax import dlpack

        args = [dlpack.from_dlpack(t.contiguous()) for t in
                (batch.input_ids, batch.token_type_ids, batch.attention_mask)]
        # a new shape's first call: trace + XLA compile + one run
        out = self.first_calls.call(
            batch, lambda: self.fn(self.weights, *args).block_until_ready())
        return torch.from_dlpack(out)

    def details(self) -> dict[str, Any]:
        jax = self.jax
        return {"jax": jax.__version__, "execution": "jax.jit (XLA), one program per shape",
                "jax_device": str(self.device), "first_call_s": dict(self.first_calls.by_shape),
                "first_call_includes": "trace + XLA compile + one run",
                "each_call_waits": "block_until_ready (JAX's streams are not torch's)",
                "cpu_threads": "XLA's own pool (all cores; the config's threads not applied)"}
