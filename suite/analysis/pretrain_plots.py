"""Figures of the pre-training experiments: Virtual Width Networks (held-out loss vs width, token
efficiency, the m ablation) and checkpoint merging (PMA: merge grid, decay forks, loss spikes).
Figures read tables, never records; every panel says so in words when its data is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from suite.analysis.figure_io import FigureData, plt, save_figure  # plt: the Agg backend set

SLOPE_CLAIM = "log-linear fit slope per log2(r)"  # the vwn_headline.csv row of Fig. 8's slope
EARLY = 0.4  # evaluations before this fraction of T do not set the zoomed y-range
METRICS = {"next_token": ("next-token", "tab:blue"), "next_2_token": ("next-2-token", "tab:orange")}
METHOD_COLORS = {"sma": "tab:blue", "ema:0.1": "tab:orange", "ema:0.2": "tab:green",
                 "wma": "tab:red"}
SPIKE_BRANCHES = {"spike-merged": ("resume from SMA of pre-spike checkpoints", "tab:blue"),
                  "spike-last": ("resume from last pre-spike checkpoint", "tab:green"),
                  "spike-spiked": ("no intervention", "tab:red")}
VWN_TABLE = ["label", "m", "n", "r", "series", "status", "seeds", "tokens", "next_token",
             "next_token_ci_low", "next_token_ci_high", "next_2_token", "next_2_token_ci_low",
             "next_2_token_ci_high"]
VWN_CURVES = ["label", "m", "n", "r", "seed", "tokens", "next_token", "next_2_token",
              "gap_next_token", "gap_next_2_token", "s_next_token", "s_next_2_token"]
PMA_TABLE = ["method", "n", "interval_steps", "step", "seeds", "merged", "latest", "gain",
             "gain_ci_low", "gain_ci_high", "status"]
PMA_CURVES = ["seed", "method", "n", "interval_steps", "decay_steps", "kind", "step", "loss"]


def _frame(df: pd.DataFrame | None, cols: list[str], ok: bool = False) -> pd.DataFrame:
    """Add the columns the panels read (as NaN), so panels test for emptiness, not for schema;
    ``ok`` keeps the successful rows only."""
    df = pd.DataFrame() if df is None else df
    df = df.assign(**{c: np.nan for c in cols if c not in df.columns})
    return df[_is(df.status, "ok")] if ok else df


def _is(col: pd.Series, value) -> pd.Series:
    return col.eq(value).fillna(False).astype(bool)


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")


def _legend(ax, **kw) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, title_fontsize=7, **kw)


def _band(ax, frame: pd.DataFrame, x: str, y: str, label: str, color=None, ls="-",
          band: bool = True) -> pd.DataFrame:
    """Mean over seeds as a line, min-max over seeds as a shaded band; returns the aggregate."""
    agg = frame.dropna(subset=[x, y]).groupby(x)[y].agg(["mean", "min", "max"])
    if not agg.empty:
        line, = ax.plot(agg.index, agg["mean"], ls=ls, color=color, marker=".", label=label)
        if band:
            ax.fill_between(agg.index, agg["min"], agg["max"], color=line.get_color(), alpha=0.2)
    return agg


def _zoom(ax, values) -> None:
    """A y-range fitted to the values given (the late evaluations), not to the first ones."""
    v = np.concatenate([np.ravel(np.asarray(x, dtype=float)) for x in values] or [[]])
    v = v[np.isfinite(v)]
    if v.size:
        lo, hi = v.min(), v.max()
        pad = 0.08 * (hi - lo) or 0.01 * abs(hi) or 0.01
        ax.set_ylim(lo - pad, hi + pad)


def _ci(frame: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    """Values and their (asymmetric) error bars from ``col``'s CI columns, 0 where unknown."""
    y = frame[col].to_numpy(float)
    return y, np.nan_to_num(np.vstack([y - frame[f"{col}_ci_low"], frame[f"{col}_ci_high"] - y]))


def _n_seeds(table: pd.DataFrame, curves: pd.DataFrame) -> int:
    seeds = table.seeds.max()
    return int(seeds) if pd.notna(seeds) else curves.seed.nunique()


