"""VWN records -> a summary per variant, the held-out curves with the loss gap and the
token-efficiency S(T), and the claims table beside the paper.

Comparisons pair runs by seed (same seed: same data order; the initial weights differ with the
width) and take the mean over seeds with a t-interval. Losses are compared at the common token
count T (the wide runs' length); the r = 1 baseline trains longer (``vwn.baseline_length``) so
that S(T) = T_base(loss_VWN(T)) / T, the tokens the baseline needs to reach the wide model's loss
divided by T, stays measurable when the wide model is ahead. T_base comes from the baseline's
running-minimum curve, interpolated linearly in tokens between evaluations; a loss the baseline
never reaches gives no S: the seed is censored at the cap ``baseline_length`` (the claims count it
there, with a one-sided interval, never drop it).

The paper's sizes (Table 1, Figs. 1 and 8) come from an A0.8B-A3.3B MoE after hundreds of billions
of tokens (``PAPER_SCALE``); a run below that judges the direction and shows the size beside the
paper's, marked not tested.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from suite.analysis.verdicts import (CLAIM_COLUMNS, Size, censored_claim, claim,
                                     equivalence_claim)
from suite.analysis.tables import read_checked
from suite.measure.stats import mean_ci

LOSSES = {"next_token": "next-token", "next_2_token": "next-2-token"}
# The setting the paper's sizes were measured at (Table 1: A0.8B activated parameters, 500B
# tokens): a run at least this big and this long expects them.
PAPER_SCALE = {"params": 0.8e9, "tokens": 500e9}
PAPER_SETTING = "the paper's scale (>= 0.8B parameters, >= 500B tokens)"
# "approximately log-linear": the quadratic term of a fit in log2 r, per unit of the linear
# slope, within this margin of 0 (a curvature that bends the line by under 10% of its slope per
# doubling squared); declared before the runs.
LOG_LINEAR_MARGIN = 0.1


def read_runs(paths: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per run, one row per run and evaluation)."""
    rows, curve_rows = [], []
    for path in paths:
        rec = read_checked(path)
        d, p, t = rec.derived, rec.point, rec.timing
        cost = d.get("cost", {})
        row = {"experiment": rec.experiment, "label": rec.system, "m": p.get("m"),
               "n": p.get("n"), "r": (p["n"] / p["m"]) if p.get("m") else None,
               "seed": p.get("seed"), "series": p.get("series"), "status": rec.status.value,
               "reason": rec.reason, "n_params": p.get("n_params"),
               "step_ms": t["stats"]["median"] * 1e3 if t.get("stats") else None,
               "params_overhead": cost.get("params_overhead"),
               "flops_overhead": cost.get("flops_overhead"),
               "flops_per_token": cost.get("flops_per_token"),
               "tokens_seen": d.get("tokens_seen"), "machine": rec.env.get("machine"),
               "config_hash": rec.config_hash,
               "git_commit": rec.env.get("git", {}).get("commit"), "record": str(path)}
        rows.append(row)
        for point in d.get("curve", []):
            curve_rows.append({"label": rec.system, "m": row["m"], "n": row["n"],
                               "r": row["r"], "seed": row["seed"], "series": row["series"],
                               **point})
    return pd.DataFrame(rows), pd.DataFrame(curve_rows)


def tokens_to_reach(tokens: np.ndarray, losses: np.ndarray, target: float) -> float:
    """Tokens at which the running minimum of ``losses`` first reaches ``target`` (linear
    interpolation between evaluations); NaN if it never does."""
    best = np.minimum.accumulate(losses)
    hit = np.nonzero(best <= target)[0]
    if hit.size == 0:
        return math.nan
    i = hit[0]
    if i == 0:
        return float(tokens[0])
    t0, t1, l0, l1 = tokens[i - 1], tokens[i], best[i - 1], best[i]
    return float(t0 + (t1 - t0) * (l0 - target) / (l0 - l1)) if l0 != l1 else float(t1)


def with_gaps(curves: pd.DataFrame) -> pd.DataFrame:
    """The curves plus, per wide run and evaluation, the loss gap to the same seed's baseline at
    the same tokens (baseline minus VWN: positive = VWN better) and S(T)."""
    out = curves.copy()
    for key in LOSSES:
        out[f"gap_{key}"] = math.nan
        out[f"s_{key}"] = math.nan
    base = curves[curves.m == curves.n]
    for seed, b in base.groupby("seed"):
        b = b.sort_values("tokens")
        at = b.set_index("tokens")
        mask = (out.seed == seed) & (out.m != out.n) & (out.tokens > 0)
        for idx in out.index[mask]:
            T = out.at[idx, "tokens"]
            for key in LOSSES:
                value = out.at[idx, key]
                if value is None or pd.isna(value) or b[key].isna().all():
                    continue
                if T in at.index:
                    out.at[idx, f"gap_{key}"] = at.at[T, key] - value
                out.at[idx, f"s_{key}"] = tokens_to_reach(b.tokens.to_numpy(float),
                                                          b[key].to_numpy(float), value) / T
    return out


