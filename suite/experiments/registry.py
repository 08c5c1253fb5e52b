"""Every experiment, described once: the CLI's choices, the workflow's wildcard patterns and
sections, the figure and analysis dispatch and the report's text all come from ``SPECS``.

Torch-free and matplotlib-free on purpose: the workflow's planning and the CLI's argument
parser import it. Functions are named as ``"module:function"`` strings and imported only by
the stage that calls them.

Adding an experiment to an existing family: a spec here, its runner (how one point becomes a
record), its figure function, and its report columns; nothing else names experiments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable

# Families share a runner command, a planner and a table builder (workflows/rules/<family>.smk).
FAMILIES = ("bert", "llm", "scale", "pretrain", "serving")
# Families whose experiments each build their table, curves and measured claims themselves
# (``ExperimentSpec.table``; ``seedbench table-step``).
OWN_TABLE_STEP = ("pretrain", "serving")
# How a section's claims are laid out in the report: the ByteTransformer framework claims
# (suite.analysis.claims) or measured verdicts with intervals (suite.analysis.verdicts).
CLAIM_LAYOUTS = ("frameworks", "verdicts")
PAPER_DIR = "results/paper"


@dataclass(frozen=True)
class ExperimentSpec:
    """One experiment.

    ``paper``: role -> CSV under ``results/paper/`` (the papers' numbers this experiment's
    table step, figure or analysis reads; the workflow declares each as a rule input and passes
    it as ``--paper ROLE=PATH``). The functions are ``"module:function"``:

    - ``runner``: one point -> a record, called by the family's run command. bert:
      ``(cfg, experiment, subject, system, batch_size, max_seq_len, peak)``; pretrain:
      ``(section, seed, series=, checkpoints=)``; serving: ``(section, system, repeat, out)``.
      llm runs are processes under a launcher
      (``suite.launch.jobs``), so the llm family names none.
    - ``table``: the ``OWN_TABLE_STEP`` families, ``(records, paper) -> (table, curves,
      claims)``; the other families share one table builder each (``seedbench table`` /
      ``llm-table``).
    - ``figure(FigureData, out)`` writes the SVG.
    - ``summary(AnalysisInputs) -> str``: the sentence above the section's table.
    - ``claims(AnalysisInputs) -> DataFrame``: the paper's claims, measured.
    - ``headline(AnalysisInputs) -> Headline | None``: the one number the report sets side by
      side across machines (``suite.analysis.headlines``).

    ``reads_tables``: other experiments' tables the analysis needs (when they are in the run).
    ``columns``: the report's table layout (``suite.report.columns``).
    """

    name: str
    title: str
    family: str
    figure: str
    runner: str | None = None
    table: str | None = None
    note: str = ""
    columns: str = "bert"
    paper: dict[str, str] = field(default_factory=dict)
    summary: str | None = None
    claims: str | None = None
    headline: str | None = None
    claims_layout: str = "verdicts"
    reads_tables: tuple[str, ...] = ()
    curves: bool = False  # the figure draws the table step's curves.csv
    roofline: bool = False  # the figure draws peak.json's library lines

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9]*_[a-z0-9_]+", self.name):
            raise ValueError(f"experiment name {self.name!r}: lower-case family prefix and "
                             "words joined by '_' (e.g. 'bert_varlen')")
        if self.family not in FAMILIES:
            raise ValueError(f"{self.name}: family={self.family!r} is not one of {FAMILIES}")
        if (self.runner is None) != (self.family in ("llm", "scale")):
            raise ValueError(f"{self.name}: the {self.family} family "
                             + ("launches its runs (no runner)" if self.family in ("llm", "scale")
                                else "needs a runner"))
        if (self.table is not None) != (self.family in OWN_TABLE_STEP):
            raise ValueError(f"{self.name}: a table builder is for the {OWN_TABLE_STEP} "
                             "families only, and they need one")
        if self.claims_layout not in CLAIM_LAYOUTS:
            raise ValueError(f"{self.name}: claims_layout={self.claims_layout!r} is not one of "
                             f"{CLAIM_LAYOUTS}")
        for ref in (self.figure, self.runner, self.table, self.summary, self.claims,
                    self.headline):
            if ref is not None and not re.fullmatch(r"[\w.]+:\w+", ref):
                raise ValueError(f"{self.name}: {ref!r} is not 'module:function'")

    @property
    def measured(self) -> bool:
        """False for the analytical family: its section is the same on every machine."""
        return self.family != "scale"

    def paper_paths(self) -> dict[str, str]:
        return {role: f"{PAPER_DIR}/{name}" for role, name in self.paper.items()}


def load(ref: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` reference names."""
    module, _, name = ref.partition(":")
    return getattr(import_module(module), name)