def build_vwn_figure(table: pd.DataFrame, curves: pd.DataFrame, paper: pd.DataFrame | None,
                     headline: pd.DataFrame | None = None) -> Figure:
    """The VWN figure (2 x 3 panels), unsaved, so tests can read its panels."""
    t, c = _frame(table, VWN_TABLE, ok=True), _frame(curves, VWN_CURVES)
    main = t[_is(t.series, "main")].sort_values("r")
    wide = main[main.r > 1]
    widest = wide.iloc[-1] if not wide.empty else None
    T = t.tokens.max() if t.tokens.notna().any() else c.tokens[c.m != c.n].max()
    fig, axes = plt.subplots(2, 3, figsize=(18, 10), constrained_layout=True)
    ax = axes.ravel()
    for i, metric in enumerate(METRICS):
        _vwn_loss_panel(ax[i], c, widest, T, metric)
    _vwn_gap_panel(ax[2], c, wide, T, _frame(paper, ["expansion_r", "next_token_loss_drop",
                                                     "next_2_token_loss_drop"]))
    _vwn_efficiency_panel(ax[3], c, widest, _frame(headline, ["claim", "value"]))
    head = _frame(headline, ["claim", "value"])
    slope = head[head.claim == SLOPE_CLAIM].value
    _vwn_fit_panel(ax[4], main, float(slope.iloc[0]) if not slope.empty else None)
    _vwn_ablation_panel(ax[5], t)
    fig.suptitle("Virtual Width Networks at small scale: held-out loss vs width "
                 f"(mean of {_n_seeds(t, c)} seeds)")
    return fig


def vwn_figure(data: FigureData, out: Path) -> list[Path]:
    """Writes ``out.svg`` of the VWN figure (curves and the paper's Table 1 and
    headline numbers from ``data``)."""
    if data.curves is None:
        raise ValueError("vwn_scaling: the figure needs its curves.csv (--curves)")
    return save_figure(build_vwn_figure(data.table, data.curves, data.paper.get("table1"),
                                        data.paper.get("headline")), out)


def _vwn_loss_panel(ax, c: pd.DataFrame, widest, T: float, metric: str) -> None:
    name = METRICS[metric][0]
    ax.set(title=f"held-out {name} loss vs tokens", xlabel="tokens",
           ylabel=f"{name} loss (nats)")
    if c[metric].isna().all():
        return _note(ax, "no MTP module" if metric == "next_2_token" else "no loss curves")
    aggs = [_band(ax, c[c.m == c.n], "tokens", metric, "baseline r = 1", "grey")]
    if widest is not None:
        aggs.append(_band(ax, c[_is(c.label, widest.label)], "tokens", metric,
                          f"VWN r = {widest.r:g} ({widest.label})", "tab:blue"))
    if pd.notna(T):
        ax.axvline(T, color="k", ls=":", lw=1, label=f"common T = {T:,.0f} tokens")
    _zoom(ax, [a[a.index >= EARLY * np.nan_to_num(T)][["min", "max"]] for a in aggs])
    _legend(ax, title="mean, min-max over seeds")


def _vwn_gap_panel(ax, c: pd.DataFrame, wide: pd.DataFrame, T: float, paper: pd.DataFrame):
    ax.set(title="loss gap baseline - VWN (positive = VWN better)", xlabel="tokens",
           ylabel="gap (nats, mean over seeds)")
    colors = plt.cm.viridis(np.linspace(0, 0.85, max(len(wide), 1)))
    late = []
    for color, v in zip(colors, wide.itertuples()):
        run = c[_is(c.label, v.label)]
        for metric, ls in (("next_token", "-"), ("next_2_token", "--")):
            agg = _band(ax, run, "tokens", f"gap_{metric}", f"r = {v.r:g}" if ls == "-" else None,
                        color, ls, band=False)
            late.append(agg[agg.index >= EARLY * np.nan_to_num(T)]["mean"])
        drop = paper[np.isclose(paper.expansion_r, v.r)]
        if not drop.empty and pd.notna(T):
            for col, marker in (("next_token_loss_drop", "*"), ("next_2_token_loss_drop", "x")):
                ax.plot([1.03 * T] * len(drop), drop[col], marker, ms=10, color=color)
                late.append(drop[col])
    if not ax.lines:
        return _note(ax, "no VWN variants with r > 1")
    ax.axhline(0, color="k", lw=0.8)
    handles = ax.get_legend_handles_labels()[0] + [
        Line2D([], [], color="k", ls="-", label="next-token"),
        Line2D([], [], color="k", ls="--", label="next-2-token")]
    if not paper.empty:
        handles.append(Line2D([], [], color="k", ls="", marker="*", ms=9,
                              label="paper Table 1 at 500B tokens (* next, x next-2)"))
    _zoom(ax, late)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.4 * (hi - lo))  # headroom for the legend
    ax.legend(handles=handles, fontsize=7, ncol=2, loc="upper left")


