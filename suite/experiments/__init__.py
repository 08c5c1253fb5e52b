"""Experiment families: each turns (config section, system, workload point) into a record.

``subject`` is what a point is about besides its sweep: the model family for end-to-end
experiments, the operator for kernel micro-benchmarks.
"""

EXPERIMENTS = {
    "bert_varlen": "BERT-base inference, padded frameworks vs padding-free (ByteTransformer)",
    "bert_fixed": "the same frameworks with every sequence at max length (padding-free's control)",
    "bert_ablation": "the reference with the paper's optimizations turned on one by one",
    "bert_variants": "ALBERT, DistilBERT, DeBERTa: padded HF vs padding-free",
    "bert_mha": "attention: varlen vs padded MHA (matmul+mask+softmax+matmul) and padded SDPA",
    "bert_fused_ops": "add-bias+LayerNorm and GEMM+bias+GELU: fused vs unfused",
    "llm_mfu": "GPT training MFU and tokens/s: model sizes x distributed engines (MegaScale)",
    "llm_engines": "DDP, FSDP2 and DeepSpeed ZeRO-1/2/3 at equal model and global batch",
    "llm_ablation": "MegaScale's optimizations one after another, beside its Table 3",
    "llm_loss": "loss sanity on real text: AdamW vs LAMB at a larger batch, equal tokens",
    "llm_scale": "MegaScale at cluster scale, on paper: an analytical model against Table 2 and "
                 "Figure 9",
    "vwn_scaling": "Virtual Width Networks: one backbone at expansions r = n/m, held-out loss vs "
                   "tokens, with seeds",
    "pma_merging": "checkpoint merging in pre-training (PMA): merged vs latest checkpoint, vs "
                   "annealing, and after a loss spike",
}
