"""The report's table layouts: a header and a formatter per column, one layout per
``ExperimentSpec.columns`` name. Formatting only: every value comes from the tidy table."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

# A section's table: (header, cell of a row) per column; experiments not listed get BERT_COLUMNS.
Column = tuple[str, Callable[[dict[str, Any]], str]]


def _num(key: str, spec: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: fmt(r.get(key), spec)


def _range(low: str, high: str, spec: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: ("–" if r.get(low) is None else
                      f"{fmt(r.get(low), spec)}–{fmt(r.get(high), spec)}")


def is_noisy(row: dict[str, Any]) -> bool:
    """The tidy table's ``noisy`` flag (a bool, or its CSV text); rows without it are not."""
    return row.get("noisy") in (True, "True", "true")


def _cv(row: dict[str, Any]) -> str:
    """The samples' CV, marked where the point was timed on a busy or noisy machine."""
    return fmt(row.get("cv"), ".2f") + (" noisy" if is_noisy(row) else "")


def _lead(row: dict[str, Any]) -> str:
    """'1.40x torch-sdpa [1.35–1.46]': the fastest other system's median over this row's."""
    if not isinstance(row.get("fastest_other"), str):
        return "–"
    ci = ("" if row.get("lead_ci_low") is None or fmt(row.get("lead_ci_low"), ".2f") == "–"
          else f" [{_range('lead_ci_low', 'lead_ci_high', '.2f')(row)}]")
    return f"{fmt(row.get('lead_over_fastest'), '.2f')}x {row['fastest_other']}{ci}"


BERT_COLUMNS: list[Column] = [
    ("system", lambda r: r["system"] + (f" ({r['step']})" if r.get("step") else "")),
    ("subject", lambda r: str(r.get("subject"))),
    ("batch", _num("batch_size", ".0f")), ("max len", _num("max_seq_len", ".0f")),
    ("tokens", _num("total_tokens", ".0f")), ("median ms", _num("median_ms", ".2f")),
    ("95% CI ms", _range("ci_low_ms", "ci_high_ms", ".2f")), ("IQR ms", _num("iqr_ms", ".2f")),
    ("p90 ms", _num("p90_ms", ".2f")), ("p99 ms", _num("p99_ms", ".2f")),
    ("CV", _cv), ("n", _num("n_samples", ".0f")),
    ("speedup", _num("speedup_vs_padded", ".2f")),
    ("speedup 95% CI", _range("speedup_ci_low", "speedup_ci_high", ".2f")),
    ("lead over the fastest other", _lead),
    ("back-to-back ms", _num("back_to_back_ms", ".3f")),
    ("GEMM bound", _num("gemm_flop_bound", ".2f")),
    ("attn bound", _num("attention_flop_bound", ".2f")),
    ("% of GEMM bound", _num("pct_of_gemm_bound", ".0f")),
    ("tokens/s", _num("tokens_per_s", ".0f")),
    ("useful GFLOP/s", _num("useful_gflops_per_s", ".1f")),
    ("% of measured peak", _num("pct_of_measured_peak", ".1f")),
    ("peak it divides by", lambda r: "–" if r.get("measured_peak_library") is None else
     f"{r['measured_peak_library']} {fmt(r.get('measured_peak_gflops_per_s'), '.0f')} GFLOP/s"),
    ("% of theoretical", _num("pct_of_theoretical_peak", ".1f")),
    ("GEMMs ran on", lambda r: str(r.get("gemm_library") or "–")),
    ("GB/s", _num("min_gbytes_per_s", ".1f")), ("max abs err", _num("max_abs_err", ".1e")),
]


def _memory_verdict(row: dict[str, Any]) -> str:
    """The memory model's peak on the fullest GPU and whether it fits; "ran out of memory"
    where the run did."""
    gib = fmt(row.get("predicted_memory_gib"), ".1f")
    fits = row.get("predicted_fits")
    if gib == "–" or fits is None:
        return "–"
    verdict = "fits" if fits in (True, "True", "true") else "does not fit"
    ran_out = " (ran out of memory)" if row.get("outcome") == "oom" else ""
    return f"{gib} ({verdict}){ran_out}"


