"""Fit each system on its declared rows, predict every other row, and score the predictions:
per dataset and system, on the rows not fitted, the mean, signed mean and max relative
iteration-time error, the share within 10%, MFU errors in points, and within layout sweeps
(groups of one model, sequence length and GPU count with 2+ measured layouts, compared on time
per sequence, as their batches may differ) the Spearman rank correlation of predicted and
measured time (groups of 3+) and the top-1 regret (the measured time of the layout the model
ranks first over the measured best). Memory, where runs report it: the memory model's peak on
the fullest GPU over the measured one, and whether it marks the runs that ran out of memory
(and no run that ran). ``summarize(..., by=...)`` splits each dataset further by
layout columns (``SLICES``), to show where the model is biased: a term that is off for one kind
of layout (no recompute, high TP, short micro-batches) moves the ranking, not just the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from math import nan
from typing import Any, NamedTuple

import pandas as pd
from scipy.stats import spearmanr

from suite.scale.fit import Row, fit_system, fits_straggler
from suite.scale.hardware import GiB, Hardware
from suite.scale.memory import memory
from suite.scale.runs import Run
from suite.scale.step import (
    ALL_TERMS,
    BREAKDOWN,
    Estimate,
    Terms,
    estimate,
    job_nodes,
    layer_breakdown,
)

Calibration = dict[str, tuple[tuple[str, str], ...]]  # system -> ((dataset, id), ...)
# Columns of ``predict``'s table that ``summarize`` can split the held-out rows by.
SLICES = ("gpu", "gpus", "nodes", "tp", "pp", "dp", "virtual_stages", "micro_batch", "seq_len",
          "tokens_per_micro_batch", "recompute", "sequence_parallel", "attention", "dp_mode")


def calibration_rows(runs: list[Run], calibration: Calibration) -> dict[str, list[Row]]:
    """Per system, the rows it is fitted on: its declared runs, each with a measured time."""
    by_key = {(r.dataset, r.id, r.system): r for r in runs}
    rows: dict[str, list[Row]] = {}
    for system in sorted({r.system for r in runs}):
        if system not in calibration:
            raise ValueError(f"system {system!r} declares no calibration runs; declared: "
                             f"{sorted(calibration)}")
        rows[system] = []
        for dataset, rid in calibration[system]:
            run = by_key.get((dataset, rid, system))
            if run is None or run.measured_s is None:
                raise ValueError(f"{system}: calibration run {dataset}/{rid!r} is not a run "
                                 "with a measured iteration or layer time")
            rows[system].append(Row(run.model, run.layout, run.hardware, run.measured_s,
                                    run.timed))
    return rows


def fit(runs: list[Run], calibration: Calibration, terms: Terms = ALL_TERMS
        ) -> dict[str, tuple[float, float]]:
    """Each system's (gemm_efficiency, straggler), from its declared runs only."""
    return {system: fit_system(rows, terms)
            for system, rows in calibration_rows(runs, calibration).items()}


def iteration_rows(predictions: pd.DataFrame) -> pd.DataFrame:
    """``predict``'s rows that timed an iteration, not one layer (tables written before layer
    rows existed have no ``timed`` column: all of theirs)."""
    if "timed" not in predictions:
        return predictions
    return predictions[predictions.timed == "iteration"]


def hardware_with_fit(run: Run, fits: dict[str, tuple[float, float]]) -> Hardware:
    eff, straggler = fits[run.system]
    return replace(run.hardware, gemm_efficiency=eff, straggler=straggler)