# The runner of the end-to-end BERT-family experiments. Their points share one float64
# oracle per (subject, point): the first system's job computes it and leaves it in a folder
# (`seedbench run --oracle-dir`) where the others read it (suite.experiments.bert_oracle).
END_TO_END_RUNNER = "suite.experiments.bert_varlen:measure_point"
_BT_LATENCY = "bytetransformer_readme_a100_fp16_latency.csv"
_BT_CLAIMS = "bytetransformer_abstract_claims.csv"

_SPECS = [
    ExperimentSpec(
        "bert_varlen",
        "BERT-base inference, padded frameworks vs padding-free (ByteTransformer)", "bert",
        figure="suite.analysis.plots:varlen_figure",
        headline="suite.analysis.headlines:bert_reference",
        runner=END_TO_END_RUNNER,
        paper={"latency": _BT_LATENCY, "claims": _BT_CLAIMS},
        claims="suite.analysis.claims:framework_claims", claims_layout="frameworks",
        reads_tables=("bert_mha",), roofline=True,
        note="Left: latency here. Middle: speedup of the padding-free reference over the "
             "padded baseline, with its 95% CI, the FLOP bounds, and the paper's "
             "ByteTransformer-over-PyTorch speedup from the ByteTransformer README (A100, "
             "fp16: another machine and precision, shown for shape, not for equality). "
             "Right: the paper's latencies."),
    ExperimentSpec(
        "bert_fixed",
        "the same frameworks with every sequence at max length (padding-free's control)", "bert",
        figure="suite.analysis.plots:fixed_figure",
        headline="suite.analysis.headlines:bert_reference",
        runner=END_TO_END_RUNNER,
        note="Every sequence of the batch at the full length: there is no padding, so a "
             "padding-free system has nothing to skip. Its speedup here is what its kernels "
             "and fusion give alone; the difference from the variable-length figure at the "
             "same point is what removing padding gives."),
    ExperimentSpec(
        "bert_ablation", "the reference with the paper's optimizations turned on one by one",
        "bert", figure="suite.analysis.plots:ablation_figure",
        headline="suite.analysis.headlines:bert_full_ladder",
        runner=END_TO_END_RUNNER,
        note="The reference with the paper's optimizations switched on one after "
             "another; speedups are over step 0 (padded, unfused). On CPU the fused "
             "epilogues run as PyTorch ops (the Triton kernels need CUDA), so those two "
             "steps are expected to change little here. Steps 0-4 run their linear layers "
             "on F.linear (MKL in x86 wheels); the last step moves them to oneDNN with "
             "weights prepacked once and bias+GELU / bias+residual fused as post-ops "
             "(on CPU; on GPUs it equals the step before)."),
    ExperimentSpec(
        "bert_variants", "ALBERT, DistilBERT, DeBERTa: padded HF vs padding-free", "bert",
        figure="suite.analysis.plots:variants_figure",
        headline="suite.analysis.headlines:bert_reference",
        runner=END_TO_END_RUNNER,
        note="Each family at BERT-base size, padded HF eager against the padding-free "
             "reference; speedups over the padded HF model."),
    ExperimentSpec(
        "bert_mha",
        "attention: varlen vs padded MHA (matmul+mask+softmax+matmul) and padded SDPA", "bert",
        figure="suite.analysis.plots:mha_figure",
        headline="suite.analysis.headlines:bert_varlen_attention",
        runner="suite.experiments.bert_kernels:measure_point", paper={"claims": _BT_CLAIMS},
        note="Attention alone on BERT-base-shaped Q/K/V (12 heads x 64): varlen attention on "
             "the packed tokens and padded SDPA, against the padded matmul + mask + softmax + "
             "matmul the paper calls PyTorch. The paper's 6.13x is A100 fp16 with a fused "
             "CUDA kernel."),
    ExperimentSpec(
        "bert_fused_ops", "add-bias+LayerNorm and GEMM+bias+GELU: fused vs unfused", "bert",
        figure="suite.analysis.plots:fused_ops_figure",
        headline="suite.analysis.headlines:bert_fused",
        runner="suite.experiments.bert_kernels:measure_point",
        note="The two element-wise epilogues ByteTransformer fuses, on the packed "
             "tokens. LayerNorm is memory-bound: its figure is GB/s of least traffic."),
    ExperimentSpec(
        "bert_serving",
        "serving BERT under MLPerf LoadGen: padded, length-bucketed and padding-free dynamic "
        "batching at a p99 bound", "serving", figure="suite.analysis.serving_plots:serving_figure",
        headline="suite.analysis.headlines:first_claim",
        runner="suite.experiments.bert_serving:measure_point",
        table="suite.analysis.serving_analysis:table_step", columns="serving", curves=True,
        claims="suite.analysis.analyze:claims_of_table_step",
        summary="suite.analysis.summaries:bert_serving",
        note="Requests of mixed length (the ByteTransformer mix unless a histogram is given) "
             "issued by MLPerf LoadGen: Offline (all at once, samples/s) and Server (Poisson "
             "arrivals at an offered load, VALID only while LoadGen's p99 latency stays under "
             "the bound). Every system batches the same way (a batch leaves full or when its "
             "oldest request has waited the window): padded to the batch's longest request, "
             "padded within length buckets, or packed without padding into the reference. "
             "The Server number is the highest offered load LoadGen found VALID, by bisection "
             "(every trial is a point of the left plot). Each system is checked against the "
             "float64 oracle before it is timed."),
    ExperimentSpec(
        "llm_mfu", "GPT training MFU and tokens/s: model sizes x distributed engines (MegaScale)",
        "llm", figure="suite.analysis.llm_plots:mfu_sweep_figure",
        headline="suite.analysis.headlines:llm_best_mfu", columns="train",
        note="GPT training runs of reference_impl.gpt under the engines, each checked first "
             "against a single-process run of the same global batches (losses and gradient "
             "norms). MFU = tokens/s x model FLOPs per token (matmuls, forward + backward, no "
             "recompute; the formula is in each record) / the peak: on a CPU the machine's "
             "measured matmul peak at the threads all ranks use counts as one device; on GPUs "
             "the per-GPU peak x GPUs. Warm-up steps are left out."),
    ExperimentSpec(
        "llm_engines", "DDP, FSDP2 and DeepSpeed ZeRO-1/2/3 at equal model and global batch",
        "llm", figure="suite.analysis.llm_plots:engines_figure",
        headline="suite.analysis.headlines:llm_fastest_engine", columns="train",
        claims="suite.analysis.megascale_claims:engines_claims",
        paper={"table3": "megascale_table3_ablation_175b_256gpu.csv"},
        note="The same model and global batch under each engine (2 processes, gloo on a "
             "CPU, NCCL on GPUs); FSDP2 with and without explicit prefetch, DeepSpeed ZeRO "
             "stages 1-3 with the same AdamW, ZeRO-3 also with overlap_comm off: the paper's "
             "data-parallel overlap, on against off."),
    ExperimentSpec(
        "llm_window", "sliding-window attention against causal attention, forward + backward",
        "llm", figure="suite.analysis.llm_plots:window_figure", columns="window",
        headline="suite.analysis.headlines:llm_window_time",
        summary="suite.analysis.summaries:llm_window",
        claims="suite.analysis.megascale_claims:window_claims",
        note="MegaScale's sliding-window attention (Sec. 3.1) as a kernel that computes the "
             "window's band only (reference_impl.kernels.window_attention), timed side by side "
             "with SDPA's causal kernel, with the band in explicit math (the unfused model's "
             "path) and with a dense mask (every score computed) beside it; each checked "
             "against float64 masked attention (output and q/k/v gradients) before timing."),
    ExperimentSpec(
        "llm_pipeline", "the pipeline engine's bubble as micro-batches grow, against 1F1B's "
                        "formula", "llm",
        figure="suite.analysis.llm_plots:pipeline_figure", columns="pipeline",
        summary="suite.analysis.summaries:llm_pipeline",
        claims="suite.analysis.megascale_claims:pipeline_claims",
        note="The GPT cut into one stage per rank (torch.distributed.pipelining, 1F1B; gloo on "
             "a CPU, NCCL on GPUs), the micro-batch size fixed and their count m growing, as "
             "LAMB's larger batch grows it in MegaScale. Each stage times its own compute "
             "inside the schedule's step; the rest is waiting on its neighbour: the bubble, "
             "beside 1F1B's (p-1)/(m+p-1) for stages of equal cost."),
    ExperimentSpec(
        "llm_ablation", "MegaScale's optimizations one after another, beside its Table 3", "llm",
        figure="suite.analysis.llm_plots:ablation_figure",
        headline="suite.analysis.headlines:llm_ablation_gain", columns="ablation",
        paper={"table3": "megascale_table3_ablation_175b_256gpu.csv"},
        summary="suite.analysis.summaries:llm_ablation",
        claims="suite.analysis.megascale_claims:ablation_claims",
        note="MegaScale's Table 3 ladder run here, each step keeping the previous ones, each "
             "row naming its mechanism and engine. The throughput ratio of each step over the "
             "previous one carries a bootstrap interval of the two runs' medians; MFU is shown "
             "at each run's own FLOP count (a window does fewer attention FLOPs) and at the "
             "baseline's (a ladder of throughput). On the pipeline engine LAMB's larger batch "
             "is more micro-batches (fewer bubbles, measured); the overlap step is FSDP2's or "
             "ZeRO-3's prefetch where the ladder runs on them, and a CPU cannot show it."),
    ExperimentSpec(
        "llm_loss", "loss sanity on real text: AdamW vs LAMB at a larger batch, equal tokens",
        "llm", figure="suite.analysis.llm_plots:loss_figure",
        headline="suite.analysis.headlines:llm_loss_gap", columns="loss", curves=True,
        summary="suite.analysis.summaries:llm_loss",
        claims="suite.analysis.megascale_claims:lamb_claims",
        note="Loss sanity on the King James Bible (bytes): AdamW at the base batch against "
             "LAMB at a larger batch with the same tokens (fewer steps), held-out loss on the "
             "last 5% of the text."),
    ExperimentSpec(
        "llm_resilience", "training that survives failures and stragglers: checkpoint stall, "
        "recovery under torchrun's agent, the slow rank named, ETTR at scale", "llm",
        figure="suite.analysis.llm_plots:resilience_figure", columns="resilience",
        headline="suite.analysis.headlines:llm_resilience_stall",
        summary="suite.analysis.resilience_analysis:resilience_summary",
        claims="suite.analysis.resilience_analysis:resilience_claims",
        paper={"published": "resilience_published.csv"}, reads_tables=("llm_scale",),
        note="MegaScale's stability half (Sec. 4) on the suite's engines. Checkpoints through "
             "torch.distributed.checkpoint, fsynced and committed atomically, taking turns in "
             "one run: synchronous, two-stage (async_save: a copy into shared memory persisted "
             "by DCP's process) and DCP's default two-stage (persisted by a thread), each "
             "mode's first checkpoint (its set-up) apart; each fault (a rank killed, a rank "
             "stopped, a NaN loss) fired once at a declared step under torchrun "
             "--max-restarts, the run resumed from its last checkpoint and its every loss "
             "compared with an uninterrupted run's; a busy process pinned to one rank's core "
             "and the per-rank monitor (run-queue time on CPU, CUDA events on a GPU) naming "
             "it. ETTR carries this run's costs per byte to a node of the 175B run; the "
             "failure rate is Llama 3's."),
    ExperimentSpec(
        "llm_scale",
        "MegaScale at cluster scale, on paper: an analytical model against every published run",
        "scale", figure="suite.analysis.llm_plots:scale_figure",
        headline="suite.analysis.headlines:llm_scale_error", columns="scale",
        summary="suite.analysis.summaries:llm_scale",
        paper={"table2": "megascale_table2_175b_strong_scaling.csv",
               "fig9": "megascale_fig9_530b_weak_scaling.csv",
               "narayanan": "narayanan2021_table1_weak_scaling.csv",
               "h100": "megatron_readme_h100_scaling.csv",
               "korthikanti": "korthikanti2022_table5_recompute.csv",
               "mpt": "llmfoundry_mpt_throughput.csv",
               "torchtitan": "torchtitan_llama_throughput.csv",
               "bloom": "bloom176b_training_log.csv",
               "bloom_search": "bloom176b_topology_search.csv"},
        note="An analytical model of 3D-parallel and sharded training: each GEMM timed from "
             "its per-GPU shape (tile and wave quantization, short K, the HBM roofline) under "
             "one fitted ceiling, FlashAttention at its published throughput or materialized "
             "scores, memory-bound element-wise and loss traffic, the interleaved pipeline "
             "bubble (uneven stages, the uneven bubble), TP/PP/DP/FSDP communication with "
             "NCCL's latencies and each system's overlap, recompute, sequence parallelism, a "
             "straggler stretch growing with ln(nodes), and a memory model that marks layouts "
             "that cannot fit. Two numbers per system (GEMM ceiling, straggler constant) are "
             "fitted on its declared runs (ringed); every other run is a prediction, with "
             "llm-analysis 0.2.2 fitted on the same rows beside it: MegaScale Table 2 and "
             "Figure 9, Narayanan et al. 2021 (Selene), the Megatron-LM README's H100 scaling, "
             "Korthikanti et al. 2022, llm-foundry's MPT benchmarks (FSDP), torchtitan's "
             "Llama runs (GQA, SwiGLU, FSDP2) and BLOOM-176B's training log. Formulas, sources "
             "and assumptions: suite/scale/ (docs/scale-model.md)."),
    ExperimentSpec(
        "vwn_scaling",
        "Virtual Width Networks: one backbone at expansions r = n/m, held-out loss vs tokens, "
        "with seeds", "pretrain", figure="suite.analysis.pretrain_plots:vwn_figure",
        headline="suite.analysis.headlines:first_claim",
        runner="suite.experiments.vwn_width:measure_point",
        table="suite.analysis.vwn_analysis:table_step",
        columns="vwn", curves=True, summary="suite.analysis.summaries:vwn_scaling",
        claims="suite.analysis.analyze:claims_of_table_step",
        paper={"table1": "vwn_table1_a0.8b_m8_500b_tokens.csv", "headline": "vwn_headline.csv"},
        note="reference_impl.vwn: one backbone (train.model) trained at each expansion "
             "r = n/m with dynamic GHCs and the next-2-token module, byte-level King James "
             "text, constant LR after warm-up, the same held-out windows for every run. "
             "The r = 1 baseline has the GHCs frozen at the identity (a plain residual "
             "transformer with the same output path and MTP module) and trains longer so "
             "that S(T) can be read off its curve. Losses compare at the wide runs' token "
             "count, paired by seed. The paper's numbers are an A0.8B-A3.3B MoE after "
             "hundreds of billions of tokens: below that scale the claims judge directions "
             "and show sizes untested. Where this model departs from the paper: the "
             "GroupNorm before W_reduce normalizes n groups of D/m features (the paper's "
             "groups of D need an integer r; r = 1.5 is run); the dynamic GHC's s_A and s_B "
             "are learned scalars where the paper has matrices (a scalar is a matrix with "
             "every entry tied: a restriction, not an equivalent form); the next-2-token "
             "module follows the paper (a shared linear at r = 1's cost, one VWN layer) with "
             "its block one segment of D/m features."),
    ExperimentSpec(
        "pma_merging",
        "checkpoint merging in pre-training (PMA): merged vs latest checkpoint, vs annealing, "
        "and after a loss spike", "pretrain", figure="suite.analysis.pretrain_plots:pma_figure",
        headline="suite.analysis.headlines:first_claim",
        runner="suite.experiments.pma_merging:measure_point",
        table="suite.analysis.pma_analysis:table_step",
        columns="pma", curves=True, summary="suite.analysis.summaries:pma_merging",
        claims="suite.analysis.analyze:claims_of_table_step",
        paper={"headline": "pma_headline.csv"},
        note="reference_impl.merging on the checkpoints of one constant-LR GPT run per "
             "seed, saved every V0 steps: SMA, EMA and WMA of N checkpoints V apart, at "
             "several points of training; whether the run reached the stable phase (the "
             "held-out slope over its last steps, checked before merging: the claims about "
             "it are not tested where it did not); forks that decay the LR to 0 over the "
             "last steps, and one ending early in training (annealed models at the same "
             "tokens as the merges), with merging inside them and early in them; a loss "
             "spike caused by a raised LR, then resumed at that LR from the SMA of the "
             "pre-spike checkpoints, from the last one, and from the spiked weights. Loss is "
             "held-out next-token loss; the paper reports downstream accuracy of MoE models."),
]

