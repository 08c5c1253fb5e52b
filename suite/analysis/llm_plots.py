"""Figures of the LLM-training experiments (MegaScale): the cluster-scale model against the paper,
and the measured MFU sweep, ablation ladder and engines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from suite.analysis.figure_io import FigureData, plt, save_figure  # plt: the Agg backend set
from suite.analysis.llm_tables import mfu_denominator
from suite.resilience.store import MODES

DATASET_NAMES = {"megascale_table2": "MegaScale Table 2 (175B)",
                 "megascale_fig9": "MegaScale Fig. 9 (530B)",
                 "narayanan2021": "Narayanan 2021 Table 1",
                 "megatron_h100": "Megatron-LM README, H100",
                 "korthikanti2022": "Korthikanti 2022 Table 5",
                 "llmfoundry_mpt": "llm-foundry MPT (FSDP)",
                 "torchtitan_llama": "torchtitan Llama (FSDP2)",
                 "bloom176b": "BLOOM-176B log", "bloom176b_search": "BLOOM topology search"}
DATASET_COLORS = dict(zip(DATASET_NAMES, (f"C{i}" for i in range(10))))
# Table 4 of the same paper: one layer timed; its errors beside Table 5's, in Table 5's colour
DATASET_NAMES["korthikanti2022_layers"] = "Korthikanti 2022 Table 4 (one layer)"
DATASET_COLORS["korthikanti2022_layers"] = DATASET_COLORS["korthikanti2022"]
BREAKDOWN = [("gemm_s", "GEMMs", "tab:blue"), ("attention_s", "flash attention", "tab:cyan"),
             ("memory_s", "memory-bound", "tab:green"), ("bubble_s", "bubble", "tab:gray"),
             ("tp_exposed_s", "TP", "tab:orange"), ("pp_exposed_s", "PP", "tab:brown"),
             ("fsdp_exposed_s", "FSDP", "tab:pink"), ("dp_exposed_s", "DP", "tab:red"),
             ("interference_s", "hidden comm. (SMs held)", "gold"),
             ("sync_s", "sync (straggler)", "tab:purple"), ("optimizer_s", "optimizer",
                                                           "tab:olive")]
PEER_COLUMN = "peer_fitted_time_s"


def scale_figure(data: FigureData, out: Path) -> list[Path]:
    """The cluster-scale model against every published run: predicted vs published iteration
    time (fitted runs ringed), the breakdown of MegaScale Table 2's iterations per GPU count,
    and the signed error of every held-out run per dataset (one-sided bias shows as a side),
    with llm-analysis's (fitted on the same rows) beside each dataset."""
    from suite.scale.validate import iteration_rows

    table = data.table
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), constrained_layout=True,
                             gridspec_kw={"width_ratios": [1, 1.4, 1]})
    timed = iteration_rows(table[table.paper_iteration_time_s.notna()])
    ax = axes[0]
    for i, (dataset, g) in enumerate(timed.groupby("dataset", sort=False)):
        color = DATASET_COLORS.get(dataset, "k")
        ax.scatter(g.paper_iteration_time_s, g.predicted_iteration_time_s, s=18, color=color,
                   label=DATASET_NAMES.get(dataset, dataset))
        cal = g[g.calibration.astype(bool)]
        ax.scatter(cal.paper_iteration_time_s, cal.predicted_iteration_time_s, s=90,
                   facecolors="none", edgecolors="k", zorder=4,
                   label="fitted run" if i == 0 else None)
    lo, hi = timed.paper_iteration_time_s.min() / 1.5, timed.paper_iteration_time_s.max() * 1.5
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.95, hi * 0.95], [lo * 1.05, hi * 1.05], color="k",
                    alpha=0.08, label="within 5%")
    ax.set(xscale="log", yscale="log", xlabel="published iteration time (s)",
           ylabel="model (s)", title="every published run with an iteration time")
    ax.legend(fontsize=6)

    ax = axes[1]
    t2 = table[table.dataset == "megascale_table2"].sort_values(["system", "gpus"])
    labels = [f"{r.system}\n{r.gpus} GPUs b{r.batch_size}" for r in t2.itertuples()]
    bottom = pd.Series(0.0, index=t2.index)
    total = sum(t2[col] for col, _, _ in BREAKDOWN)
    for col, name, color in BREAKDOWN:
        share = 100 * t2[col] / total
        ax.bar(range(len(t2)), share, bottom=bottom, color=color, label=name)
        bottom += share
    ax.set_xticks(range(len(t2)), labels, rotation=60, ha="right", fontsize=6)
    ax.set(ylabel="% of the modelled iteration",
           title="MegaScale Table 2: where each iteration goes (model)")
    ax.legend(fontsize=6, ncol=4, loc="lower left")

    ax = axes[2]
    held = table[~table.calibration.astype(bool)]
    names = list(dict.fromkeys(held.dataset))
    for i, dataset in enumerate(names):
        g = held[held.dataset == dataset]
        err = 100 * g.iteration_time_rel_error
        unit = "%"
        if err.isna().all():  # Fig. 9: MFU only
            err, unit = -g.mfu_error_points, "pt MFU\n(sign flipped)"
        jitter = [i - 0.12 + 0.05 * ((k % 5) - 2) for k in range(len(err))]
        ax.scatter(jitter, err.clip(-60, 60), s=10, color=DATASET_COLORS.get(dataset, "k"),
                   label="scale model" if i == 0 else None)
        ax.plot([i - 0.3, i + 0.05], [err.mean()] * 2, "k-", lw=1.5)
        ax.annotate(f"{err.mean():+.1f} {unit}", (i, min(err.max(), 60)), fontsize=6,
                    ha="center", va="bottom", xytext=(0, 3), textcoords="offset points")
        if PEER_COLUMN in g and g[PEER_COLUMN].notna().any() and unit == "%":
            peer = 100 * (g[PEER_COLUMN] - g.paper_iteration_time_s) / g.paper_iteration_time_s
            ax.scatter([i + 0.18] * len(peer), peer.clip(-60, 60), s=10, marker="x",
                       color="0.5", label="llm-analysis (same rows fitted)" if i == 0 else None)
            ax.plot([i + 0.08, i + 0.3], [peer.mean()] * 2, color="0.5", lw=1.5)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylim(-65, 65)
    ax.legend(fontsize=6, loc="lower left")
    ax.set_xticks(range(len(names)), [DATASET_NAMES.get(n, n) for n in names], rotation=20,
                  ha="right", fontsize=7)
    ax.set(ylabel="model - published (% of iteration time; clipped at 60)",
           title="held-out runs: signed error (+ = model too slow)")
    fig.suptitle("Cluster-scale model: two numbers fitted per system on its declared runs; "
                 "every other run predicted")
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
          f"MFU (% of {mfu_denominator(ok.peak_source)})", "MFU (model FLOPs, no recompute)")
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
    """Left: training loss against tokens at each optimizer's chosen learning rate (a line per
    seed); right: the held-out loss at every learning rate of the sweep (mean and range over
    the seeds), the chosen one marked."""
    from suite.analysis.megascale_claims import best_lrs, loss_runs

    table, curves = data.table, data.curves
    if curves is None:
        raise ValueError("llm_loss: the figure draws the table step's curves.csv (--curves)")
    ok = loss_runs(table)
    best = best_lrs(ok)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), constrained_layout=True)
    for color, (opt, runs) in zip(("C0", "C1"), ok.groupby("optimizer")):
        for i, r in enumerate(runs[runs.lr == best.get(opt)].itertuples()):
            run = curves[curves.record == r.record].sort_values("step")
            left.plot(run.tokens, run.loss, color=color, linewidth=1, alpha=0.8,
                      label=f"{opt}, batch {r.global_batch}, lr {r.lr:g}" if i == 0 else None)
        by_lr = runs.groupby("lr").eval_loss
        mean, low, high = by_lr.mean(), by_lr.min(), by_lr.max()
        right.errorbar(mean.index, mean, yerr=[mean - low, high - mean], color=color,
                       marker="o", capsize=3, label=f"{opt} (batch {runs.global_batch.iloc[0]})")
        if opt in best:
            right.scatter([best[opt]], [mean[best[opt]]], s=160, marker="*", color=color,
                          zorder=3)
    left.set(xlabel="tokens", ylabel="training loss (nats/byte)",
             title="Training loss at each optimizer's chosen LR (a line per seed)")
    right.set(xscale="log", xlabel="learning rate", ylabel="held-out loss (nats/byte)",
              title="Held-out loss over the LR sweep (range over seeds; * chosen)")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    return save_figure(fig, out)


