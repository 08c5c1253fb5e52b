"""What the ByteTransformer family's jobs are called: the kernel micro-benchmarks' operators and
systems, and the name of each step of the reference's ablation ladder. Torch-free: the planner
(``suite.experiments.plan``) and the runners (``bert_kernels``, ``bert_varlen``) both read it."""

from __future__ import annotations

OPS = {"bert_mha": ("attention",), "bert_fused_ops": ("layernorm", "gemm_gelu")}
SYSTEMS = {"bert_mha": ("varlen", "padded-unfused", "padded-sdpa"),
           "bert_fused_ops": ("fused", "unfused")}


def ladder_name(step: int) -> str:
    """Baseline name of step ``step`` of ``reference_impl.LADDER`` (experiment bert_ablation)."""
    return f"ladder-{step}"
