"""An analytical model of iteration time and MFU for 3D-parallel (TP x PP x DP) GPT training.

Why: MegaScale (Jiang et al., NSDI'24) reports MFU falling from 53% to 41% (Megatron-LM) and
from 65% to 55% (MegaScale) as the 175B model goes from 256 to 12288 GPUs. A few-term model
says how much of that drop bubble and exposed communication explain, and whether one
efficiency number measured at 256 GPUs predicts the rest.

The model, per GPU:
  compute per micro-batch and stage  t_c = F * b * s / (tp * pp) / (peak * efficiency),
      F = Megatron FLOPs per token, no recompute (``suite.mfu.megatron_flops_per_token``);
  TP  4 all-reduces (or reduce-scatter + all-gather, same bytes) of b*s*h activations per
      layer, forward + backward, ring factor 2(t-1)/t, over NVLink;
  PP  a send of the stage's b*s*h/tp activation slice (scatter-gather over the TP ranks) at
      each of the v*p - 1 chunk boundaries, forward and backward, averaged over the p stages,
      over the network;
  DP  reduce-scatter of gradients + all-gather of parameters, ring factor 2(d-1)/d, of the
      replica's N/(tp*pp) parameters, once per iteration, over the network;
  exposed communication = (1 - overlap) x its time, per kind;
  iteration = (m + (p-1)/v) x (t_c + exposed TP + exposed PP) + exposed DP,
      m = global_batch / (dp * micro_batch): the interleaved 1F1B bubble is (p-1)/(v m).
MFU uses the Megatron "none" FLOP count and the given peak, as Table 2's Megatron-LM column.

Assumptions (inputs, not fitted; see ``A100_CLUSTER`` and ``SYSTEMS``):
- A100 bf16 peak 312 TFLOP/s; NVLink 300 GB/s per direction per GPU; one 200 Gb/s
  (25 GB/s) network NIC per GPU; 8 GPUs per node. Bandwidths are datasheet, not achieved.
- 175B: TP 8, PP 8, v 6 (Table 1) for both systems, DP = GPUs / 64, micro-batch 1.
- Activations in bf16 (2 bytes); gradients reduced in fp32 (4 bytes), Megatron's default for
  bf16 training; the same is assumed for MegaScale, which does not say.
- Megatron-LM overlaps nothing (overlaps 0): MegaScale's Table 3 lists TP, PP and DP overlap
  as its own additions over the Megatron-LM baseline. MegaScale hides TP and PP communication
  fully (overlap 1) and DP except the first all-gather and last reduce-scatter of each
  iteration, one of v model chunks: dp_overlap = 1 - 1/v. MegaScale's other gains (parallel
  block, sliding window, kernels, LAMB) are not modelled; they land in its efficiency.
- Calibration: one free parameter per system (the achievable GEMM efficiency), fitted to the
  iteration time of one row each: the 256-GPU, batch-768 row of each system. Nothing else is
  tuned; every other Table 2 row and all of Figure 9 are predictions.
- Figure 9 (530B: 105 layers, hidden 20480, heads 160, TP 8, PP 35, v 3) gives only GPUs and
  MFU. Weak scaling is taken to mean the batch grows in proportion to the GPUs (how the
  paper describes the figure, as far as we read it); the base batch is not given. Assumed:
  1920 sequences at 2240 GPUs (MT-NLG's batch on this same 2240-GPU, TP 8 x PP 35 layout,
  Smith et al. 2022, quoted from memory), i.e. 240 micro-batches per pipeline at every point.
  With m fixed the bubble is constant, so only the DP ring factor changes with scale.
- Predicted MFU uses the Megatron count for both systems; MegaScale's printed MFU uses a
  count about 1.2% smaller (sliding-window attention), so its MFU errors carry that offset.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import nan
from numbers import Integral, Real

import pandas as pd

from suite.env import REPO_ROOT
from suite.mfu import megatron_flops_per_token

PAPER_DIR = REPO_ROOT / "results" / "paper"
TABLE2_CSV = PAPER_DIR / "megascale_table2_175b_strong_scaling.csv"
FIG9_CSV = PAPER_DIR / "megascale_fig9_530b_weak_scaling.csv"


def _check_positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise ValueError(f"{name}={value!r} must be a positive number")


def _check_fraction(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value <= 1:
        raise ValueError(f"{name}={value!r} must be a fraction in [0, 1]")


@dataclass(frozen=True)
class ModelConfig:
    """A GPT as the Megatron FLOP formula sees it (MHA, GELU MLP of 4h)."""
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    activation_bytes: int = 2

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "activation_bytes"):
            _check_positive_int(name, getattr(self, name))

    @property
    def flops_per_token(self) -> float:
        return megatron_flops_per_token(self.layers, self.hidden, self.seq_len, self.vocab)

    @property
    def n_params(self) -> float:
        """Weights and biases of the layers plus token and position embeddings (tied head)."""
        l, h = self.layers, self.hidden
        return float(12 * l * h * h + 13 * l * h + (self.vocab + self.seq_len) * h)


@dataclass(frozen=True)
class Hardware:
    """Per-GPU peak and bandwidths (bytes/s, one direction); efficiency = achieved / peak."""
    peak_flops: float
    gemm_efficiency: float
    nvlink_bw: float
    network_bw: float
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        for name in ("peak_flops", "nvlink_bw", "network_bw"):
            _check_positive(name, getattr(self, name))
        _check_positive("gemm_efficiency", self.gemm_efficiency)
        if self.gemm_efficiency > 1:
            raise ValueError(f"gemm_efficiency={self.gemm_efficiency!r} must be in (0, 1]")
        _check_positive_int("gpus_per_node", self.gpus_per_node)


@dataclass(frozen=True)
class Layout:
    """3D-parallel layout and how much of each communication kind hides behind compute."""
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    virtual_stages: int = 1
    tp_overlap: float = 0.0
    pp_overlap: float = 0.0
    dp_overlap: float = 0.0
    grad_bytes: int = 4

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "micro_batch", "global_batch", "virtual_stages",
                     "grad_bytes"):
            _check_positive_int(name, getattr(self, name))
        for name in ("tp_overlap", "pp_overlap", "dp_overlap"):
            _check_fraction(name, getattr(self, name))
        if self.global_batch % (self.dp * self.micro_batch):
            raise ValueError(f"global_batch={self.global_batch} is not a multiple of "
                             f"dp * micro_batch = {self.dp * self.micro_batch}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per iteration (m)."""
        return self.global_batch // (self.dp * self.micro_batch)


