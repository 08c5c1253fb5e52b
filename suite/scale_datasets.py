"""Published training runs as inputs of the cluster-scale model (``suite.scale_model``), the rows
each system is fitted to, and the model's predictions of every other row.

Datasets (``results/paper/``, sources in SOURCES.md):
- ``megascale_table2``: MegaScale Table 2, 175B strong scaling, Megatron-LM and MegaScale,
  256-12288 GPUs at batch 768 and 6144; iteration times published.
- ``megascale_fig9``: MegaScale Figure 9, 530B weak scaling, MFU only; predicted with the
  numbers fitted on Table 2.
- ``narayanan2021``: Narayanan et al. 2021 Table 1, Megatron-LM on Selene (A100), 1.7B on 32 GPUs
  to 1T on 3072; iteration time = Eq. (3) FLOPs (full recompute) / aggregate PFLOP/s.
- ``megatron_h100``: the Megatron-LM README's H100 weak scaling (Megatron-Core r0.8.0, 1.7B on 48
  GPUs to 462B on 6144) and its GPT-3 175B strong-scaling endpoints (96 and 4608 GPUs, batch
  1152); iteration time = model FLOPs (no recompute, what MFU counts) / (GPUs x TFLOP/s),
  strong scaling from MFU.
- ``korthikanti2022``: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  Transformer Models") Table 5, Megatron-LM on Selene (A100), 22B on 8 GPUs to 1T on 512, each
  with full recompute and with the paper's selective recompute + sequence parallelism, no DP;
  and its Sec. 6.3 / abstract 530B runs at 8-way DP (2240 GPUs; the full-recompute one as MFU
  only, its time from that MFU).

Each run becomes a ``Run``: the model, the layout, the hardware preset and the published
iteration time and MFU. What a paper leaves unsaid is an assumption, declared here:
- MegaScale: TP 8, PP 8, v 6 for 175B, TP 8, PP 35, v 3 for 530B (its Table 1), micro-batch 1,
  DP = the rest; Megatron-LM overlaps nothing (MegaScale's Table 3 lists TP, PP and DP overlap
  as MegaScale's additions); MegaScale hides TP and PP fully and DP but one of v chunks.
  Figure 9's batch grows with the GPUs from 1920 sequences at 2240 (MT-NLG's batch on this
  layout, Smith et al. 2022). Gradients reduced in fp32.
- Narayanan 2021: micro-batch and layers per virtual stage from NVIDIA's reproduction script
  (examples/sc21/run_table_1.sh; rows without a virtual-stage flag run v = 1), full recompute
  of every layer (the script's uniform checkpointing of 1 layer; Eq. (3) counts it), no
  sequence parallelism (it came in 2022); the script's "torch" DDP overlaps the gradient
  all-reduce with the backward pass (dp_overlap 1, bounded by the window), its "local" DDP
  overlaps nothing; TP and PP not overlapped. Gradients reduced in fp16 (2 bytes): the script
  trains with --fp16 and does not set --accumulate-allreduce-grads-in-fp32 (off by default).
- Megatron README H100: the README states TP/PP/DP communication overlap (--tp-comm-overlap,
  --overlap-grad-reduce, --overlap-param-gather, PP overlap by default): overlaps 1 (DP bounded
  by its window); micro-batch 1, sequence parallelism where TP > 1 and no recompute (not
  stated; Megatron-Core's defaults); gradients reduced in fp32; untied embeddings (what its
  parameter counts imply, counted as the model's); NDR 400 Gb/s per GPU. The strong-scaling
  runs keep the 177B weak-scaling row's TP 8 and PP 6 (DP = GPUs / 48).
  Interleaving: with PP > 1, one layer per virtual stage (v = layers / pp). The README's "PP
  overlap enabled by default" exists only in the interleaved schedule (core_r0.8.0
  megatron/training/arguments.py turns overlap_p2p_comm off without
  --num-layers-per-virtual-pipeline-stage), and one layer is the only interleaving the 119B
  and 462B stages (23 and 7 layers) admit; every weak-scaling batch gives m = 4p, a multiple of
  the stages as r0.8's interleaved schedule requires. This replaced the first version's v = 1
  after the first comparison (v = 1 contradicts the README's PP overlap); the calibration rows
  stayed as declared.
- Korthikanti 2022 (a fifth dataset, added in the fourth round; the assumptions below were
  written before its predictions were computed with them): the layouts, micro-batches, batches
  and v = 3 for 175B and 530B are the paper's (Table 3, Sec. 6); 22B has no pipeline and the
  paper names interleaving for 175B and 530B only, so 1T runs v = 1. "Full recompute" is
  without sequence parallelism, "present work" selective recompute with it (Sec. 6.3). TP:
  the backward's collectives hide under the gradient GEMMs (``System.tp_backward_only``), the
  forward's and the recomputed forward's do not; PP not overlapped (overlapped P2P came with
  Megatron-Core); the DP all-reduce of the 2240-GPU runs not overlapped (the paper says so);
  no distributed optimizer (it came after the paper); no flash attention (Megatron's fused
  softmax then); tied embeddings (GPT's default). Precision: "mixed" in the paper; the model
  assumes bf16, whose gradients Megatron accumulates and reduces in fp32 (4 bytes; fp16
  would halve the 2240-GPU runs' DP bytes). A previous round predicted the "present work"
  rows once with v = 1 for every model (8-16% too slow, the excess all bubble), before the
  paper's text on v was read; that run was not kept, and nothing here was changed after this
  round's comparison.

Calibration (``CALIBRATION``): per system, the two runs with the fewest GPUs of its first
dataset (for the MegaScale systems: the smallest GPU count of each Table 2 batch size), declared
with the model before its predictions were compared; every other run is a prediction. The
MegaScale pairs are one model at two scales and fit both numbers; the Narayanan and H100 pairs
are two models, which fit the efficiency alone (``fit_system``; until the second round the
Narayanan pair also fitted a straggler, from the 1.7B/3.6B difference). Korthikanti 2022's pair
is its smallest model with each method (8 GPUs, one node): the efficiency alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import nan
from pathlib import Path

import pandas as pd

from suite.experiments import registry
from suite.scale_model import (
    ALL_TERMS,
    HARDWARE,
    Hardware,
    Layout,
    ModelConfig,
    Terms,
    estimate,
    fit_system,
    tp_collectives_per_layer,
)

PAPER_ROLES = registry.get("llm_scale").paper  # role -> CSV under results/paper/

GPT_175B = ModelConfig(layers=96, hidden=12288, heads=128, seq_len=2048, vocab=64000)
GPT_530B = ModelConfig(layers=105, hidden=20480, heads=160, seq_len=2048, vocab=64000)
FIG9_BASE_BATCH, FIG9_BASE_GPUS = 1920, 2240


@dataclass(frozen=True)
class System:
    """A training system as the model sees it: what it hides behind compute (fractions of each
    communication kind), whether its attention is flash (scores never in HBM), its hardware."""
    hardware: str
    tp: float = 0.0
    pp: float = 0.0
    dp: float = 0.0
    dp_all_but_one_chunk: bool = False  # MegaScale: DP of v-1 of the v chunks hidden
    tp_backward_only: bool = False  # the backward's 2 TP collectives per layer hidden, no other
    flash_attention: bool = False
    distributed_optimizer: bool = False

    def dp_for(self, virtual_stages: int) -> float:
        return 1 - 1 / virtual_stages if self.dp_all_but_one_chunk else self.dp

    def tp_for(self, recompute: str) -> float:
        """Hidden fraction of the TP traffic: with ``tp_backward_only`` the backward's 2 of the
        4 collectives per layer (of 6 under full recompute, whose recomputed forward's 2 wait)."""
        if not self.tp_backward_only:
            return self.tp
        return 2 / tp_collectives_per_layer(recompute)


SYSTEMS: dict[str, System] = {
    "Megatron-LM": System("A100"),
    # MegaScale Sec. 3.3 and Table 3: TP/PP/DP overlap, FlashAttention-2
    "MegaScale": System("A100", tp=1.0, pp=1.0, dp_all_but_one_chunk=True,
                        flash_attention=True),
    "Megatron-LM 2021 (Selene)": System("A100"),
    # 2022 code (Korthikanti et al.): the column-parallel linear's backward runs its TP
    # all-reduce (with sequence parallelism: all-gather, then reduce-scatter) asynchronously
    # under the input- and weight-gradient GEMMs (Sec. 6.2; megatron/mpu/layers.py,
    # LinearWithGradAccumulationAndAsyncCommunication, at commit 7f9a48ba8f); nothing else
    "Megatron-LM 2022 (Selene)": System("A100", tp_backward_only=True),
    # the README: --tp-comm-overlap, --overlap-grad-reduce/--overlap-param-gather, PP overlap;
    # Transformer Engine's fused (flash) attention
    # (--overlap-param-gather exists only with the distributed optimizer)
    "Megatron-Core r0.8 (H100)": System("H100", tp=1.0, pp=1.0, dp=1.0, flash_attention=True,
                                        distributed_optimizer=True),
}
# Runs each system's two numbers are fitted to (dataset, label), declared before comparing.
CALIBRATION: dict[str, tuple[tuple[str, str], ...]] = {
    "Megatron-LM": (("megascale_table2", "175B b768 256 GPUs"),
                    ("megascale_table2", "175B b6144 3072 GPUs")),
    "MegaScale": (("megascale_table2", "175B b768 256 GPUs"),
                  ("megascale_table2", "175B b6144 3072 GPUs")),
    "Megatron-LM 2021 (Selene)": (("narayanan2021", "1.7B 32 GPUs"),
                                  ("narayanan2021", "3.6B 64 GPUs")),
    "Megatron-LM 2022 (Selene)": (("korthikanti2022", "22B 8 GPUs, full recompute"),
                                  ("korthikanti2022", "22B 8 GPUs, present work")),
    "Megatron-Core r0.8 (H100)": (("megatron_h100", "1.7B 48 GPUs"),
                                  ("megatron_h100", "7.1B 96 GPUs")),
}


@dataclass(frozen=True)
class Run:
    """One published run as the model's inputs, and what was published about it."""
    dataset: str
    system: str
    label: str
    model: ModelConfig
    layout: Layout
    iteration_time_s: float | None
    mfu_percent: float | None

    @property
    def gpus(self) -> int:
        return self.layout.gpus


def system_layout(system: str, gpus: int, batch: int, tp: int, pp: int, v: int = 1,
                  micro_batch: int = 1, **kw) -> Layout:
    """A layout as ``system`` runs it: its overlaps, attention and optimizer, DP = the rest of
    the GPUs; ``kw`` sets any other ``Layout`` field or overrides the system's."""
    spec = SYSTEMS[system]
    if gpus % (tp * pp):
        raise ValueError(f"gpus={gpus} is not a multiple of tp * pp = {tp * pp}")
    settings = {"tp_overlap": spec.tp_for(kw.get("recompute", "none")), "pp_overlap": spec.pp,
                "dp_overlap": spec.dp_for(v), "flash_attention": spec.flash_attention,
                "distributed_optimizer": spec.distributed_optimizer}
    return Layout(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=micro_batch,
                  global_batch=batch, virtual_stages=v, **{**settings, **kw})


def _time_from_mfu(model: ModelConfig, batch: int, gpus: int, peak_flops: float,
                   mfu_percent: float) -> float:
    """The iteration time at which the model FLOPs (no recompute, what MFU counts) of a batch
    run at ``mfu_percent`` of the GPUs' peak: for runs published as MFU only."""
    return (model.flops_per_token * batch * model.seq_len
            / (gpus * peak_flops * mfu_percent / 100))


def megascale_runs(table2: pd.DataFrame, fig9: pd.DataFrame) -> list[Run]:
    runs = [Run("megascale_table2", r.system, f"175B b{r.batch_size} {r.gpus} GPUs", GPT_175B,
                system_layout(r.system, int(r.gpus), int(r.batch_size), 8, 8, 6),
                float(r.iteration_time_s), float(r.mfu_percent))
            for r in table2.itertuples(index=False)]
    for r in fig9.itertuples(index=False):
        if (FIG9_BASE_BATCH * r.gpus) % FIG9_BASE_GPUS:
            raise ValueError(f"gpus={r.gpus}: {FIG9_BASE_BATCH} x gpus / {FIG9_BASE_GPUS} is "
                             "not a whole batch")
        batch = FIG9_BASE_BATCH * int(r.gpus) // FIG9_BASE_GPUS
        runs.append(Run("megascale_fig9", r.system, f"530B b{batch} {r.gpus} GPUs", GPT_530B,
                        system_layout(r.system, int(r.gpus), batch, 8, 35, 3), None,
                        float(r.mfu_percent)))
    return runs


def narayanan_runs(table: pd.DataFrame) -> list[Run]:
    system = "Megatron-LM 2021 (Selene)"
    runs = []
    for r in table.itertuples(index=False):
        model = ModelConfig(layers=int(r.num_layers), hidden=int(r.hidden_size),
                            heads=int(r.attention_heads), seq_len=int(r.seq_length),
                            vocab=int(r.vocab_size))
        pp = int(r.pp)
        per_stage = model.layers // pp
        v = per_stage // int(r.layers_per_virtual_stage) \
            if pd.notna(r.layers_per_virtual_stage) else 1
        overlap = 1.0 if r.ddp_impl == "torch" else 0.0
        layout = system_layout(system, int(r.gpus), int(r.batch_size), int(r.tp), pp, v,
                               int(r.micro_batch_size), recompute="full", grad_bytes=2,
                               dp_overlap=overlap)
        # Eq. (3) counts the recompute: iteration time = those FLOPs / the aggregate rate
        flops = model.hardware_flops_per_token("full") * int(r.batch_size) * model.seq_len
        runs.append(Run("narayanan2021", system, f"{r.params_billion}B {r.gpus} GPUs", model,
                        layout, flops / (float(r.aggregate_pflops) * 1e15), None))
    return runs


def h100_runs(table: pd.DataFrame) -> list[Run]:
    system = "Megatron-Core r0.8 (H100)"
    peak = HARDWARE["H100"].peak_flops
    weak = table[table.experiment == "weak_scaling"]
    runs = []
    shapes = {}
    for r in weak.itertuples(index=False):
        model = ModelConfig(layers=int(r.num_layers), hidden=int(r.hidden_size),
                            heads=int(r.attention_heads), seq_len=int(r.seq_length),
                            vocab=int(r.vocab_size), tied_embeddings=False)
        shapes[r.model_size_label] = (model, int(r.tp), int(r.pp))
        pp = int(r.pp)
        layout = system_layout(system, int(r.gpus), int(r.batch_size), int(r.tp), pp,
                         model.layers // pp if pp > 1 else 1, sequence_parallel=int(r.tp) > 1)
        time = (model.flops_per_token * int(r.batch_size) * model.seq_len
                / (int(r.gpus) * float(r.tflops_per_gpu) * 1e12))
        runs.append(Run("megatron_h100", system, f"{r.model_size_label} {r.gpus} GPUs", model,
                        layout, time, float(r.mfu_percent)))
    model, tp, pp = shapes["177B"]
    for r in table[table.experiment == "strong_scaling"].itertuples(index=False):
        layout = system_layout(system, int(r.gpus), int(r.batch_size), tp, pp, model.layers // pp,
                         sequence_parallel=True)
        time = _time_from_mfu(model, int(r.batch_size), int(r.gpus), peak,
                              float(r.mfu_percent))
        runs.append(Run("megatron_h100", system, f"175B strong b{r.batch_size} {r.gpus} GPUs",
                        model, layout, time, float(r.mfu_percent)))
    return runs


KORTHIKANTI_METHODS = {"full_recompute": ("full", False), "present_work": ("selective", True)}


def korthikanti_runs(table: pd.DataFrame) -> list[Run]:
    """Korthikanti et al. 2022: each model with full recompute (no sequence parallelism) and
    with the paper's method (selective recompute + sequence parallelism); iteration times
    published, or for the 2240-GPU full-recompute run only its MFU."""
    system = "Megatron-LM 2022 (Selene)"
    peak = HARDWARE["A100"].peak_flops
    runs = []
    for r in table.itertuples(index=False):
        if r.method not in KORTHIKANTI_METHODS:
            raise ValueError(f"method {r.method!r} is not one of {sorted(KORTHIKANTI_METHODS)}")
        recompute, sequence_parallel = KORTHIKANTI_METHODS[r.method]
        model = ModelConfig(layers=int(r.num_layers), hidden=int(r.hidden_size),
                            heads=int(r.attention_heads), seq_len=int(r.seq_length),
                            vocab=int(r.vocab_size))
        v = int(r.virtual_stages) if pd.notna(r.virtual_stages) else 1
        layout = system_layout(system, int(r.gpus), int(r.batch_size), int(r.tp), int(r.pp), v,
                         int(r.micro_batch_size), recompute=recompute,
                         sequence_parallel=sequence_parallel)
        mfu = float(r.mfu_percent) if pd.notna(r.mfu_percent) else None
        if pd.notna(r.iteration_time_s):
            time = float(r.iteration_time_s)
        else:  # the abstract's MFU only
            time = _time_from_mfu(model, int(r.batch_size), int(r.gpus), peak, mfu)
        method = r.method.replace("_", " ")
        runs.append(Run("korthikanti2022", system, f"{r.model_size_label} {r.gpus} GPUs, {method}",
                        model, layout, time, mfu))
    return runs


def all_runs(paper: dict[str, pd.DataFrame]) -> list[Run]:
    """Every run of the datasets whose CSVs are given (roles of ``PAPER_ROLES``)."""
    missing = sorted({"table2", "fig9"} - set(paper))
    if missing:
        raise ValueError(f"the scale model needs the paper CSV(s) {missing}; roles: "
                         f"{sorted(PAPER_ROLES)}")
    runs = megascale_runs(paper["table2"], paper["fig9"])
    if "narayanan" in paper:
        runs += narayanan_runs(paper["narayanan"])
    if "h100" in paper:
        runs += h100_runs(paper["h100"])
    if "korthikanti" in paper:
        runs += korthikanti_runs(paper["korthikanti"])
    return runs


def load_paper(paper_dir: Path) -> dict[str, pd.DataFrame]:
    """Every dataset's CSV from a folder (``results/paper``)."""
    return {role: pd.read_csv(Path(paper_dir) / name) for role, name in PAPER_ROLES.items()}


def hardware_of(system: str) -> Hardware:
    return HARDWARE[SYSTEMS[system].hardware]


def fit(runs: list[Run], calibration: dict[str, tuple[tuple[str, str], ...]] | None = None,
        terms: Terms = ALL_TERMS) -> dict[str, Hardware]:
    """Each system's hardware with its two fitted numbers, from its declared runs only."""
    calibration = CALIBRATION if calibration is None else calibration
    by_key = {(r.dataset, r.label, r.system): r for r in runs}
    fitted = {}
    for system in sorted({r.system for r in runs}):
        if system not in calibration:
            raise ValueError(f"system {system!r} declares no calibration runs; declared: "
                             f"{sorted(calibration)}")
        rows = []
        for dataset, label in calibration[system]:
            run = by_key.get((dataset, label, system))
            if run is None or run.iteration_time_s is None:
                raise ValueError(f"{system}: calibration run {dataset}/{label!r} is not a run "
                                 "with a published iteration time")
            rows.append((run.model, run.layout, run.iteration_time_s))
        hw = hardware_of(system)
        eff, straggler = fit_system(rows, hw, terms)
        fitted[system] = replace(hw, gemm_efficiency=eff, straggler=straggler)
    return fitted


def predict(runs: list[Run], calibration: dict[str, tuple[tuple[str, str], ...]] | None = None,
            terms: Terms = ALL_TERMS) -> pd.DataFrame:
    """One row per run: published and predicted iteration time and MFU, the errors (predicted
    - published), the breakdown, whether the run was fitted, and the fitted numbers."""
    calibration = CALIBRATION if calibration is None else calibration
    fitted = fit(runs, calibration, terms)
    out = []
    for run in runs:
        hw = fitted[run.system]
        est = estimate(run.model, hw, run.layout, terms)
        paper_time = nan if run.iteration_time_s is None else run.iteration_time_s
        paper_mfu = nan if run.mfu_percent is None else run.mfu_percent
        out.append({
            "dataset": run.dataset, "system": run.system, "label": run.label,
            "gpus": run.gpus, "batch_size": run.layout.global_batch,
            "tp": run.layout.tp, "pp": run.layout.pp, "dp": run.layout.dp,
            "virtual_stages": run.layout.virtual_stages, "micro_batch": run.layout.micro_batch,
            "recompute": run.layout.recompute, "sequence_parallel": run.layout.sequence_parallel,
            "paper_iteration_time_s": paper_time,
            "predicted_iteration_time_s": est.iteration_time_s,
            "iteration_time_rel_error": (est.iteration_time_s - paper_time) / paper_time,
            "paper_mfu_percent": paper_mfu, "predicted_mfu_percent": 100 * est.mfu,
            "mfu_error_points": 100 * est.mfu - paper_mfu,
            **est.breakdown,
            "calibration": (run.dataset, run.label) in calibration[run.system],
            "gemm_efficiency": hw.gemm_efficiency, "straggler": hw.straggler,
        })
    return pd.DataFrame(out)


def validation_table(paper: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The llm_scale experiment's tidy table: every run of the given datasets predicted."""
    table = predict(all_runs(paper))
    table.insert(0, "experiment", "llm_scale")
    table["status"] = "ok"
    return table


def summarize(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and system, on the runs not fitted: mean, max and signed mean relative error
    of iteration time, mean and signed mean MFU error in points."""
    held = predictions[~predictions.calibration.astype(bool)]
    if held.empty:
        raise ValueError("predictions has no held-out rows to summarize")
    rows = []
    for (dataset, system), g in held.groupby(["dataset", "system"], sort=False):
        times, points = g.iteration_time_rel_error.dropna(), g.mfu_error_points.dropna()
        rows.append({"dataset": dataset, "system": system, "runs": len(g),
                     "time_mean_abs_pct": 100 * times.abs().mean() if len(times) else nan,
                     "time_max_abs_pct": 100 * times.abs().max() if len(times) else nan,
                     "time_mean_signed_pct": 100 * times.mean() if len(times) else nan,
                     "mfu_mean_abs_points": points.abs().mean() if len(points) else nan,
                     "mfu_mean_signed_points": points.mean() if len(points) else nan})
    return pd.DataFrame(rows)
