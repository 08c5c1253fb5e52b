"""One claims-table row: the paper's number beside what was measured here, with a verdict on
the direction of the claim from the measured confidence interval.

Verdicts: ``reproduced`` (the CI lies wholly on the claim's side of the null value),
``not reproduced`` (wholly on the other side), ``inconclusive`` (the CI contains the null value,
or there are too few seeds for an interval), ``not tested`` (the suite cannot measure it at
this scale; the note says why). The size is not part of the verdict: the ``paper`` and
``measured`` columns show it, and at a thousand times smaller scale it is not expected to match.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from suite.measure.stats import mean_ci

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not tested")
CLAIM_COLUMNS = ["paper", "claim", "paper_value", "measured", "ci_low", "ci_high", "n", "unit",
                 "verdict", "note"]


def verdict(ci_low: float, ci_high: float, n: int, *, sign: int, null: float = 0.0) -> str:
    """``sign`` +1: the claim says the quantity is above ``null``; -1: below."""
    if sign not in (1, -1):
        raise ValueError(f"sign={sign!r} must be +1 or -1")
    if n < 2:
        return "inconclusive"
    if sign * (ci_low - null) > 0 and sign * (ci_high - null) > 0:
        return "reproduced"
    if sign * (ci_low - null) < 0 and sign * (ci_high - null) < 0:
        return "not reproduced"
    return "inconclusive"


def claim(paper: str, text: str, paper_value: Any, values: Sequence[float], *, sign: int,
          unit: str, note: str = "", null: float = 0.0) -> dict[str, Any]:
    """A measured claim: the mean over seeds of ``values`` with its t-interval."""
    finite = [v for v in values if v is not None and v == v]
    if not finite:
        return not_tested(paper, text, paper_value, unit,
                          note or "no successful run measured it")
    s = mean_ci(finite)
    return {"paper": paper, "claim": text, "paper_value": paper_value, "measured": s["mean"],
            "ci_low": s["ci_low"], "ci_high": s["ci_high"], "n": s["n"], "unit": unit,
            "verdict": verdict(s["ci_low"], s["ci_high"], s["n"], sign=sign, null=null),
            "note": note}


def ratio_claim(paper: str, text: str, paper_value: Any, ratios: Sequence[float], *,
                unit: str = "x", note: str = "") -> dict[str, Any]:
    """A claim that a ratio is above 1, measured as the geometric mean of per-repeat ratios
    with the Student-t interval of their logarithms: ratios multiply, so a 2x and a 0.5x repeat
    average to 1x, not the 1.25x a plain mean gives, and the interval cannot reach below 0."""
    positive = [r for r in ratios if r is not None and math.isfinite(r) and r > 0]
    if not positive:
        return not_tested(paper, text, paper_value, unit, note or "no successful run measured it")
    s = mean_ci([math.log(r) for r in positive])
    low, high = math.exp(s["ci_low"]), math.exp(s["ci_high"])
    return {"paper": paper, "claim": text, "paper_value": paper_value,
            "measured": math.exp(s["mean"]), "ci_low": low, "ci_high": high, "n": s["n"],
            "unit": unit, "verdict": verdict(low, high, s["n"], sign=1, null=1.0), "note": note}


def not_tested(paper: str, text: str, paper_value: Any, unit: str, note: str) -> dict[str, Any]:
    return {"paper": paper, "claim": text, "paper_value": paper_value, "measured": None,
            "ci_low": None, "ci_high": None, "n": 0, "unit": unit, "verdict": "not tested",
            "note": note}