@dataclass(frozen=True)
class Estimate:
    """One iteration, broken down; the *_s parts sum to ``iteration_time_s``."""
    iteration_time_s: float
    tokens_per_s: float
    mfu: float  # fraction
    compute_s: float
    bubble_s: float
    tp_exposed_s: float
    pp_exposed_s: float
    dp_exposed_s: float


def bubble_fraction(pp: int, virtual_stages: int, micro_batches: int) -> float:
    """Idle time of the interleaved 1F1B schedule relative to the ideal: (p-1)/(v m)."""
    for name, value in (("pp", pp), ("virtual_stages", virtual_stages),
                        ("micro_batches", micro_batches)):
        _check_positive_int(name, value)
    return (pp - 1) / (virtual_stages * micro_batches)


def ring_factor(n: int) -> float:
    """Bytes each rank sends per byte of an all-reduce (= reduce-scatter + all-gather) on a
    ring of n ranks: 2(n-1)/n."""
    _check_positive_int("n", n)
    return 2 * (n - 1) / n


def tp_bytes_per_microbatch(model: ModelConfig, layout: Layout) -> float:
    """Bytes a GPU sends for TP per micro-batch in its stage: 4 collectives per layer."""
    activation = layout.micro_batch * model.seq_len * model.hidden * model.activation_bytes
    return 4 * (model.layers / layout.pp) * ring_factor(layout.tp) * activation


def pp_bytes_per_microbatch(model: ModelConfig, layout: Layout) -> float:
    """Bytes a GPU sends point-to-point per micro-batch, averaged over stages.

    v*p - 1 chunk boundaries, each crossed forward (activations) and backward (gradients);
    each TP rank sends its 1/tp slice.
    """
    if layout.pp == 1:
        return 0.0
    boundaries = layout.virtual_stages * layout.pp - 1
    activation = layout.micro_batch * model.seq_len * model.hidden * model.activation_bytes
    return 2 * boundaries / layout.pp * activation / layout.tp


