"""MegaScale's claims beside the runs measured here (``ExperimentSpec.claims`` of llm_window,
llm_pipeline, llm_ablation and llm_loss), each of its kind (``suite.analysis.verdicts``).

The ladder (Table 3): each step's throughput over the previous step's is a size claim (the
paper's MFU ratio for the same rows), whose size is expected only at the paper's setting (175B
on 256 A100s: never on the machines this suite has run on). The interval is a bootstrap of the
ratio of the two runs' median step times (their timed samples, resampled apart); a run timed on
a noisy machine (the BERT points' noise gate, ``suite.measure.load``) leaves its row not tested.
A step whose mechanism here is not the paper's, or that a CPU cannot show, keeps its values and
says why instead of a verdict. The loss check (Fig. 10b, "LAMB scales the batch 4x without
accuracy loss") is an equivalence claim within ``LAMB_MARGIN``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from suite.analysis.llm_tables import paper_steps
from suite.analysis.tables import read_checked
from suite.analysis.verdicts import (CLAIM_COLUMNS, Size, equivalence_claim, interval_claim,
                                     not_tested, withheld)
from suite.experiments.llm_plan import ABLATION, NO_OVERLAP_STEP, OVERLAP, PIPELINE
from suite.measure.stats import ratio_of_medians_ci

PAPER = "MegaScale"
PAPER_SETTING = "the paper's setting (175B, 256 A100s, Megatron-LM's 3D parallelism)"
CPU_OVERLAP = ("not shown on a CPU: gloo's collectives block the calling thread and FSDP2's "
               "and DeepSpeed's side streams are no-ops there, so nothing runs beside compute")
LAMB_WITHOUT_PIPELINE = ("a larger batch without a pipeline spreads fixed per-step costs; the "
                         "paper's gain is fewer pipeline bubbles (run the ladder on the "
                         "pipeline engine)")
# "without accuracy loss": held-out loss within this many nats of AdamW's, declared here.
LAMB_MARGIN = 0.05
# the pipeline's measured bubble against 1F1B's formula: within this factor either way
BUBBLE_FACTOR = 1.2


def ablation_claims(inputs) -> pd.DataFrame:
    table, paper = inputs.table, inputs.paper["table3"].set_index("step")
    if "step" not in table or "tokens_per_s" not in table:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    ok = table[table.status == "ok"].sort_values("step")
    engine = ok.system.iloc[-1] if not ok.empty else None
    rows = []
    for (_, prev), (_, r) in zip(ok.iloc[:-1].iterrows(), ok.iloc[1:].iterrows()):
        name = ABLATION[r.step][0]
        steps = paper_steps(r.paper_steps)
        text = (f"{r.technique.removeprefix('+ ')} raises throughput (step {r.step} over "
                f"{prev.step}: {r.mechanism})")
        if steps:
            before = paper.mfu_percent[min(steps) - 1]
            paper_ratio = float(paper.mfu_percent[max(steps)] / before)
            paper_value = f"{paper_ratio:.3f}x (Table 3 rows {', '.join(map(str, steps))})"
            size = Size(paper_ratio, expected=False, setting=PAPER_SETTING)
        else:
            paper_value, size = "not in Table 3", None
        row = _ratio_row(text, paper_value, prev, r, size)
        why = _not_shown(name, r)
        if why:
            row = withheld(row, why)
        rows.append(row)
    if engine is not None and engine not in OVERLAP and not (ok.step == 5).any():
        rows.append(not_tested(PAPER, "communication overlap raises throughput",
                               "Table 3 rows 3-5", "x", f"no overlap step on {engine}: "
                               f"{NO_OVERLAP_STEP.get(engine, 'the engine has none')}",
                               kind="size"))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _not_shown(name: str, r) -> str:
    """Why a step's comparison here is not the paper's, or cannot show its mechanism; empty
    when it can."""
    if name == "overlap" and r.system not in OVERLAP:
        return f"not the paper's mechanism: {NO_OVERLAP_STEP.get(r.system, 'no overlap')}"
    if name == "overlap" and str(r.get("device", "")).startswith("cpu"):
        return CPU_OVERLAP
    if name in ("parallel_block", "sliding_window") and not isinstance(
            r.get("attention_path"), str):
        return ("the run did not record its code path (before the band-only window and the "
                "fused input GEMM): rerun it")
    if name == "lamb" and r.system != PIPELINE:
        return f"not the paper's mechanism: {LAMB_WITHOUT_PIPELINE}"
    return _noisy(r.get("noisy"), r.get("noise_reason"))


def _noisy(flag, reason) -> str:
    """The noise gate's reason to withhold a row (``suite.measure.load``), or empty."""
    if flag in (True, "True", "true"):
        return f"timed on a noisy machine: {reason} (rerun: make rerun-noisy)"
    return ""


def _samples(row) -> list[float]:
    return read_checked(Path(row.record)).timing.get("samples") or []


