"""The two numbers fitted per system, from its declared rows only: the GEMM ceiling
(``gemm_efficiency``) and the straggler constant.

Two rows of one model and layout at different DP sizes (a scaling pair) on different node
counts fit both: the pair that reproduces both rows. Where that needs a negative straggler, or
the rows are two models or layouts (whose difference is not only scale), or both ran on one node
count (the straggler stretches a step by ln nodes, so such a pair measures nothing of it), the
straggler is 0 and the efficiency minimises the rows' squared relative errors (exact for one
row); ``validate.unfitted_straggler`` then says what that leaves out where rows run on more
nodes.

A row is an iteration's time, or one layer's (``Row.timed == "layer"``: forward, backward and
recompute of one layer on its TP group, ``step.timed_layer_seconds``). A layer time fits the
ceiling on what the ceiling describes, the layer's GEMMs, without the step's costs outside the
layers that the model prices only in part (optimizer, embeddings, the framework's fixed costs);
it cannot fit a straggler.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from scipy.optimize import brentq, minimize_scalar

from suite.scale.checks import check_positive
from suite.scale.hardware import Hardware
from suite.scale.layout import Layout
from suite.scale.model import ModelConfig
from suite.scale.step import ALL_TERMS, Terms, estimate, job_nodes, timed_layer_seconds

TIMED = ("iteration", "layer")


class Row(NamedTuple):
    """One calibration row: what ran, and the measured seconds of what ``timed`` names."""
    model: ModelConfig
    layout: Layout
    hw: Hardware
    time: float
    timed: str = "iteration"


def modelled_seconds(model: ModelConfig, hw: Hardware, layout: Layout, terms: Terms = ALL_TERMS,
                     timed: str = "iteration") -> float:
    """The model's seconds of what a row timed: the iteration, or one layer."""
    if timed == "iteration":
        return estimate(model, hw, layout, terms).iteration_time_s
    if timed == "layer":
        return timed_layer_seconds(model, layout, hw, terms)
    raise ValueError(f"timed={timed!r}; valid: {list(TIMED)}")


def fit_efficiency(model: ModelConfig, hw: Hardware, layout: Layout, iteration_time_s: float,
                   terms: Terms = ALL_TERMS, timed: str = "iteration") -> float:
    """The ceiling at which the model gives the measured time (straggler held): time falls
    monotonically as the ceiling rises, so a root search on (0, 1] finds it."""
    check_positive("iteration_time_s", iteration_time_s)

    def gap(eff: float) -> float:
        return modelled_seconds(model, replace(hw, gemm_efficiency=eff), layout, terms,
                                timed) - iteration_time_s

    if gap(1.0) > 0:
        raise ValueError(f"{timed} time {iteration_time_s} s is shorter than the model gives "
                         "at gemm_efficiency=1; the model's communication or FLOP count is off")
    lo = 1e-4
    if gap(lo) < 0:
        raise ValueError(f"{timed} time {iteration_time_s} s needs gemm_efficiency < {lo}")
    return float(brentq(gap, lo, 1.0, xtol=1e-12, rtol=1e-12))


def is_scaling_pair(a: tuple[ModelConfig, Layout], b: tuple[ModelConfig, Layout]) -> bool:
    """Whether two (model, layout) differ only in scale: DP and the global batch."""
    (model_a, lay_a), (model_b, lay_b) = a, b
    return (model_a == model_b and lay_a.dp != lay_b.dp
            and replace(lay_a, dp=1, global_batch=lay_a.micro_batch)
            == replace(lay_b, dp=1, global_batch=lay_b.micro_batch))


def fits_straggler(rows: list[Row], terms: Terms = ALL_TERMS) -> bool:
    """Whether the rows fit the straggler constant: two timed iterations of one scaling pair, on
    one machine, on different node counts."""
    return (len(rows) == 2 and terms.straggler and all(r.timed == "iteration" for r in rows)
            and rows[0].hw == rows[1].hw and is_scaling_pair(rows[0][:2], rows[1][:2])
            and job_nodes(rows[0].layout, rows[0].hw) != job_nodes(rows[1].layout, rows[1].hw))


def _least_squares_efficiency(rows: list[Row], terms: Terms) -> float:
    if len(rows) == 1:
        r = rows[0]
        return fit_efficiency(r.model, r.hw, r.layout, r.time, terms, r.timed)

    def loss(eff: float) -> float:
        return sum(((modelled_seconds(r.model, replace(r.hw, gemm_efficiency=eff), r.layout,
                                      terms, r.timed) - r.time) / r.time) ** 2 for r in rows)

    return float(minimize_scalar(loss, bounds=(1e-3, 1.0), method="bounded",
                                 options={"xatol": 1e-9}).x)


def fit_system(rows: list[Row | tuple], terms: Terms = ALL_TERMS) -> tuple[float, float]:
    """(gemm_efficiency, straggler) from one or two rows (see the module docstring)."""
    if not 1 <= len(rows) <= 2:
        raise ValueError(f"{len(rows)} calibration rows: a system fits one or two")
    rows = [Row(m, lay, replace(h, straggler=0.0), *rest) for m, lay, h, *rest in rows]
    if not fits_straggler(rows, terms):
        return _least_squares_efficiency(rows, terms), 0.0
    (m1, l1, hw, t1, _), (m2, l2, _, t2, _) = rows

    def mismatch(sigma: float) -> float:
        h = replace(hw, straggler=sigma)
        try:
            eff = fit_efficiency(m1, h, l1, t1, terms)
        except ValueError:  # sigma so large that the first row leaves no time for GEMMs
            return t2
        return estimate(m2, replace(h, gemm_efficiency=eff), l2, terms).iteration_time_s - t2

    if mismatch(0.0) >= 0:
        return _least_squares_efficiency(rows, terms), 0.0
    hi = 0.5
    while mismatch(hi) < 0:
        hi *= 2
        if hi > 16:
            raise ValueError("no straggler constant up to 16 fits the calibration rows")
    sigma = brentq(mismatch, 0.0, hi, xtol=1e-12)
    return fit_efficiency(m1, replace(hw, straggler=sigma), l1, t1, terms), sigma
