"""The serving figure: p99 latency against offered load for each system (every Server trial
of every repeat, the bound drawn: the knee is where a system's points cross it), and each
system's highest VALID Server QPS beside its Offline samples/s, labelled with the tokens it
computed per valid token in its Offline batches (its padding: the most packing could gain)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.ticker import ScalarFormatter

from suite.analysis.figure_io import FigureData, plt, save_figure  # plt: the Agg backend set

COLORS = {"padded": "tab:red", "bucketed": "tab:orange", "packed": "tab:blue"}
OTHERS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")


def _color(system: str, palette: dict[str, str]) -> str:
    """The batching's color for the first system of that batching, then one of ``OTHERS``
    (padded-reference beside padded-onnxruntime-fused must not share a color)."""
    if system not in palette:
        taken = set(palette.values())
        free = [c for c in (COLORS.get(system.split("-", 1)[0]), *OTHERS)
                if c and c not in taken]
        palette[system] = free[0] if free else f"C{len(palette) % 10}"
    return palette[system]


def serving_figure(data: FigureData, out: Path) -> list[Path]:
    """Writes ``out.svg``."""
    if data.curves is None:
        raise ValueError("bert_serving: the figure needs its curves.csv (--curves)")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    palette: dict[str, str] = {}
    _knee_panel(left, data.table, data.curves, palette)
    _bars_panel(right, data.table, palette)
    return save_figure(fig, out)


def _knee_panel(ax, table: pd.DataFrame, curves: pd.DataFrame, palette) -> None:
    ax.set(title="Server: p99 latency vs offered load (each LoadGen trial)",
           xlabel="offered load (queries/s, Poisson)", ylabel="p99 latency (ms)")
    for system, g in curves.groupby("system", sort=True):
        c = _color(system, palette)
        for _, run in g.groupby("repeat"):
            run = run.sort_values("offered_qps")
            ax.plot(run.offered_qps, run.p99_ms, "-", color=c, alpha=0.35)
        valid = g.valid.astype(str).str.lower() == "true"
        ax.plot(g.offered_qps[valid], g.p99_ms[valid], "o", color=c, label=f"{system}")
        ax.plot(g.offered_qps[~valid], g.p99_ms[~valid], "x", color=c)
    bounds = table.latency_bound_ms.dropna().unique()
    for b in bounds:
        ax.axhline(b, color="k", ls="--", lw=1, label=f"p99 bound {b:g} ms")
    if not ax.lines:
        ax.text(0.5, 0.5, "no Server trials", ha="center", transform=ax.transAxes)
        return
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    # LoadGen also calls a run INVALID when its early-stopping estimate of the p99 (an upper
    # bound from the queries it saw) is over the bound, even if the measured p99 is under it
    ax.legend(fontsize=8, title="o VALID, x INVALID (p99, or LoadGen's\nearly-stopping "
                                "estimate of it, over the bound)", title_fontsize=8)


def _tick(ok: pd.DataFrame, system: str) -> str:
    rows = ok[(ok.system == system) & (ok.scenario == "Offline")]
    work = pd.to_numeric(rows.get("computed_per_real"), errors="coerce").dropna()
    return system if work.empty else f"{system}\n{work.mean():.2f} tokens / valid (Offline)"


def _bars_panel(ax, table: pd.DataFrame, palette) -> None:
    ax.set(title="highest VALID Server QPS, Offline samples/s", ylabel="queries/s (mean, "
           "min-max over repeats)")
    ok = table[table.status == "ok"]
    systems = sorted(ok.system.unique())
    if not systems:
        ax.text(0.5, 0.5, "no system ran", ha="center", transform=ax.transAxes)
        return
    x = np.arange(len(systems))
    for offset, (scenario, column, hatch) in zip(
            (-0.2, 0.2), (("Server", "max_valid_qps", ""), ("Offline", "samples_per_s", "//"))):
        rows = ok[ok.scenario == scenario]
        for i, system in enumerate(systems):
            values = rows[rows.system == system][column].dropna().astype(float)
            if values.empty:
                continue
            m = values.mean()
            ax.bar(x[i] + offset, m, 0.38, color=_color(system, palette), hatch=hatch,
                   edgecolor="k", yerr=[[m - values.min()], [values.max() - m]], capsize=3,
                   label=scenario if i == 0 else None)
            ax.annotate(f"{m:.0f}", (x[i] + offset, m / 2), ha="center", va="center",
                        fontsize=8, backgroundcolor="white")
    ax.set_xticks(x, [_tick(ok, s) for s in systems], rotation=15, fontsize=8)
    ax.legend(fontsize=8)