def window_figure(data: FigureData, out: Path) -> list[Path]:
    """Each system's forward + backward time over causal attention's (same rounds, 95%
    interval) per point, with the band's share of the causal triangle: where a kernel that
    computes the band only would land."""
    ok = data.table[data.table.status == "ok"].sort_values(["seq_len", "window", "system"])
    labels = sorted({(r.seq_len, r.window) for r in ok.itertuples()})
    systems = [s for s in dict.fromkeys(ok.system)]
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(labels) + 3), 4.2), constrained_layout=True)
    width = 0.8 / max(1, len(systems))
    for j, system in enumerate(systems):
        rows = ok[ok.system == system].set_index(["seq_len", "window"])
        xs, ys, errs = [], [], [[], []]
        for i, key in enumerate(labels):
            if key in rows.index:
                r = rows.loc[key]
                xs.append(i + (j - (len(systems) - 1) / 2) * width)
                ys.append(r.time_vs_causal)
                errs[0].append(r.time_vs_causal - r.time_vs_causal_ci_low)
                errs[1].append(r.time_vs_causal_ci_high - r.time_vs_causal)
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=system)
    for i, (s, w) in enumerate(labels):
        band = ok[(ok.seq_len == s) & (ok.window == w)].band_fraction.iloc[0]
        ax.hlines(band, i - 0.45, i + 0.45, colors="black", linestyles="dashed",
                  label="band / causal triangle" if i == 0 else None)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(range(len(labels)), [f"s={s}, w={w}" for s, w in labels])
    ax.set(ylabel="time / causal attention's (forward + backward)",
           title="Sliding-window attention against causal attention, side by side")
    ax.legend(fontsize=7)
    return save_figure(fig, out)


