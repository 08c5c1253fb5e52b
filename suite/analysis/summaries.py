"""The sentence above an experiment's table in the report: ``(AnalysisInputs) -> str``, named
by ``ExperimentSpec.summary`` and run by the analysis step (the report only shows it)."""

from __future__ import annotations

import pandas as pd

from suite.analysis.analyze import AnalysisInputs


def llm_scale(inputs: AnalysisInputs) -> str:
    """The model's error on the runs it was not fitted to, per dataset and system, with
    llm-analysis's (fitted on the same rows) beside it; where a dataset holds runs with and
    without recompute, the signed error of each (a bias between them misranks layouts); the
    memory model against the measured peaks and the runs that ran out of memory; the systems
    whose straggler constant their calibration cannot fit, with their errors by node count."""
    from suite.scale.validate import memory_line, memory_summary, summarize, unfitted_straggler

    table = inputs.table
    peer = summarize(table, "peer_fitted_time_s").set_index(["dataset", "system"]) \
        if "peer_fitted_time_s" in table and table.peer_fitted_time_s.notna().any() else None
    by_recompute = summarize(table, by=["recompute"]).dropna(subset=["time_mean_signed_pct"])
    parts = []
    memory = memory_summary(table)
    lines = {(m.dataset, m.system): memory_line(m) for m in memory.itertuples()}
    for r in summarize(table).itertuples():
        part = f"{r.dataset} / {r.system} ({r.runs} runs): "
        if pd.notna(r.time_mean_abs_pct):
            part += (f"{r.timed} time off by {r.time_mean_abs_pct:.1f}% on average "
                     f"(max {r.time_max_abs_pct:.1f}%, signed mean {r.time_mean_signed_pct:+.1f}%)")
            kinds = by_recompute[(by_recompute.dataset == r.dataset)
                                 & (by_recompute.system == r.system)]
            if len(kinds) > 1:
                part += " (signed by recompute: " + ", ".join(
                    f"{k.recompute} {k.time_mean_signed_pct:+.1f}% of {k.runs}"
                    for k in kinds.itertuples()) + ")"
            if r.sweeps:
                part += (f", {r.sweeps} layout sweep(s): top-1 regret {r.top1_regret_pct:.1f}%"
                         + (f", Spearman {r.spearman:.2f}" if pd.notna(r.spearman) else ""))
            theirs = None if peer is None else peer.loc[(r.dataset, r.system)]
            if theirs is not None and pd.notna(theirs.time_mean_abs_pct):
                part += (f"; llm-analysis {theirs.time_mean_abs_pct:.1f}% (signed "
                         f"{theirs.time_mean_signed_pct:+.1f}%)")
        else:
            part += (f"MFU off by {r.mfu_mean_abs_points:.1f} points on average (signed "
                     f"{r.mfu_mean_signed_points:+.1f})")
        if lines[(r.dataset, r.system)]:
            part += f"; memory: {lines[(r.dataset, r.system)]}"
        parts.append(part)
    unfitted = unfitted_straggler(table)
    scale = (" With no calibration pair of one layout on two node counts, these systems fit no "
             "straggler constant, so their runs on more nodes than they were fitted on carry no "
             "synchronization cost that grows with the nodes; signed error by nodes: "
             + "; ".join(f"{u.system} ({u.trend()})" for u in unfitted) + "."
             if unfitted else "")
    return ("Error on the rows held out from the fit (not unseen: the model's terms were shaped "
            "while reading these datasets): " + "; ".join(parts)
            + f". Of the {memory.fit_checked.sum()} published runs that ran whole (memory is "
            "never fitted), the memory model marks "
            f"{memory.ran_marked_oom.sum()} as too big to fit." + scale)


def llm_ablation(inputs: AnalysisInputs) -> str:
    """Each step's MFU gain here beside the paper's (Table 3)."""
    from suite.analysis.llm_tables import ablation_vs_paper

    rows = ablation_vs_paper(inputs.table, inputs.paper["table3"])
    parts = [f"{r.technique}: {r.gain_points:+.1f} points here"
             + ("" if pd.isna(r.paper_gain_points)
                else f" vs {r.paper_gain_points:+.1f} in the paper")
             for r in rows.itertuples() if pd.notna(r.gain_points)]
    return "Gain of each step in MFU points: " + "; ".join(parts) + "." if parts else ""


