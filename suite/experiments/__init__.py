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
}