def pipeline_figure(data: FigureData, out: Path) -> list[Path]:
    """The measured bubble (95% interval over the steps) against 1F1B's (p-1)/(m+p-1)."""
    ok = data.table[(data.table.status == "ok") & data.table.bubble_fraction.notna()] \
        .sort_values("micro_batches")
    fig, ax = plt.subplots(figsize=(6.5, 4.2), constrained_layout=True)
    yerr = [ok.bubble_fraction - ok.bubble_ci_low, ok.bubble_ci_high - ok.bubble_fraction]
    ax.errorbar(ok.micro_batches, ok.bubble_fraction, yerr=yerr, marker="o", capsize=3,
                label="measured (mean over stages)")
    if not ok.empty:
        p = int(ok.world_size.iloc[0])
        m = range(int(ok.micro_batches.min()), int(ok.micro_batches.max()) + 1)
        ax.plot(list(m), [(p - 1) / (k + p - 1) for k in m], linestyle="dashed", color="black",
                label=f"(p-1)/(m+p-1), p={p}")
    ax.set(xlabel="micro-batches per step (m)", ylabel="fraction of the step idle",
           title="Pipeline bubble, 1F1B, as micro-batches grow")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=8)
    return save_figure(fig, out)


_MODE_ORDER = {m: i for i, m in enumerate(MODES)}


