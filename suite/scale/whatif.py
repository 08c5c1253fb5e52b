"""The scale model as a what-if tool: one layout's estimate, or every layout ranked
(``suite.scale.search``), at the two numbers a system was fitted to on its published runs (or
given explicitly), as plain data for JSON and as a terminal table."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from suite.scale.datasets import CALIBRATION, all_runs, load_paper
from suite.scale.hardware import Hardware, preset
from suite.scale.layout import Layout
from suite.scale.memory import Memory, fullest, stage_memory
from suite.scale.model import ModelConfig
from suite.scale.search import SearchResult
from suite.scale.step import estimate
from suite.scale.systems import system as system_spec
from suite.scale.validate import fit


def fitted_hardware(gpu: str, system: str, gemm_efficiency: float | None,
                    straggler: float | None, paper_dir: Path | None) -> tuple[Hardware, str]:
    """The GPU preset with the system's fitted numbers (either may be given instead), and
    where they came from."""
    system_spec(system)
    hw = preset(gpu)
    source = "given"
    if gemm_efficiency is None or straggler is None:
        if paper_dir is None:
            raise ValueError("give --gemm-efficiency and --straggler, or --paper-dir with the "
                             "published runs to fit them on")
        own = [r for r in all_runs(load_paper(paper_dir)) if r.system == system]
        eff, sigma = fit(own, CALIBRATION)[system]
        gemm_efficiency = eff if gemm_efficiency is None else gemm_efficiency
        straggler = sigma if straggler is None else straggler
        source = f"{system}'s published runs ({paper_dir})"
    return replace(hw, gemm_efficiency=gemm_efficiency, straggler=straggler), source


def _result(model: ModelConfig, hw: Hardware, layout: Layout) -> dict[str, Any]:
    est, stages = estimate(model, hw, layout), stage_memory(model, layout, hw)
    mem = fullest(stages)
    return {"layout": asdict(layout), "micro_batches": layout.micro_batches,
            "iteration_time_s": est.iteration_time_s, "tokens_per_s": est.tokens_per_s,
            "mfu_percent": 100 * est.mfu, "hfu_percent": 100 * est.hfu,
            "memory_gib": mem.total / 2 ** 30, "memory_capacity_gib": mem.capacity / 2 ** 30,
            "memory_stage": mem.stage, "memory_by_stage_gib": [m.total / 2 ** 30 for m in stages],
            "memory_breakdown_gib": memory_breakdown(mem), "fits": mem.fits,
            "breakdown_s": est.breakdown}


MEMORY_KINDS = ("weights", "gradients", "optimizer", "activations", "transient")


def memory_breakdown(mem: Memory) -> dict[str, float]:
    """The fullest stage's GiB by kind; its total is the state plus the larger of the
    activations and the transient (``Memory.total``)."""
    return {kind: getattr(mem, kind) / 2 ** 30 for kind in MEMORY_KINDS}


def what_if(model: ModelConfig, hw: Hardware, layout: Layout, system: str,
            fitted_on: str) -> dict[str, Any]:
    """One layout's estimate, memory and breakdown."""
    return {"model": asdict(model), "gpu": hw.name, "system": system,
            "gemm_efficiency": hw.gemm_efficiency, "straggler": hw.straggler,
            "fitted_on": fitted_on, **_result(model, hw, layout)}


def search_report(model: ModelConfig, hw: Hardware, result: SearchResult, system: str,
                  fitted_on: str, top: int) -> dict[str, Any]:
    """The search's top layouts with their estimates."""
    return {"model": asdict(model), "gpu": hw.name, "system": system,
            "gemm_efficiency": hw.gemm_efficiency, "straggler": hw.straggler,
            "fitted_on": fitted_on, "layouts_considered": result.considered,
            "layouts_too_big": result.too_big, "layouts_ranked": len(result.ranked),
            "top": [_result(model, hw, c.layout) for c in result.ranked[:top]],
            # where nothing fits: how far the layout needing the least memory is from fitting
            "leanest_too_big": None if result.ranked or result.leanest is None
            else _result(model, hw, result.leanest)}