SPECS: dict[str, ExperimentSpec] = {}


def register(spec: ExperimentSpec) -> ExperimentSpec:
    """Add an experiment (a name may be registered once)."""
    if spec.name in SPECS:
        raise ValueError(f"experiment {spec.name!r} is already registered")
    SPECS[spec.name] = spec
    return spec


for _spec in _SPECS:
    register(_spec)


def get(name: str) -> ExperimentSpec:
    if name not in SPECS:
        raise KeyError(f"unknown experiment {name!r}; registered: {sorted(SPECS)}")
    return SPECS[name]


def shares_oracle(name: str) -> bool:
    """Whether ``name``'s points share their oracle (``END_TO_END_RUNNER``)."""
    return get(name).runner == END_TO_END_RUNNER


def oracle_experiments() -> list[str]:
    """The experiments whose points share an oracle file, in registration order."""
    return [n for n in SPECS if shares_oracle(n)]


def names(family: str | None = None) -> list[str]:
    """Registered experiments (of one family), in registration order (the report's order)."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family={family!r} is not one of {FAMILIES}")
    return [n for n, s in SPECS.items() if family is None or s.family == family]


def table_step_names() -> list[str]:
    """The experiments that build their table, curves and claims themselves."""
    return [n for n, s in SPECS.items() if s.family in OWN_TABLE_STEP]


def pattern(family: str | None = None) -> str:
    """A regular expression matching exactly the experiments (of one family): the workflow's
    wildcard constraints."""
    return "|".join(re.escape(n) for n in names(family))
