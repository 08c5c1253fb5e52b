"""The GEMM shapes a GPU lease times to test ``suite.scale.gemm`` where it matters: the per-GPU
layer GEMMs (forward, input and weight gradient) of published runs, and what the model says of
each. If the shape term is right, measured / peak divided by the predicted tile-and-K
efficiency is one number for every shape (the fitted ceiling); its spread across shapes is the
error the term leaves (``seedbench gpu-check``'s gemm_shapes step). Also what a block's autograd
keeps for its backward, the memory model's activation term measured (the activation_memory
step, and a CPU test)."""

from __future__ import annotations

from scipy.stats import spearmanr

from suite.scale.gemm import backward_gemms, shape_efficiency
from suite.scale.hardware import Hardware
from suite.scale.model import Gemm
from suite.scale.runs import Run


def probe_shapes(runs: list[Run], hw: Hardware, limit: int) -> list[Gemm]:
    """Up to ``limit`` distinct dense GEMMs of the runs' layers and output layers (batched
    attention GEMMs aside), spread evenly over the model's predicted efficiency on ``hw``,
    the least and the most efficient included."""
    seen: dict[tuple[int, int, int], Gemm] = {}
    for run in runs:
        lay = run.layout
        layer = [g for g in run.model.layer_gemms(lay.micro_batch, lay.tp)
                 if g.name not in ("scores", "context")]
        for g in [*layer, run.model.logits_gemm(lay.micro_batch, lay.tp)]:
            for shape in (g, *backward_gemms(g)):
                seen.setdefault((shape.m, shape.n, shape.k), shape)
    ranked = sorted(seen.values(), key=lambda g: (shape_efficiency(g, hw), g.flops))
    if len(ranked) <= limit:
        return ranked
    step = (len(ranked) - 1) / (limit - 1)
    return [ranked[round(i * step)] for i in range(limit)]


def summarize(rows: list[dict]) -> dict:
    """How far the shape term explains the measured efficiencies: the Spearman correlation of
    predicted and measured, and the spread (coefficient of variation) of measured / predicted
    (the ceiling: constant if the term were exact) beside the spread of the measured
    efficiencies themselves (what one constant, the term off, leaves)."""
    timed = [r for r in rows if r.get("correct")]
    if len(timed) < 3:
        return {"shapes_timed": len(timed)}
    measured = [r["fraction_of_peak"] for r in timed]
    ceiling = [r["fraction_of_peak"] / r["predicted_shape_efficiency"] for r in timed]

    def cv(xs: list[float]) -> float:
        mean = sum(xs) / len(xs)
        return (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5 / mean

    return {"shapes_timed": len(timed),
            "spearman_predicted_vs_measured": float(spearmanr(
                [r["predicted_shape_efficiency"] for r in timed], measured).statistic),
            "ceiling_median": sorted(ceiling)[len(ceiling) // 2],
            "ceiling_cv": cv(ceiling), "measured_cv": cv(measured)}


def attention_flops(batch: int, heads: int, seq: int, head_dim: int,
                    causal: bool = True) -> tuple[float, float]:
    """(forward, backward) FLOPs of attention as FlashAttention's own benchmarks count them
    (Dao et al. 2022/2023, whose fractions of peak ``suite.scale.hardware`` carries): the two
    GEMMs, 4 b h s^2 d, halved when causal; the backward 2.5 times the forward (five GEMMs
    against two)."""
    forward = 4.0 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
    return forward, 2.5 * forward


def attention_summary(rows: list[dict], hw: Hardware) -> dict:
    """Per kernel timed correct: the median fraction of peak forward and backward over the
    lengths, beside what the model assumes of the ``flash`` (the architecture's best) and
    ``flash2`` (FlashAttention-2, what SDPA's flash backend runs) kinds on ``hw``: for a long
    sequence (``assumed``) and at each length measured (``assumed_at``)."""
    kinds = ("flash", "flash2")
    seqs = sorted({r["seq"] for r in rows if "seq" in r})
    out: dict = {
        "assumed": {kind: dict(zip(("forward", "backward"), hw.flash_fractions(kind)))
                    for kind in kinds},
        "assumed_at": {kind: {str(s): dict(zip(("forward", "backward"),
                                               hw.flash_fractions(kind, s))) for s in seqs}
                       for kind in kinds}}
    for kernel in sorted({r["kernel"] for r in rows}):
        timed = [r for r in rows if r["kernel"] == kernel and r.get("correct")]
        if not timed:
            continue
        out[kernel] = {
            pass_: sorted(r[f"{pass_}_fraction_of_peak"] for r in timed)[len(timed) // 2]
            for pass_ in ("forward", "backward")}
    return out


def saved_activation_bytes(module, *inputs) -> int:
    """Bytes autograd keeps for the backward of ``module(*inputs)``: every tensor saved for
    backward, each storage counted once (views share one), the module's parameters left out.
    What the memory model's activation term (``suite.scale.memory.layer_activation_bytes``)
    claims to count, measured on any device."""
    import torch

    weights = {p.untyped_storage().data_ptr() for p in module.parameters()}
    kept: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(*inputs)
    return sum(kept.values())


def matmul_flops(module, *inputs) -> float:
    """FLOPs of the matrix products (mm, addmm, bmm; attention kernels aside) that one forward
    and backward of ``module(*inputs)`` (its first output, if a tuple) run, counted by torch's
    FlopCounterMode: checkpointed minus plain is what the backward re-runs, the recompute term
    (``suite.scale.step.forward_reruns``) measured on any device."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        out = module(*inputs)
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()
    ops = counter.get_flop_counts()["Global"]
    return float(sum(n for op, n in ops.items() if str(op).split(".")[-1] in
                     ("mm", "addmm", "bmm")))
