"""Figures of the LLM-training experiments (MegaScale): the cluster-scale model against the paper,
and the measured MFU sweep, ablation ladder and engines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from suite.analysis.figure_io import FigureData, plt, save_figure  # plt: the Agg backend set

SYSTEM_COLORS = {"Megatron-LM": "tab:orange", "MegaScale": "tab:blue"}


def scale_figure(data: FigureData, out: Path) -> list[Path]:
    """Table 2 (175B strong scaling): iteration time and MFU vs GPUs, paper points beside the
    model's predictions (calibration rows ringed); Figure 9 (530B weak scaling): MFU."""
    table = data.table
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    t2, f9 = table[table.figure == "table2"], table[table.figure == "fig9"]
    for system, color in SYSTEM_COLORS.items():
        for ax, frame, y, by in ((axes[0], t2, "iteration_time_s", "batch_size"),
                                 (axes[1], t2, "mfu_percent", "batch_size"),
                                 (axes[2], f9, "mfu_percent", "system")):  # Fig 9: batch ~ GPUs
            g = frame[frame.system == system].sort_values("gpus")
            for i, (_, gb) in enumerate(g.groupby(by)):
                ax.plot(gb.gpus, gb[f"predicted_{y}"], "x--", color=color,
                        label=f"{system}: model" if i == 0 else None)
                ax.plot(gb.gpus, gb[f"paper_{y}"], "o-", color=color,
                        label=f"{system}: paper" if i == 0 else None)
            cal = g[g.calibration]
            ax.scatter(cal.gpus, cal[f"paper_{y}"], s=160, facecolors="none", edgecolors="k",
                       zorder=4, label="calibration row" if system == "MegaScale" else None)
    axes[0].set(xscale="log", yscale="log", xlabel="GPUs", ylabel="iteration time (s)",
                title="175B strong scaling: iteration time (batch 768, then 6144)")
    axes[1].set(xscale="log", xlabel="GPUs", ylabel="MFU (%)", title="175B strong scaling: MFU")
    axes[2].set(xscale="log", xlabel="GPUs", ylabel="MFU (%)",
                title="530B weak scaling (Fig. 9): MFU")
    for ax in axes:
        ax.legend(fontsize=6)
    fig.suptitle("Cluster-scale model (calibrated on one row per system) vs MegaScale")
    return save_figure(fig, out)


def _bars(ax, labels: list[str], values, annotations: list[str], ylabel: str, title: str):
    x = range(len(labels))
    ax.bar(x, values, color="tab:blue")
    for i, (v, text) in enumerate(zip(values, annotations)):
        if pd.notna(v):
            ax.annotate(text, (i, v), ha="center", va="bottom", fontsize=7, xytext=(0, 3),
                        textcoords="offset points")
    ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel=ylabel, title=title)


def mfu_sweep_figure(data: FigureData, out: Path) -> list[Path]:
    return _mfu_figure(data.table, out, "MFU sweep: model sizes x engines")


def engines_figure(data: FigureData, out: Path) -> list[Path]:
    return _mfu_figure(data.table, out, "Engines at equal model and global batch")


def _mfu_figure(table: pd.DataFrame, out: Path, title: str) -> list[Path]:
    """MFU per run (tokens/s on each bar) and the peak memory per rank."""
    ok = table[table.status == "ok"].sort_values(["n_params", "system"])
    labels = [f"{r.model}\n{r.system} x{r.world_size}" for r in ok.itertuples()]
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.3 * len(ok) + 4), 4.2),
                             constrained_layout=True)
    _bars(axes[0], labels, ok.mfu_percent, [f"{v:.0f} tok/s" for v in ok.tokens_per_s],
          "MFU (% of the measured peak)", "MFU (model FLOPs, no recompute)")
    _bars(axes[1], labels, ok.peak_mem_mb, [f"{v:.0f}" for v in ok.peak_mem_mb],
          "MiB", "peak memory of rank 0")
    fig.suptitle(title)
    return save_figure(fig, out)


def ablation_figure(data: FigureData, out: Path) -> list[Path]:
    """The ladder measured here (MFU at the baseline's FLOP count) beside Table 3's."""
    ok = data.table[data.table.status == "ok"].sort_values("step")
    paper = data.paper_table("table3")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), constrained_layout=True)
    gains = ok.mfu_fixed_percent.diff()
    _bars(axes[0], list(ok.technique), ok.mfu_fixed_percent,
          [f"{v:.1f}%" + ("" if pd.isna(g) else f" ({g:+.1f})")
           for v, g in zip(ok.mfu_fixed_percent, gains)],
          "MFU (%, baseline FLOP count)", "measured here")
    if not paper.empty:
        _bars(axes[1], list(paper.technique), paper.mfu_percent,
              [f"{v:.1f}%" for v in paper.mfu_percent], "MFU (%)",
              "MegaScale Table 3 (175B, 256 A100s)")
    fig.suptitle("MegaScale's optimizations, one after another")
    return save_figure(fig, out)


def loss_figure(data: FigureData, out: Path) -> list[Path]:
    """Training loss against tokens seen (the table step's curves), held-out loss at the end."""
    table, curves = data.table, data.curves
    if curves is None:
        raise ValueError("llm_loss: the figure draws the table step's curves.csv (--curves)")
    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    for r in table[table.status == "ok"].itertuples():
        run = curves[curves.record == r.record].sort_values("step")
        line, = ax.plot(run.tokens, run.loss,
                        label=f"{r.optimizer}, batch {r.global_batch}, lr {r.lr:g}")
        if pd.notna(r.eval_loss):
            ax.scatter([run.tokens.max()], [r.eval_loss], color=line.get_color(), marker="*",
                       s=120, zorder=3, label=f"held-out {r.eval_loss:.3f}")
    ax.set(xlabel="tokens", ylabel="loss (nats/byte)",
           title="Loss on the King James text: AdamW vs LAMB at a larger batch")
    ax.legend(fontsize=7)
    return save_figure(fig, out)
