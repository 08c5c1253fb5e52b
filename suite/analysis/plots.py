"""Tidy table -> figures (PNG for the page, SVG for print). Figures read tables, never records."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

PAPER_LABEL = "paper: A100 fp16 (another machine)"


def latency_figure(table: pd.DataFrame, paper: pd.DataFrame, out: Path) -> list[Path]:
    """One row per batch size: latency here; speedup here vs the FLOP bounds and the paper's
    speedup; the paper's own latencies. Writes ``out.png`` and ``out.svg``."""
    ok = table[(table.experiment == "bert_varlen") & (table.status == "ok")]
    batch_sizes = sorted(table.batch_size.dropna().unique().astype(int)) or [1]
    fig, axes = plt.subplots(len(batch_sizes), 3, figsize=(15, 3.8 * len(batch_sizes)),
                             squeeze=False, constrained_layout=True)
    for row, b in zip(axes, batch_sizes):
        here = ok[ok.batch_size == b]
        _latency_panel(row[0], here, b)
        _speedup_panel(row[1], here, paper[paper.batch_size == b], b)
        _paper_panel(row[2], paper[paper.batch_size == b], b)
    machine = ", ".join(sorted(ok.machine.dropna().unique())) or "this machine"
    fig.suptitle(f"BERT variable-length inference: padded vs padding-free on {machine}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.with_suffix(".png"), out.with_suffix(".svg")]
    fig.savefig(paths[0], dpi=110)
    fig.savefig(paths[1])
    plt.close(fig)
    return paths


def _latency_panel(ax, here: pd.DataFrame, b: int) -> None:
    for name, g in here.groupby("baseline"):
        g = g.sort_values("max_seq_len")
        err = [g.median_ms - g.q1_ms, g.q3_ms - g.median_ms]
        ax.errorbar(g.max_seq_len, g.median_ms, yerr=err, marker="o", capsize=3, label=name)
    ax.set(title=f"this machine, batch {b}: latency (median, IQR)",
           xlabel="max sequence length", ylabel="ms")
    _legend(ax)


def _speedup_panel(ax, here: pd.DataFrame, paper_b: pd.DataFrame, b: int) -> None:
    sp = here[here.speedup_vs_padded.notna() & here.padding_free.fillna(False).astype(bool)]
    for name, g in sp.groupby("baseline"):
        g = g.sort_values("max_seq_len")
        ax.plot(g.max_seq_len, g.speedup_vs_padded, marker="o", label=f"{name} (here)")
        ax.fill_between(g.max_seq_len, g.speedup_ci_low, g.speedup_ci_high, alpha=0.2)
    bounds = here.drop_duplicates("max_seq_len").sort_values("max_seq_len")
    if not bounds.empty:
        ax.plot(bounds.max_seq_len, bounds.gemm_flop_bound, "k--", lw=1,
                label="GEMM FLOP bound sum(L)/sum(l)")
        ax.plot(bounds.max_seq_len, bounds.attention_flop_bound, "k:", lw=1,
                label="attention FLOP bound sum(L²)/sum(l²)")
    if not here.empty:  # the paper's curve over the lengths measured here, so they compare
        paper_b = paper_b[paper_b.max_seq_len <= here.max_seq_len.max()]
    wide = paper_b.pivot_table(index="max_seq_len", columns="framework", values="latency_ms")
    if {"PyTorch", "ByteTransformer"} <= set(wide.columns):
        ax.plot(wide.index, wide.PyTorch / wide.ByteTransformer, color="grey", marker="x",
                ls="-.", label=f"ByteTransformer / PyTorch, {PAPER_LABEL}")
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set(title=f"batch {b}: speedup over the padded baseline",
           xlabel="max sequence length", ylabel="speedup (x)")
    _legend(ax)


def _paper_panel(ax, paper_b: pd.DataFrame, b: int) -> None:
    for name, g in paper_b.groupby("framework"):
        g = g.sort_values("max_seq_len")
        ax.plot(g.max_seq_len, g.latency_ms, marker=".", label=name)
    ax.set(title=f"{PAPER_LABEL}, batch {b}", xlabel="max sequence length", ylabel="ms")
    if paper_b.empty:
        ax.text(0.5, 0.5, f"the paper reports no batch {b}", ha="center", va="center",
                transform=ax.transAxes)
    _legend(ax)


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