def llm_loss(inputs: AnalysisInputs) -> str:
    """Each optimizer's chosen learning rate and its held-out loss over the seeds."""
    from suite.analysis.megascale_claims import chosen_runs, loss_runs

    ok = loss_runs(inputs.table)
    parts = []
    for opt, runs in chosen_runs(ok).items():
        lr = float(runs.lr.iloc[0])
        parts.append(f"{opt.upper() if opt == 'lamb' else 'AdamW'} (batch "
                     f"{int(runs.global_batch.iloc[0])}, best LR {lr:g} of "
                     f"{ok[ok.optimizer == opt].lr.nunique()}): held-out "
                     f"{runs.eval_loss.mean():.4f} over {len(runs)} seed(s)")
    if not parts:
        return ""
    return (f"At {int(ok.tokens_seen.iloc[0])} tokens each, " + "; ".join(parts)
            + "; both start near ln(256) = 5.545.")


def vwn_scaling(inputs: AnalysisInputs) -> str:
    table = inputs.table
    ok = table[(table.status == "ok") & (table.series == "main")].sort_values("r")
    wide = ok[ok.r > 1]
    if wide.empty:
        return ""
    w = wide.iloc[-1]
    return (f"At {int(w.tokens)} tokens, the widest model (r = {w.r:g}) is "
            f"{w.gap_next_token:+.4f} [{w.gap_next_token_ci_low:+.4f}, "
            f"{w.gap_next_token_ci_high:+.4f}] nats below the r = 1 baseline in next-token loss "
            f"and {w.gap_next_2_token:+.4f} [{w.gap_next_2_token_ci_low:+.4f}, "
            f"{w.gap_next_2_token_ci_high:+.4f}] in next-2-token loss (mean of {int(w.seeds)} "
            f"seeds, 95% t-interval), at {100 * w.time_overhead:+.0f}% step time.")


def pma_merging(inputs: AnalysisInputs) -> str:
    table = inputs.table
    ok = table[table.status == "ok"]
    if ok.empty:
        return ""
    best = ok.sort_values("gain", ascending=False).iloc[0]
    helps = int((ok.gain_ci_low > 0).sum())
    return (f"At step {int(best.step)}, {helps} of {len(ok)} merge settings beat the latest "
            f"checkpoint with a 95% interval above 0; the best, {best.method.upper()} of "
            f"N = {int(best.n)} every {int(best.interval_steps)} steps, by {best.gain:+.4f} "
            f"nats (chosen after the fact: the claims table uses the setting fixed before the "
            f"run).")


def bert_serving(inputs: AnalysisInputs) -> str:
    table = inputs.table
    ok = table[(table.status == "ok") & (table.scenario == "Server")]
    if ok.empty:
        return ""
    by = ok.groupby("system").agg(qps=("max_valid_qps", "mean"), p99=("p99_ms", "mean"),
                                  runs=("repeat", "count")).sort_values("qps", ascending=False)
    bound = ok.latency_bound_ms.dropna()
    parts = [f"{system} {r.qps:.1f} queries/s (p99 {r.p99:.0f} ms)" for system, r in
             by.iterrows() if r.qps == r.qps]
    if not parts:
        return (f"No offered load was VALID at the p99 bound of {bound.iloc[0]:g} ms for any "
                "system (LoadGen's reasons are in the table).")
    return (f"Highest offered load LoadGen found VALID at the p99 bound of "
            f"{bound.iloc[0]:g} ms, mean of {int(by.runs.max())} run(s) per system: "
            + ", ".join(parts) + ".")


def llm_window(inputs: AnalysisInputs) -> str:
    """The fused windowed kernel's time over causal attention's at each point."""
    from suite.analysis.megascale_claims import window_fused

    ok = window_fused(inputs.table)
    parts = [f"s={r.seq_len}, w={r.window}: {r.time_vs_causal:.2f}x causal's time "
             f"[{r.time_vs_causal_ci_low:.2f}, {r.time_vs_causal_ci_high:.2f}] (band "
             f"{r.band_fraction:.0%} of the causal triangle)" for r in ok.itertuples()]
    return ("The windowed kernel, forward + backward: " + "; ".join(parts) + "."
            if parts else "")


def llm_pipeline(inputs: AnalysisInputs) -> str:
    """The measured bubble beside the formula at each micro-batch count."""
    t = inputs.table
    ok = t[(t.status == "ok") & t.bubble_fraction.notna()].sort_values("micro_batches") \
        if "bubble_fraction" in t else t.iloc[0:0]
    parts = [f"m={r.micro_batches:.0f}: {r.bubble_fraction:.3f} (formula {r.bubble_formula:.3f})"
             for r in ok.itertuples()]
    return "Bubble fraction measured (1F1B's formula): " + "; ".join(parts) + "." if parts \
        else ""
