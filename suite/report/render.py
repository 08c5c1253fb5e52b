"""Tidy table + figures -> a self-contained HTML page (figures inlined, so one file publishes).

The report reads what the runs wrote; it never runs a model.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Callable
from typing import Any

import jinja2
import pandas as pd

from suite.correctness import REFERENCE, TOLERANCE
from suite.peak.schema import read_peak
from suite.records import read_record

TEMPLATES = Path(__file__).parent / "templates"


NOTES = {
    "bert_varlen": "Left: latency here. Middle: speedup of the padding-free reference over the "
                   "padded baseline, with its 95% CI, the FLOP bounds, and the paper's "
                   "ByteTransformer-over-PyTorch speedup from the ByteTransformer README (A100, "
                   "fp16: another machine and precision, shown for shape, not for equality). "
                   "Right: the paper's latencies.",
    "bert_fixed": "Every sequence of the batch at the full length: there is no padding, so a "
                  "padding-free system has nothing to skip. Its speedup here is what its kernels "
                  "and fusion give alone; the difference from the variable-length figure at the "
                  "same point is what removing padding gives.",
    "llm_scale": "An analytical model of 3D-parallel training (compute at a fitted GEMM efficiency, "
                 "the interleaved pipeline bubble (p-1)/(v m), TP/PP/DP communication over "
                 "NVLink and the network with each system's overlap), calibrated on one Table 2 "
                 "row per system (ringed); every other point is a prediction. Assumptions: "
                 "suite/scale_model.py. The model is optimistic at scale: it misses part of the "
                 "MFU drop the paper reports (stragglers, imperfect overlap, network contention "
                 "are not in it).",
    "llm_mfu": "GPT training runs of reference_impl.gpt under the engines, each checked first "
               "against a single-process run of the same global batches (losses and gradient "
               "norms). MFU = tokens/s x model FLOPs per token (matmuls, forward + backward, no "
               "recompute; the formula is in each record) / the peak: on a CPU the machine's "
               "measured matmul peak at the threads all ranks use counts as one device; on GPUs "
               "the per-GPU peak x GPUs. Warm-up steps are left out.",
    "llm_engines": "The same model and global batch under each engine (2 processes, gloo on a "
                   "CPU, NCCL on GPUs); FSDP2 with and without explicit prefetch, DeepSpeed ZeRO "
                   "stages 1-3 with the same AdamW.",
    "llm_ablation": "MegaScale's Table 3 ladder run here, each step keeping the previous ones. "
                    "MFU is taken at the baseline's FLOP count (tokens/s x step 0's FLOPs per "
                    "token), as a ladder of throughput; the paper's 175B model on 256 A100s gains "
                    "from overlap and kernels that a 2-core CPU cannot show.",
    "llm_loss": "Loss sanity on the King James Bible (bytes): AdamW at the base batch against "
                "LAMB at a larger batch with the same tokens (fewer steps), held-out loss on the "
                "last 5% of the text.",
    "vwn_scaling": "reference_impl.vwn: one backbone (train.model) trained at each expansion "
                   "r = n/m with dynamic GHCs and the next-2-token module, byte-level King James "
                   "text, constant LR after warm-up, the same held-out windows for every run. "
                   "The r = 1 baseline has the GHCs frozen at the identity (a plain residual "
                   "transformer with the same output path and MTP module) and trains longer so "
                   "that S(T) can be read off its curve. Losses compare at the wide runs' token "
                   "count, paired by seed. The paper's numbers are an A0.8B-A3.3B MoE after "
                   "hundreds of billions of tokens: compare directions, not sizes.",
    "pma_merging": "reference_impl.merging on the checkpoints of one constant-LR GPT run per "
                   "seed, saved every V0 steps: SMA, EMA and WMA of N checkpoints V apart, at "
                   "several points of training; forks that decay the LR to 0 over the last "
                   "steps (annealed models at the same tokens as the merges) and merging inside "
                   "them; a loss spike caused by a raised LR, then resumed from the SMA of the "
                   "pre-spike checkpoints, from the last one, and from the spiked weights. Loss is held-out next-token loss; the "
                   "paper reports downstream accuracy of MoE models.",
    "bert_ablation": "The reference with the paper's optimizations switched on one after "
                     "another; speedups are over step 0 (padded, unfused). On CPU the fused "
                     "epilogues run as PyTorch ops (the Triton kernels need CUDA), so those two "
                     "steps are expected to change little here. Steps 0-4 run their linear layers "
                     "on F.linear (MKL in x86 wheels); the last step moves them to oneDNN with "
                     "weights prepacked once and bias+GELU / bias+residual fused as post-ops "
                     "(on CPU; on GPUs it equals the step before).",
    "bert_variants": "Each family at BERT-base size, padded HF eager against the padding-free "
                     "reference; speedups over the padded HF model.",
    "bert_mha": "Attention alone on BERT-base-shaped Q/K/V (12 heads x 64): varlen attention on "
                "the packed tokens and padded SDPA, against the padded matmul + mask + softmax + "
                "matmul the paper calls PyTorch. The paper's 6.13x is A100 fp16 with a fused "
                "CUDA kernel.",
    "bert_fused_ops": "The two element-wise epilogues ByteTransformer fuses, on the packed "
                      "tokens. LayerNorm is memory-bound: its figure is GB/s of least traffic.",
}


def render_report(sections: list[tuple[str, Path, Path]], out: Path, *,
                  peak_path: Path | None = None, config_path: Path | None = None,
                  claims_path: Path | None = None,
                  section_claims: dict[str, Path] | None = None) -> Path:
    """One section per (experiment, tidy table, figure SVG), the paper's claims beside what was
    measured, and every run that failed, was incorrect or unavailable. ``section_claims``: a
    measured claims table (``suite.analysis.verdicts`` columns) shown in that section."""
    from suite.analysis.claims import claims_table
    from suite.experiments import EXPERIMENTS

    frames = {exp: pd.read_csv(table) for exp, table, _ in sections}
    claims = (claims_table(pd.read_csv(claims_path), frames.get("bert_varlen"),
                           frames.get("bert_mha")) if claims_path else None)
    df = pd.concat(frames.values(), ignore_index=True)
    for column in ("machine", "git_commit", "config_hash", "record", "reason", "subject",
                   "batch_size", "max_seq_len"):  # absent from tables that come from no record
        if column not in df:
            df[column] = None
    first = _first_record(df)
    env = first.env if first else {}
    timing = first.timing if first and first.timing else {}
    context = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "env": env,
        "machines": sorted(df.machine.dropna().unique()),
        "commits": sorted({f"{c[:12]}" for c in df.git_commit.dropna().unique()}),
        "dirty": bool(env.get("git", {}).get("dirty")),
        "config_text": Path(config_path).read_text() if config_path else None,
        "config_hashes": sorted(df.config_hash.dropna().unique()),
        "timing": timing,
        "peak": read_peak(peak_path),
        "reference": REFERENCE,
        "tolerance": TOLERANCE,
        "sections": [{"id": exp, "title": EXPERIMENTS.get(exp, exp), "note": NOTES.get(exp, ""),
                      "figure_svg": _strip_xml_header(Path(svg).read_text()),
                      "summary": SUMMARIES[exp](frames[exp]) if exp in SUMMARIES else "",
                      "claims": _claims_rows((section_claims or {}).get(exp)),
                      **section_table(exp, frames[exp])}
                     for exp, _, svg in sections],
        "problems": [_clean(r) for r in df[df.status != "ok"].to_dict("records")],
        "claims": [] if claims is None else [_clean(r) for r in claims.to_dict("records")],
        "counts": df.status.value_counts().to_dict(),
    }
    env_j = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                               autoescape=jinja2.select_autoescape(["html", "j2"]),
                               undefined=jinja2.StrictUndefined)
    env_j.filters["fmt"] = _fmt
    html = env_j.get_template("index.html.j2").render(**context)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    return out


# A section's table: (header, cell of a row) per column; experiments not listed get BERT_COLUMNS.
Column = tuple[str, Callable[[dict[str, Any]], str]]


def _num(key: str, spec: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: _fmt(r.get(key), spec)


def _range(low: str, high: str, spec: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: ("–" if r.get(low) is None else
                      f"{_fmt(r.get(low), spec)}–{_fmt(r.get(high), spec)}")


BERT_COLUMNS: list[Column] = [
    ("system", lambda r: r["baseline"] + (f" ({r['step']})" if r.get("step") else "")),
    ("subject", lambda r: str(r.get("subject"))),
    ("batch", _num("batch_size", ".0f")), ("max len", _num("max_seq_len", ".0f")),
    ("tokens", _num("total_tokens", ".0f")), ("median ms", _num("median_ms", ".2f")),
    ("95% CI ms", _range("ci_low_ms", "ci_high_ms", ".2f")), ("IQR ms", _num("iqr_ms", ".2f")),
    ("CV", _num("cv", ".2f")), ("n", _num("n_samples", ".0f")),
    ("speedup", _num("speedup_vs_padded", ".2f")),
    ("speedup 95% CI", _range("speedup_ci_low", "speedup_ci_high", ".2f")),
    ("GEMM bound", _num("gemm_flop_bound", ".2f")),
    ("attn bound", _num("attention_flop_bound", ".2f")),
    ("% of GEMM bound", _num("pct_of_gemm_bound", ".0f")),
    ("tokens/s", _num("tokens_per_s", ".0f")),
    ("useful GFLOP/s", _num("useful_gflops_per_s", ".1f")),
    ("% of measured peak", _num("pct_of_measured_peak", ".1f")),
    ("peak it divides by", lambda r: "–" if r.get("measured_peak_library") is None else
     f"{r['measured_peak_library']} {_fmt(r.get('measured_peak_gflops_per_s'), '.0f')} GFLOP/s"),
    ("% of theoretical", _num("pct_of_theoretical_peak", ".1f")),
    ("GEMMs ran on", lambda r: str(r.get("gemm_library") or "–")),
    ("GB/s", _num("min_gbytes_per_s", ".1f")), ("max abs err", _num("max_abs_err", ".1e")),
]
SCALE_COLUMNS: list[Column] = [
    ("system", lambda r: r["system"]),
    ("figure", lambda r: {"table2": "Table 2 (175B)", "fig9": "Fig. 9 (530B)"}[r["figure"]]),
    ("GPUs", _num("gpus", ".0f")), ("batch", _num("batch_size", ".0f")),
    ("paper s/iter", _num("paper_iteration_time_s", ".2f")),
    ("model s/iter", _num("predicted_iteration_time_s", ".2f")),
    ("time error", lambda r: _fmt(100 * r["iteration_time_rel_error"]
                                  if r.get("iteration_time_rel_error") is not None else None,
                                  "+.1f") + "%"),
    ("paper MFU %", _num("paper_mfu_percent", ".1f")),
    ("model MFU %", _num("predicted_mfu_percent", ".1f")),
    ("MFU error (points)", _num("mfu_error_points", "+.1f")),
    ("bubble s", _num("bubble_s", ".2f")), ("exposed comm s", _num("exposed_comm_s", ".2f")),
    ("calibration row", lambda r: "yes" if r.get("calibration") else ""),
]
TRAIN_COLUMNS: list[Column] = [
    ("engine", lambda r: f"{r['baseline']} x{r['world_size']}"),
    ("run", lambda r: r.get("technique") or r["label"]),
    ("model", lambda r: f"{r['model']} ({r['n_params'] / 1e6:.1f}M)"),
    ("seq", _num("seq_len", ".0f")), ("global batch", _num("global_batch", ".0f")),
    ("optimizer", lambda r: str(r.get("optimizer"))),
    ("step ms", _num("median_step_ms", ".1f")), ("95% CI ms", _range("ci_low_ms", "ci_high_ms", ".1f")),
    ("CV", _num("cv", ".2f")), ("n", _num("n_samples", ".0f")),
    ("tokens/s", _num("tokens_per_s", ".0f")), ("MFU %", _num("mfu_percent", ".1f")),
    ("HFU %", _num("hfu_percent", ".1f")),
    ("MFU/HFU peak", lambda r: str(r.get("peak_source") or "–")), ("peak MiB (rank 0)", _num("peak_mem_mb", ".0f")),
    ("loss first→last", lambda r: f"{_fmt(r.get('first_loss'), '.3f')}→"
                                  f"{_fmt(r.get('final_loss'), '.3f')}"),
    ("gate: loss rel diff", _num("gate_max_rel_diff", ".1e")),
]
ABLATION_COLUMNS: list[Column] = [*TRAIN_COLUMNS[:2], ("MFU % at baseline FLOPs",
                                                        _num("mfu_fixed_percent", ".1f")),
                                  ("paper rows", lambda r: str(r.get("paper_steps") or "–")),
                                  *TRAIN_COLUMNS[2:]]
LOSS_COLUMNS: list[Column] = [*TRAIN_COLUMNS[:6], ("lr", _num("lr", "g")),
                              ("tokens", _num("tokens_seen", ".0f")),
                              ("train loss first→last", TRAIN_COLUMNS[-2][1]),
                              ("held-out loss", _num("eval_loss", ".4f"))]
def _ci(key: str, spec: str) -> Callable[[dict[str, Any]], str]:
    """``mean [low, high]`` of a mean-over-seeds column."""
    return lambda r: ("–" if r.get(key) is None else
                      f"{_fmt(r.get(key), spec)} [{_fmt(r.get(key + '_ci_low'), spec)}, "
                      f"{_fmt(r.get(key + '_ci_high'), spec)}]")


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
COLUMNS: dict[str, list[Column]] = {"vwn_scaling": VWN_COLUMNS, "pma_merging": PMA_COLUMNS,
                                    "llm_scale": SCALE_COLUMNS, "llm_mfu": TRAIN_COLUMNS,
                                    "llm_engines": TRAIN_COLUMNS,
                                    "llm_ablation": ABLATION_COLUMNS, "llm_loss": LOSS_COLUMNS}


def _scale_summary(table: pd.DataFrame) -> str:
    """The model's error on the rows it was not fitted to, per system and figure."""
    held = table[~table.calibration.astype(bool)]
    parts = []
    for (figure, system), g in held.groupby(["figure", "system"], sort=False):
        time = g.iteration_time_rel_error.abs().mean()
        part = f"{system}, {'Table 2' if figure == 'table2' else 'Fig. 9'} ({len(g)} points): "
        if pd.notna(time):
            part += f"iteration time off by {100 * time:.1f}% on average, "
        part += f"MFU by {g.mfu_error_points.abs().mean():.1f} points"
        parts.append(part)
    return "Held-out error: " + "; ".join(parts) + "."