def _vwn_efficiency_panel(ax, c: pd.DataFrame, widest, headline: pd.DataFrame) -> None:
    ax.set(title="token efficiency S(T): tokens the baseline needs / T", xlabel="tokens T",
           ylabel="S (x)")
    if widest is None:
        return _note(ax, "no VWN variant with r > 1")
    run = c[_is(c.label, widest.label)]
    for metric, (name, color) in METRICS.items():
        _band(ax, run, "tokens", f"s_{metric}", f"r = {widest.r:g} {name}", color)
    if not ax.lines:
        return _note(ax, "no token-efficiency values")
    ax.axhline(1, color="grey", lw=0.8)
    claims = headline[headline.claim.astype(str).str.startswith("token-efficiency speedup")]
    for h in claims.itertuples():
        metric = "next_2_token" if "next-2-token" in h.claim else "next_token"
        what = h.claim.removeprefix("token-efficiency speedup").strip()
        ax.axhline(h.value, color=METRICS[metric][1], ls=":", label=f"paper {what}: {h.value:g}x")
    _legend(ax, title="mean, min-max over seeds")


def _vwn_fit_panel(ax, main: pd.DataFrame, paper_slope: float | None) -> None:
    ax.set(title="held-out loss at T vs width", xlabel="expansion r = n/m (log2 axis)",
           ylabel="loss at T (nats)")
    main = main[main.r > 0]
    if main.empty:
        return _note(ax, "no main-series variants")
    x = np.log2(main.r.to_numpy(float))
    for metric, (name, color) in METRICS.items():
        y, err = _ci(main, metric)
        has = np.isfinite(y)
        if not has.any():
            continue
        ax.errorbar(x[has], y[has], yerr=err[:, has], fmt="o", capsize=3, color=color,
                    label=f"{name} (CI over seeds)")
        fit = has & (main.r.to_numpy() >= 2)
        if fit.sum() >= 2:
            slope, icpt = np.polyfit(x[fit], y[fit], 1)
            xs = np.array([x[fit].min(), x[fit].max()])
            ax.plot(xs, slope * xs + icpt, color=color,
                    label=f"{name} fit on r >= 2: slope {slope:+.4f} per doubling")
    anchor = main[np.isclose(main.r, 2) & main.next_token.notna()]
    if not anchor.empty and paper_slope is not None:
        xs = np.array([1.0, max(x.max(), 1.0)])
        ax.plot(xs, anchor.next_token.iloc[0] + paper_slope * (xs - 1), "k:",
                label=f"paper slope {paper_slope:g} (Fig. 8)")
    ax.set_xticks(sorted(set(x)), [f"{r:g}" for r in sorted(set(main.r))])
    _legend(ax)


def _vwn_ablation_panel(ax, t: pd.DataFrame) -> None:
    abl = t[_is(t.series, "m_ablation")]
    if abl.empty:
        ax.set(title="m ablation")
        return _note(ax, "no m ablation in this run")
    r = abl.r.mode().iloc[0]
    rows = t[np.isclose(t.r, r) & (t.m != t.n)].sort_values("m")
    y, err = _ci(rows, "next_token")
    x = np.arange(len(rows))
    ax.bar(x, y, yerr=err, capsize=4, color="tab:blue", label="VWN (CI over seeds)")
    for i, v in enumerate(y):
        ax.annotate(f"{v:.3f}", (i, v), ha="left", va="bottom", fontsize=8, xytext=(6, 2),
                    textcoords="offset points")
    base = t[t.m == t.n].next_token.mean()
    if pd.notna(base):
        ax.axhline(base, color="grey", ls="--", label=f"baseline r = 1: {base:.3f}")
    ax.set_xticks(x, [f"m={m:g}" for m in rows.m])
    _zoom(ax, [y - err[0], y + err[1], [base]])
    ax.set(title=f"m ablation at r = {r:g} (n = {r:g} m): next-token loss at T",
           ylabel="loss at T (nats)")
    _legend(ax)


