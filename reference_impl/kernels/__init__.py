"""Kernels of the reference models. Each has a plain PyTorch path; fused (Triton) paths join here."""

from reference_impl.kernels.attention import varlen_attention

__all__ = ["varlen_attention"]
