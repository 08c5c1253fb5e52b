"""``seedbench scale-model``: the cluster-scale model as a what-if tool. A model shape, a GPU
count and a layout in; iteration time, tokens/s, MFU and the breakdown out, at the efficiency
and straggler constant of a system fitted on its published runs (or given explicitly).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from suite.scale_datasets import SYSTEMS, all_runs, fit, load_paper, system_layout
from suite.scale_model import HARDWARE, RECOMPUTE, ModelConfig, estimate


def what_if(*, layers: int, hidden: int, heads: int, seq_len: int, vocab: int, gpus: int,
            tp: int, pp: int, micro_batch: int, global_batch: int, virtual_stages: int = 1,
            recompute: str = "none", sequence_parallel: bool = False,
            flash_attention: bool | None = None, distributed_optimizer: bool | None = None,
            hardware: str = "H100", system: str = "Megatron-Core r0.8 (H100)",
            gemm_efficiency: float | None = None, straggler: float | None = None,
            paper_dir: Path | None = None) -> dict[str, Any]:
    """One estimate. The system gives the overlaps, attention kind and optimizer (unless
    overridden) and, unless both are given, its fitted efficiency and straggler constant."""
    if system not in SYSTEMS:
        raise ValueError(f"system {system!r} is not one of {sorted(SYSTEMS)}")
    if hardware not in HARDWARE:
        raise ValueError(f"hardware {hardware!r} is not one of {sorted(HARDWARE)}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute {recompute!r} is not one of {RECOMPUTE}")
    model = ModelConfig(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab)
    overrides = {name: value for name, value in (("flash_attention", flash_attention),
                                                 ("distributed_optimizer", distributed_optimizer))
                 if value is not None}
    layout = system_layout(system, gpus, global_batch, tp, pp, virtual_stages, micro_batch,
                           recompute=recompute, sequence_parallel=sequence_parallel, **overrides)
    fitted_on = "given"
    if gemm_efficiency is None or straggler is None:
        if paper_dir is None:
            raise ValueError("give --gemm-efficiency and --straggler, or --paper-dir with the "
                             "published runs to fit them on")
        fits = fit(all_runs(load_paper(paper_dir)))
        gemm_efficiency = fits[system].gemm_efficiency if gemm_efficiency is None \
            else gemm_efficiency
        straggler = fits[system].straggler if straggler is None else straggler
        fitted_on = f"{system}'s published runs ({paper_dir})"
    hw = replace(HARDWARE[hardware], gemm_efficiency=gemm_efficiency, straggler=straggler)
    est = estimate(model, hw, layout)
    return {"model": asdict(model), "layout": asdict(layout), "hardware": hardware,
            "system": system, "gemm_efficiency": gemm_efficiency, "straggler": straggler,
            "fitted_on": fitted_on, "micro_batches": layout.micro_batches,
            "iteration_time_s": est.iteration_time_s, "tokens_per_s": est.tokens_per_s,
            "mfu_percent": 100 * est.mfu, "hfu_percent": 100 * est.hfu,
            "breakdown_s": est.breakdown}


def as_text(result: dict[str, Any]) -> str:
    """A short table for the terminal."""
    lay = result["layout"]
    lines = [f"{result['system']} on {result['hardware']}: TP {lay['tp']} x PP {lay['pp']} "
             f"(v {lay['virtual_stages']}) x DP {lay['dp']}, micro-batch {lay['micro_batch']}, "
             f"{result['micro_batches']} micro-batches, recompute {lay['recompute']}, "
             f"sequence parallel {lay['sequence_parallel']}",
             f"gemm efficiency {result['gemm_efficiency']:.3f}, straggler "
             f"{result['straggler']:.4f} ({result['fitted_on']})",
             f"iteration time  {result['iteration_time_s']:.3f} s",
             f"tokens/s        {result['tokens_per_s']:,.0f}",
             f"MFU             {result['mfu_percent']:.1f}%  (HFU {result['hfu_percent']:.1f}%)"]
    total = result["iteration_time_s"]
    for name, seconds in result["breakdown_s"].items():
        lines.append(f"  {name.removesuffix('_s'):14s} {seconds:8.3f} s  "
                     f"{100 * seconds / total:5.1f}%")
    return "\n".join(lines)