def _ratio_row(text: str, paper_value: str, prev, r, size: Size | None) -> dict:
    """r's tokens/s over prev's: the ratio of the two runs' median step times (tokens per step
    taken into account), with a bootstrap interval over their timed samples."""
    tokens = (r.global_batch * r.seq_len) / (prev.global_batch * prev.seq_len)
    before, after = _samples(prev), _samples(r)
    if len(before) > 1 and len(after) > 1:
        point, low, high = ratio_of_medians_ci(before, after)
        ratio, low, high, n = tokens * point, tokens * low, tokens * high, 2
    else:
        ratio = float(r.tokens_per_s / prev.tokens_per_s)
        low = high = ratio
        n = 1
    return interval_claim(PAPER, text, paper_value, ratio, low, high, n, sign=1, null=1.0,
                          unit="x", size=size, interval="95% bootstrap of the medians",
                          note=f"one run per step, {len(before)} and {len(after)} timed steps")


def pipeline_claims(inputs) -> pd.DataFrame:
    """The pipeline engine's measured bubble against 1F1B's (p - 1) / (m + p - 1) at each
    micro-batch count (size within ``BUBBLE_FACTOR``), and its fall from the fewest
    micro-batches to the most: what LAMB's larger batch buys on a pipeline (Sec. 3.1)."""
    table = inputs.table
    ok = table[(table.status == "ok") & table.bubble_fraction.notna()].sort_values(
        "micro_batches") if "bubble_fraction" in table else table.iloc[0:0]
    rows = []
    for r in ok.itertuples():
        text = (f"1F1B's bubble is (p-1)/(m+p-1): p={r.world_size} stages, m={r.micro_batches} "
                f"micro-batches")
        rows.append(interval_claim(
            PAPER, text, f"{r.bubble_formula:.3f} (formula)", float(r.bubble_fraction),
            float(r.bubble_ci_low), float(r.bubble_ci_high), int(r.bubble_steps), sign=1,
            unit="of the step idle", interval="95% t over the measured steps",
            size=Size(float(r.bubble_formula), expected=True, setting="1F1B", rule="within",
                      factor=BUBBLE_FACTOR),
            note="idle = 1 - the stage's compute / the pipeline's step, mean over stages; the "
                 "formula assumes stages of equal cost and free communication"
                 + ("" if pd.isna(getattr(r, "bubble_of_stage_costs", None)) else
                    f"; with the stages' measured costs it bounds {r.bubble_of_stage_costs:.3f}")))
    if len(ok) >= 2:
        few, many = ok.iloc[0], ok.iloc[-1]
        ratio, low, high = ratio_of_medians_ci(_bubbles(many), _bubbles(few))
        expected = many.bubble_formula / few.bubble_formula
        rows.append(interval_claim(
            PAPER, f"more micro-batches (a larger batch: LAMB's) cut the bubble: m="
                   f"{many.micro_batches} over m={few.micro_batches}",
            f"{expected:.3f}x (formula)", ratio, low, high, 2, sign=-1, null=1.0, unit="x",
            interval="95% bootstrap of the medians",
            size=Size(float(expected), expected=True, setting="1F1B", rule="within",
                      factor=BUBBLE_FACTOR),
            note="per-step bubbles of the two runs, resampled apart"))
    if not rows:
        rows.append(not_tested(PAPER, "1F1B's bubble is (p-1)/(m+p-1)", "formula",
                               "of the step idle", "no pipeline run measured its bubble",
                               kind="size"))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _bubbles(row) -> list[float]:
    engine = read_checked(Path(row.record)).derived.get("trainer") or {}
    return engine.get("bubble_fraction_steps") or []


def best_lrs(table: pd.DataFrame) -> dict[str, float]:
    """Each optimizer's learning rate of lowest mean training loss at the end (``tail_loss``,
    over the seeds): chosen on training loss, so the held-out loss judged is untouched."""
    ok = table[(table.status == "ok") & table.tail_loss.notna()]
    means = ok.groupby(["optimizer", "lr"]).tail_loss.mean()
    return {opt: float(means[opt].idxmin()) for opt in means.index.get_level_values(0).unique()}


def loss_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The loss sweep's finished runs with a held-out loss (none when the table predates the
    sweep's columns)."""
    if not {"eval_loss", "tail_loss", "optimizer", "lr"} <= set(table):
        return table.iloc[0:0]
    return table[(table.status == "ok") & table.eval_loss.notna()]