def dp_bytes_per_iteration(model: ModelConfig, layout: Layout) -> float:
    """Bytes a GPU sends for DP per iteration: gradient reduce-scatter + parameter all-gather."""
    return ring_factor(layout.dp) * model.n_params / (layout.tp * layout.pp) * layout.grad_bytes


def _parts(model: ModelConfig, hw: Hardware, layout: Layout) -> tuple[float, float, float,
                                                                      float, float]:
    """(slots, compute at efficiency 1, exposed TP, exposed PP, exposed DP), all per GPU."""
    if layout.tp > hw.gpus_per_node:
        raise ValueError(f"tp={layout.tp} spans nodes; the model puts TP on NVLink, so tp must "
                         f"be <= gpus_per_node={hw.gpus_per_node}")
    if model.layers % layout.pp:
        raise ValueError(f"layers={model.layers} is not a multiple of pp={layout.pp}")
    flops = model.flops_per_token * layout.micro_batch * model.seq_len / (layout.tp * layout.pp)
    compute_at_peak = flops / hw.peak_flops
    tp = (1 - layout.tp_overlap) * tp_bytes_per_microbatch(model, layout) / hw.nvlink_bw
    pp = (1 - layout.pp_overlap) * pp_bytes_per_microbatch(model, layout) / hw.network_bw
    dp = (1 - layout.dp_overlap) * dp_bytes_per_iteration(model, layout) / hw.network_bw
    slots = layout.micro_batches + (layout.pp - 1) / layout.virtual_stages
    return slots, compute_at_peak, tp, pp, dp


def estimate(model: ModelConfig, hw: Hardware, layout: Layout) -> Estimate:
    """Iteration time, throughput and MFU of one layout on one machine."""
    slots, compute_at_peak, tp, pp, dp = _parts(model, hw, layout)
    compute = compute_at_peak / hw.gemm_efficiency
    m = layout.micro_batches
    time = slots * (compute + tp + pp) + dp
    tokens_per_s = layout.global_batch * model.seq_len / time
    mfu = tokens_per_s * model.flops_per_token / (layout.gpus * hw.peak_flops)
    bubble = (slots - m) * (compute + tp + pp)
    return Estimate(iteration_time_s=time, tokens_per_s=tokens_per_s, mfu=mfu,
                    compute_s=m * compute, bubble_s=bubble, tp_exposed_s=m * tp,
                    pp_exposed_s=m * pp, dp_exposed_s=dp)


def fit_efficiency(model: ModelConfig, hw: Hardware, layout: Layout,
                   iteration_time_s: float) -> float:
    """The GEMM efficiency at which ``estimate`` gives the measured iteration time.

    Time is affine in 1/efficiency, so the fit is exact and closed-form.
    """
    _check_positive("iteration_time_s", iteration_time_s)
    slots, compute_at_peak, tp, pp, dp = _parts(model, hw, layout)
    left_for_compute = iteration_time_s - dp - slots * (tp + pp)
    if left_for_compute <= 0:
        raise ValueError(f"iteration_time_s={iteration_time_s} is shorter than the modelled "
                         "exposed communication alone; no efficiency fits")
    eff = slots * compute_at_peak / left_for_compute
    if eff > 1:
        raise ValueError(f"iteration_time_s={iteration_time_s} needs gemm_efficiency={eff:.3f} "
                         "> 1; the model's communication or FLOP count is off")
    return eff


# --- MegaScale Table 2 / Figure 9 ---------------------------------------------------------

GPT_175B = ModelConfig(layers=96, hidden=12288, heads=128, seq_len=2048, vocab=64000)
GPT_530B = ModelConfig(layers=105, hidden=20480, heads=160, seq_len=2048, vocab=64000)
LAYOUT_175B = {"tp": 8, "pp": 8, "virtual_stages": 6, "micro_batch": 1}
LAYOUT_530B = {"tp": 8, "pp": 35, "virtual_stages": 3, "micro_batch": 1}
FIG9_BASE_BATCH, FIG9_BASE_GPUS = 1920, 2240  # assumed, see the module docstring

# gemm_efficiency here is a placeholder: ``calibrate`` replaces it per system.
A100_CLUSTER = Hardware(peak_flops=312e12, gemm_efficiency=1.0, nvlink_bw=300e9,
                        network_bw=25e9, gpus_per_node=8)


