"""The serving records -> the summary table (one row per system, repeat and scenario), the
latency-vs-offered-load curves (one row per Server trial) and the measured claims.

Claims pair each padding-free system (``packed-reference``; ``packed-reference-eager`` where it
ran) with each padded or bucketed one by repeat (the same LoadGen seeds), VALID runs only: per
repeat the ratio of the Server's highest VALID offered load, of Offline samples/s, and of the
SingleStream p90 latency (theirs over ours); the claim's value is the geometric mean of the
ratios with the t-interval of their logarithms over repeats, reproduced when the whole interval
lies above 1. The note names every repeat left out and why (failed, INVALID, not run on the
other side).

Beside each ratio, its ceiling from work alone: the tokens the padded system computed per valid
token in the same runs (its batches padded to their longest request). Where time grows with
tokens, skipping the padding gains at most that much; a ratio above it comes from elsewhere
(kernels, per-batch overhead), one well below it from costs packing does not remove.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from suite.analysis.tables import read_checked
from suite.analysis.verdicts import CLAIM_COLUMNS, not_tested, ratio_claim
from suite.serving.config import PACKED, PADDING_FREE, is_packed

PAPER = "ByteTransformer"
# scenario -> (the table's column, the claim's ratio in words, +1: higher is better / -1: lower)
METRICS = {"Server": ("max_valid_qps", "{ours}'s highest VALID Server QPS over {other}'s, at "
                                       "the same p99 bound", 1),
           "Offline": ("samples_per_s", "{ours}'s Offline samples/s over {other}'s", 1),
           "SingleStream": ("p90_ms", "{other}'s SingleStream p90 latency over {ours}'s", -1)}
TABLE_COLUMNS = ["system", "batching", "baseline", "repeat", "scenario", "status", "reason",
                 "valid", "loadgen_reasons", "samples_per_s", "max_valid_qps", "p50_ms",
                 "p90_ms", "p99_ms", "latency_bound_ms", "mean_batch", "computed_per_real",
                 "trials", "max_abs_err", "loadgen_version"]
CURVE_COLUMNS = ["system", "repeat", "offered_qps", "valid", "loadgen_reasons", "scheduled_qps",
                 "p50_ms", "p90_ms", "p99_ms", "mean_batch"]


def table_step(paths: Iterable[str | Path], paper: dict[str, pd.DataFrame]
               ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The registry's table builder (no paper CSV: the paper measures fixed batches only)."""
    table, curves = read_runs(paths)
    return table, curves, claims(table)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _latencies(result: dict[str, Any] | None) -> dict[str, float | None]:
    result = result or {}
    return {f"p{p}_ms": _ms(result.get(f"p{p}_s")) for p in (50, 90, 99)}


def _computed_per_real(batching: str | None, result: dict[str, Any]) -> float | None:
    """Tokens computed per valid token: 1 when packed, the batches' padding otherwise."""
    if batching == "packed":
        return 1.0
    return result.get("padded_per_real")