def _layout_line(lay: dict[str, Any]) -> str:
    recompute = lay["recompute"] + ("" if lay["recompute_fraction"] == 1 else
                                    f" x{lay['recompute_fraction']:g}")
    ends = lay["first_stage_layers"], lay["last_stage_layers"]
    split = "" if ends == (None, None) else \
        f", ends {'/'.join('-' if n is None else str(n) for n in ends)}"
    return (f"TP {lay['tp']} x PP {lay['pp']} (v {lay['virtual_stages']}{split}) x DP {lay['dp']}, "
            f"micro-batch {lay['micro_batch']}, recompute {recompute}, "
            f"SP {'on' if lay['sequence_parallel'] else 'off'}, {lay['attention']}, "
            f"{lay['dp_mode']}")


def _memory_kinds(result: dict[str, Any]) -> str:
    """A result's fullest stage's GiB by kind, those it holds."""
    return ", ".join(f"{kind} {gib:.1f}" for kind, gib in
                     result["memory_breakdown_gib"].items() if gib)


def as_text(result: dict[str, Any]) -> str:
    """A what-if result as a short table for the terminal."""
    lines = [f"{result['system']} on {result['gpu']}: {_layout_line(result['layout'])}, "
             f"{result['micro_batches']} micro-batches",
             f"gemm efficiency {result['gemm_efficiency']:.3f}, straggler "
             f"{result['straggler']:.4f} ({result['fitted_on']})",
             f"iteration time  {result['iteration_time_s']:.3f} s",
             f"tokens/s        {result['tokens_per_s']:,.0f}",
             f"MFU             {result['mfu_percent']:.1f}%  (HFU {result['hfu_percent']:.1f}%; "
             f"peak: the {result['gpu']} datasheet's dense bf16)",
             f"memory          {result['memory_gib']:.1f} GiB of "
             f"{result['memory_capacity_gib']:.1f} usable on stage {result['memory_stage']}"
             + (f" (first stage {result['memory_by_stage_gib'][0]:.1f}, last "
                f"{result['memory_by_stage_gib'][-1]:.1f})"
                if len(result["memory_by_stage_gib"]) > 1 else "")
             + ("" if result["fits"] else "  DOES NOT FIT"),
             f"  {_memory_kinds(result)}"]
    total = result["iteration_time_s"]
    for name, seconds in result["breakdown_s"].items():
        lines.append(f"  {name.removesuffix('_s'):14s} {seconds:8.3f} s  "
                     f"{100 * seconds / total:5.1f}%")
    return "\n".join(lines)


def search_as_text(report: dict[str, Any]) -> str:
    """The search's ranking as a table for the terminal."""
    lines = [f"{report['system']} on {report['gpu']} (gemm efficiency "
             f"{report['gemm_efficiency']:.3f}, straggler {report['straggler']:.4f}; "
             f"{report['fitted_on']})",
             f"{report['layouts_considered']} layouts, {report['layouts_too_big']} do not fit "
             f"in memory, {report['layouts_ranked']} ranked"
             + ("; the fastest:" if report["top"] else "")]
    lean = report.get("leanest_too_big")
    if lean:
        lines.append(f"none fits: the layout needing the least memory, "
                     f"{_layout_line(lean['layout'])}, needs {lean['memory_gib']:.1f} GiB of "
                     f"the {lean['memory_capacity_gib']:.1f} usable on stage "
                     f"{lean['memory_stage']} ({_memory_kinds(lean)}); more GPUs, or a GPU with "
                     "more memory, would fit")
    if report["top"]:
        lines.append(f"{'#':>3} {'time s':>8} {'MFU %':>6} {'GiB':>6}  layout")
    for i, r in enumerate(report["top"], start=1):
        lines.append(f"{i:>3} {r['iteration_time_s']:8.3f} {r['mfu_percent']:6.1f} "
                     f"{r['memory_gib']:6.1f}  {_layout_line(r['layout'])}")
    return "\n".join(lines)
