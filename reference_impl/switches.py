"""The padding-free encoder's optimization switches and the paper's ablation ladder over them.

Plain data, no torch: the harness plans its ablation jobs (one per ``LADDER`` step) without
importing a model. ``reference_impl.bert`` runs the switches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

CPU_GEMMS = ("auto", "torch", "onednn")


def check_cpu_gemm(cpu_gemm: str) -> str:
    if cpu_gemm not in CPU_GEMMS:
        raise ValueError(f"cpu_gemm={cpu_gemm!r} is not one of {CPU_GEMMS}")
    return cpu_gemm


@dataclass(frozen=True)
class Switches:
    padding_free: bool = True
    fused_layernorm: bool = True
    fused_gemm_gelu: bool = True
    fused_mha: bool = True
    backend: str = "auto"  # kernel backend: auto (triton on CUDA) | torch | triton
    cpu_gemm: str = "auto"  # CPU linear layers: auto (oneDNN where usable) | torch | onednn

    def __post_init__(self) -> None:
        check_cpu_gemm(self.cpu_gemm)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


# The paper's steps on F.linear, then the CPU GEMM step (on GPUs the last two steps are equal).
LADDER: list[tuple[str, Switches]] = [
    ("padded, unfused", Switches(False, False, False, False, cpu_gemm="torch")),
    ("+ fused LayerNorm", Switches(False, True, False, False, cpu_gemm="torch")),
    ("+ fused GEMM/GELU", Switches(False, True, True, False, cpu_gemm="torch")),
    ("+ padding-free", Switches(True, True, True, False, cpu_gemm="torch")),
    ("+ fused MHA", Switches(True, True, True, True, cpu_gemm="torch")),
    ("+ oneDNN GEMMs, fused epilogues (CPU)", Switches(True, True, True, True, cpu_gemm="auto")),
]
