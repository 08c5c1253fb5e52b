# seedbench workflow: config -> runs (one job, one process each) -> records -> table -> figures
# -> report. Default config: the CPU-sized smoke sweep; see README for the paper-scale one.
from snakemake.utils import min_version

min_version("9.0")


configfile: "workflows/config/smoke.yaml"


wildcard_constraints:
    baseline=r"[a-z0-9][a-z0-9_-]*",
    batch=r"\d+",
    experiment=r"(bert|llm|vwn|pma)_[a-z_]+",
    subject=r"[a-z0-9_]+",
    max_len=r"\d+",
    program=r"[a-z0-9][a-z0-9_]*",


include: "workflows/rules/common.smk"
include: "workflows/rules/peak.smk"
include: "workflows/rules/bert_varlen.smk"
include: "workflows/rules/llm.smk"
include: "workflows/rules/pretrain.smk"
include: "workflows/rules/report.smk"


rule all:
    default_target: True
    input:
        REPORT_HTML,
