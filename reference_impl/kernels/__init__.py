"""Kernels of the reference models: PyTorch paths everywhere, Triton kernels on CUDA."""

from reference_impl.kernels.attention import length_buckets, padded_attention, varlen_attention
from reference_impl.kernels.fused import add_bias_residual_layernorm, bias_gelu

__all__ = ["add_bias_residual_layernorm", "bias_gelu", "length_buckets", "padded_attention",
           "varlen_attention"]
