"""VWN and PMA analyses: S(T) and loss gaps on curves with known answers, the log2(r) fit, the
verdict rule, and the claims tables built from real (tiny) records."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from suite.analysis import pma_analysis, vwn_analysis
from suite.analysis.verdicts import CLAIM_COLUMNS, claim, verdict
from suite.env import REPO_ROOT
from suite.records import write_record
from suite.measure.stats import mean_ci

PAPER = REPO_ROOT / "results" / "paper"
pytestmark = pytest.mark.usefixtures("one_thread")


def test_mean_ci_is_the_student_t_interval():
    x = [2.0, 2.5, 1.0, 3.5]
    s = mean_ci(x)
    low, high = sps.t.interval(0.95, 3, loc=np.mean(x), scale=sps.sem(x))
    assert (s["n"], s["mean"]) == (4, 2.25)
    assert s["ci_low"] == pytest.approx(low) and s["ci_high"] == pytest.approx(high)
    assert mean_ci([1.5]) == {"n": 1, "mean": 1.5, "ci_low": 1.5, "ci_high": 1.5, "std": 0.0}
    assert mean_ci([1.0, float("nan"), 3.0])["n"] == 2
    with pytest.raises(ValueError, match="zero finite values"):
        mean_ci([float("nan")])


@pytest.mark.parametrize("low, high, n, sign, null, want", [
    (0.1, 0.3, 3, 1, 0.0, "reproduced"),
    (-0.3, -0.1, 3, 1, 0.0, "not reproduced"),
    (-0.1, 0.3, 3, 1, 0.0, "inconclusive"),
    (-0.3, -0.1, 3, -1, 0.0, "reproduced"),
    (1.2, 1.5, 3, 1, 1.0, "reproduced"),
    (0.8, 0.95, 3, 1, 1.0, "not reproduced"),
    (0.1, 0.3, 1, 1, 0.0, "inconclusive"),  # one seed: no interval
])
def test_verdict(low, high, n, sign, null, want):
    assert verdict(low, high, n, sign=sign, null=null) == want


def test_claim_row_without_values_is_not_tested():
    row = claim("X", "a claim", 1.0, [None, float("nan")], sign=1, unit="x")
    assert row["verdict"] == "not tested" and set(row) == set(CLAIM_COLUMNS)


def test_tokens_to_reach():
    t = np.array([0, 100, 200, 300], float)
    loss = np.array([5.0, 3.0, 3.2, 2.0])  # a bump at 200: the running minimum ignores it
    assert vwn_analysis.tokens_to_reach(t, loss, 4.0) == pytest.approx(50.0)
    assert vwn_analysis.tokens_to_reach(t, loss, 3.0) == pytest.approx(100.0)
    assert vwn_analysis.tokens_to_reach(t, loss, 2.5) == pytest.approx(250.0)
    assert math.isnan(vwn_analysis.tokens_to_reach(t, loss, 1.9))
    assert vwn_analysis.tokens_to_reach(t, loss, 6.0) == 0.0


def _base_loss(tokens):
    return 1.0 + 3.0 * np.exp(-np.asarray(tokens, float) / 1000.0)


def _synthetic_curves(speedups: dict[float, float], seeds=(0, 1, 2), T=1000, length=3):
    """Baseline (m = n = 2) to length x T; a wide model at r reaches at T what the baseline
    reaches at S_r T (next-2-token: the same shape, 0.2 lower)."""
    rows = []
    for seed in seeds:
        jitter = 1e-3 * seed
        for tok in range(0, length * T + 1, 50):
            loss = _base_loss(tok) + jitter
            rows.append({"label": "m2-n2", "m": 2, "n": 2, "r": 1.0, "seed": seed,
                         "series": "main", "step": tok // 50, "tokens": tok,
                         "next_token": loss, "next_2_token": loss - 0.2})
        for r, s in speedups.items():
            n = int(2 * r)
            for tok in range(0, T + 1, 50):
                loss = _base_loss(s * tok) + jitter
                rows.append({"label": f"m2-n{n}", "m": 2, "n": n, "r": r, "seed": seed,
                             "series": "main", "step": tok // 50, "tokens": tok,
                             "next_token": loss, "next_2_token": loss - 0.2})
    return pd.DataFrame(rows)


def test_gaps_and_token_efficiency_recover_the_known_speedup():
    speedups = {2.0: 1.2, 4.0: 1.4, 8.0: 1.6}
    curves = vwn_analysis.with_gaps(_synthetic_curves(speedups))
    at_T = curves[curves.tokens == 1000]
    for r, s in speedups.items():
        g = at_T[at_T.r == r]
        # interpolation between evaluations 50 tokens apart on a convex curve: within 1%
        assert g.s_next_token.to_numpy() == pytest.approx(s, rel=0.01)
        assert g.s_next_2_token.to_numpy() == pytest.approx(s, rel=0.01)
        assert g.gap_next_token.to_numpy() == pytest.approx(_base_loss(1000) - _base_loss(s * 1000))
    assert curves[curves.m == curves.n].gap_next_token.isna().all()


def test_slope_fit_on_r_at_least_2():
    curves = _synthetic_curves({1.5: 1.05, 2.0: 1.2, 4.0: 1.4, 8.0: 1.6})
    slopes = vwn_analysis.slopes(curves, 1000)
    at = curves[(curves.tokens == 1000) & (curves.seed == 0) & (curves.r >= 2)]
    want = np.polyfit(np.log2(at.r), at.next_token, 1)[0]
    assert len(slopes) == 3 and slopes[0] == pytest.approx(want)


def test_vwn_claims_table():
    curves = vwn_analysis.with_gaps(_synthetic_curves({2.0: 1.2, 4.0: 1.4, 8.0: 1.6}))
    # make the seeds differ so that the intervals have width
    curves.loc[curves.m != curves.n, "next_token"] += 1e-4 * curves.seed
    curves = vwn_analysis.with_gaps(curves.drop(columns=[c for c in curves if
                                                         c.startswith(("gap_", "s_"))]))
    table = vwn_analysis.claims(curves, 1000, pd.read_csv(PAPER / "vwn_headline.csv"),
                                pd.read_csv(PAPER / "vwn_table1_a0.8b_m8_500b_tokens.csv"))
    assert list(table.columns) == CLAIM_COLUMNS
    slope = table[table.claim.str.startswith("loss falls in log2 r")].iloc[0]
    assert slope.paper_value == -0.0069 and slope.verdict == "reproduced" and slope.measured < 0
    # a tiny run: the paper's sizes are shown, not judged
    assert (slope.kind, slope.size_verdict, slope.size_tested) == ("size", "not expected", False)
    drop8 = table[table.claim.str.startswith("next-token loss drop at r = 8")].iloc[0]
    assert drop8.paper_value == 0.035 and drop8.verdict == "reproduced"
    eff = table[table.claim.str.startswith("next-token token efficiency")].iloc[0]
    assert eff.paper_value == 2.5 and eff.measured == pytest.approx(1.6, rel=0.01)
    assert eff.verdict == "reproduced" and pd.notna(eff.ci_high)  # nothing censored
    # log-linearity itself, against a curved fit over every r (1, 2, 4, 8)
    bend = table[table.claim.str.startswith("the relation is approximately log-linear")].iloc[0]
    assert bend.kind == "equivalence" and bend.n == 3 and "R^2" in bend.note
    grows = table[table.claim.str.startswith("the advantage grows")].iloc[0]
    assert grows.kind == "direction" and grows.n == 3
    # next-2-token gains equal next-token gains here: the "exceed" claim cannot be reproduced
    exceed = table[table.claim.str.startswith("next-2-token gains exceed")].iloc[0]
    assert exceed.verdict != "reproduced"


def test_a_seed_the_baseline_never_catches_counts_at_the_cap():
    """r = 8 at S = 3.5 against a baseline run 3 T long: S is censored at 3 for every seed,
    and the claim reports that lower bound (the old table dropped the seeds: no value)."""
    curves = vwn_analysis.with_gaps(_synthetic_curves({2.0: 1.2, 8.0: 3.5}, length=3))
    table = vwn_analysis.claims(curves, 1000, pd.read_csv(PAPER / "vwn_headline.csv"),
                                pd.read_csv(PAPER / "vwn_table1_a0.8b_m8_500b_tokens.csv"))
    eff = table[table.claim.str.startswith("next-token token efficiency")].iloc[0]
    assert eff.measured == pytest.approx(3.0) and pd.isna(eff.ci_high)
    assert "3 of 3 seed(s) censored at the cap 3" in eff.note
    assert eff.verdict == "reproduced"  # every seed at least 3: above 1
    assert eff.reading.startswith("at least: direction reproduced")


def test_summary_pairs_seeds_and_lists_failures(tmp_path):
    curves = vwn_analysis.with_gaps(_synthetic_curves({8.0: 1.6}, seeds=(0, 1)))
    runs = pd.DataFrame([
        {"experiment": "vwn_scaling", "label": lab, "m": 2, "n": n, "r": n / 2, "seed": s,
         "series": "main", "status": "ok", "reason": "", "n_params": 1000 * n,
         "step_ms": 10.0 * (1 + (n > 2)), "params_overhead": None, "flops_overhead": None,
         "flops_per_token": 100 * n, "tokens_seen": 3000 if n == 2 else 1000,
         "machine": "m", "config_hash": "h", "git_commit": "c", "record": "r"}
        for lab, n in (("m2-n2", 2), ("m2-n16", 16)) for s in (0, 1)]
        + [{"experiment": "vwn_scaling", "label": "m2-n4", "m": 2, "n": 4, "r": 2.0, "seed": 0,
            "series": "main", "status": "failed", "reason": "boom", "machine": "m",
            "config_hash": "h", "git_commit": "c", "record": "x"}])
    table = vwn_analysis.summary(runs, curves)
    wide = table[(table.label == "m2-n16") & (table.status == "ok")].iloc[0]
    assert wide.tokens == 1000 and wide.seeds == 2
    assert wide.time_overhead == pytest.approx(1.0) and wide.flops_overhead == pytest.approx(7.0)
    assert wide.s_next_token == pytest.approx(1.6, rel=0.01)
    failed = table[table.status == "failed"].iloc[0]
    assert failed.reason == "boom" and failed.system == "m2-n4 seed 0"


# ----------------------------------------------------------------------------- PMA from records


@pytest.fixture(scope="module")
def pma_records(tmp_path_factory):
    from test_pretrain import _pma_section
    from suite.experiments import pma_merging

    root = tmp_path_factory.mktemp("pma")
    paths = []
    for seed in (0, 1):
        rec = pma_merging.run(_pma_section(), seed, root / f"ck{seed}")
        assert rec.status.value == "ok", rec.reason
        paths.append(write_record(rec, root / f"seed{seed}.json"))
    return paths


def test_pma_grid_curves_and_claims(pma_records):
    table, curves, claims = pma_analysis.analyze(pma_records,
                                                 pd.read_csv(PAPER / "pma_headline.csv"))
    ok = table[table.status == "ok"]
    assert set(ok.step) == {12} and (ok.seeds == 2).all()
    assert set(ok.method) == {"sma", "ema:0.5", "wma"}
    np.testing.assert_allclose(ok.gain, ok.latest - ok.merged)
    assert {"latest", "merged", "decay", "merged_in_decay", "spike-merged", "spike-last",
            "spike-spiked"} <= set(curves.kind)
    assert list(claims.columns) == CLAIM_COLUMNS
    assert set(claims.verdict) <= {"reproduced", "not reproduced", "inconclusive", "not tested"}
    assert {"direction", "equivalence"} <= set(claims.kind)
    head = claims[claims.claim.str.startswith("merging in the stable (constant-LR) phase")].iloc[0]
    assert head.n == 2
    # the measured value is the mean over seeds of latest - merged of the headline setting
    from suite.records import read_record
    gains = [(r.derived["headline"]["latest"] - r.derived["headline"]["merged"])
             for r in map(read_record, pma_records)]
    assert head.measured == pytest.approx(np.mean(gains))
    assert "not tested" in set(claims.verdict)  # the V-vs-model-size claim, one size here
    # 12 steps never reach the stable phase: its claims keep their values, not their verdicts
    stable = [read_record(p).derived["stable"]["met"] for p in pma_records]
    assert not all(stable) and head.verdict == "not tested"
    assert head.reading.startswith("not tested: ") and "stable phase" in head.reading
    comparable = claims[claims.claim.str.startswith("the merged constant-LR model is "
                                                    "comparable")].iloc[0]
    assert comparable.kind == "equivalence" and comparable.verdict == "not tested"
    early = claims[claims.claim.str.startswith("early in training too")].iloc[0]
    assert early.kind == "equivalence" and early.verdict != "not tested"  # not gated
    for text in ("merging early in annealing", "early in training more checkpoints hurt",
                 "late in training more checkpoints help"):
        assert claims.claim.str.startswith(text).sum() == 1, text


def test_pma_failed_run_is_listed(tmp_path, pma_records):
    from suite.records import read_record

    bad = read_record(pma_records[0])
    bad.status, bad.reason = type(bad.status)("failed"), "RuntimeError: boom"
    path = write_record(bad, tmp_path / "bad.json")
    table, _, _ = pma_analysis.analyze([pma_records[1], path],
                                       pd.read_csv(PAPER / "pma_headline.csv"))
    failed = table[table.status == "failed"]
    assert len(failed) == 1 and failed.reason.iloc[0] == "RuntimeError: boom"
    assert (table[table.status == "ok"].seeds == 1).all()