def _ablation_summary(table: pd.DataFrame) -> str:
    from suite.analysis.llm_tables import ablation_vs_paper
    from suite.env import REPO_ROOT

    paper = pd.read_csv(REPO_ROOT / "results/paper/megascale_table3_ablation_175b_256gpu.csv")
    rows = ablation_vs_paper(table, paper)
    parts = [f"{r.technique}: {r.gain_points:+.1f} points here"
             + ("" if pd.isna(r.paper_gain_points) else f" vs {r.paper_gain_points:+.1f} in the paper")
             for r in rows.itertuples() if pd.notna(r.gain_points)]
    return "Gain of each step in MFU points: " + "; ".join(parts) + "." if parts else ""


def _loss_summary(table: pd.DataFrame) -> str:
    ok = table[(table.status == "ok") & table.eval_loss.notna()]
    if len(ok) < 2:
        return ""
    adamw, lamb = ok[ok.optimizer == "adamw"], ok[ok.optimizer == "lamb"]
    if adamw.empty or lamb.empty:
        return ""
    a, b = adamw.iloc[0], lamb.iloc[0]
    verdict = ("reaches" if b.eval_loss <= a.eval_loss else "does not reach")
    return (f"At {int(b.tokens_seen)} tokens, LAMB with batch {int(b.global_batch)} "
            f"{verdict} the held-out loss of AdamW with batch {int(a.global_batch)} "
            f"({b.eval_loss:.4f} vs {a.eval_loss:.4f} at {int(a.tokens_seen)} tokens); both "
            f"start near ln(256) = 5.545.")


