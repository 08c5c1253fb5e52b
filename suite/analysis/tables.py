"""Records -> one tidy table (a row per record), with speedups against the padded baseline.

Speedups are computed here, not in the runs, because each baseline runs in its own process; they
compare two records of the same machine, workload point and config.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from suite.measure.load import noise_columns
from suite.records import Record, read_record
from suite.measure.correctness import weights_version
from suite.measure.stats import ratio_of_medians_ci

# Records that share these are the same workload point; speedups pair records across systems.
POINT_KEYS = ["experiment", "machine", "config_hash", "subject", "batch_size", "max_seq_len",
              "distribution", "dtype"]
# Forms of one implementation (another way to launch it), never each other's competitor in a
# point's lead: the reference is not "faster than the fastest other system" by beating itself
FORM_OF = {"reference-eager": "reference"}


def record_row(rec: Record, path: Path | None = None) -> dict:
    stats = rec.timing.get("stats", {})
    ms = {f"{k}_ms": stats[k] * 1e3 for k in ("median", "q1", "q3", "iqr", "ci_low", "ci_high",
                                              "p90", "p99") if k in stats}
    d, c, w = rec.derived, rec.correctness, rec.workload
    return {
        "experiment": rec.experiment, "system": rec.system, **rec.point,
        "subject": rec.point.get("model") or rec.point.get("op") or rec.point.get("subject"),
        "status": rec.status.value, "reason": rec.reason,
        "machine": rec.env.get("machine"), "config_hash": rec.config_hash,
        "padding_free": d.get("padding_free"),
        "total_tokens": w.get("total_tokens"), "padded_tokens": w.get("padded_tokens"),
        "gemm_flop_bound": w.get("gemm_flop_bound"),
        "attention_flop_bound": w.get("attention_flop_bound"),
        **ms, "cv": stats.get("cv"), "n_samples": stats.get("n"), **noise_columns(rec.timing),
        "back_to_back_ms": d.get("back_to_back_ms"), "launch_share": d.get("launch_share"),
        "execution": (d.get("system") or {}).get("execution"),
        "tokens_per_s": d.get("tokens_per_s"),
        "useful_gflops_per_s": (d["useful_flops_per_s"] / 1e9
                                if "useful_flops_per_s" in d else None),
        "pct_of_measured_peak": d.get("pct_of_measured_peak"),
        "measured_peak_library": d.get("measured_peak_library"),
        "measured_peak_gflops_per_s": (d["measured_peak_flops_per_s"] / 1e9
                                       if d.get("measured_peak_flops_per_s") else None),
        "pct_of_theoretical_peak": d.get("pct_of_theoretical_peak"),
        "pct_of_datasheet_peak": d.get("pct_of_datasheet_peak"),
        "gemm_library": gemm_library_text(d.get("gemm_library")),
        "peak_note": d.get("peak_note"),
        "min_gbytes_per_s": d["min_bytes_per_s"] / 1e9 if "min_bytes_per_s" in d else None,
        "max_abs_err": c.get("max_abs_err"), "max_rel_err": c.get("max_rel_err"),
        "gate_weights": weights_version(c),
        "threads": rec.timing.get("threads"), "device": rec.timing.get("device"),
        "git_commit": rec.env.get("git", {}).get("commit"), "created_at": rec.created_at,
        "record": str(path) if path else None,
    }


def gemm_library_text(seen: dict | None) -> str | None:
    """'oneDNN 48 + MKL 12672': the GEMM calls one forward made through torch's libraries
    (attention's small blocked GEMMs count too), or what the record says when it saw none."""
    if not seen:
        return None
    counts = [(name, seen.get(key, 0)) for name, key in (("oneDNN", "onednn_gemm_calls"),
                                                         ("MKL", "mkl_gemm_calls"))]
    seen_any = [f"{name} {n}" for name, n in counts if n]
    return " + ".join(seen_any) if seen_any else "its own (not torch's MKL or oneDNN)"


def tidy_table(paths: Iterable[str | Path], padded_baseline: str = "torch-eager") -> pd.DataFrame:
    """A row per record. Records of different configs (config hash) stay apart: a speedup
    pairs two records of one config only. A file that is not a record stops the table, named,
    with the command that re-runs its point."""
    records = [(Path(p), read_checked(p)) for p in paths]
    rows = [record_row(rec, p) for p, rec in records]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    samples = {str(p): rec.timing.get("samples") for p, rec in records}
    df = _add_leads(_add_speedups(df, samples, padded_baseline), samples)
    # How much of what removing padding can save was realized: a padding-free system's figure.
    saved = 100 * df["speedup_vs_padded"] / df["gemm_flop_bound"]
    df["pct_of_gemm_bound"] = saved.where(df["padding_free"] == True)  # noqa: E712 (may be NaN)
    return df.sort_values(["experiment", "batch_size", "max_seq_len", "system"],
                          ignore_index=True)


def read_checked(path: str | Path) -> Record:
    """``read_record``, its error saying how to replace the file with a fresh run."""
    try:
        return read_record(path)
    except ValueError as e:
        raise ValueError(f"{e}. Re-run its point: make reproduce SNAKEFLAGS='--forcerun "
                         f"{path}' (or delete it if it is not a record)") from e


def _add_speedups(df: pd.DataFrame, samples: dict, padded_baseline: str) -> pd.DataFrame:
    """speedup = padded baseline latency / this latency, with a bootstrap CI, per point. The
    padded baseline's own rows get 1 without a CI; rows without an ok baseline get nothing."""
    by_point = {tuple(r[k] for k in POINT_KEYS): r for _, r in
                df[(df.system == padded_baseline) & (df.status == "ok")].iterrows()}
    speedups = []
    for _, row in df.iterrows():
        base = by_point.get(tuple(row[k] for k in POINT_KEYS))
        if row["status"] != "ok" or base is None:
            speedups.append((None, None, None))
        elif base["record"] == row["record"]:
            speedups.append((1.0, None, None))
        else:
            speedups.append(ratio_of_medians_ci(samples[base["record"]], samples[row["record"]]))
    ratio, low, high = zip(*speedups) if speedups else ((), (), ())
    return df.assign(speedup_vs_padded=ratio, speedup_ci_low=low, speedup_ci_high=high,
                     speedup_over=padded_baseline)


def _add_leads(df: pd.DataFrame, samples: dict) -> pd.DataFrame:
    """Per timed row, the fastest other system at its point (by median; forms of the same
    implementation excluded, ``FORM_OF``) and the lead over it: that system's median over this
    one's, with a bootstrap CI. Above 1: this system is first at its point by that factor;
    below: the fastest other is that much faster."""
    def point(row) -> tuple[str, ...]:
        return tuple(str(row[k]) for k in POINT_KEYS)

    def family(system: str) -> str:
        return FORM_OF.get(system, system)

    timed = df[(df.status == "ok") & df.get("median_ms", pd.Series(index=df.index)).notna()]
    at: dict[tuple[str, ...], list] = {}
    for _, row in timed.iterrows():
        at.setdefault(point(row), []).append(row)
    columns = ("fastest_other", "lead_over_fastest", "lead_ci_low", "lead_ci_high")
    found: dict[str, list] = {c: [] for c in columns}
    for i, row in df.iterrows():
        others = [] if i not in timed.index else [
            r for r in at[point(row)] if family(r.system) != family(row.system)]
        lead: tuple = (None,) * 4
        if others:
            best = min(others, key=lambda r: r.median_ms)
            ours, theirs = samples.get(row.record), samples.get(best.record)
            lead = (best.system, *(ratio_of_medians_ci(theirs, ours) if ours and theirs else
                                   (best.median_ms / row.median_ms, None, None)))
        for column, value in zip(columns, lead):
            found[column].append(value)
    return df.assign(**found)
