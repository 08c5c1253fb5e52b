"""Figures of the pre-training experiments (VWN, PMA) from small synthetic tables: both files are
written, the panels show what they claim, and missing data gives words instead of a crash."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from suite.analysis.figure_io import FigureData
from suite.analysis.pretrain_plots import build_pma_figure, build_vwn_figure, pma_figure, vwn_figure

T = 1000  # the common token count of the VWN variants; the baseline runs 3 T
VARIANTS = {(2, 2): "main", (2, 4): "main", (2, 8): "main", (2, 16): "main", (2, 3): "main",
            (1, 2): "m_ablation", (4, 8): "m_ablation"}
NOISE = {(2, 2): 0.0, (2, 4): 0.003, (2, 8): -0.004, (2, 16): 0.002, (2, 3): 0.001,
         (1, 2): -0.002, (4, 8): 0.004}
METHODS = ["sma", "ema:0.1", "ema:0.2", "wma"]


def _final(m: int, n: int) -> float:
    return 2.5 - 0.01 * np.log2(n / m) + NOISE[(m, n)]


def vwn_inputs(mtp: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, curves = [], []
    for (m, n), series in VARIANTS.items():
        r, loss = n / m, _final(m, n)
        two = loss - 0.1 if mtp else np.nan
        rows.append(dict(label=f"m{m}-n{n}", m=m, n=n, r=r, series=series, status="ok", seeds=3,
                         tokens=T, next_token=loss, next_token_ci_low=loss - 0.01,
                         next_token_ci_high=loss + 0.01, next_2_token=two,
                         next_2_token_ci_low=two - 0.01, next_2_token_ci_high=two + 0.01))
        for seed in range(3):
            for tokens in range(0, (3 * T if m == n else T) + 1, 100):
                nt = loss + 3 * np.exp(-tokens / 200) + 0.002 * seed
                gap = np.nan if m == n else 0.01 * np.log2(r)
                curves.append(dict(label=f"m{m}-n{n}", m=m, n=n, r=r, seed=seed, series=series,
                                   step=tokens // 10, tokens=tokens, train_loss=nt, next_token=nt,
                                   next_2_token=nt - 0.1 if mtp else np.nan,
                                   gap_next_token=gap, gap_next_2_token=gap,
                                   s_next_token=1 + gap, s_next_2_token=1 + 2 * gap))
    rows.append(dict(label="m2-n32", m=2, n=32, r=16.0, series="main", status="failed"))
    return pd.DataFrame(rows), pd.DataFrame(curves)


PAPER = pd.DataFrame({"expansion_r": [2, 4, 8], "next_token_loss_drop": [0.02, 0.028, 0.035],
                      "next_2_token_loss_drop": [0.03, 0.045, 0.058]})
HEADLINE = pd.DataFrame({"claim": ["log-linear fit slope per log2(r)",
                                   "token-efficiency speedup next-token (8x)",
                                   "token-efficiency speedup next-2-token (8x)"],
                         "value": [-0.0069, 2.5, 3.5], "note": ["Fig 8", "Fig 1", "Fig 1"]})


def _texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in ax.texts] + (
        [t.get_text() for t in legend.get_texts()] if legend else [])


def _written(paths) -> None:
    assert [p.suffix for p in paths] == [".svg"]
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)


def test_vwn_figure_writes_an_svg(tmp_path):
    table, curves = vwn_inputs()
    _written(vwn_figure(FigureData(table, {"table1": PAPER, "headline": HEADLINE}, curves),
                        tmp_path / "fig"))


def test_vwn_panels():
    table, curves = vwn_inputs()
    fig = build_vwn_figure(table, curves, PAPER, headline=HEADLINE)
    try:
        main = table[(table.series == "main") & (table.status == "ok") & (table.r >= 2)]
        slope = np.polyfit(np.log2(main.r), main.next_token, 1)[0]
        fit = _texts(fig.axes[4])
        assert any(f"next-token fit on r >= 2: slope {slope:+.4f}" in t for t in fit)
        assert any("paper slope -0.0069 (Fig. 8)" in t for t in fit)
        assert [t.get_text() for t in fig.axes[5].get_xticklabels()] == ["m=1", "m=2", "m=4"]
        assert any("2.5x" in t for t in _texts(fig.axes[3]))
        assert any("3.5x" in t for t in _texts(fig.axes[3]))
        widest = [t for t in _texts(fig.axes[0]) if t.startswith("VWN")]
        assert widest == ["VWN r = 8 (m2-n16)"]  # the failed r = 16 run is not drawn
        assert "(mean of 3 seeds)" in fig.get_suptitle()
    finally:
        plt.close(fig)


def test_vwn_missing_inputs(tmp_path):
    table, curves = vwn_inputs(mtp=False)
    table = table[table.series != "m_ablation"]
    curves = curves.drop(columns=["next_2_token", "gap_next_2_token", "s_next_2_token"])
    fig = build_vwn_figure(table, curves, None)
    try:
        assert "no MTP module" in _texts(fig.axes[1])
        assert "no m ablation in this run" in _texts(fig.axes[5])
    finally:
        plt.close(fig)
    _written(vwn_figure(FigureData(table, {}, curves), tmp_path / "partial"))
    _written(vwn_figure(FigureData(pd.DataFrame(), {}, pd.DataFrame()), tmp_path / "empty"))


def pma_inputs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Latest loss 2 + 1/(1 + step/10); a merged model's loss is the latest + an offset per
    method, N and V, so the gain is known exactly."""
    offset = {m: 0.01 * (i - 1) for i, m in enumerate(METHODS)}
    grid = [(m, n, v) for m in METHODS for n in (3, 10) for v in (10, 20)]
    latest = lambda step: 2 + 1 / (1 + step / 10)  # noqa: E731
    rows, curves = [], []
    for method, n, v in grid:
        off = offset[method] + 0.001 * n + 0.0001 * v
        rows.append(dict(method=method, n=n, interval_steps=v, step=120, tokens=120 * 512,
                         seeds=2, merged=latest(120) + off, latest=latest(120), gain=-off,
                         gain_ci_low=-off - 0.005, gain_ci_high=-off + 0.005, status="ok"))
        for seed in range(2):
            for step in (40, 80, 120):
                curves.append(dict(seed=seed, method=method, n=n, interval_steps=v, kind="merged",
                                   step=step, tokens=step * 512, loss=latest(step) + off))
    rows.append(dict(method="sma", n=6, interval_steps=10, status="failed"))
    for seed in range(2):
        curves += [dict(seed=seed, kind="latest", step=s, tokens=s * 512, loss=latest(s))
                   for s in range(0, 121, 10)]
        curves += [dict(seed=seed, kind="decay", decay_steps=20, step=s, loss=latest(s) - 0.01)
                   for s in (130, 140)]
        curves.append(dict(seed=seed, kind="merged_in_decay", decay_steps=20, n=2, step=140,
                           loss=latest(140) - 0.012))
        for kind, extra in (("spike-merged", 0.0), ("spike-last", 0.01), ("spike-spiked", 0.3)):
            curves += [dict(seed=seed, kind=kind, step=s, loss=2.1 + extra / (1 + s))
                       for s in (0, 10, 20)]
    return pd.DataFrame(rows), pd.DataFrame(curves)


