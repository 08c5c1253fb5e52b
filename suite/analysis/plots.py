"""Tidy table -> figures (PNG for the page, SVG for print). Figures read tables, never records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from suite.analysis.figure_io import FigureData, plt, save_figure  # plt: the Agg backend set

PAPER_LABEL = "paper: A100 fp16 (another machine)"


def latency_figure(table: pd.DataFrame, paper: pd.DataFrame, out: Path,
                   peak: dict | None = None) -> list[Path]:
    """One row per batch size: latency here; speedup here vs the FLOP bounds and the paper's
    speedup; the paper's own latencies; then the speedup map, the frameworks at the largest
    point and the roofline. Writes ``out.svg``."""
    ok = table[(table.experiment == "bert_varlen") & (table.status == "ok")]
    batch_sizes = sorted(table.batch_size.dropna().unique().astype(int)) or [1]
    fig, axes = plt.subplots(len(batch_sizes) + 1, 3, figsize=(15, 3.8 * (len(batch_sizes) + 1)),
                             squeeze=False, constrained_layout=True)
    for row, b in zip(axes, batch_sizes):
        here = ok[ok.batch_size == b]
        _latency_panel(row[0], here, b, paper[paper.batch_size == b])
        _speedup_panel(row[1], here, paper[paper.batch_size == b], b)
        _paper_panel(row[2], paper[paper.batch_size == b], b)
    _heatmap_panel(axes[-1][0], ok)
    _framework_bars(axes[-1][1], ok)
    roofline_panel(axes[-1][2], ok, peak)
    machine = ", ".join(sorted(ok.machine.dropna().unique())) or "this machine"
    fig.suptitle(f"BERT variable-length inference: padded vs padding-free on {machine}")
    return save_figure(fig, out)


def roofline_panel(ax, ok: pd.DataFrame, peak: dict | None) -> None:
    """Each system's useful GFLOP/s at each point against a line per GEMM library's measured
    peak on this machine (and the theoretical peak where it is known): who sits how close to
    which limit, and whether a framework beats the library the suite timed."""
    if ok.empty or "useful_gflops_per_s" not in ok:
        ax.text(0.5, 0.5, "no timed points", ha="center", va="center")
        ax.axis("off")
        return
    points = sorted({(int(b), int(s)) for b, s in zip(ok.batch_size, ok.max_seq_len)})
    x = {p: i for i, p in enumerate(points)}
    systems = sorted(ok.system.unique(), key=lambda n: (n != "reference", n))
    markers = "o^svD<>phX*d"
    for i, name in enumerate(systems):
        rows = ok[ok.system == name].sort_values(["batch_size", "max_seq_len"])
        xs = [x[(int(b), int(s))] for b, s in zip(rows.batch_size, rows.max_seq_len)]
        ax.plot(xs, rows.useful_gflops_per_s, marker=markers[i % len(markers)],
                lw=2.5 if name == "reference" else 0.8, label=name)
    dtype = str(ok.dtype.iloc[0]) if "dtype" in ok else "fp32"
    entry = ((peak or {}).get("peaks") or {}).get(dtype) or {}
    styles = iter(["--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 3))])
    ran = [(lib, e["flops_per_s"] / 1e9) for lib, e in (entry.get("libraries") or {}).items()
           if e.get("flops_per_s")]
    for i, (lib, gflops) in enumerate(sorted(ran, key=lambda t: -t[1])):
        ax.axhline(gflops, color="k", ls=next(styles, ":"), lw=0.9)
        # labels alternate ends of the axis (x in axes units) so that close lines stay readable
        ax.annotate(f"{lib} {gflops:.0f}", (0.99 if i % 2 == 0 else 0.01, gflops),
                    xycoords=ax.get_yaxis_transform(), fontsize=7,
                    ha="right" if i % 2 == 0 else "left", va="bottom")
    theory = (entry.get("theoretical") or {}).get("flops_per_s")
    if theory:
        ax.axhline(theory / 1e9, color="r", lw=1)
        ax.annotate(f"theoretical {theory / 1e9:.0f}", (0.5, theory / 1e9),
                    xycoords=ax.get_yaxis_transform(), fontsize=7, color="r", ha="center",
                    va="bottom")
    ax.set_xticks(range(len(points)), [f"b{b}\nL{s}" for b, s in points])
    peak_text = "lines: GEMM peaks" if entry else "no peak.json: no lines"
    ax.set(title=f"roofline ({dtype}); {peak_text}", ylabel="useful GFLOP/s")
    ax.set_ylim(bottom=0)
    ax.set_xlim(-0.3, len(points) - 0.7)
    ax.legend(fontsize=6, ncol=2, loc="upper left", bbox_to_anchor=(0, -0.12), frameon=False)


def _heatmap_panel(ax, ok: pd.DataFrame) -> None:
    """Speedup of the padding-free system(s) over the padded baseline, batch x max length."""
    pf = ok[ok.padding_free.fillna(False).astype(bool) & ok.speedup_vs_padded.notna()]
    grid = pf.pivot_table(index="batch_size", columns="max_seq_len",
                          values="speedup_vs_padded", aggfunc="max")
    if grid.empty:
        ax.text(0.5, 0.5, "no padding-free speedups measured", ha="center", va="center")
        ax.axis("off")
        return
    im = ax.imshow(grid.values, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(grid.shape[1]), grid.columns)
    ax.set_yticks(range(grid.shape[0]), grid.index)
    for (i, j), v in np.ndenumerate(grid.values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}x", ha="center", va="center", color="w", fontsize=8)
    ax.figure.colorbar(im, ax=ax, label="speedup (x)")
    ax.set(title="padding-free speedup over the padded baseline", xlabel="max sequence length",
           ylabel="batch size")


def _framework_bars(ax, ok: pd.DataFrame) -> None:
    """Every framework at the largest measured point, fastest first."""
    if ok.empty:
        ax.axis("off")
        return
    b, s = ok.batch_size.max(), ok[ok.batch_size == ok.batch_size.max()].max_seq_len.max()
    at = ok[(ok.batch_size == b) & (ok.max_seq_len == s)].sort_values("median_ms")
    err = [at.median_ms - at.q1_ms, at.q3_ms - at.median_ms]
    ax.barh(at.system, at.median_ms, xerr=err, capsize=3, color="tab:blue")
    ax.invert_yaxis()
    ax.set(title=f"every framework at batch {b}, max length {s}", xlabel="ms (median, IQR)")


def _latency_panel(ax, here: pd.DataFrame, b: int, paper_b: pd.DataFrame) -> None:
    """Latency here; on a GPU in fp16 (the paper's setting) the README's A100 ByteTransformer
    beside it on the same axes. A log scale where the systems lie more than 20x apart."""
    for name, g in here.groupby("system"):
        g = g.sort_values("max_seq_len")
        err = [g.median_ms - g.q1_ms, g.q3_ms - g.median_ms]
        ax.errorbar(g.max_seq_len, g.median_ms, yerr=err, marker="o", capsize=3, label=name,
                    lw=2.5 if name == "reference" else 1.2)
    gpu_fp16 = (not here.empty and (here.dtype == "fp16").all()
                and here.device.astype(str).str.startswith("cuda").all())
    bt = paper_b[paper_b.framework == "ByteTransformer"].sort_values("max_seq_len")
    if gpu_fp16 and not bt.empty:
        bt = bt[bt.max_seq_len <= here.max_seq_len.max()]
        ax.plot(bt.max_seq_len, bt.latency_ms, color="grey", ls="--", marker="x",
                label=f"ByteTransformer, {PAPER_LABEL}")
    if not here.empty and here.median_ms.max() > 20 * here.median_ms.min():
        ax.set_yscale("log")
    ax.set(title=f"this machine, batch {b}: latency (median, IQR)",
           xlabel="max sequence length", ylabel="ms")
    _legend(ax)


def _speedup_panel(ax, here: pd.DataFrame, paper_b: pd.DataFrame, b: int) -> None:
    sp = here[here.speedup_vs_padded.notna() & here.padding_free.fillna(False).astype(bool)]
    for name, g in sp.groupby("system"):
        g = g.sort_values("max_seq_len")
        ax.plot(g.max_seq_len, g.speedup_vs_padded, marker="o", label=f"{name} (here)")
        ax.fill_between(g.max_seq_len, g.speedup_ci_low, g.speedup_ci_high, alpha=0.2)
    bounds = here.drop_duplicates("max_seq_len").sort_values("max_seq_len")
    if not bounds.empty:
        # markers too: a sweep of one max length draws no line
        ax.plot(bounds.max_seq_len, bounds.gemm_flop_bound, "k--", lw=1, marker="_", ms=12,
                label="GEMM FLOP bound sum(L)/sum(l)")
        ax.plot(bounds.max_seq_len, bounds.attention_flop_bound, "k:", lw=1, marker="_", ms=12,
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


def bars_figure(table: pd.DataFrame, out: Path, title: str, order: list[str] | None = None,
                label_of: dict[str, str] | None = None) -> list[Path]:
    """One panel per (subject, batch, max length): median latency per system with IQR whiskers,
    each bar labelled with its speedup over the experiment's baseline."""
    ok = table[table.status == "ok"]
    groups = list(ok.groupby(["subject", "batch_size", "max_seq_len"], sort=True))
    fig, axes = plt.subplots(1, max(len(groups), 1), figsize=(3.6 * max(len(groups), 1) + 1, 4),
                             squeeze=False, constrained_layout=True)
    for ax, ((subject, b, s), g) in zip(axes[0], groups):
        systems = [x for x in (order or sorted(g.system.unique())) if x in set(g.system)]
        g = g.set_index("system").loc[systems]
        x = range(len(systems))
        err = [g.median_ms - g.q1_ms, g.q3_ms - g.median_ms]
        ax.bar(x, g.median_ms, yerr=err, capsize=3, color="tab:blue")
        for i, (_, row) in enumerate(g.iterrows()):
            if pd.notna(row.speedup_vs_padded):
                ax.annotate(f"{row.speedup_vs_padded:.2f}x", (i, row.median_ms),
                            ha="center", va="bottom", fontsize=8, xytext=(0, 4),
                            textcoords="offset points")
        ax.set_xticks(list(x), [(label_of or {}).get(n, n) for n in systems], rotation=30,
                      ha="right", fontsize=8)
        ax.set(title=f"{subject}, batch {b}, max len {s}", ylabel="ms (median, IQR)")
    if not groups:
        axes[0][0].text(0.5, 0.5, "no successful runs", ha="center", va="center")
    fig.suptitle(title)
    return save_figure(fig, out)


def speedup_over_padded_mha(table: pd.DataFrame, claims: pd.DataFrame, out: Path
                             ) -> list[Path]:
    """Speedup over the padded unfused MHA per batch size vs max length, beside the attention
    FLOP bound and the paper's fused-MHA claim."""
    ok = table[table.status == "ok"]
    batch_sizes = sorted(ok.batch_size.unique()) or [1]
    claim = claims[claims.claim == "fused MHA speedup"]
    fig, axes = plt.subplots(1, len(batch_sizes), figsize=(5.5 * len(batch_sizes), 4),
                             squeeze=False, constrained_layout=True)
    for ax, b in zip(axes[0], batch_sizes):
        here = ok[ok.batch_size == b]
        for name, g in here[here.system != "padded-unfused"].groupby("system"):
            g = g.sort_values("max_seq_len")
            ax.plot(g.max_seq_len, g.speedup_vs_padded, marker="o", label=name)
            ax.fill_between(g.max_seq_len, g.speedup_ci_low, g.speedup_ci_high, alpha=0.2)
        bounds = here.drop_duplicates("max_seq_len").sort_values("max_seq_len")
        ax.plot(bounds.max_seq_len, bounds.attention_flop_bound, "k:", lw=1,
                label="attention FLOP bound sum(L²)/sum(l²)")
        for _, c in claim.iterrows():
            ax.axhline(c.value, color="grey", ls="-.", lw=1,
                       label=f"paper: {c.value:g}x vs {c.baseline} ({c.setting})")
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set(title=f"batch {b}: speedup over padded MHA",
               xlabel="max sequence length", ylabel="speedup (x)")
        _legend(ax)
    fig.suptitle("Multi-head attention: speedup over padded matmul + mask + softmax + matmul")
    return save_figure(fig, out)


# ---- the figure functions the experiment registry names: (FigureData, out) -> [svg]

def varlen_figure(data: FigureData, out: Path) -> list[Path]:
    return latency_figure(data.table, data.paper_table("latency"), out, data.peak)


def fixed_figure(data: FigureData, out: Path) -> list[Path]:
    return bars_figure(data.table, out, "Every sequence at max length: no padding to skip")


def mha_figure(data: FigureData, out: Path) -> list[Path]:
    return speedup_over_padded_mha(data.table, data.paper_table("claims"), out)


def ablation_figure(data: FigureData, out: Path) -> list[Path]:
    """Bars in ladder order, labelled with each step's name from the table."""
    ok = data.table[data.table.status == "ok"]
    steps = (ok.drop_duplicates("system").set_index("system").step
             if "step" in ok else pd.Series(dtype=str))
    order = sorted(steps.index, key=lambda n: int(n.rpartition("-")[2]))
    return bars_figure(data.table, out, "Ablation: the paper's optimizations, one by one", order,
                       {n: str(steps[n]) for n in order})


def variants_figure(data: FigureData, out: Path) -> list[Path]:
    return bars_figure(data.table, out, "BERT variants: padded HF vs padding-free reference",
                       ["torch-eager", "reference"])


def fused_ops_figure(data: FigureData, out: Path) -> list[Path]:
    return bars_figure(data.table, out, "Fused epilogues vs their unfused torch form",
                       ["unfused", "fused"])
