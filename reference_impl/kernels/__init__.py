"""Kernels of the reference models: PyTorch paths everywhere, Triton kernels on CUDA, oneDNN
linear layers with fused epilogues on CPU (``cpu_linear``)."""

from reference_impl.kernels.attention import (bucket_plan, length_buckets, padded_attention,
                                              varlen_attention)
from reference_impl.kernels.fused import add_bias_residual_layernorm, bias_gelu

__all__ = ["add_bias_residual_layernorm", "bias_gelu", "bucket_plan", "length_buckets",
           "padded_attention", "varlen_attention"]
