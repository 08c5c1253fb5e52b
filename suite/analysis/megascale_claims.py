"""MegaScale's claims beside the ladder and the loss check measured here (``ExperimentSpec.claims``
of llm_ablation and llm_loss), each of its kind (``suite.analysis.verdicts``).

The ladder (Table 3): each step's throughput over the previous step's, at the baseline's FLOP
count, is a size claim (the paper's MFU ratio for the same rows), whose size is expected only at
the paper's setting (175B on 256 A100s: never on the machines this suite has run on). The interval
of a ratio combines the two steps' 95% intervals of the median step time in log space, as
independent. A step whose mechanism here is not the paper's is not scored as the paper's row
(``NOT_THE_PAPERS``: its values stay, its verdict is not tested). The loss check (Fig. 10b,
"LAMB scales the batch 4x without accuracy loss") is an equivalence claim within
``LAMB_MARGIN``.
"""

from __future__ import annotations

import math

import pandas as pd

from suite.analysis.verdicts import (CLAIM_COLUMNS, Size, equivalence_claim, interval_claim,
                                     not_tested, withheld)

PAPER = "MegaScale"
PAPER_SETTING = "the paper's setting (175B, 256 A100s, Megatron-LM's 3D parallelism)"
# Ladder steps whose mechanism here is not the paper's, and what it is instead.
NOT_THE_PAPERS = {
    2: "masked full attention computes every s x s score and saves no compute; the paper's "
       "window costs O(s w)",
    5: "DDP's default gradient bucketing, not the paper's data-, pipeline- and tensor-parallel "
       "overlaps",
    6: "a larger batch without a pipeline spreads fixed per-step costs; the paper's gain is "
       "fewer pipeline bubbles",
}
# "without accuracy loss": held-out loss within this many nats of AdamW's, declared here.
LAMB_MARGIN = 0.05


def ablation_claims(inputs) -> pd.DataFrame:
    table, paper = inputs.table, inputs.paper["table3"].set_index("step")
    if "step" not in table or "tokens_per_s" not in table:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    ok = table[table.status == "ok"].sort_values("step")
    rows = []
    for (_, prev), (_, r) in zip(ok.iloc[:-1].iterrows(), ok.iloc[1:].iterrows()):
        steps = [int(s) for s in str(r.paper_steps).split(",") if s not in ("", "nan")]
        text = f"{r.technique.removeprefix('+ ')} raises throughput (step {r.step} over " \
               f"{prev.step}, at the baseline's FLOP count)"
        if steps:
            before = paper.mfu_percent[min(steps) - 1]
            paper_ratio = float(paper.mfu_percent[max(steps)] / before)
            paper_value = f"{paper_ratio:.3f}x (Table 3 rows {', '.join(map(str, steps))})"
            size = Size(paper_ratio, expected=False, setting=PAPER_SETTING)
        else:
            paper_value, size = "not in Table 3", None
        row = _ratio_row(text, paper_value, prev, r, size)
        if r.step in NOT_THE_PAPERS:
            row = withheld(row, f"not the paper's mechanism: {NOT_THE_PAPERS[r.step]}")
        rows.append(row)
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _ratio_row(text: str, paper_value: str, prev, r, size: Size | None) -> dict:
    """r's tokens/s over prev's with the interval of the two medians' step times."""
    ratio = float(r.tokens_per_s / prev.tokens_per_s)
    halves = [_log_half_width(x) for x in (prev, r)]
    if any(h is None for h in halves):
        low = high = ratio
        n = 1
    else:
        half = math.hypot(*halves)
        low, high, n = ratio * math.exp(-half), ratio * math.exp(half), 2
    return interval_claim(PAPER, text, paper_value, ratio, low, high, n, sign=1, null=1.0,
                          unit="x", size=size, interval="95% of the medians",
                          note="one run per step; interval from the two medians' step-time "
                               "intervals")


def _log_half_width(row) -> float | None:
    low, high = row.get("ci_low_ms"), row.get("ci_high_ms")
    if low is None or high is None or not (low > 0 and high > 0) or pd.isna(low) or pd.isna(high):
        return None
    return (math.log(high) - math.log(low)) / 2


def lamb_claims(inputs) -> pd.DataFrame:
    """Fig. 10b: LAMB at a larger batch reaches AdamW's held-out loss at equal tokens."""
    table = inputs.table
    ok = table[(table.status == "ok") & table.eval_loss.notna()] if "eval_loss" in table \
        else table.iloc[0:0]
    adamw, lamb = ok[ok.optimizer == "adamw"], ok[ok.optimizer == "lamb"]
    text = "LAMB scales the batch without accuracy loss (held-out loss, LAMB - AdamW, equal tokens)"
    if adamw.empty or lamb.empty:
        return pd.DataFrame([not_tested(PAPER, text, "4x batch, same loss (Fig. 10b)", "nats",
                                        "needs an AdamW and a LAMB run that finished",
                                        kind="equivalence")], columns=CLAIM_COLUMNS)
    factor = lamb.global_batch.iloc[0] / adamw.global_batch.iloc[0]
    pairs = _paired(adamw, lamb)
    row = equivalence_claim(PAPER, f"{text}; batch {factor:g}x here",
                            "4x batch, same loss (Fig. 10b)", pairs, margin=LAMB_MARGIN,
                            unit="nats (LAMB - AdamW)",
                            note=(f"{len(pairs)} seed(s); the paper's batch factor is 4x, "
                                  f"this run's {factor:g}x"))
    return pd.DataFrame([row], columns=CLAIM_COLUMNS)


def _paired(adamw: pd.DataFrame, lamb: pd.DataFrame) -> list[float]:
    """LAMB - AdamW per seed where the table has seeds, else the one pair."""
    if "seed" in adamw and "seed" in lamb and adamw.seed.notna().all():
        a, b = adamw.set_index("seed").eval_loss, lamb.set_index("seed").eval_loss
        return [float(b[s] - a[s]) for s in a.index.intersection(b.index)]
    return [float(lamb.eval_loss.iloc[0] - adamw.eval_loss.iloc[0])]


def window_claims(inputs) -> pd.DataFrame:
    """Sec. 3.1: a sliding window makes attention's cost O(s w): the fused windowed kernel's
    forward + backward time over causal attention's, timed in the same rounds, at each point;
    the band's share of the causal triangle is what a kernel that skips the rest can reach."""
    table = inputs.table
    rows = []
    fused = table[(table.system == "window-fused") & (table.status == "ok")] \
        if "system" in table else table.iloc[0:0]
    for r in fused.sort_values("seq_len").itertuples():
        text = (f"sliding-window attention saves compute: time over causal attention's, "
                f"s={r.seq_len}, w={r.window} (forward + backward)")
        row = interval_claim(
            PAPER, text, "O(s w) instead of O(s^2) (Sec. 3.1)", float(r.time_vs_causal),
            float(r.time_vs_causal_ci_low), float(r.time_vs_causal_ci_high), int(r.n_samples),
            sign=-1, null=1.0, unit="x causal's time", interval="95% bootstrap of the medians",
            note=(f"the band is {r.band_fraction:.0%} of the causal triangle; the same rounds "
                  f"timed SDPA's causal kernel"))
        rows.append(row)
    if not rows:
        rows.append(not_tested(PAPER, "sliding-window attention saves compute",
                               "O(s w) instead of O(s^2) (Sec. 3.1)", "x causal's time",
                               "no window-fused record passed its check"))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