@dataclass(frozen=True)
class SystemAssumptions:
    """What a training system overlaps, fixed before looking at the results."""
    tp_overlap: float
    pp_overlap: float
    dp_overlap: float  # used unless dp_overlap_all_but_one_chunk
    dp_overlap_all_but_one_chunk: bool = False
    grad_bytes: int = 4

    def dp_overlap_for(self, virtual_stages: int) -> float:
        """MegaScale hides DP traffic behind the other v-1 model chunks, not the first/last."""
        if self.dp_overlap_all_but_one_chunk:
            return 1 - 1 / virtual_stages
        return self.dp_overlap


SYSTEMS: dict[str, SystemAssumptions] = {
    "Megatron-LM": SystemAssumptions(tp_overlap=0.0, pp_overlap=0.0, dp_overlap=0.0),
    "MegaScale": SystemAssumptions(tp_overlap=1.0, pp_overlap=1.0, dp_overlap=0.0,
                                   dp_overlap_all_but_one_chunk=True),
}
# One row per system, (batch_size, gpus): the only paper numbers the model is fitted to.
CALIBRATION_ROWS: dict[str, tuple[int, int]] = {"Megatron-LM": (768, 256),
                                                "MegaScale": (768, 256)}


def layout_for(system: SystemAssumptions, gpus: int, global_batch: int, tp: int, pp: int,
               virtual_stages: int, micro_batch: int) -> Layout:
    """The layout a system runs at a GPU count: DP takes whatever TP x PP leaves."""
    if gpus % (tp * pp):
        raise ValueError(f"gpus={gpus} is not a multiple of tp * pp = {tp * pp}")
    return Layout(tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=micro_batch,
                  global_batch=global_batch, virtual_stages=virtual_stages,
                  tp_overlap=system.tp_overlap, pp_overlap=system.pp_overlap,
                  dp_overlap=system.dp_overlap_for(virtual_stages),
                  grad_bytes=system.grad_bytes)


def load_table2() -> pd.DataFrame:
    return pd.read_csv(TABLE2_CSV)


def load_fig9() -> pd.DataFrame:
    return pd.read_csv(FIG9_CSV)


def calibrate(table: pd.DataFrame | None = None,
              rows: dict[str, tuple[int, int]] | None = None,
              hardware: Hardware = A100_CLUSTER,
              systems: dict[str, SystemAssumptions] | None = None) -> dict[str, float]:
    """Fit one GEMM efficiency per system to one Table 2 row each (two rows, two parameters).

    Only the declared rows' iteration times are read, so no other row can leak in.
    """
    table = load_table2() if table is None else table
    rows = CALIBRATION_ROWS if rows is None else rows
    systems = SYSTEMS if systems is None else systems
    if len(rows) > 2:
        raise ValueError(f"rows={rows!r}: at most two calibration rows (one per system)")
    effs = {}
    for name, (batch, gpus) in rows.items():
        if name not in systems:
            raise ValueError(f"system {name!r} is not one of {sorted(systems)}")
        match = table[(table.system == name) & (table.batch_size == batch) & (table.gpus == gpus)]
        if len(match) != 1:
            raise ValueError(f"calibration row system={name!r}, batch_size={batch}, gpus={gpus} "
                             f"matches {len(match)} Table 2 rows, need exactly 1")
        layout = layout_for(systems[name], gpus, batch, **_layout_args(LAYOUT_175B))
        effs[name] = fit_efficiency(GPT_175B, hardware, layout,
                                    float(match.iloc[0].iteration_time_s))
    return effs


def _layout_args(spec: dict[str, int]) -> dict[str, int]:
    return {"tp": spec["tp"], "pp": spec["pp"], "virtual_stages": spec["virtual_stages"],
            "micro_batch": spec["micro_batch"]}


