"""Training systems as the scale model sees them: what each hides behind compute, its attention
kernel, how it shards over DP, its hardware. A run names its system; the system fills the
layout fields the run leaves empty. Each system's two numbers are fitted on its declared rows
(``suite.scale.datasets.CALIBRATION``, or ``--calibrate`` for a user's runs).
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.scale.step import tp_collectives_per_layer


@dataclass(frozen=True)
class System:
    hardware: str
    tp_overlap: float = 0.0
    pp_overlap: float = 0.0
    dp_overlap: float = 0.0
    dp_all_but_one_chunk: bool = False  # MegaScale: DP of v-1 of the v chunks hidden
    # the backward's TP traffic that runs beside a gradient GEMM hidden: 2 all-reduces' worth
    # per layer (without SP the input gradients' all-reduces, under the weight gradients; with
    # SP their reduce-scatters, and the inputs' re-gather under the input gradients; the
    # all-gather of the output gradient before the row-parallel linear's backward is not)
    tp_backward_only: bool = False
    attention: str = "fused_softmax"
    dp_mode: str = "allreduce"
    grad_bytes: int = 4
    loss: str = "megatron"
    recompute_early_stop: bool = False  # PyTorch's non-reentrant checkpoint, torch >= 2.1
    logit_metrics: int = 0  # train metrics computed on each micro-batch's logits

    def layout_defaults(self, virtual_stages: int, full_recompute: float,
                        sequence_parallel: bool = False) -> dict:
        """Layout fields this system sets unless a run sets them (``full_recompute``: the
        share of layers fully recomputed)."""
        dp = 1 - 1 / virtual_stages if self.dp_all_but_one_chunk else self.dp_overlap
        tp = 2 / tp_collectives_per_layer(full_recompute, sequence_parallel,
                                          self.recompute_early_stop) \
            if self.tp_backward_only else self.tp_overlap
        return {"tp_overlap": tp, "pp_overlap": self.pp_overlap, "dp_overlap": dp,
                "attention": self.attention, "dp_mode": self.dp_mode,
                "grad_bytes": self.grad_bytes, "loss": self.loss,
                "recompute_early_stop": self.recompute_early_stop,
                "logit_metrics": self.logit_metrics}


SYSTEMS: dict[str, System] = {
    # MegaScale's baseline: its Table 3 lists the overlaps as MegaScale's additions, so only
    # what Megatron-LM's linears always run beside a gradient GEMM is hidden (as in 2022's)
    "Megatron-LM": System("A100", tp_backward_only=True),
    # MegaScale Sec. 3.3 and Table 3: TP/PP/DP overlap, FlashAttention-2
    "MegaScale": System("A100", tp_overlap=1.0, pp_overlap=1.0, dp_all_but_one_chunk=True,
                        attention="flash"),
    "Megatron-LM 2021 (Selene)": System("A100"),
    # 2022 code (Korthikanti et al.): the column-parallel linear's backward runs its TP
    # all-reduce asynchronously under the gradient GEMMs (megatron/mpu/layers.py,
    # LinearWithGradAccumulationAndAsyncCommunication, at commit 7f9a48ba8f); nothing else
    "Megatron-LM 2022 (Selene)": System("A100", tp_backward_only=True),
    # the README: --tp-comm-overlap, --overlap-grad-reduce/--overlap-param-gather (the latter
    # exists only with the distributed optimizer), PP overlap; Transformer Engine's fused attention
    "Megatron-Core r0.8 (H100)": System("H100", tp_overlap=1.0, pp_overlap=1.0, dp_overlap=1.0,
                                        attention="flash", dp_mode="zero1"),
    # llm-foundry's benchmarks (scripts/train/benchmarking): Composer FSDP with forward and
    # backward prefetch (limit_all_gathers; set in the 2024-01 sweep, the earlier ones ran
    # Composer's defaults: datasets.py), the Triton or flash-attn FlashAttention kernel,
    # flash-attn's fused cross entropy (the yamls' loss_fn: fused_crossentropy), no TP or PP;
    # Composer's trainer (0.13.4, 0.16, 0.17: the three eras' pins) updates the
    # MPT model's two train metrics, LanguageCrossEntropy and LanguagePerplexity, on each
    # micro-batch's logits after its backward (Trainer._train_microbatch ->
    # _eval_train_metrics), a torch CrossEntropyLoss each (logit_metrics 2);
    # A100 nodes on 1600 Gb/s RoCE (25 GB/s per GPU), H100 nodes unstated (the preset's
    # 50 GB/s per GPU assumed)
    "llm-foundry (A100-40GB)": System("A100-40GB", dp_overlap=1.0, attention="flash",
                                      dp_mode="fsdp", loss="fused", logit_metrics=2),
    "llm-foundry (A100-80GB)": System("A100-80GB", dp_overlap=1.0, attention="flash",
                                      dp_mode="fsdp", loss="fused", logit_metrics=2),
    "llm-foundry (H100)": System("H100", dp_overlap=1.0, attention="flash", dp_mode="fsdp",
                                 loss="fused", logit_metrics=2),
    # torchtitan (2024, docs/performance.md): FSDP2 (fully_shard) with prefetch, SDPA's flash
    # kernel, the loss on fp32-cast logits (train.py: cross_entropy(pred.float(), ...)), activation
    # checkpointing by torch's non-reentrant checkpoint_wrapper on a 2024 nightly (early stop)
    "torchtitan (A100)": System("A100-80GB", dp_overlap=1.0, attention="flash", dp_mode="fsdp2",
                                loss="eager", recompute_early_stop=True),
    # BLOOM-176B (bigscience tr11): Megatron-DeepSpeed, DeepSpeed's BF16 optimizer sharding the
    # optimizer state (ZeRO-1) with fp32 gradients, which its pipeline engine all-reduces in
    # full (PipelineEngine._bf16_reduce_grads: buffered_allreduce_fallback over the optimizer's
    # fp32 gradients), cast to bf16 for the wire: DeepSpeed's communication_data_type was bf16
    # for bf16 without ZeRO from 2021-11 (#1487) until fp32 became the default in 2023-03
    # (#2970), on the olruwase/bf16-updates commits BigScience ran (15293139f of 2022-02-28,
    # the search's day; 77b649d16 and 5ea1c60f8, the training's); tr11's ds_config sets none.
    # Megatron's fused softmax, nothing overlapped
    "Megatron-DeepSpeed (BLOOM, Jean Zay)": System("A100-80GB", dp_mode="zero1_allreduce",
                                                   grad_bytes=2),
}


def system(name: str) -> System:
    try:
        return SYSTEMS[name]
    except KeyError:
        raise ValueError(f"system {name!r} is not one of {sorted(SYSTEMS)}") from None