def build_pma_figure(table: pd.DataFrame, curves: pd.DataFrame) -> Figure:
    """The PMA figure (2 x 3 panels), unsaved, so tests can read its panels."""
    t, c = _frame(table, PMA_TABLE, ok=True), _frame(curves, PMA_CURVES)
    kind = {k: c[_is(c.kind, k)] for k in ("latest", "merged", "decay", "merged_in_decay")}
    merged, where = _pick(kind["merged"])
    fig, axes = plt.subplots(2, 3, figsize=(18, 10), constrained_layout=True)
    ax = axes.ravel()
    _pma_curve_panel(ax[0], kind["latest"], merged, where)
    _pma_heatmap_panel(ax[1], t)
    _pma_bars_panel(ax[2], t)
    _pma_ranking_panel(ax[3], kind["latest"], merged, where)
    _pma_decay_panel(ax[4], kind["latest"], kind["decay"], kind["merged_in_decay"], t)
    _pma_spike_panel(ax[5], c)
    fig.suptitle("Checkpoint merging in pre-training (PMA) at small scale "
                 f"(mean of {_n_seeds(t, c)} seeds)")
    return fig


def pma_figure(data: FigureData, out: Path) -> list[Path]:
    """Writes ``out.svg`` of the PMA figure."""
    if data.curves is None:
        raise ValueError("pma_merging: the figure needs its curves.csv (--curves)")
    return save_figure(build_pma_figure(data.table, data.curves), out)


