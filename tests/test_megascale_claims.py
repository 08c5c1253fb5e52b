"""MegaScale's claims rows (suite.analysis.megascale_claims) on hand-made tables."""

import math

import pandas as pd
import pytest

from suite.analysis.analyze import AnalysisInputs
from suite.analysis.megascale_claims import LAMB_MARGIN, ablation_claims, lamb_claims
from suite.analysis.verdicts import CLAIM_COLUMNS

TABLE3 = pd.read_csv("results/paper/megascale_table3_ablation_175b_256gpu.csv")


def _step(step, technique, paper_steps, tokens_per_s, ms, half=0.01):
    return {"step": step, "technique": technique, "paper_steps": paper_steps, "status": "ok",
            "tokens_per_s": tokens_per_s, "ci_low_ms": ms * (1 - half),
            "ci_high_ms": ms * (1 + half)}


def test_each_ladder_step_is_a_size_claim_and_the_steps_not_the_papers_are_not_scored():
    table = pd.DataFrame([
        _step(0, "baseline", "0", 100.0, 10.0),
        _step(1, "+ parallel block", "1", 120.0, 10.0 / 1.2),
        _step(2, "+ sliding window", "2", 121.0, 10.0 / 1.21),
        _step(3, "+ fused operators", "6", 120.0, 10.0 / 1.2, half=0.2),  # noisy: straddles 1
    ])
    c = ablation_claims(AnalysisInputs(table, {"table3": TABLE3}))
    assert list(c.columns) == CLAIM_COLUMNS and len(c) == 3
    block, window, fused = (c.iloc[i] for i in range(3))
    assert block.measured == pytest.approx(1.2) and block.kind == "size"
    # the interval: the two medians' log half-widths in quadrature
    half = math.hypot(*(2 * [(math.log(1.01) - math.log(0.99)) / 2]))
    assert block.ci_low == pytest.approx(1.2 * math.exp(-half))
    assert (block.verdict, block.size_verdict) == ("reproduced", "not expected")
    assert block.paper_value.startswith("1.096x (Table 3 rows 1)")
    assert window.verdict == "not tested" and "saves no compute" in window.reading
    assert window.measured == pytest.approx(121 / 120)  # measured, not scored
    assert fused.verdict == "inconclusive"


def test_lamb_is_an_equivalence_claim_with_its_batch_factor_and_seeds():
    def row(opt, batch, loss, seed):
        return {"optimizer": opt, "global_batch": batch, "eval_loss": loss, "seed": seed,
                "status": "ok"}

    same = pd.DataFrame([row("adamw", 8, 2.30, 0), row("lamb", 32, 2.31, 0),
                         row("adamw", 8, 2.32, 1), row("lamb", 32, 2.32, 1),
                         row("adamw", 8, 2.31, 2), row("lamb", 32, 2.30, 2)])
    c = lamb_claims(AnalysisInputs(same)).iloc[0]
    assert (c.kind, c.verdict, c.n) == ("equivalence", "reproduced", 3)
    assert "batch 4x here" in c.claim and f"±{LAMB_MARGIN:g}" in c.reading
    one = lamb_claims(AnalysisInputs(same[same.seed == 0].assign(seed=None))).iloc[0]
    assert one.verdict == "inconclusive" and one.reading == "inconclusive: one value, no interval"
    none = lamb_claims(AnalysisInputs(same[same.optimizer == "adamw"])).iloc[0]
    assert none.verdict == "not tested"