def resilience_figure(data: FigureData, out: Path) -> list[Path]:
    """Left: each mode's checkpoint stall (bars: the median after the first; crosses: the first,
    which pays the mode's set-up). Middle: recovery after each
    fault, split into detection, the agent's shutdown, start-up, restore and the first step.
    Right: ETTR against cluster size for the 175B run under each scheme (Daly's interval,
    Llama 3's failure rate, this run's costs carried to a node's bytes; Table 2's step), with
    MegaScale's reported recovery (10 + 15 min) dashed and the papers' 90% line."""
    from suite.analysis import resilience_analysis as ra
    from suite.resilience.ettr import Costs

    t = data.table
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), constrained_layout=True)
    ok = t[(t.status == "ok") & (t.group == "checkpoint")]
    ok = ok.assign(order=ok.system.map(lambda s: _MODE_ORDER.get(s.removeprefix("checkpoint-"),
                                                                 len(_MODE_ORDER))))
    ok = ok.sort_values(["trainer", "order"], kind="stable")

    def label(r) -> str:
        return f"{r.trainer}\n" + r.system.removeprefix("checkpoint-").replace("-thread",
                                                                              "\n(thread)")

    for i, r in enumerate(ok.itertuples()):
        stalls = ra._samples(r._asdict())
        axes[0].scatter([i] * len(stalls), stalls, s=14)
        axes[0].bar(i, r.stall_s, 0.6, alpha=0.4)
        if pd.notna(getattr(r, "first_stall_s", None)):  # the set-up each mode pays once
            axes[0].scatter(i, r.first_stall_s, s=24, marker="x", color="k",
                            label="first checkpoint (set-up)" if i == 0 else None)
    axes[0].set_xticks(range(len(ok)), [label(r) for r in ok.itertuples()], fontsize=8)
    axes[0].set(ylabel="training time lost per checkpoint (s)", title="Checkpoint stall")
    if len(ok):
        axes[0].legend(fontsize=7)
    faults = t[(t.status == "ok") & t.system.str.startswith("fault-")
               & t.detect_s.notna()] if "detect_s" in t else t.iloc[0:0]
    parts = ["detect_s", "shutdown_s", "startup_s", "restore_s", "first_step_s"]
    for i, r in enumerate(faults.itertuples()):
        bottom = 0.0
        for j, part in enumerate(parts):
            value = float(getattr(r, part))
            axes[1].bar(i, value, 0.6, bottom=bottom, color=f"C{j}",
                        label=part.removesuffix("_s").replace("_", " ") if i == 0 else None)
            bottom += value
    axes[1].set_xticks(range(len(faults)), [f"{r.trainer}\n{r.system.removeprefix('fault-')}"
                                            for r in faults.itertuples()])
    axes[1].set(ylabel="seconds from the fault to training again", title="Recovery")
    axes[1].legend(fontsize=7)
    published = data.paper.get("published")
    for trainer in sorted(set(ok.trainer)):
        costs = ra.at_paper_scale(t, trainer)
        if costs is None or published is None:
            continue
        rate = ra.failure_rate(published)
        for j, (scheme, c) in enumerate(costs.items()):
            curve = ra.ettr_curves({scheme: c}, rate, ra.PAPER_STEP_S)
            axes[2].plot(curve.gpus, curve.ettr, marker="o", color=f"C{j}",
                         label=f"{trainer} {scheme}")
            slow = ra.ettr_curves({scheme: Costs(c.stall_s, c.persist_s,
                                                 ra.MEGASCALE_RECOVERY_S)}, rate, ra.PAPER_STEP_S)
            axes[2].plot(slow.gpus, slow.ettr, linestyle="--", color=f"C{j}",
                         label=f"{trainer} {scheme}, MegaScale's 25 min recovery")
    axes[2].axhline(ra.ETTR_PAPER, color="gray", linewidth=0.8, label="papers: > 90%")
    axes[2].axvline(ra.PAPER_GPUS, color="gray", linestyle=":", linewidth=0.8)
    axes[2].set_xscale("log", base=2)
    axes[2].set(xlabel="GPUs", ylabel="effective training time ratio",
                title="ETTR, 175B (Daly interval, Llama 3 failure rate)")
    axes[2].legend(fontsize=6)
    return save_figure(fig, out)