def _pick(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of one merge setting, for panels that can show only one: N = 10 (the paper's)
    else the largest N, at its smallest interval; and the setting in words."""
    ns = frame.n.dropna().unique()
    if not len(ns):
        return frame.iloc[:0], "no merges"
    n = 10.0 if 10 in ns else float(ns.max())
    iv = frame[frame.n == n].interval_steps.min()
    return frame[(frame.n == n) & (frame.interval_steps == iv)], f"N = {n:g}, V = {iv:g} steps"


def _pma_curve_panel(ax, latest: pd.DataFrame, merged: pd.DataFrame, where: str) -> None:
    ax.set(title=f"latest checkpoint vs merged ({where})", xlabel="step",
           ylabel="held-out loss (nats)")
    agg = _band(ax, latest, "step", "loss", "latest checkpoint (constant LR)", "k")
    shown = [agg[agg.index >= EARLY * np.nan_to_num(latest.step.max())]]
    for method, g in merged.groupby("method", sort=False):
        m = g.groupby("step").loss.mean()
        ax.plot(m.index, m.values, "o", ms=7, color=METHOD_COLORS.get(method), label=method)
        shown.append(m)
    if not ax.lines:
        return _note(ax, "no loss curves")
    _zoom(ax, shown)
    _legend(ax)


def _pma_heatmap_panel(ax, t: pd.DataFrame) -> None:
    grid = t[_is(t.method, "sma")].pivot_table(index="n", columns="interval_steps",
                                                values="gain", aggfunc="mean")
    if grid.empty:
        ax.set(title="SMA gain at the last merge point")
        return _note(ax, "no SMA merges")
    lim = np.nanmax(np.abs(grid.values)) or 1.0
    im = ax.imshow(grid.values, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto", origin="lower")
    ax.set_xticks(range(grid.shape[1]), [f"{v:g}" for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [f"{v:g}" for v in grid.index])
    for (i, j), v in np.ndenumerate(grid.values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.3f}", ha="center", va="center", fontsize=8,
                    color="w" if abs(v) > 0.6 * lim else "k")
    ax.figure.colorbar(im, ax=ax, label="gain (nats)")
    ax.set(title=f"SMA gain at step {t.step.max():g} (blue = merging helps)",
           xlabel="interval V (steps)", ylabel="N checkpoints merged")


def _pma_bars_panel(ax, t: pd.DataFrame) -> None:
    iv = t.interval_steps.min()
    at = t[t.interval_steps == iv]
    ns, methods = sorted(at.n.dropna().unique()), list(dict.fromkeys(at.method.dropna()))
    ax.set(title="gain per method at the last merge point",
           ylabel="gain = latest - merged (nats, CI)")
    if not ns or not methods:
        return _note(ax, "no merge grid")
    ax.set_title(f"gain per method at the last merge point, V = {iv:g} steps")
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        g = at[_is(at.method, method)].groupby("n").first().reindex(ns)
        y, err = _ci(g, "gain")
        ax.bar(np.arange(len(ns)) + (i - (len(methods) - 1) / 2) * width, y, width, yerr=err,
               capsize=2, color=METHOD_COLORS.get(method), label=method)
    ax.set_xticks(range(len(ns)), [f"N = {n:g}" for n in ns])
    ax.axhline(0, color="k", lw=0.8)
    _legend(ax)


def _pma_ranking_panel(ax, latest: pd.DataFrame, merged: pd.DataFrame, where: str) -> None:
    ax.set(title=f"gain per method over training ({where})", xlabel="merge step",
           ylabel="gain = latest - merged (nats)")
    lat = latest.groupby(["seed", "step"]).loss.mean().rename("latest").reset_index()
    m = merged.merge(lat, on=["seed", "step"], how="left")
    m["gain"] = m.latest - m.loss
    for method, g in m.dropna(subset=["gain"]).groupby("method", sort=False):
        agg = g.groupby("step").gain.mean()
        ax.plot(agg.index, agg.values, "o-", color=METHOD_COLORS.get(method), label=method)
    if not ax.lines:
        return _note(ax, "no merged and latest losses at the same steps")
    ax.axhline(0, color="k", lw=0.8)
    _legend(ax)


def _pma_decay_panel(ax, latest: pd.DataFrame, decay: pd.DataFrame, in_decay: pd.DataFrame,
                     t: pd.DataFrame) -> None:
    ax.set(title="LR decay forks vs merging at constant LR", xlabel="step",
           ylabel="held-out loss (nats)")
    end = latest.step.max() if latest.step.notna().any() else 0
    aggs = [_band(ax, latest[latest.step >= 0.5 * end], "step", "loss", "latest (constant LR)",
                  "k")]
    colors = plt.cm.plasma(np.linspace(0.1, 0.7, max(decay.decay_steps.nunique(), 1)))
    for color, (d, g) in zip(colors, decay.groupby("decay_steps")):
        start = latest.step[latest.step < g.step.min()].max()  # the fork leaves the constant run
        aggs.append(_band(ax, pd.concat([latest[latest.step == start], g]), "step", "loss",
                          f"decay fork over {d:g} steps", color))
        mid = in_decay[in_decay.decay_steps == d]
        mm = mid.groupby("step").loss.mean()
        if not mm.empty:
            n = f"N = {mid.n.iloc[0]:g}, " if mid.n.notna().any() else ""
            ax.plot(mm.index, mm.values, "*", ms=13, color=color, mec="k",
                    label=f"merged inside that decay ({n}mean over seeds)")
            aggs.append(mm.to_frame("mean"))
    at, where = _pick(t[_is(t.method, "sma")])
    if at.merged.notna().any():
        ax.axhline(at.merged.mean(), color="tab:blue", ls="--",
                   label=f"SMA {where}, at step {at.step.max():g} (constant LR)")
        aggs.append(at.merged.to_frame("mean"))
    if not ax.lines:
        return _note(ax, "no decay forks or merges")
    _zoom(ax, aggs)
    _legend(ax)


def _pma_spike_panel(ax, c: pd.DataFrame) -> None:
    ax.set(title="after a loss spike: resume strategies", xlabel="steps after resume",
           ylabel="held-out loss (nats)")
    for kind, (label, color) in SPIKE_BRANCHES.items():
        _band(ax, c[_is(c.kind, kind)], "step", "loss", label, color)
    if not ax.lines:
        return _note(ax, "no spike test in this run")
    _legend(ax, title="mean, min-max over seeds")
