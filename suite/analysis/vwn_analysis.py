"""VWN records -> a summary per variant, the held-out curves with the loss gap and the
token-efficiency S(T), and the claims table beside the paper.

Comparisons pair runs by seed (same seed: same data order; the initial weights differ with the
width) and take the mean over seeds with a t-interval. Losses are compared at the common token
count T (the wide runs' length); the r = 1 baseline trains longer (``vwn.baseline_length``) so
that S(T) = T_base(loss_VWN(T)) / T, the tokens the baseline needs to reach the wide model's loss
divided by T, stays measurable when the wide model is ahead. T_base comes from the baseline's
running-minimum curve, interpolated linearly in tokens between evaluations; a loss the baseline
never reaches gives no S (counted as censored).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from suite.analysis.verdicts import CLAIM_COLUMNS, claim
from suite.analysis.tables import read_checked
from suite.measure.stats import mean_ci

LOSSES = {"next_token": "next-token", "next_2_token": "next-2-token"}


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


def claims(curves: pd.DataFrame, T: int | None, headline: pd.DataFrame,
           table1: pd.DataFrame) -> pd.DataFrame:
    """The VWN paper's claims beside the measured values (``suite.analysis.verdicts``)."""
    paper = "VWN"
    head = dict(zip(headline.claim, headline.value))
    rows = []
    if T is None:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    at = curves[curves.tokens == T]
    widest = at[at.series == "main"].r.max()
    wide = at[(at.r == widest) & (at.series == "main")]
    rows.append(claim(paper, "loss falls log-linearly in r (next-token loss at equal tokens vs "
                      "log2 r, fit on r >= 2)", head.get("log-linear fit slope per log2(r)"),
                      slopes(curves, T), sign=-1, unit="nats per doubling of r",
                      note="Fig. 8 slope, fitted on r >= 2; per-seed fits here"))
    for key, name in LOSSES.items():
        for r_value in sorted(at[(at.series == "main") & (at.r >= 2)].r.unique()):
            prow = table1[table1.expansion_r == r_value]
            pv = float(prow[f"{key}_loss_drop"].iloc[0]) if not prow.empty else None
            vals = at[(at.r == r_value) & (at.series == "main")][f"gap_{key}"].tolist()
            rows.append(claim(paper, f"{name} loss drop at r = {r_value:g} (baseline - VWN, "
                              f"equal tokens)", pv, vals, sign=1, unit="nats",
                              note="Table 1 (A0.8B MoE, 500B tokens)" if pv is not None
                              else "no Table 1 row for this r"))
    for key, name, hk in (("next_token", "next-token", "token-efficiency speedup next-token (8x)"),
                          ("next_2_token", "next-2-token",
                           "token-efficiency speedup next-2-token (8x)")):
        vals = wide[f"s_{key}"].tolist()
        censored = int(pd.isna(wide[f"s_{key}"]).sum())
        note = (f"S(T) at the widest r = {widest:g} and T = {T} tokens; paper: Fig. 1 at 8x, "
                f"~3T tokens")
        if censored:
            note += (f"; {censored} seed(s) censored (the baseline never reached the VWN loss "
                     f"within its longer run)")
        rows.append(claim(paper, f"{name} token efficiency: the baseline needs S x the tokens "
                          f"to reach VWN's loss", head.get(hk), vals, sign=1, null=1.0,
                          unit="x", note=note))
    both = wide[["gap_next_token", "gap_next_2_token"]].dropna()
    rows.append(claim(paper, "next-2-token gains exceed next-token gains (drop at the widest r)",
                      "0.058 vs 0.035 at 8x",
                      (both.gap_next_2_token - both.gap_next_token).tolist(), sign=1,
                      unit="nats (difference of drops)", note="Table 1 at r = 8"))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


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
    return summary(runs, curves), curves, claims(curves, common_tokens(runs), headline, table1)