def common_tokens(runs: pd.DataFrame) -> int | None:
    """The token count every wide run reached (the comparison point)."""
    wide = runs[(runs.status == "ok") & (runs.m != runs.n)]
    return int(wide.tokens_seen.min()) if not wide.empty else None


def summary(runs: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """One row per variant (means over seeds with t-intervals, at the common T), plus one row per
    run that did not succeed (for the report's failures list)."""
    ok = runs[runs.status == "ok"]
    T = common_tokens(runs)
    rows = []
    at_T = curves[curves.tokens == T] if T is not None else curves.iloc[0:0]
    base = ok[ok.m == ok.n]
    base_ms = base.step_ms.median()
    base_flops = base.flops_per_token.iloc[0] if not base.empty else None
    base_params = base.n_params.iloc[0] if not base.empty else None
    for (label, m, n), g in ok.groupby(["label", "m", "n"], sort=False):
        here = at_T[at_T.label == label]
        row = {"experiment": g.experiment.iloc[0], "label": label, "m": m, "n": n, "r": n / m,
               "series": g.series.iloc[0], "status": "ok", "seeds": len(g), "tokens": T,
               "n_params": g.n_params.iloc[0], "flops_per_token": g.flops_per_token.iloc[0],
               # against the r = 1 run (same embedding path and MTP module): what width costs
               "params_overhead": (g.n_params.iloc[0] / base_params - 1) if base_params else None,
               "flops_overhead": (g.flops_per_token.iloc[0] / base_flops - 1) if base_flops
               else None,
               "step_ms": g.step_ms.median(),
               "time_overhead": g.step_ms.median() / base_ms - 1 if base_ms else None,
               "machine": g.machine.iloc[0], "config_hash": g.config_hash.iloc[0],
               "git_commit": g.git_commit.iloc[0], "record": g.record.iloc[0]}
        for key in LOSSES:
            for col in (key, f"gap_{key}", f"s_{key}"):
                values = here[col].dropna().tolist() if col in here else []
                s = mean_ci(values) if values else None
                row[col] = s["mean"] if s else None
                row[f"{col}_ci_low"] = s["ci_low"] if s else None
                row[f"{col}_ci_high"] = s["ci_high"] if s else None
            if m != n and f"s_{key}" in here:
                row[f"s_{key}_censored"] = int(here[f"s_{key}"].isna().sum())
        rows.append(row)
    table = pd.DataFrame(rows).sort_values(["series", "r", "m"], ignore_index=True) if rows \
        else pd.DataFrame()
    bad = runs[runs.status != "ok"][["experiment", "label", "m", "n", "seed", "series", "status",
                                     "reason", "machine", "config_hash", "git_commit",
                                     "record"]]
    bad = bad.assign(system=bad.label + " seed " + bad.seed.astype(str))
    return pd.concat([table, bad], ignore_index=True)


def slopes(curves: pd.DataFrame, T: int, key: str = "next_token",
           min_r: float = 2.0) -> list[float]:
    """Per seed: least-squares slope of the loss at T on log2(r), over the main series' r >= min_r
    (the paper's Figure 8 fit)."""
    at = curves[(curves.tokens == T) & (curves.series == "main") & (curves.r >= min_r)]
    out = []
    for _, g in at.groupby("seed"):
        if g.r.nunique() >= 2:
            out.append(float(np.polyfit(np.log2(g.r.to_numpy(float)), g[key].to_numpy(float),
                                        1)[0]))
    return out


def curvature(curves: pd.DataFrame, T: int, key: str = "next_token"
              ) -> tuple[list[float], list[float]]:
    """Per seed, over every r of the main series: the quadratic coefficient of a fit of the loss
    at T in x = log2 r divided by |the linear fit's slope| (0 for a straight line), and the linear
    fit's R^2. Needs 4 or more r (a quadratic through 3 points always fits)."""
    at = curves[(curves.tokens == T) & (curves.series == "main")]
    ratios, r2 = [], []
    for _, g in at.groupby("seed"):
        if g.r.nunique() < 4:
            continue
        x, y = np.log2(g.r.to_numpy(float)), g[key].to_numpy(float)
        b = np.polyfit(x, y, 1)
        c = np.polyfit(x, y, 2)[0]
        residual = y - np.polyval(b, x)
        r2.append(float(1 - residual.var() / y.var()) if y.var() > 0 else 1.0)
        ratios.append(float(c / abs(b[0])) if b[0] != 0 else math.inf)
    return ratios, r2


def paper_scale_met(runs: pd.DataFrame, T: int | None) -> bool:
    ok = runs[runs.status == "ok"]
    return (T is not None and not ok.empty and T >= PAPER_SCALE["tokens"]
            and ok.n_params.min() >= PAPER_SCALE["params"])


def claims(curves: pd.DataFrame, T: int | None, headline: pd.DataFrame,
           table1: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The VWN paper's claims beside the measured values, each of its kind
    (``suite.analysis.verdicts``)."""
    paper = "VWN"
    head = dict(zip(headline.claim, headline.value))
    rows = []
    if T is None:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    expected = paper_scale_met(runs, T) if runs is not None else False

    def size(value, rule="within", factor=2.0):
        return None if value is None else Size(float(value), expected, PAPER_SETTING, rule,
                                               factor)

    at = curves[curves.tokens == T]
    widest = at[at.series == "main"].r.max()
    wide = at[(at.r == widest) & (at.series == "main")]
    rows.append(claim(paper, "loss falls in log2 r (next-token loss at equal tokens vs log2 r, "
                      "fit on r >= 2)", head.get("log-linear fit slope per log2(r)"),
                      slopes(curves, T), sign=-1, unit="nats per doubling of r",
                      size=size(head.get("log-linear fit slope per log2(r)")),
                      note="Fig. 8 slope, fitted on r >= 2; per-seed fits here"))
    bend, r2 = curvature(curves, T)
    rows.append(equivalence_claim(
        paper, "the relation is approximately log-linear (quadratic term of a fit in log2 r over "
        "every r run, per unit of the linear slope)", "R^2 = 0.9986 (Fig. 8)", bend,
        margin=LOG_LINEAR_MARGIN, unit="per |slope|",
        note=(f"linear fit R^2 {np.mean(r2):.3f} on average over seeds" if r2 else
              "needs 4 or more r in the main series")))
    for key, name in LOSSES.items():
        for r_value in sorted(at[(at.series == "main") & (at.r >= 2)].r.unique()):
            prow = table1[table1.expansion_r == r_value]
            pv = float(prow[f"{key}_loss_drop"].iloc[0]) if not prow.empty else None
            vals = at[(at.r == r_value) & (at.series == "main")][f"gap_{key}"].tolist()
            rows.append(claim(paper, f"{name} loss drop at r = {r_value:g} (baseline - VWN, "
                              f"equal tokens)", pv, vals, sign=1, unit="nats", size=size(pv),
                              note="Table 1 (A0.8B MoE, 500B tokens)" if pv is not None
                              else "no Table 1 row for this r"))
    cap = _cap(curves, T)
    for key, name, hk in (("next_token", "next-token", "token-efficiency speedup next-token (8x)"),
                          ("next_2_token", "next-2-token",
                           "token-efficiency speedup next-2-token (8x)")):
        rows.append(censored_claim(
            paper, f"{name} token efficiency: the baseline needs S x the tokens to reach VWN's "
            f"loss (r = {widest:g})", head.get(hk), wide[f"s_{key}"].tolist(), cap=cap,
            null=1.0, unit="x", size=size(head.get(hk), rule="at least"),
            note=f"S(T) at T = {T} tokens; paper: Fig. 1 at 8x, ~3T tokens"))
    both = wide[["gap_next_token", "gap_next_2_token"]].dropna()
    rows.append(claim(paper, "next-2-token gains exceed next-token gains (drop at the widest r)",
                      "0.058 vs 0.035 at 8x",
                      (both.gap_next_2_token - both.gap_next_token).tolist(), sign=1,
                      unit="nats (difference of drops)", note="Table 1 at r = 8"))
    rows.append(_growth(curves, T, widest, paper))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _cap(curves: pd.DataFrame, T: int) -> float:
    """The largest S(T) the baseline's longer run can measure: its last tokens / T."""
    base = curves[curves.m == curves.n]
    return float(base.tokens.max()) / T if not base.empty else math.nan


def _growth(curves: pd.DataFrame, T: int, widest: float, paper: str) -> dict:
    """The advantage grows over training: the widest r's next-token loss gap at T minus at the
    evaluation nearest T / 2, per seed."""
    wide = curves[(curves.r == widest) & (curves.series == "main") & (curves.tokens > 0)]
    half = min(wide.tokens.unique(), key=lambda t: abs(t - T / 2)) if not wide.empty else None
    vals = []
    for _, g in wide.groupby("seed"):
        g = g.set_index("tokens").gap_next_token
        if T in g.index and half in g.index:
            vals.append(float(g[T] - g[half]))
    return claim(paper, f"the advantage grows over training (next-token gap at r = {widest:g}: "
                 f"at T minus at {half} tokens)", "the loss gap grows (abstract, Fig. 1)", vals,
                 sign=1, unit="nats")


def table_step(paths: Iterable[str | Path], paper: dict[str, pd.DataFrame]
               ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The registry's table builder: the paper CSVs by role (headline, table1)."""
    return analyze(paths, paper["headline"], paper["table1"])


def analyze(paths: Iterable[str | Path], headline: pd.DataFrame, table1: pd.DataFrame
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(summary table, curves with gaps and S(T), claims)."""
    runs, curves = read_runs(paths)
    if curves.empty:
        return summary(runs, curves), curves, pd.DataFrame(columns=CLAIM_COLUMNS)
    curves = with_gaps(curves)
    return (summary(runs, curves), curves,
            claims(curves, common_tokens(runs), headline, table1, runs))