def test_pma_figure_writes_an_svg(tmp_path):
    table, curves = pma_inputs()
    _written(pma_figure(FigureData(table, {}, curves), tmp_path / "fig"))


def test_pma_panels():
    table, curves = pma_inputs()
    fig = build_pma_figure(table, curves)
    try:
        sma = table[(table.method == "sma") & (table.status == "ok")]
        assert sorted(fig.axes[1].texts[i].get_text() for i in range(len(sma))) == \
            sorted(f"{g:.3f}" for g in sma.gain)
        assert "N = 10, V = 10 steps" in fig.axes[0].get_title()
        gains = {t: line.get_ydata() for t, line in
                 zip(_texts(fig.axes[3]), fig.axes[3].get_lines())}
        for method in METHODS:  # the gain of a setting is the same at every merge step
            row = table[(table.method == method) & (table.n == 10) & (table.interval_steps == 10)]
            assert gains[method] == pytest.approx([row.gain.iloc[0]] * 3)
        spike = _texts(fig.axes[5])
        assert "resume from SMA of pre-spike checkpoints" in spike and "no intervention" in spike
        assert "(mean of 2 seeds)" in fig.get_suptitle()
    finally:
        plt.close(fig)


def test_pma_missing_inputs(tmp_path):
    table, curves = pma_inputs()
    curves = curves[curves.kind.isin(["latest", "merged"])]
    fig = build_pma_figure(table[table.method != "sma"], curves)
    try:
        assert "no SMA merges" in _texts(fig.axes[1])
        assert "no spike test in this run" in _texts(fig.axes[5])
    finally:
        plt.close(fig)
    _written(pma_figure(FigureData(table, {}, curves), tmp_path / "partial"))
    _written(pma_figure(FigureData(pd.DataFrame(), {}, pd.DataFrame()), tmp_path / "empty"))
