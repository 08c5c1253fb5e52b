"""A BERT encoder written in TensorFlow, padded: the paper's "TensorFlow" baseline.

The encoder is a few plain functions over a dict of weights (nanoGPT style), copied from the
canonical HF ``BertModel`` so it computes the same function from the same weights:

    embeddings:  word[ids] + position[0..S) + token_type[types] -> LayerNorm
    each layer:  x -> fused QKV dense -> per-head softmax(q k^T / sqrt(d) + mask bias) v
                   -> output dense -> LayerNorm(x + .)
                 x -> dense -> exact (erf) GELU -> dense -> LayerNorm(x + .)

Every sequence is computed at the full padded length ``S``; padded keys get a large negative
additive bias (HF's ``finfo.min``), so padding never leaks into valid positions, but the padded
positions are computed all the same.

Two systems share the code and differ only in how the function is run:

- ``tensorflow``: ``tf.function`` (a TF graph, Grappler-optimized, no XLA);
- ``tensorflow-xla``: ``tf.function(jit_compile=True)`` (the whole encoder one XLA cluster).

TensorFlow is imported lazily (``available``/``prepare``), never at module import, and always
after triton (see ``_import_tf``).
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

import numpy as np
import torch

from suite.baselines.base import Baseline, FirstCalls, Supports
from suite.baselines.bert_weights import bert_weights
from suite.workloads import BertBatch


def _import_tf():
    """Import tensorflow, triton first where it is installed.

    Importing triton after tensorflow crashes the process (SIGSEGV loading ``triton._C``), and
    torch imports triton lazily: building the HF model (transformers -> ``torch._dynamo``) or
    ``torch.compile`` would do it after this baseline's import. Importing triton first is safe.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no INFO/WARNING spam from the C++ side
    if importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401

    import tensorflow as tf

    return tf


# --------------------------------------------------------------------------- the encoder


def make_encoder(tf, weights: dict[str, Any], heads: int, eps: float):
    """``encoder(input_ids, token_type_ids, attention_mask) -> [B, S, H]`` (int32 inputs
    ``[B, S]``), closing over ``weights`` (tf tensors, same structure as ``bert_weights``)."""

    def dense(x, wb):  # x [N, in] -> [N, out]
        w, b = wb
        return tf.matmul(x, w) + b

    def layer_norm(x, gb):
        gamma, beta = gb
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + eps) * gamma + beta

    def attention(x, mask_bias, layer, batch, seq):  # x [B*S, H]
        hidden = x.shape[-1]
        head_dim = hidden // heads
        qkv = dense(x, layer["qkv"])  # [B*S, 3H]
        qkv = tf.reshape(qkv, [batch, seq, 3, heads, head_dim])
        qkv = tf.transpose(qkv, [2, 0, 3, 1, 4])  # [3, B, heads, S, d]
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(head_dim))
        probs = tf.nn.softmax(scores + mask_bias, axis=-1)  # [B, heads, S, S]
        context = tf.matmul(probs, v)  # [B, heads, S, d]
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch * seq, hidden])
        return dense(context, layer["attn_out"])

    def encoder_layer(x, mask_bias, layer, batch, seq):
        x = layer_norm(x + attention(x, mask_bias, layer, batch, seq), layer["attn_norm"])
        h = tf.nn.gelu(dense(x, layer["ffn_in"]), approximate=False)  # HF "gelu": erf form
        return layer_norm(x + dense(h, layer["ffn_out"]), layer["ffn_norm"])

    def encoder(input_ids, token_type_ids, attention_mask):
        batch, seq = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
        x = (tf.gather(weights["word"], input_ids)
             + tf.gather(weights["token_type"], token_type_ids)
             + weights["position"][None, :seq])
        hidden = x.shape[-1]
        x = layer_norm(tf.reshape(x, [batch * seq, hidden]), weights["embed_norm"])
        # Additive key mask, [B, 1, 1, S]: 0 on valid keys, the most negative float on padding.
        keep = tf.cast(attention_mask, x.dtype)[:, None, None, :]
        mask_bias = (1.0 - keep) * x.dtype.min
        for layer in weights["layers"]:
            x = encoder_layer(x, mask_bias, layer, batch, seq)
        return tf.reshape(x, [batch, seq, hidden])

    return encoder