def _prediction_row(system: str, gpus: int, batch: int, model: ModelConfig, hw: Hardware,
                    layout: Layout, paper_time: float | None, paper_mfu: float,
                    calibration: bool) -> dict[str, object]:
    est = estimate(model, hw, layout)
    pred_mfu = 100 * est.mfu
    return {
        "system": system, "gpus": gpus, "batch_size": batch,
        "paper_iteration_time_s": nan if paper_time is None else paper_time,
        "predicted_iteration_time_s": est.iteration_time_s,
        "iteration_time_rel_error": (nan if paper_time is None
                                     else (est.iteration_time_s - paper_time) / paper_time),
        "paper_mfu_percent": paper_mfu, "predicted_mfu_percent": pred_mfu,
        "mfu_rel_error": (pred_mfu - paper_mfu) / paper_mfu,
        "mfu_error_points": pred_mfu - paper_mfu,
        "bubble_s": est.bubble_s, "exposed_comm_s": (est.tp_exposed_s + est.pp_exposed_s
                                                     + est.dp_exposed_s),
        "calibration": calibration,
    }


def predict_table2(table: pd.DataFrame | None = None,
                   rows: dict[str, tuple[int, int]] | None = None,
                   hardware: Hardware = A100_CLUSTER,
                   systems: dict[str, SystemAssumptions] | None = None) -> pd.DataFrame:
    """Every Table 2 row predicted from the two calibration rows; errors are pred - paper."""
    table = load_table2() if table is None else table
    rows = CALIBRATION_ROWS if rows is None else rows
    systems = SYSTEMS if systems is None else systems
    effs = calibrate(table, rows, hardware, systems)
    out = []
    for r in table.itertuples(index=False):
        if r.system not in effs:
            continue
        hw = replace(hardware, gemm_efficiency=effs[r.system])
        layout = layout_for(systems[r.system], int(r.gpus), int(r.batch_size),
                            **_layout_args(LAYOUT_175B))
        out.append(_prediction_row(r.system, int(r.gpus), int(r.batch_size), GPT_175B, hw,
                                   layout, float(r.iteration_time_s), float(r.mfu_percent),
                                   rows.get(r.system) == (r.batch_size, r.gpus)))
    return pd.DataFrame(out)


def predict_fig9(table: pd.DataFrame | None = None,
                 efficiencies: dict[str, float] | None = None,
                 hardware: Hardware = A100_CLUSTER,
                 systems: dict[str, SystemAssumptions] | None = None,
                 base_batch: int = FIG9_BASE_BATCH,
                 base_gpus: int = FIG9_BASE_GPUS) -> pd.DataFrame:
    """Figure 9's 530B weak-scaling MFU from the efficiencies fitted on the 175B rows.

    No Figure 9 number is fitted (``calibration`` is False throughout); the batch is
    base_batch * gpus / base_gpus. The paper gives no iteration times, so those are NaN.
    """
    table = load_fig9() if table is None else table
    systems = SYSTEMS if systems is None else systems
    effs = calibrate(hardware=hardware, systems=systems) if efficiencies is None else efficiencies
    out = []
    for r in table.itertuples(index=False):
        if r.system not in effs:
            continue
        gpus = int(r.gpus)
        if (base_batch * gpus) % base_gpus:
            raise ValueError(f"gpus={gpus}: base_batch={base_batch} * gpus / base_gpus="
                             f"{base_gpus} is not a whole batch")
        batch = base_batch * gpus // base_gpus
        hw = replace(hardware, gemm_efficiency=effs[r.system])
        layout = layout_for(systems[r.system], gpus, batch, **_layout_args(LAYOUT_530B))
        out.append(_prediction_row(r.system, gpus, batch, GPT_530B, hw, layout, None,
                                   float(r.mfu_percent), False))
    return pd.DataFrame(out)


def summarize(predictions: pd.DataFrame) -> pd.DataFrame:
    """Mean absolute errors of the held-out (non-calibration) rows, per system and overall."""
    held = predictions[~predictions.calibration]
    if held.empty:
        raise ValueError("predictions has no held-out rows to summarize")

    def stats(frame: pd.DataFrame) -> dict[str, float]:
        times = frame.iteration_time_rel_error.dropna()
        return {"rows": len(frame),
                "iteration_time_mean_abs_rel_error": (times.abs().mean() if len(times)
                                                      else float("nan")),
                "mfu_mean_abs_rel_error": frame.mfu_rel_error.abs().mean(),
                "mfu_mean_abs_error_points": frame.mfu_error_points.abs().mean()}

    out = {name: stats(group) for name, group in held.groupby("system", sort=False)}
    out["all"] = stats(held)
    return pd.DataFrame(out).T