def _fitted(row: dict[str, Any]) -> str:
    """Whether the scale model was fitted on the run, and if so whether the run hardly fixes the
    GEMM ceiling (``suite.scale.validate.weak_calibration``)."""
    from suite.scale.validate import WEAK_CALIBRATION_SHARE, gemm_share

    if row.get("calibration") not in (True, "True", "true"):
        return ""
    share = gemm_share(row)
    return f"yes, weak: {share:.0%} GEMMs" if share < WEAK_CALIBRATION_SHARE else "yes"


SCALE_COLUMNS: list[Column] = [
    ("dataset", lambda r: r["dataset"]), ("system", lambda r: r["system"]),
    ("run", lambda r: r["label"]),
    ("layout", lambda r: f"TP {r['tp']} PP {r['pp']} v {r['virtual_stages']} DP {r['dp']}, "
                         f"mb {r['micro_batch']}, recompute {r['recompute']}"
                         + (", SP" if r.get("sequence_parallel") else "")
                         + f", {r['attention']}, {r['dp_mode']}"),
    ("paper s (iteration or one layer)", _num("paper_iteration_time_s", ".4g")),
    ("model s", _num("predicted_iteration_time_s", ".4g")),
    ("time error", lambda r: fmt(100 * r["iteration_time_rel_error"]
                                  if r.get("iteration_time_rel_error") is not None else None,
                                  "+.1f") + "%"),
    ("paper MFU %", _num("paper_mfu_percent", ".1f")),
    ("model MFU %", _num("predicted_mfu_percent", ".1f")),
    ("MFU error (points)", _num("mfu_error_points", "+.1f")),
    ("bubble s", _num("bubble_s", ".2f")),
    ("exposed TP/PP/DP s", lambda r: "/".join(fmt(r.get(k), ".2f") for k in
                                              ("tp_exposed_s", "pp_exposed_s", "dp_exposed_s"))),
    ("SMs held by hidden comm. s", _num("interference_s", ".2f")),
    ("sync s", _num("sync_s", ".2f")),
    ("paper GiB", _num("paper_memory_gib", ".1f")),
    ("model GiB (fits)", _memory_verdict),
    ("fitted run", _fitted),
]
TRAIN_COLUMNS: list[Column] = [
    ("engine", lambda r: f"{r['system']} x{r['world_size']}"),
    ("run", lambda r: r.get("technique") or r["label"]),
    ("model", lambda r: f"{r['model']} ({r['n_params'] / 1e6:.1f}M)"),
    ("seq", _num("seq_len", ".0f")), ("global batch", _num("global_batch", ".0f")),
    ("optimizer", lambda r: str(r.get("optimizer"))),
    ("step ms", _num("median_step_ms", ".1f")),
    ("95% CI ms", _range("ci_low_ms", "ci_high_ms", ".1f")),
    ("CV", _cv), ("n", _num("n_samples", ".0f")),
    ("tokens/s", _num("tokens_per_s", ".0f")), ("MFU %", _num("mfu_percent", ".1f")),
    ("HFU %", _num("hfu_percent", ".1f")),
    ("MFU/HFU peak", lambda r: str(r.get("peak_source") or "–")),
    ("peak MiB (rank 0)", _num("peak_mem_mb", ".0f")),
    ("loss first→last", lambda r: f"{fmt(r.get('first_loss'), '.3f')}→"
                                  f"{fmt(r.get('final_loss'), '.3f')}"),
    ("gate: loss rel diff", _num("gate_max_rel_diff", ".1e")),
]
def _paper_rows(value: Any) -> str:
    """Table 3's rows of a ladder step ("1", or "3, 4, 5"; the CSV reader makes "1" a float)."""
    from suite.analysis.llm_tables import paper_steps

    return ", ".join(map(str, paper_steps(value))) or "–"


