# seedbench workflow: config -> runs (one job, one process each) -> records -> table -> figures
# -> report. Default config: the CPU-sized smoke sweep; see README for the paper-scale one.
from snakemake.utils import min_version

from suite.experiments import registry as experiments

min_version("9.0")


configfile: "workflows/config/smoke.yaml"


wildcard_constraints:
    system=r"[a-z0-9][a-z0-9_-]*",
    batch=r"\d+",
    experiment=experiments.pattern(),
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
