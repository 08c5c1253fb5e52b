"""Which jobs a config asks for: (experiment, subject, system, batch size, max length), and which
system each experiment's speedups are measured against. The workflow's rules read this."""

from __future__ import annotations

from typing import NamedTuple

from reference_impl.switches import LADDER
from suite.config import BertVarlenConfig
from suite.experiments.bert_names import OPS, SYSTEMS, ladder_name

VARIANT_SYSTEMS = ("torch-eager", "reference")


class Job(NamedTuple):
    experiment: str
    subject: str
    system: str
    batch_size: int
    max_seq_len: int

    def path(self, results: str) -> str:
        return (f"{results}/{self.experiment}/{self.subject}/{self.system}/"
                f"b{self.batch_size}_l{self.max_seq_len}.json")


def speedup_baseline(padded_baseline: str, experiment: str) -> str:
    """What an experiment's speedups divide by: ``padded_baseline`` is the config's
    (``bert_varlen.padded_baseline``) for the framework comparisons."""
    return {"bert_varlen": padded_baseline, "bert_fixed": padded_baseline,
            "bert_ablation": ladder_name(0),
            "bert_variants": "torch-eager", "bert_mha": "padded-unfused",
            "bert_fused_ops": "unfused"}[experiment]


def jobs(cfg: BertVarlenConfig) -> dict[str, list[Job]]:
    """Jobs per experiment, experiments without jobs left out."""
    cases = {
        "bert_varlen": ([("bert", b) for b in cfg.baselines], cfg.points() if cfg.enabled else []),
        "bert_fixed": ([("bert", b) for b in cfg.fixed_length_baselines()],
                       cfg.fixed_length.points()),
        "bert_ablation": ([("bert", ladder_name(i)) for i in range(len(LADDER))],
                          cfg.ablation.points()),
        "bert_variants": ([(m, s) for m in cfg.variants.models for s in VARIANT_SYSTEMS],
                          cfg.variants.points()),
        "bert_mha": ([(op, s) for op in OPS["bert_mha"] for s in SYSTEMS["bert_mha"]],
                     cfg.mha.points()),
        "bert_fused_ops": ([(op, s) for op in OPS["bert_fused_ops"]
                            for s in SYSTEMS["bert_fused_ops"]], cfg.fused_ops.points()),
    }
    out = {}
    for experiment, (systems, points) in cases.items():
        found = [Job(experiment, subject, system, b, s) for subject, system in systems
                 for b, s in points]
        if found:
            out[experiment] = found
    return out
