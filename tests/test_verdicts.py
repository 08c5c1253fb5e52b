"""Each claim kind's verdict on hand-made values (suite.analysis.verdicts)."""

import math

import pytest

from suite.analysis.verdicts import (Size, censored_claim, claim, equivalence_claim, grid_claim,
                                     ratio_claim, withheld)


def test_a_tie_is_equivalent_and_a_clear_difference_is_not():
    tie = equivalence_claim("P", "comparable", "comparable", [0.002, -0.003, 0.001, 0.0],
                            margin=0.02, unit="nats")
    assert (tie["kind"], tie["verdict"]) == ("equivalence", "reproduced")
    assert tie["interval"] == "90% t (TOST)" and -0.02 < tie["ci_low"] < tie["ci_high"] < 0.02
    apart = equivalence_claim("P", "comparable", None, [0.05, 0.06, 0.055], margin=0.02,
                              unit="nats")
    assert apart["verdict"] == "not reproduced"
    wide = equivalence_claim("P", "comparable", None, [0.0, 0.03, -0.02], margin=0.02,
                             unit="nats")
    assert wide["verdict"] == "inconclusive"  # mean near 0, interval past the margin
    # a tie is what a direction test can never reproduce: the old reading of the claim
    assert claim("P", "better", None, [0.002, -0.003, 0.001, 0.0], sign=-1,
                 unit="nats")["verdict"] == "inconclusive"


def test_a_size_short_of_the_paper_is_judged_only_where_expected():
    values = [1.3, 1.4, 1.5]
    short = claim("P", "S", 2.5, values, sign=1, null=1.0, unit="x",
                  size=Size(2.5, expected=True, setting="paper scale"))
    assert (short["kind"], short["verdict"], short["size_verdict"]) == \
        ("size", "reproduced", "not reproduced")
    assert short["size_tested"] is True
    assert short["reading"] == ("direction reproduced; size not reproduced (size 0.56x of the "
                                "paper's 2.5, claim at least 2.5)")
    small = claim("P", "S", 2.5, values, sign=1, null=1.0, unit="x",
                  size=Size(2.5, expected=False, setting="the paper's scale"))
    assert (small["verdict"], small["size_verdict"], small["size_tested"]) == \
        ("reproduced", "not expected", False)
    assert small["reading"] == ("direction reproduced; size 0.56x of the paper's 2.5 (not "
                                "tested: the paper's scale not met here)")
    big = claim("P", "S", 2.5, [2.9, 3.0, 3.1], sign=1, null=1.0, unit="x",
                size=Size(2.5, expected=True, setting=""))
    assert big["size_verdict"] == "reproduced"
    direction = claim("P", "S", 2.5, values, sign=1, null=1.0, unit="x")
    assert (direction["kind"], direction["size_verdict"]) == ("direction", None)


def test_within_a_factor_and_negative_sizes():
    within = Size(0.035, expected=True, setting="", rule="within", factor=2)
    assert within.judge(0.02, 0.05, 3) == "reproduced"
    assert within.judge(0.001, 0.01, 3) == "not reproduced"  # under 0.0175
    assert within.judge(0.01, 0.03, 3) == "inconclusive"
    slope = Size(-0.0069, expected=True, setting="", rule="within", factor=2)
    assert slope.judge(-0.010, -0.005, 3) == "reproduced"
    assert slope.judge(-0.05, -0.03, 3) == "not reproduced"
    with pytest.raises(ValueError, match="rule='about'"):
        Size(1.0, True, "", rule="about")


def test_a_censored_seed_counts_at_its_cap_with_a_one_sided_bound():
    row = censored_claim("P", "S", 3.5, [1.6, None, 1.8], cap=4.0, null=1.0, unit="x",
                         size=Size(3.5, expected=True, setting=""))
    assert row["measured"] == pytest.approx((1.6 + 4.0 + 1.8) / 3)  # not the 1.7 of dropping it
    assert row["ci_high"] is None and row["interval"] == "one-sided 95% t"
    assert row["size_verdict"] == "inconclusive"  # a censored seed: S may be far above 3.5
    assert row["reading"].startswith("at least: direction")
    assert "1 of 3 seed(s) censored at the cap 4" in row["note"]
    clear = censored_claim("P", "S", 3.5, [3.9, math.nan, 3.95, 3.8], cap=4.0, null=1.0,
                           unit="x")
    assert clear["verdict"] == "reproduced"
    uncensored = censored_claim("P", "S", 3.5, [1.2, 1.3, 1.1], cap=4.0, null=1.0, unit="x")
    assert uncensored["ci_high"] is not None and uncensored["interval"] == "95% t"


def test_grid_ratio_and_withheld_rows():
    row = grid_claim("P", "speedup", "1.5x", {"a": 2.0, "b": 0.5},
                     size=Size(1.5, expected=True, setting=""))
    assert row["measured"] == pytest.approx(1.0) and row["verdict"] == "inconclusive"
    assert (row["ci_low"], row["ci_high"], row["interval"]) == (0.5, 2.0, "range over the grid")
    r = ratio_claim("P", "faster", None, [2.0, 0.5])
    assert r["measured"] == pytest.approx(1.0) and r["interval"] == "95% t of the logs"
    held = withheld(claim("P", "x", None, [1.0, 1.1], sign=1, unit=""), "not stable")
    assert held["verdict"] == "not tested" and held["measured"] == pytest.approx(1.05)
    assert held["reading"] == "not tested: not stable"