def _vwn_summary(table: pd.DataFrame) -> str:
    ok = table[(table.status == "ok") & (table.series == "main")].sort_values("r")
    wide = ok[ok.r > 1]
    if wide.empty:
        return ""
    w = wide.iloc[-1]
    return (f"At {int(w.tokens)} tokens, the widest model (r = {w.r:g}) is "
            f"{w.gap_next_token:+.4f} [{w.gap_next_token_ci_low:+.4f}, "
            f"{w.gap_next_token_ci_high:+.4f}] nats below the r = 1 baseline in next-token loss "
            f"and {w.gap_next_2_token:+.4f} [{w.gap_next_2_token_ci_low:+.4f}, "
            f"{w.gap_next_2_token_ci_high:+.4f}] in next-2-token loss (mean of {int(w.seeds)} "
            f"seeds, 95% t-interval), at {100 * w.time_overhead:+.0f}% step time.")


def _pma_summary(table: pd.DataFrame) -> str:
    ok = table[table.status == "ok"]
    if ok.empty:
        return ""
    best = ok.sort_values("gain", ascending=False).iloc[0]
    helps = int((ok.gain_ci_low > 0).sum())
    return (f"At step {int(best.step)}, {helps} of {len(ok)} merge settings beat the latest "
            f"checkpoint with a 95% interval above 0; the best, {best.method.upper()} of "
            f"N = {int(best.n)} every {int(best.interval_steps)} steps, by {best.gain:+.4f} "
            f"nats (chosen after the fact: the claims table uses the setting fixed before the "
            f"run).")


SUMMARIES: dict[str, Callable[[pd.DataFrame], str]] = {
    "llm_scale": _scale_summary, "llm_ablation": _ablation_summary, "llm_loss": _loss_summary,
    "vwn_scaling": _vwn_summary, "pma_merging": _pma_summary}


def section_table(experiment: str, table: pd.DataFrame) -> dict[str, Any]:
    """Header and formatted cells of the successful rows of one experiment's tidy table (the
    first column left-aligned as a label)."""
    columns = COLUMNS.get(experiment, BERT_COLUMNS)
    rows = [_clean(r) for r in table[table.status == "ok"].to_dict("records")]
    return {"header": [name for name, _ in columns],
            "cells": [[cell(r) for _, cell in columns] for r in rows]}


def _claims_rows(path: Path | None) -> list[dict[str, Any]]:
    if path is None:
        return []
    table = pd.read_csv(path)
    return [_clean(r) for r in table.to_dict("records")]


def _first_record(df: pd.DataFrame):
    for path in df.sort_values("status", key=lambda s: s != "ok").record.dropna():
        if Path(path).exists():
            return read_record(path)
    return None


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def _fmt(value: Any, spec: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value, spec)