def predict(runs: list[Run], calibration: Calibration, terms: Terms = ALL_TERMS) -> pd.DataFrame:
    """One row per run: measured and predicted iteration time and MFU, the errors (predicted -
    measured), the breakdown, whether the run was fitted, and the fitted numbers (with whether
    its system's calibration could fit the straggler, and the nodes it ran on); its outcome,
    and the measured and modelled memory of the fullest GPU with whether the model fits it. A
    run that timed one layer (``timed`` "layer") has that layer's seconds in the time columns
    and its breakdown, and no MFU or memory."""
    declared = calibration_rows(runs, calibration)
    fits = {system: fit_system(rows, terms) for system, rows in declared.items()}
    straggler_fitted = {system: fits_straggler(rows, terms) for system, rows in declared.items()}
    out = []
    for run in runs:
        hw = hardware_with_fit(run, fits)
        time = nan if run.measured_s is None else run.measured_s
        if run.timed == "layer":
            parts = layer_breakdown(run.model, run.layout, hw, terms)
            est = Estimate(sum(parts.values()), nan, nan, nan, parts)
        else:
            est = estimate(run.model, hw, run.layout, terms)
        mfu = nan if run.mfu_percent is None else run.mfu_percent
        lay = run.layout
        # a layer benchmark did not hold the whole model: no memory verdict
        mem = None if run.timed == "layer" else memory(run.model, lay, run.hardware)
        out.append({
            "dataset": run.dataset, "system": run.system, "label": run.id, "group": run.group,
            "timed": run.timed,
            "gpu": run.hardware.name, "gpus": run.gpus,
            "nodes": job_nodes(lay, run.hardware), "batch_size": lay.global_batch,
            "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "virtual_stages": lay.virtual_stages,
            "micro_batch": lay.micro_batch, "seq_len": run.model.seq_len,
            "tokens_per_micro_batch": lay.micro_batch * run.model.seq_len,
            "recompute": lay.recompute,
            "sequence_parallel": lay.sequence_parallel, "attention": lay.attention,
            "dp_mode": lay.dp_mode,
            "paper_iteration_time_s": time, "predicted_iteration_time_s": est.iteration_time_s,
            "iteration_time_rel_error": (est.iteration_time_s - time) / time,
            "paper_mfu_percent": mfu, "predicted_mfu_percent": 100 * est.mfu,
            "mfu_error_points": 100 * est.mfu - mfu,
            "outcome": run.outcome,
            "paper_memory_gib": nan if run.memory_gib is None else run.memory_gib,
            "predicted_memory_gib": nan if mem is None else mem.total / GiB,
            "predicted_fits": nan if mem is None else mem.fits,
            **est.breakdown,
            "calibration": (run.dataset, run.id) in calibration.get(run.system, ()),
            "gemm_efficiency": hw.gemm_efficiency, "straggler": hw.straggler,
            "straggler_fitted": straggler_fitted[run.system],
        })
    return pd.DataFrame(out)


# Below this share of a calibration row's time in its GEMMs, the ceiling fitted on it mostly
# absorbs the other terms' errors (bubble, communication, fixed costs): it is flagged.
WEAK_CALIBRATION_SHARE = 0.5


def gemm_share(row: Mapping[str, Any]) -> float:
    """The share of a predicted row's time in its GEMMs: the time the fitted ceiling scales."""
    return row["gemm_s"] / row["predicted_iteration_time_s"]


def weak_calibration(predictions: pd.DataFrame) -> list[str]:
    """One line per calibration row whose GEMMs are under ``WEAK_CALIBRATION_SHARE`` of its
    predicted time, naming the largest other part."""
    lines = []
    for r in predictions[predictions.calibration.astype(bool)].to_dict("records"):
        share = gemm_share(r)
        if share >= WEAK_CALIBRATION_SHARE:
            continue
        top = max((k for k in BREAKDOWN if k != "gemm_s"), key=r.get)
        lines.append(f"{r['system']}: calibration row {r['label']!r} spends {100 * share:.0f}% "
                     f"of its time in GEMMs ({top.removesuffix('_s')} "
                     f"{100 * r[top] / r['predicted_iteration_time_s']:.0f}%), so the GEMM "
                     "ceiling fitted on it mostly absorbs the other terms' errors; a row with "
                     "more micro-batches per pipeline, or less communication, fits it better")
    return lines