ABLATION_COLUMNS: list[Column] = [*TRAIN_COLUMNS[:2],
                                  ("mechanism", lambda r: str(r.get("mechanism") or "–")),
                                  ("MFU % at baseline FLOPs", _num("mfu_fixed_percent", ".1f")),
                                  ("paper rows", lambda r: _paper_rows(r.get("paper_steps"))),
                                  ("bubble (1F1B formula)", lambda r: "–" if r.get(
                                      "bubble_fraction") is None else
                                   f"{fmt(r.get('bubble_fraction'), '.3f')} "
                                   f"({fmt(r.get('bubble_formula'), '.3f')})"),
                                  *TRAIN_COLUMNS[2:]]
PIPELINE_COLUMNS: list[Column] = [
    *TRAIN_COLUMNS[:1], ("micro-batches", _num("micro_batches", ".0f")),
    ("global batch", _num("global_batch", ".0f")),
    ("bubble [95% CI over steps]", lambda r: "–" if r.get("bubble_fraction") is None else
     f"{fmt(r.get('bubble_fraction'), '.3f')} [{fmt(r.get('bubble_ci_low'), '.3f')}, "
     f"{fmt(r.get('bubble_ci_high'), '.3f')}]"),
    ("(p-1)/(m+p-1)", _num("bubble_formula", ".3f")),
    ("bound of the stages' costs", _num("bubble_of_stage_costs", ".3f")),
    ("step ms", _num("median_step_ms", ".1f")), ("CV", _cv),
    ("tokens/s", _num("tokens_per_s", ".0f")),
    ("gate: loss rel diff", _num("gate_max_rel_diff", ".1e")),
]
LOSS_COLUMNS: list[Column] = [*TRAIN_COLUMNS[:6], ("lr", _num("lr", "g")),
                              ("tokens", _num("tokens_seen", ".0f")),
                              ("train loss first→last", TRAIN_COLUMNS[-2][1]),
                              ("held-out loss", _num("eval_loss", ".4f"))]
WINDOW_COLUMNS: list[Column] = [
    ("system", lambda r: str(r["system"])), ("seq", _num("seq_len", ".0f")),
    ("window", _num("window", ".0f")),
    ("heads x dim", lambda r: f"{fmt(r.get('heads'), '.0f')} x {fmt(r.get('head_dim'), '.0f')}"),
    ("dtype", lambda r: str(r.get("dtype"))), ("fwd+bwd ms", _num("median_ms", ".1f")),
    ("95% CI ms", _range("ci_low_ms", "ci_high_ms", ".1f")), ("CV", _cv),
    ("n", _num("n_samples", ".0f")), ("time vs causal", _num("time_vs_causal", ".3f")),
    ("95% CI", _range("time_vs_causal_ci_low", "time_vs_causal_ci_high", ".3f")),
    ("band / causal triangle", _num("band_fraction", ".3f")),
    ("gate: max rel err", _num("gate_max_rel_err", ".1e")),
]

def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _slowed_named(r: dict[str, Any]) -> str:
    if r.get("group") != "straggler":
        return "–"
    slowed = "none" if _missing(r.get("slowed")) else f"rank {int(r['slowed'])}"
    return f"{slowed} / {r.get('named') or 'none'}"


RESILIENCE_COLUMNS: list[Column] = [
    ("trainer", lambda r: str(r.get("trainer"))), ("system", lambda r: str(r["label"])),
    ("stall s", _num("stall_s", ".3f")), ("first stall s", _num("first_stall_s", ".3f")),
    ("persist s", _num("persist_s", ".3f")),
    ("state GiB", lambda r: "–" if _missing(r.get("state_bytes")) else
     f"{r['state_bytes'] / 2**30:.2f}"),
    ("restore s", _num("restore_s", ".2f")), ("detect s", _num("detect_s", ".2f")),
    ("detected by", lambda r: "–" if _missing(r.get("detected_by")) else str(r["detected_by"])),
    ("agent shutdown s", _num("shutdown_s", ".1f")), ("start-up s", _num("startup_s", ".1f")),
    ("fault to training s", _num("downtime_s", ".1f")),
    ("steps redone", _num("steps_redone", ".0f")),
    ("losses bit-exact", lambda r: "–" if _missing(r.get("bit_exact")) else str(r["bit_exact"])),
    ("slowed / named", _slowed_named), ("throughput lost", _num("throughput_lost", ".2f")),
    ("left behind", _num("leftovers", ".0f")),
]