def read_runs(paths: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, curves = [], []
    for path in paths:
        rec = read_checked(path)
        base = {"system": rec.system, "batching": rec.point.get("batching"),
                "baseline": rec.point.get("baseline"), "repeat": rec.point.get("repeat"),
                "status": rec.status.value, "reason": rec.reason,
                "max_abs_err": rec.correctness.get("max_abs_err")}
        scenarios = rec.derived.get("scenarios") or {}
        if not scenarios:
            rows.append(base)
        for scenario, s in scenarios.items():
            result = s.get("result") or {}
            rows.append({**base, "scenario": scenario, "valid": s["valid"],
                         "loadgen_reasons": "; ".join(result.get("reasons") or []),
                         "samples_per_s": s.get("samples_per_s"),
                         "max_valid_qps": s.get("max_valid_qps"), **_latencies(result),
                         "latency_bound_ms": _ms(s["plan"]["latency_bound_s"])
                         if scenario == "Server" else None,
                         "mean_batch": result.get("mean_batch"),
                         "computed_per_real": _computed_per_real(base["batching"], result),
                         "trials": len(s["search"]["trials"]) if "search" in s else 1,
                         "loadgen_version": s.get("loadgen_version")})
            for t in (s.get("search") or {}).get("trials", []):
                curves.append({"system": rec.system, "repeat": base["repeat"],
                               "offered_qps": t["qps"], "valid": t["valid"],
                               "loadgen_reasons": "; ".join(t.get("reasons") or []),
                               "scheduled_qps": t.get("scheduled_qps"), **_latencies(t),
                               "mean_batch": t.get("mean_batch")})
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    order = {"Offline": 0, "SingleStream": 1, "Server": 2}
    table = table.sort_values(["system", "repeat", "scenario"],
                              key=lambda c: c.map(order) if c.name == "scenario" else c,
                              kind="stable", ignore_index=True)
    curves = pd.DataFrame(curves, columns=CURVE_COLUMNS).sort_values(
        ["system", "repeat", "offered_qps"], ignore_index=True)
    return table, curves


def ratios(table: pd.DataFrame, scenario: str, other: str, ours: str = PADDING_FREE
           ) -> tuple[list[float], list[str]]:
    """Per repeat, the padding-free system ``ours`` over ``other`` on the scenario's metric (for
    a latency, ``other`` over ``ours``): above 1 means padding-free is better.
    Only VALID runs pair, and only within a repeat (the same LoadGen seeds); the second list
    says which repeats were left out and why."""
    column, _, sign = METRICS[scenario]
    rows = table[(table.scenario == scenario) | table.scenario.isna()]
    kept: dict[str, dict[int, float]] = {}
    dropped: list[str] = []
    for system in (ours, other):
        kept[system] = {}
        for r in rows[rows.system == system].to_dict("records"):
            why = _unusable(r, column)
            if why:
                dropped.append(f"{system} repeat {r['repeat']}: {why}")
            else:
                kept[system][int(r["repeat"])] = float(r[column])
    ran = {s: set(rows[rows.system == s].repeat.astype(int)) for s in kept}
    for system, partner in ((other, ours), (ours, other)):
        dropped += [f"{system} repeat {k}: not run"
                    for k in sorted(set(kept[partner]) - ran[system])]
    mine, theirs = kept[ours], kept[other]
    common = sorted(set(mine) & set(theirs))
    if sign > 0:
        return [mine[k] / theirs[k] for k in common], dropped
    return [theirs[k] / mine[k] for k in common], dropped


def _unusable(row: dict[str, Any], column: str) -> str:
    """Why a summary row cannot enter a ratio, or "" when it can."""
    if row["status"] != "ok":
        return f"{row['status']} ({row['reason']})" if row.get("reason") else row["status"]
    if row.get("valid") not in (True, "True", "true"):  # a bool, or its CSV text
        reasons = row.get("loadgen_reasons")
        return "INVALID" + (f" ({reasons})" if isinstance(reasons, str) and reasons else "")
    value = pd.to_numeric(row.get(column), errors="coerce")
    if pd.isna(value) or value <= 0:
        return f"no {column}"
    return ""


def _ceiling(table: pd.DataFrame, scenario: str, other: str) -> str:
    """The claim note's words on the ratio's ceiling from work alone (see the module doc)."""
    rows = table[(table.system == other) & (table.scenario == scenario)
                 & (table.status == "ok")]
    values = pd.to_numeric(rows.computed_per_real, errors="coerce").dropna()
    if values.empty:
        return ""
    return (f"; {other} computed {values.mean():.2f} tokens per valid token in these runs "
            f"(padding to each batch's longest): the ratio's ceiling where time grows with "
            f"tokens")


def claims(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (scenario, padding-free system, padded or bucketed system), Server first;
    ``packed-reference`` stands for padding-free packing even where it did not run."""
    ran = set(table.system.dropna())
    others = sorted(s for s in ran if not is_packed(s))
    packed = [f"packed-{b}" for b in PACKED if f"packed-{b}" in ran] or [PADDING_FREE]
    scenarios = [s for s in METRICS if s in set(table.scenario.dropna())]
    rows = []
    for scenario, ours, other in ((s, o, t) for s in scenarios for o in packed for t in others):
        _, says, _ = METRICS[scenario]
        text = says.format(ours=PACKED[ours.removeprefix("packed-")], other=other)
        if ours not in ran:
            rows.append(not_tested(PAPER, text, None, "x", f"{ours} is not among the systems run"))
            continue
        values, dropped = ratios(table, scenario, other, ours)
        rows.append(ratio_claim(
            PAPER, text, None, values, unit="x",
            note="the paper measures fixed batches only: no serving number to set beside; "
                 "VALID runs paired by repeat (same LoadGen seeds), geometric mean with the 95% "
                 "t-interval of the log-ratios over repeats" + _ceiling(table, scenario, other)
                 + (f"; left out: {'; '.join(dropped)}" if dropped else "")))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)