def chosen_runs(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Each optimizer's runs (its seeds) at its best learning rate (``best_lrs``); empty unless
    both AdamW and LAMB finished."""
    if set(runs.optimizer) != {"adamw", "lamb"}:
        return {}
    return {opt: runs[(runs.optimizer == opt) & (runs.lr == lr)]
            for opt, lr in best_lrs(runs).items()}


def window_fused(table: pd.DataFrame) -> pd.DataFrame:
    """The windowed kernel's checked and timed rows of the llm_window table."""
    if "system" not in table:
        return table.iloc[0:0]
    return table[(table.status == "ok") & (table.system == "window-fused")]


def lamb_claims(inputs) -> pd.DataFrame:
    """Fig. 10b: LAMB at a larger batch reaches AdamW's held-out loss at equal tokens, each at
    its best learning rate of a sweep of the same size, paired by seed."""
    table = inputs.table
    text = ("LAMB scales the batch without accuracy loss (held-out loss, LAMB - AdamW, equal "
            "tokens, each at its best LR)")
    paper_value = "4x batch, same loss (Fig. 10b)"
    ok = loss_runs(table)
    chosen = chosen_runs(ok)
    if not chosen:
        return pd.DataFrame([not_tested(PAPER, text, paper_value, "nats",
                                        "needs AdamW and LAMB runs that finished",
                                        kind="equivalence")], columns=CLAIM_COLUMNS)
    adamw, lamb = chosen["adamw"], chosen["lamb"]
    best = {opt: float(runs.lr.iloc[0]) for opt, runs in chosen.items()}
    factor = lamb.global_batch.iloc[0] / adamw.global_batch.iloc[0]
    pairs = _paired(adamw, lamb)
    sweeps = {opt: sorted(float(v) for v in ok[ok.optimizer == opt].lr.unique())
              for opt in ("adamw", "lamb")}
    edge = [opt for opt in sweeps if len(sweeps[opt]) > 1
            and best[opt] in (sweeps[opt][0], sweeps[opt][-1])]
    row = equivalence_claim(
        PAPER, f"{text}; batch {factor:g}x here", paper_value, pairs, margin=LAMB_MARGIN,
        unit="nats (LAMB - AdamW)",
        note=(f"{len(pairs)} seed(s), paired; LR sweeps of {len(sweeps['adamw'])} each, "
              f"declared in the config: AdamW {sweeps['adamw']} -> {best['adamw']:g}, LAMB "
              f"{sweeps['lamb']} -> {best['lamb']:g} (lowest mean training loss over the last "
              f"tenth of the steps); {int(adamw.tokens_seen.iloc[0])} tokens each"
              + (f"; the best LR of {', '.join(edge)} is at its sweep's edge: a wider sweep "
                 f"may do better" if edge else "")))
    return pd.DataFrame([row], columns=CLAIM_COLUMNS)


def _paired(adamw: pd.DataFrame, lamb: pd.DataFrame) -> list[float]:
    """LAMB - AdamW per seed both have (a seed run twice, e.g. records of an older config
    still on disk: its latest run)."""
    a, b = (t.sort_values("created_at").drop_duplicates("seed", keep="last")
            .set_index("seed").eval_loss for t in (adamw, lamb))
    return [float(b[s] - a[s]) for s in a.index.intersection(b.index)]


def window_claims(inputs) -> pd.DataFrame:
    """Sec. 3.1: a sliding window makes attention's cost O(s w): the fused windowed kernel's
    forward + backward time over causal attention's, timed in the same rounds, at each point;
    the band's share of the causal triangle is what a kernel that skips the rest can reach."""
    rows = []
    for r in window_fused(inputs.table).sort_values("seq_len").itertuples():
        text = (f"sliding-window attention saves compute: time over causal attention's, "
                f"s={r.seq_len}, w={r.window} (forward + backward)")
        row = interval_claim(
            PAPER, text, "O(s w) instead of O(s^2) (Sec. 3.1)", float(r.time_vs_causal),
            float(r.time_vs_causal_ci_low), float(r.time_vs_causal_ci_high), int(r.n_samples),
            sign=-1, null=1.0, unit="x causal's time", interval="95% bootstrap of the medians",
            note=(f"the band is {r.band_fraction:.0%} of the causal triangle; the same rounds "
                  f"timed SDPA's causal kernel"))
        why = _noisy(r.noisy, r.noise_reason)
        rows.append(withheld(row, why) if why else row)
    if not rows:
        rows.append(not_tested(PAPER, "sliding-window attention saves compute",
                               "O(s w) instead of O(s^2) (Sec. 3.1)", "x causal's time",
                               "no window-fused record passed its check"))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def engines_claims(inputs) -> pd.DataFrame:
    """Sec. 3.2's data-parallel overlap on the engines that have it: each engine with its
    prefetch / overlap on against the same engine with it off (``llm_plan.OVERLAP``), at the same
    model and batch. A CPU cannot show it (the row keeps the values and says so)."""
    table, paper = inputs.table, inputs.paper["table3"].set_index("step").mfu_percent
    ok = table[table.status == "ok"].set_index("system") if "system" in table else table
    row5 = float(paper[5] / paper[4])  # Table 3: + data-parallel communication overlap
    rows = []
    for on, (off, what) in OVERLAP.items():
        if on not in ok.index or off not in ok.index:
            continue
        r, prev = ok.loc[on], ok.loc[off]
        row = _ratio_row(f"data-parallel overlap raises throughput: {on} over {off} ({what})",
                         f"{row5:.3f}x (Table 3 row 5)", prev, r,
                         Size(row5, expected=False, setting=PAPER_SETTING))
        if str(r.get("device", "")).startswith("cpu"):
            row = withheld(row, CPU_OVERLAP)
        rows.append(row)
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
