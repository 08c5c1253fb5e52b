# seedbench workflow: config -> runs (one job, one process each) -> records -> table -> figures
# and analyses -> report of every machine under results/. Default config: quick.yaml (minutes
# on a CPU); README lists the others. make report: --config report_only=true.
from snakemake.utils import min_version

from suite.experiments import registry as experiments

min_version("9.0")


# The quick default when no --configfile is given; a named config is complete on its own (it is
# not merged over the default, so what it leaves out takes the schema's defaults).
if not workflow.overwrite_configfiles:

    configfile: "workflows/config/quick.yaml"


wildcard_constraints:
    system=r"[a-z0-9][a-z0-9_-]*",
    batch=r"\d+",
    experiment=experiments.pattern(),
    subject=r"[a-z0-9_]+",
    max_len=r"\d+",
    program=r"[a-z0-9][a-z0-9_]*",


include: "workflows/rules/common.smk"


# The runs of this machine; with report_only (make report) nothing runs and every machine
# folder is rebuilt from the records on disk.
if not REPORT_ONLY:

    include: "workflows/rules/peak.smk"
    include: "workflows/rules/bert_varlen.smk"
    include: "workflows/rules/llm.smk"
    include: "workflows/rules/pretrain.smk"
    include: "workflows/rules/serving.smk"


include: "workflows/rules/tables.smk"
include: "workflows/rules/report.smk"


rule all:
    default_target: True
    input:
        REPORT_HTML,