def _ci(key: str, spec: str) -> Callable[[dict[str, Any]], str]:
    """``mean [low, high]`` of a mean-over-seeds column."""
    return lambda r: ("–" if r.get(key) is None else
                      f"{fmt(r.get(key), spec)} [{fmt(r.get(key + '_ci_low'), spec)}, "
                      f"{fmt(r.get(key + '_ci_high'), spec)}]")


def _pct(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: "–" if r.get(key) is None else f"{100 * r[key]:+.0f}%"


VWN_COLUMNS: list[Column] = [
    ("variant", lambda r: f"r = {r['r']:g} (m={r['m']:.0f}, n={r['n']:.0f})"),
    ("series", lambda r: str(r.get("series"))), ("seeds", _num("seeds", ".0f")),
    ("tokens", _num("tokens", ".0f")),
    ("next-token loss [95% CI]", _ci("next_token", ".4f")),
    ("next-2-token loss", _ci("next_2_token", ".4f")),
    ("next-token drop vs r=1", _ci("gap_next_token", "+.4f")),
    ("next-2-token drop", _ci("gap_next_2_token", "+.4f")),
    ("S(T) next-token", _ci("s_next_token", ".2f")),
    ("S(T) next-2-token", _ci("s_next_2_token", ".2f")),
    ("params", lambda r: f"{r['n_params'] / 1e3:.0f}k" if r.get("n_params") else "–"),
    ("params vs r=1", _pct("params_overhead")), ("FLOPs/token vs r=1", _pct("flops_overhead")),
    ("step ms", _num("step_ms", ".1f")), ("time vs r=1", _pct("time_overhead")),
]
PMA_COLUMNS: list[Column] = [
    ("method", lambda r: str(r["method"]).upper()), ("N", _num("n", ".0f")),
    ("V (steps)", _num("interval_steps", ".0f")), ("at step", _num("step", ".0f")),
    ("seeds", _num("seeds", ".0f")), ("latest loss", _num("latest", ".4f")),
    ("merged loss", _num("merged", ".4f")), ("gain (latest - merged)", _ci("gain", "+.4f")),
]
SERVING_COLUMNS: list[Column] = [
    ("system", lambda r: str(r["system"])), ("repeat", _num("repeat", ".0f")),
    ("scenario", lambda r: str(r.get("scenario") or r.get("status"))),
    ("LoadGen", lambda r: "–" if r.get("valid") is None else
     ("VALID" if str(r["valid"]).lower() == "true" else
      f"INVALID ({r.get('loadgen_reasons') or '?'})")),
    ("samples/s", _num("samples_per_s", ".1f")), ("max VALID QPS", _num("max_valid_qps", ".1f")),
    ("p50 ms", _num("p50_ms", ".1f")), ("p90 ms", _num("p90_ms", ".1f")),
    ("p99 ms", _num("p99_ms", ".1f")), ("p99 bound ms", _num("latency_bound_ms", ".0f")),
    ("mean batch", _num("mean_batch", ".1f")),
    ("tokens computed / valid", _num("computed_per_real", ".2f")),
    ("LoadGen runs", _num("trials", ".0f")), ("max abs err", _num("max_abs_err", ".1e")),
]
LAYOUTS: dict[str, list[Column]] = {"bert": BERT_COLUMNS, "train": TRAIN_COLUMNS,
                                    "ablation": ABLATION_COLUMNS, "loss": LOSS_COLUMNS,
                                    "window": WINDOW_COLUMNS, "pipeline": PIPELINE_COLUMNS,
                                    "resilience": RESILIENCE_COLUMNS,
                                    "scale": SCALE_COLUMNS, "vwn": VWN_COLUMNS,
                                    "pma": PMA_COLUMNS, "serving": SERVING_COLUMNS}


def fmt(value: Any, spec: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value, spec)