# --------------------------------------------------------------------------- the baselines


class TensorFlowEager(Baseline):
    name = "tensorflow"
    description = ("BERT encoder written in TensorFlow (HF weights), tf.function graph without "
                   "XLA, padded to max_seq_len")
    supports = Supports(devices=("cpu", "cuda"), dtypes=("fp32",))
    jit_compile = False

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("tensorflow") is None:
            return False, "tensorflow is not installed"
        try:
            _import_tf()
        except Exception as e:  # noqa: BLE001 - missing or broken install: a reason, not a crash
            return False, f"tensorflow cannot be imported: {type(e).__name__}: {e}"
        return True, ""

    def can_run(self, task: str, device: str, dtype: str) -> tuple[bool, str]:
        ok, why = super().can_run(task, device, dtype)
        if ok and device == "cuda" and not _import_tf().config.list_physical_devices("GPU"):
            return False, "device 'cuda' requested but TensorFlow sees no GPU (a CPU-only build?)"
        return ok, why

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        if dtype != torch.float32:
            raise ValueError(f"{self.name} runs fp32 only, got {dtype}")
        tf = self.tf = _import_tf()
        self._set_threads(tf, torch.get_num_threads())
        if device.type == "cuda":
            for gpu in tf.config.list_physical_devices("GPU"):  # share the GPU with torch
                try:
                    tf.config.experimental.set_memory_growth(gpu, True)
                except RuntimeError:  # already initialized: keep what is set
                    pass
            self.tf_device = f"/GPU:{device.index or 0}"
        else:
            self.tf_device = "/CPU:0"
        with tf.device(self.tf_device):
            weights = tf.nest.map_structure(tf.constant, bert_weights(model))
            encoder = make_encoder(tf, weights, model.config.num_attention_heads,
                                   model.config.layer_norm_eps)
        self.fn = tf.function(encoder, jit_compile=self.jit_compile, reduce_retracing=True)
        self.first_calls = FirstCalls()

    @staticmethod
    def _set_threads(tf, n: int) -> None:
        """As many intra-op threads as torch uses, and one inter-op thread (ops run one after
        another, as torch runs them), set before the runtime starts."""
        threading = tf.config.threading
        for setter, getter, want in (
                (threading.set_intra_op_parallelism_threads,
                 threading.get_intra_op_parallelism_threads, n),
                (threading.set_inter_op_parallelism_threads,
                 threading.get_inter_op_parallelism_threads, 1)):
            try:
                setter(want)
            except RuntimeError as e:  # the TF runtime already started in this process
                if getter() != want:
                    raise RuntimeError(f"TensorFlow already runs with {getter()} threads, "
                                       f"{want} wanted: {e}") from e

    def run(self, batch: BertBatch) -> np.ndarray:
        tf = self.tf
        with tf.device(self.tf_device):
            args = [tf.constant(t.cpu().numpy(), dtype=tf.int32)
                    for t in (batch.input_ids, batch.token_type_ids, batch.attention_mask)]
            # a shape's first call: trace (+ XLA compile) + run; .numpy() waits for it
            return self.first_calls.call(batch, lambda: self.fn(*args).numpy())

    def details(self) -> dict[str, Any]:
        tf = self.tf
        return {
            "tensorflow": tf.__version__,
            "execution": "tf.function + XLA (jit_compile=True)" if self.jit_compile
                         else "tf.function graph, no XLA",
            "jit_compile": self.jit_compile,
            "tf_device": self.tf_device,
            "first_call_s": next(iter(self.first_calls.by_shape.values()), None),
            "first_call_s_by_shape": dict(self.first_calls.by_shape),
            "first_call_includes": "trace + graph optimization" + (" + XLA compile"
                                   if self.jit_compile else "") + " + one run",
            "traces": self.fn.experimental_get_tracing_count(),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "timed_call_includes": "int32 input conversion and the output's .numpy() copy",
        }


class TensorFlowXla(TensorFlowEager):
    name = "tensorflow-xla"
    description = ("BERT encoder written in TensorFlow (HF weights), XLA-compiled "
                   "(tf.function jit_compile=True), padded to max_seq_len")
    jit_compile = True