class UnfittedStraggler(NamedTuple):
    """A system whose straggler constant is 0 as its calibration rows cannot fit it, with rows
    on more nodes than those: ``beyond`` measured iterations on ``lowest``-``highest`` nodes
    past the ``calibrated`` its calibration ran on; ``signed_by_nodes``, the signed mean error
    of its rows not fitted per node count."""
    system: str
    calibrated: int
    beyond: int
    lowest: int
    highest: int
    signed_by_nodes: dict[int, float]

    def trend(self) -> str:
        return ", ".join(f"{n}: {100 * e:+.1f}%" for n, e in self.signed_by_nodes.items())

    def line(self) -> str:
        return (f"{self.system}: its calibration rows cannot fit the straggler constant (no pair "
                f"of one layout on two node counts), so it is 0 and its {self.beyond} measured "
                f"iterations on {self.lowest}-{self.highest} nodes, beyond the {self.calibrated} "
                "its calibration ran on, carry no synchronization cost that grows with the "
                f"nodes; signed mean error of the rows not fitted, by nodes: {self.trend()}; two "
                "runs of one layout on two node counts, the larger near the scale you predict, "
                "fit it")


def unfitted_straggler(predictions: pd.DataFrame) -> list[UnfittedStraggler]:
    """Each system whose calibration rows cannot fit the straggler constant (no scaling pair on
    two node counts: ``suite.scale.fit``), so that it stays 0, which predicts measured
    iterations on more nodes than its calibration ran on: those rows carry no synchronization
    cost that grows with the nodes, which shows as errors falling with the nodes."""
    if "straggler_fitted" not in predictions:  # a table from before the column
        return []
    found = []
    for system, g in predictions.groupby("system", sort=False):
        fitted = g.calibration.astype(bool)
        if g.straggler_fitted.astype(bool).any() or not fitted.any():
            continue
        most = int(g[fitted].nodes.max())
        held = iteration_rows(g[~fitted]).dropna(subset=["iteration_time_rel_error"])
        beyond = held[held.nodes > most]
        if beyond.empty:
            continue
        by_nodes = held.groupby("nodes").iteration_time_rel_error.mean()
        found.append(UnfittedStraggler(system, most, len(beyond), int(beyond.nodes.min()),
                                       int(beyond.nodes.max()),
                                       {int(n): float(e) for n, e in by_nodes.items()}))
    return found


def rank_metrics(rows: pd.DataFrame, predicted: str = "predicted_iteration_time_s"
                 ) -> tuple[float, float, int]:
    """(mean Spearman over groups of 3+, mean top-1 regret over groups of 2+, groups of 2+) of
    the measured times against the ``predicted`` column."""
    rhos, regrets = [], []
    timed = rows[rows.paper_iteration_time_s.notna()]
    for _, g in timed.groupby("group"):
        if len(g) < 2:
            continue
        measured = g.paper_iteration_time_s / g.batch_size
        model = g[predicted] / g.batch_size
        regrets.append(measured[model.idxmin()] / measured.min() - 1)
        if len(g) >= 3 and model.nunique() > 1:
            rhos.append(spearmanr(model, measured).statistic)
    return _mean(rhos), _mean(regrets), len(regrets)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else nan


