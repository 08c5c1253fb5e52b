"""One claims-table row: the paper's number beside what was measured here, judged as the claim
is stated.

Each row declares its **kind**:

- ``direction``: the quantity lies above (or below) a null value. The verdict is on the
  measured 95% interval: ``reproduced`` when it lies wholly on the claim's side of the null,
  ``not reproduced`` when wholly on the other side, ``inconclusive`` when it straddles the null
  or there are too few seeds for an interval.
- ``size``: a direction and a number ("6.13x", "over 2x", "0.035 nats"). Both are judged: the
  direction as above, and the size against the paper's number (:class:`Size`: at least it, or
  within a factor of it) from the same interval. The size is judged only where the run meets
  the paper's setting (``Size.expected``, e.g. the paper's dtype on a GPU, or its model size and
  tokens); elsewhere the row says the size was not tested and shows the measured size as a
  fraction of the paper's.
- ``equivalence``: the quantity is within a declared margin of 0 ("comparable to annealing"),
  by two one-sided tests at 5%: ``reproduced`` when the 90% interval lies inside
  [-margin, +margin], ``not reproduced`` when it lies wholly outside, ``inconclusive`` otherwise.

``not tested``: the suite cannot measure it here (the note says why). ``reading`` states both
verdicts in words, e.g. "direction reproduced; size 1.4x of the paper's 2.5x (not expected at
this scale)".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from suite.measure.stats import mean_ci

KINDS = ("direction", "size", "equivalence")
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not tested")
SIZE_RULES = ("at least", "within")
CLAIM_COLUMNS = ["paper", "claim", "kind", "paper_value", "measured", "ci_low", "ci_high",
                 "interval", "n", "unit", "verdict", "size_tested", "size_verdict", "reading",
                 "note"]
CONFIDENCE = 0.95
# The report's line above every claims table (docs/methodology.md has the long form).
METHOD_NOTE = (
    "Each row names its kind. Direction: reproduced when the measured 95% interval lies wholly "
    "on the claim's side of the null, not reproduced when wholly on the other, inconclusive "
    "when it straddles. Size: the direction, and the size against the paper's number (at "
    "least it, or within a stated factor), judged only where the run meets the paper's setting; "
    "elsewhere the size is shown as a fraction of the paper's and marked not tested. "
    "Equivalence: within a margin declared before the run, by two one-sided tests (the 90% "
    "interval inside the margin). Censored seeds count at their cap and give a one-sided bound.")


@dataclass(frozen=True)
class Size:
    """The paper's number for a size claim. ``rule``: ``"at least"`` (the measured value is
    at least ``value``, e.g. a speedup) or ``"within"`` (within ``factor`` of ``value`` either
    way, e.g. a loss drop quoted as a point value). ``expected``: whether the run meets the
    paper's setting, so that the paper's size is what it should measure; ``setting`` says which
    setting (shown when it is not met)."""

    value: float
    expected: bool
    setting: str
    rule: str = "at least"
    factor: float = 2.0

    def __post_init__(self) -> None:
        if self.rule not in SIZE_RULES:
            raise ValueError(f"Size rule={self.rule!r} is not one of {SIZE_RULES}")
        if not (math.isfinite(self.value) and self.value != 0):
            raise ValueError(f"Size value={self.value!r} must be a finite non-zero number")
        if self.rule == "within" and not self.factor > 1:
            raise ValueError(f"Size factor={self.factor!r} must be above 1")

    def judge(self, low: float | None, high: float | None, n: int) -> str:
        """The size verdict from an interval (``high`` None: a one-sided, lower bound)."""
        if low is None or n < 2:
            return "inconclusive"
        if self.rule == "at least":
            if self.value > 0:
                return ("reproduced" if low >= self.value else
                        "not reproduced" if high is not None and high < self.value else
                        "inconclusive")
            return ("reproduced" if high is not None and high <= self.value else
                    "not reproduced" if low > self.value else "inconclusive")
        lo, hi = sorted((self.value / self.factor, self.value * self.factor))
        if high is None:
            return "not reproduced" if low > hi else "inconclusive"
        if lo <= low and high <= hi:
            return "reproduced"
        return "not reproduced" if high < lo or low > hi else "inconclusive"

    def describe(self) -> str:
        return (f"at least {self.value:.3g}" if self.rule == "at least" else
                f"within {self.factor:g}x of {self.value:.3g}")


def verdict(ci_low: float, ci_high: float | None, n: int, *, sign: int,
            null: float = 0.0) -> str:
    """``sign`` +1: the claim says the quantity is above ``null``; -1: below. ``ci_high`` None:
    a one-sided lower bound (censored values), which can only show the quantity above."""
    if sign not in (1, -1):
        raise ValueError(f"sign={sign!r} must be +1 or -1")
    if n < 2:
        return "inconclusive"
    if ci_high is None:
        if sign == 1 and ci_low > null:
            return "reproduced"
        return "inconclusive"
    if sign * (ci_low - null) > 0 and sign * (ci_high - null) > 0:
        return "reproduced"
    if sign * (ci_low - null) < 0 and sign * (ci_high - null) < 0:
        return "not reproduced"
    return "inconclusive"


def equivalence(values: Sequence[float], margin: float) -> dict[str, Any]:
    """Two one-sided t-tests at 5% that the mean lies within ``margin`` of 0: the 90%
    interval inside [-margin, margin]. Returns the mean, that interval and the verdict."""
    if not margin > 0:
        raise ValueError(f"equivalence margin={margin!r} must be positive")
    finite = _finite(values)
    s = mean_ci(finite, confidence=1 - 2 * (1 - CONFIDENCE))
    low, high = s["ci_low"], s["ci_high"]
    if s["n"] < 2:
        v = "inconclusive"
    elif -margin <= low and high <= margin:
        v = "reproduced"
    elif high < -margin or low > margin:
        v = "not reproduced"
    else:
        v = "inconclusive"
    return {"mean": s["mean"], "ci_low": low, "ci_high": high, "n": s["n"], "verdict": v}


def claim(paper: str, text: str, paper_value: Any, values: Sequence[float], *, sign: int,
          unit: str, note: str = "", null: float = 0.0, size: Size | None = None
          ) -> dict[str, Any]:
    """A measured claim: the mean over seeds of ``values`` with its t-interval. With ``size``
    the row is a size claim (the direction and the size judged); without, a direction claim."""
    finite = _finite(values)
    if not finite:
        return _unmeasured(paper, text, paper_value, unit, note, "size" if size else "direction")
    s = mean_ci(finite)
    return interval_claim(paper, text, paper_value, s["mean"], s["ci_low"], s["ci_high"], s["n"],
                          sign=sign, null=null, unit=unit, interval="95% t", note=note,
                          size=size)


def censored_claim(paper: str, text: str, paper_value: Any, values: Sequence[float | None], *,
                   cap: float, unit: str, null: float, note: str = "",
                   size: Size | None = None) -> dict[str, Any]:
    """A claim that a quantity is above ``null`` where some seeds are censored at ``cap`` (the
    run could not measure past it: ``None`` or NaN marks them). Censored seeds count at the cap:
    the mean is then a lower bound and so is its one-sided 95% bound, the only side reported;
    dropping them would bias the mean down exactly where the effect is largest."""
    if not values:
        return _unmeasured(paper, text, paper_value, unit, note, "size" if size else "direction")
    censored = sum(1 for v in values if v is None or not math.isfinite(v))
    filled = [cap if v is None or not math.isfinite(v) else v for v in values]
    if not censored:
        return claim(paper, text, paper_value, filled, sign=1, unit=unit, null=null, note=note,
                     size=size)
    s = mean_ci(filled, confidence=1 - 2 * (1 - CONFIDENCE))  # its lower end: one-sided 95%
    low = s["ci_low"] if s["n"] > 1 else s["mean"]
    note = (f"{censored} of {len(values)} seed(s) censored at the cap {cap:g} (counted at the "
            f"cap: the mean and its one-sided 95% bound are lower bounds)"
            + (f"; {note}" if note else ""))
    row = _row(paper, text, paper_value, s["mean"], low, None, s["n"], unit,
               verdict(low, None, s["n"], sign=1, null=null), size, note,
               interval="one-sided 95% t")
    row["reading"] = "at least: " + row["reading"]
    return row


def ratio_claim(paper: str, text: str, paper_value: Any, ratios: Sequence[float], *,
                unit: str = "x", note: str = "", size: Size | None = None) -> dict[str, Any]:
    """A claim that a ratio is above 1, measured as the geometric mean of per-repeat ratios
    with the Student-t interval of their logarithms: ratios multiply, so a 2x and a 0.5x repeat
    average to 1x, not the 1.25x a plain mean gives, and the interval cannot reach below 0."""
    positive = [r for r in ratios if r is not None and math.isfinite(r) and r > 0]
    if not positive:
        return _unmeasured(paper, text, paper_value, unit, note, "size" if size else "direction")
    s = mean_ci([math.log(r) for r in positive])
    return interval_claim(paper, text, paper_value, math.exp(s["mean"]), math.exp(s["ci_low"]),
                          math.exp(s["ci_high"]), s["n"], sign=1, null=1.0, unit=unit,
                          interval="95% t of the logs", note=note, size=size)


def equivalence_claim(paper: str, text: str, paper_value: Any, values: Sequence[float], *,
                      margin: float, unit: str, note: str = "") -> dict[str, Any]:
    """A claim that a difference is negligible: within ``margin`` (declared before the run)
    by two one-sided tests (:func:`equivalence`); ``ci_low`` / ``ci_high`` are the 90%
    interval the test reads."""
    finite = _finite(values)
    if not finite:
        return _unmeasured(paper, text, paper_value, unit, note, "equivalence")
    e = equivalence(finite, margin)
    words = {"reproduced": f"equivalent within ±{margin:g} {unit}",
             "not reproduced": f"not equivalent: wholly outside ±{margin:g} {unit}",
             "inconclusive": (f"inconclusive: the 90% interval crosses ±{margin:g} {unit}"
                              if e["n"] > 1 else "inconclusive: one value, no interval")}
    return {"paper": paper, "claim": text, "kind": "equivalence", "paper_value": paper_value,
            "measured": e["mean"], "ci_low": e["ci_low"], "ci_high": e["ci_high"],
            "interval": "90% t (TOST)", "n": e["n"],
            "unit": unit, "verdict": e["verdict"], "size_tested": False, "size_verdict": None,
            "reading": words[e["verdict"]],
            "note": f"margin ±{margin:g} declared before the run; 90% interval (TOST at 5%)"
                    + (f"; {note}" if note else "")}


def grid_claim(paper: str, text: str, paper_value: Any, points: dict[str, float], *,
               size: Size, unit: str = "x", note: str = "") -> dict[str, Any]:
    """A size claim made over a grid of settings (a speedup "on average"): read over the grid,
    as the geometric mean of the per-point ratios, with their range and every point in the note
    (never the single most favourable point). Direction: ``reproduced`` when the ratio is above
    1 at every point, ``not reproduced`` when at none, else ``inconclusive``; the size verdict
    compares the geometric mean with the paper's number (``ci_low`` / ``ci_high`` hold the
    range over the grid, not a confidence interval)."""
    ratios = {k: v for k, v in points.items() if v is not None and math.isfinite(v) and v > 0}
    if not ratios:
        return not_tested(paper, text, paper_value, unit, note or "no point measured it",
                          kind="size")
    values = list(ratios.values())
    gmean = math.exp(sum(math.log(v) for v in values) / len(values))
    above = sum(v > 1 for v in values)
    direction = ("reproduced" if above == len(values) else
                 "not reproduced" if above == 0 else "inconclusive")
    detail = "; ".join(f"{k}: {v:.2f}{unit}" for k, v in ratios.items())
    return _row(paper, text, paper_value, gmean, min(values), max(values), len(values), unit,
                direction, size, f"faster at {above} of {len(values)} points ({detail})"
                + (f"; {note}" if note else ""), interval="range over the grid",
                size_from=(gmean, gmean))


def interval_claim(paper: str, text: str, paper_value: Any, measured: float, low: float,
                   high: float, n: int, *, sign: int, unit: str, interval: str, null: float = 0.0,
                   note: str = "", size: Size | None = None) -> dict[str, Any]:
    """A claim whose interval comes from elsewhere (e.g. two timed medians' intervals), named
    by ``interval``; ``n`` < 2 means there was none to judge by."""
    return _row(paper, text, paper_value, measured, low, high, n, unit,
                verdict(low, high, n, sign=sign, null=null), size, note, interval=interval)


def _unmeasured(paper: str, text: str, paper_value: Any, unit: str, note: str,
                kind: str) -> dict[str, Any]:
    return not_tested(paper, text, paper_value, unit, note or "no successful run measured it",
                      kind=kind)


def not_tested(paper: str, text: str, paper_value: Any, unit: str, note: str, *,
               kind: str = "direction") -> dict[str, Any]:
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}")
    return {"paper": paper, "claim": text, "kind": kind, "paper_value": paper_value,
            "measured": None, "ci_low": None, "ci_high": None, "interval": None, "n": 0,
            "unit": unit,
            "verdict": "not tested", "size_tested": False, "size_verdict": None,
            "reading": "not tested", "note": note}


def withheld(row: dict[str, Any], why: str) -> dict[str, Any]:
    """A measured row whose setting the run did not meet: the values stay, the verdict is
    ``not tested`` and says why (e.g. a claim about the stable phase, measured before it)."""
    return {**row, "verdict": "not tested", "size_tested": False,
            "size_verdict": None if row.get("size_verdict") is None else "not expected",
            "reading": f"not tested: {why}"}


def _row(paper: str, text: str, paper_value: Any, measured: float, low: float,
         high: float | None, n: int, unit: str, direction: str, size: Size | None,
         note: str, interval: str = "95% t",
         size_from: tuple[float, float] | None = None) -> dict[str, Any]:
    """One row; the size is judged on the interval, or on ``size_from`` where the interval is
    not one (a grid's range: its geometric mean is judged)."""
    lo, hi, k = (low, high, n) if size_from is None else (*size_from, 2)
    size_verdict = None if size is None else (size.judge(lo, hi, k) if size.expected
                                              else "not expected")
    return {"paper": paper, "claim": text, "kind": "direction" if size is None else "size",
            "paper_value": paper_value, "measured": measured, "ci_low": low, "ci_high": high,
            "interval": interval, "n": n, "unit": unit, "verdict": direction,
            "size_tested": bool(size is not None and size.expected),
            "size_verdict": size_verdict,
            "reading": _reading(direction, size, measured, size_verdict)
            + (" (one value, no interval)" if n < 2 and direction == "inconclusive" else ""),
            "note": note}


def _reading(direction: str, size: Size | None, measured: float,
             size_verdict: str | None) -> str:
    text = f"direction {direction}"
    if size is None:
        return text
    share = f"size {measured / size.value:.2f}x of the paper's {size.value:.3g}"
    if size_verdict == "not expected":
        return f"{text}; {share} (not tested: {size.setting} not met here)"
    return f"{text}; size {size_verdict} ({share}, claim {size.describe()})"


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]

