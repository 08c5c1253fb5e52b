"""The scale model's peer: llm-analysis (PyPI 0.2.2, github.com/cli99/llm-analysis), which
predicts a training step's time from the same inputs, run on the same runs.

What it models (read in its analysis.py, 0.2.2): the step time is the FLOPs of a micro-batch
(forward, twice that backward, the recomputed forward) / (tp x pp x peak x flops_efficiency),
times the micro-batches per replica. Pipeline bubbles, DP / ZeRO / FSDP and PP communication
are ignored (its README says so); its TP communication and memory-bound terms are computed for
the forward breakdown but not added to the step time; it counts the MLP as 16 h^2 per token
whatever the FFN width or gating (only the efficiency changes its answer). It is run two ways:
with its defaults (every efficiency 1.0), and with ``flops_efficiency`` fitted on the same
declared rows as each system (the least-squares relative error, closed form: time is
proportional to 1 / efficiency). A run that timed one layer gets the same formula for one
layer (``layer_time``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from math import nan

import pandas as pd

from suite.scale.runs import Run

PEER = "llm-analysis 0.2.2"


@dataclass(frozen=True)
class PeerUnavailable:
    reason: str


def _import():
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.getLogger("__name__").setLevel(logging.ERROR)  # its logger's literal name
    from llm_analysis import analysis, config
    return analysis, config


def available() -> PeerUnavailable | None:
    """None when the peer imports; else why not."""
    try:
        _import()
    except Exception as e:  # noqa: BLE001 - any import failure makes the peer unavailable
        return PeerUnavailable(f"llm-analysis does not import: {type(e).__name__}: {e}")
    return None


def _analysis(run: Run, flops_efficiency: float):
    """(llm-analysis's LLMAnalysis of the run, its ``analysis`` module)."""
    analysis, config = _import()
    m, lay, hw = run.model, run.layout, run.hardware
    ffn = m.ffn_hidden
    model = config.ModelConfig(name=run.id, num_layers=m.layers, n_head=m.heads,
                               hidden_dim=m.hidden, vocab_size=m.vocab, max_seq_len=m.seq_len,
                               num_key_value_heads=m.kv_heads, ffn_embed_dim=ffn,
                               expansion_ratio=ffn / m.hidden)
    gpu = config.GPUConfig(name=hw.name, mem_per_GPU_in_GB=hw.hbm_bytes / 1e9,
                           hbm_bandwidth_in_GB_per_sec=hw.hbm_bw / 1e9,
                           intra_node_bandwidth_in_GB_per_sec=hw.nvlink_bw / 1e9,
                           intra_node_min_message_latency=hw.nvlink_latency_s,
                           peak_fp16_TFLOPS=hw.peak_flops / 1e12, peak_i8_TFLOPS=0,
                           peak_i4_TFLOPS=0,
                           inter_node_bandwidth_in_GB_per_sec=hw.network_bw * 8 / 1e9)
    parallel = config.ParallelismConfig(tp_size=lay.tp, pp_size=lay.pp, dp_size=lay.dp,
                                        sp_size=lay.tp if lay.sequence_parallel else 1)
    return analysis.LLMAnalysis(model, gpu, config.DtypeConfig(), parallel,
                                flops_efficiency=flops_efficiency), analysis


def step_time(run: Run, flops_efficiency: float = 1.0) -> float:
    """llm-analysis's training step time (``latency_per_iter``) for a run."""
    model_analysis, analysis = _analysis(run, flops_efficiency)
    m, lay = run.model, run.layout
    recompute = analysis.ActivationRecomputation[lay.recompute.upper()]
    zero = {"allreduce": "NONE", "zero1": "STAGE_1", "zero1_allreduce": "STAGE_1",
            "zero2": "STAGE_2", "fsdp": "STAGE_3", "fsdp2": "STAGE_3",
            "fsdp_grad_op": "STAGE_2"}
    summary = model_analysis.training(
        batch_size_per_gpu=lay.micro_batch, global_batch_size=lay.global_batch,
        seq_len=m.seq_len, activation_recomputation=recompute,
        ds_zero=analysis.DSZeRO[zero[lay.dp_mode]], layernorm_dtype_bytes=2,
        flash_attn=lay.tiled_attention, mlp_gated_linear_units=m.gated_mlp)
    return float(summary["latency_per_iter"])


def layer_time(run: Run, flops_efficiency: float = 1.0) -> float:
    """One layer's time by llm-analysis's own step formula (its training() divides a
    micro-batch's FLOPs, forward + twice that backward + the recomputed part, by the GPUs'
    FLOP/s), for one layer on its TP group: its per-layer forward FLOPs, x 3, plus its
    recompute count for that layer (full: the forward; selective: its 4 b s^2 h)."""
    model_analysis, _ = _analysis(run, flops_efficiency)
    b, s, lay = run.layout.micro_batch, run.model.seq_len, run.layout
    forward = model_analysis.get_num_flops_fwd_per_layer(b, s)
    recompute = {"none": 0, "full": forward,
                 "selective": model_analysis.get_num_flops_total_selective_recompute_attn(b, s)
                 / run.model.layers}[lay.recompute]
    return (3 * forward + recompute) / (lay.tp * model_analysis.get_TFLOPS_per_gpu() * 1e12)


def peer_time(run: Run, flops_efficiency: float = 1.0) -> float:
    """The peer's answer to what the run timed: its step, or one layer."""
    if run.timed == "layer":
        return layer_time(run, flops_efficiency)
    return step_time(run, flops_efficiency)


def fitted_efficiency(rows: list[tuple[Run, float]]) -> float:
    """The flops_efficiency minimising the rows' squared relative errors: with a_i = the time
    at efficiency 1 / the measured time, 1 / efficiency = sum(a) / sum(a^2), capped at 1."""
    a = [at_one / measured for (_, measured), at_one in
         zip(rows, (peer_time(run) for run, _ in rows))]
    return min(1.0, sum(x * x for x in a) / sum(a))


def predict(runs: list[Run], calibration: dict[str, tuple[tuple[str, str], ...]]
            ) -> pd.DataFrame:
    """Per run: the peer's time with its defaults and with the fitted efficiency (NaN columns
    and a reason when the peer cannot run here)."""
    missing = available()
    if missing is not None:
        return pd.DataFrame({"dataset": [r.dataset for r in runs],
                             "system": [r.system for r in runs],
                             "label": [r.id for r in runs],
                             "peer_default_time_s": nan, "peer_fitted_time_s": nan,
                             "peer_flops_efficiency": nan, "peer_unavailable": missing.reason})
    by_key = {(r.dataset, r.id, r.system): r for r in runs}
    efficiency = {}
    for system in {r.system for r in runs}:
        rows = [(by_key[(d, i, system)], by_key[(d, i, system)].measured_s)
                for d, i in calibration[system]]
        efficiency[system] = fitted_efficiency(rows)
    out = []
    for run in runs:
        default = peer_time(run)
        out.append({"dataset": run.dataset, "system": run.system, "label": run.id,
                    "peer_default_time_s": default,
                    "peer_fitted_time_s": default / efficiency[run.system],
                    "peer_flops_efficiency": efficiency[run.system], "peer_unavailable": ""})
    return pd.DataFrame(out)