def _memory_columns(g: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """(the runs that ran, those that ran out of memory, the model's peak over the measured
    one where a run reports it); a table from before the memory columns: every run ran."""
    if "outcome" not in g:
        g = g.assign(outcome="ok", paper_memory_gib=nan, predicted_memory_gib=nan,
                     predicted_fits=nan)
    ran, oom = g[g.outcome == "ok"], g[g.outcome == "oom"]
    return ran, oom, (ran.predicted_memory_gib / ran.paper_memory_gib).dropna()


def summarize(predictions: pd.DataFrame, predicted: str = "predicted_iteration_time_s",
              by: Sequence[str] = ()) -> pd.DataFrame:
    """Per dataset and system (and each value of the ``by`` columns, from ``SLICES``), on the
    runs not fitted that ran: the errors and rank metrics above (memory: ``memory_summary``)."""
    unknown = [c for c in by if c not in SLICES]
    if unknown:
        raise ValueError(f"by={unknown}: not a column to split by; valid: {list(SLICES)}")
    held = predictions[~predictions.calibration.astype(bool)]
    if held.empty:
        raise ValueError("predictions has no held-out rows to summarize")
    keys = ["dataset", "system", *by]
    rows = []
    for values, g in held.groupby(keys, sort=False):
        err = (g[predicted] - g.paper_iteration_time_s) / g.paper_iteration_time_s
        err = err.dropna()
        points = g.mfu_error_points.dropna() if predicted == "predicted_iteration_time_s" \
            else pd.Series(dtype=float)
        rho, regret, groups = rank_metrics(g, predicted)
        ran_held = len(g) - (int((g.outcome == "oom").sum()) if "outcome" in g else 0)
        rows.append({**dict(zip(keys, values)), "runs": ran_held,
                     "timed": "/".join(sorted(set(g.timed))) if "timed" in g else "iteration",
                     "time_mean_abs_pct": 100 * err.abs().mean() if len(err) else nan,
                     "time_max_abs_pct": 100 * err.abs().max() if len(err) else nan,
                     "time_mean_signed_pct": 100 * err.mean() if len(err) else nan,
                     "within_10pct": (err.abs() <= 0.10).mean() if len(err) else nan,
                     "mfu_mean_abs_points": points.abs().mean() if len(points) else nan,
                     "mfu_mean_signed_points": points.mean() if len(points) else nan,
                     "sweeps": groups, "spearman": rho, "top1_regret_pct": 100 * regret})
    return pd.DataFrame(rows)


def memory_summary(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and system, over every run (nothing is fitted on memory): the model's peak
    over the measured one, and the runs it would refuse among those that ran out of memory and
    those that ran."""
    rows = []
    for (dataset, system), g in predictions.groupby(["dataset", "system"], sort=False):
        ran, oom, ratio = _memory_columns(g)
        rows.append({"dataset": dataset, "system": system, "memory_runs": len(ratio),
                     "memory_ratio_min": ratio.min() if len(ratio) else nan,
                     "memory_ratio_max": ratio.max() if len(ratio) else nan,
                     "fit_checked": int(ran.predicted_fits.notna().sum()),
                     "oom_runs": len(oom),
                     "oom_marked": int((~oom.predicted_fits.astype(bool)).sum()),
                     "ran_marked_oom": int((~ran.predicted_fits.astype(bool)).sum())})
    return pd.DataFrame(rows)


def memory_line(r: Any) -> str | None:
    """One ``memory_summary`` row in words, or None where there is nothing to check."""
    if not (r.memory_runs or r.oom_runs or r.ran_marked_oom):
        return None
    return ((f"the model's peak is {r.memory_ratio_min:.2f}-{r.memory_ratio_max:.2f} of the "
             f"measured on {r.memory_runs} runs; " if r.memory_runs else "")
            + f"it marks {r.oom_marked} of the {r.oom_runs} runs that ran out of memory and "
            f"{r.ran_marked_oom} of the {r.fit_checked} that ran")


def user_system(runs: list[Run], name: str, ids: list[str]) -> tuple[list[Run], Calibration]:
    """A user's runs as one new system ``name``, calibrated on exactly the rows ``ids`` (one or
    two, each with a measured iteration time, tokens/s or layer time)."""
    if not 1 <= len(ids) <= 2:
        raise ValueError(f"--calibrate names {len(ids)} rows; a system fits one or two")
    runs = [replace(r, system=name) for r in runs]
    by_id: dict[str, list[Run]] = {}
    for r in runs:
        by_id.setdefault(r.id, []).append(r)
    keys = []
    for rid in ids:
        found = by_id.get(rid, [])
        if len(found) != 1:
            raise ValueError(f"--calibrate {rid!r}: " + ("no row has this id" if not found else
                             f"{len(found)} rows have this id (in datasets "
                             f"{sorted(r.dataset for r in found)})") + f"; ids: {sorted(by_id)}")
        if found[0].measured_s is None:
            why = "it ran out of memory" if found[0].outcome == "oom" else "only MFU"
            raise ValueError(f"--calibrate {rid!r}: the row has no measured time ({why})")
        keys.append((found[0].dataset, rid))
    return runs, {name: tuple(keys)}
