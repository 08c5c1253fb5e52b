"""Experiment families: each turns (config section, baseline, workload point) into a record."""

EXPERIMENTS = {
    "bert_varlen": "variable-length BERT inference, padded frameworks vs padding-free "
                   "(ByteTransformer)",
}
