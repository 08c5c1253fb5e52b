# Config validation, shared paths, wildcard constraints, and the job plans and input functions
# the rule files use (Snakemake's lint: functions in one place, rules in their own files).
import json
import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from suite import config as suite_config
from suite.baselines import registry
from suite.baselines.external import BUILD_ROOT, STAMP as EXTERNAL_STAMP
from suite.config import EXTERNAL_PREFIX, BertVarlenConfig
from suite.env import machine_slug
from suite.experiments import llm_plan, pretrain_plan
from suite.experiments.plan import jobs, speedup_baseline
from suite.trainers import registry as trainer_registry


# Our own pass first: its messages name the key, the bad value and what is allowed. Snakemake's
# validate then checks against the same schema and fills in the defaults.
try:
    suite_config.validate(config)
except suite_config.ConfigError as e:
    raise WorkflowError(str(e))
validate(config, "../schemas/config.schema.yaml")

MACHINE = machine_slug() if config["machine"] == "auto" else config["machine"]
RESULTS = f"results/{MACHINE}"
REPORTS = "reports"
# Timed jobs claim every core so that nothing runs beside them. `workflow.cores` raises where no
# --cores is given (--report, --lint), where the value does not matter.
TIMED_THREADS = workflow._cores or 1
REPORT_HTML = f"{REPORTS}/index.html"
try:
    BERT = BertVarlenConfig.from_dict(config["bert_varlen"])
    registry.check_names(BERT.registered_baselines())
except (suite_config.ConfigError, KeyError) as e:
    raise WorkflowError(f"bert_varlen: {e.args[0]}")
try:
    trainer_registry.check_names(llm_plan.trainers(config))
except (suite_config.ConfigError, KeyError) as e:
    raise WorkflowError(f"llm: {e.args[0]}")



# ---- the ByteTransformer family's jobs (suite.experiments.plan)

EXTERNAL_BUILDS = BUILD_ROOT.as_posix()
BERT_SECTION = json.dumps(BERT.to_dict(), sort_keys=True)

BERT_JOBS = jobs(BERT)


def bert_records(wildcards):
    return [job.path(RESULTS) for job in BERT_JOBS[wildcards.experiment]]


def external_build_stamp(wildcards):
    """An external program with a source checkout is built before its runs."""
    name = wildcards.baseline.removeprefix(EXTERNAL_PREFIX)
    if wildcards.baseline.startswith(EXTERNAL_PREFIX) and BERT.external[name]["source"]:
        return [f"{EXTERNAL_BUILDS}/{name}/{EXTERNAL_STAMP}"]
    return []


# ---- the MegaScale runs (suite.experiments.llm_plan)

LLM_JOBS = {job.path(RESULTS): job for js in llm_plan.jobs(config).values() for job in js}
LLM_EXPERIMENTS = sorted({job.experiment for job in LLM_JOBS.values()}) + (
    ["llm_scale"] if config["llm"]["enabled"] and config["llm"]["scale"]["enabled"] else [])


def llm_records(wildcards):
    return sorted(p for p, job in LLM_JOBS.items() if job.experiment == wildcards.experiment)


def llm_job(wildcards, output):
    return LLM_JOBS[output.record]


# ---- the VWN and PMA loss runs (suite.experiments.pretrain_plan)

try:
    PRETRAIN_PLAN = pretrain_plan.jobs(config)
except suite_config.ConfigError as e:
    raise WorkflowError(str(e))
PRETRAIN_JOBS = {job.path(RESULTS): job for js in PRETRAIN_PLAN.values() for job in js}
PRETRAIN_PAPER = {
    "vwn_scaling": ["results/paper/vwn_headline.csv",
                    "results/paper/vwn_table1_a0.8b_m8_500b_tokens.csv"],
    "pma_merging": ["results/paper/pma_headline.csv"],
}


def pretrain_job(output):
    return PRETRAIN_JOBS[output.record]


def pretrain_records(wildcards):
    return [job.path(RESULTS) for job in PRETRAIN_PLAN[wildcards.experiment]]


def pretrain_paper(wildcards):
    return PRETRAIN_PAPER[wildcards.experiment]


def pretrain_checkpoints(output):
    """The merging study writes its checkpoints beside its record (removed after the job
    unless pma.keep_checkpoints)."""
    if pretrain_job(output).experiment != "pma_merging":
        return ""
    return f"--checkpoints {output.record.removesuffix('.json')}.checkpoints"


def pretrain_threads(wildcards):
    """The run's own thread count (1 on CPU: jobs run side by side, one per core); 0 means
    the run takes the machine."""
    path = f"{RESULTS}/{wildcards.experiment}/{wildcards.label}/seed{wildcards.seed}.json"
    job = PRETRAIN_JOBS[path]
    train = job.spec["train"] if job.experiment == "pma_merging" else job.spec
    return train.get("threads") or TIMED_THREADS


# ---- report sections: the paper's numbers each figure shows beside the measured ones
PAPER_OF = {
    "bert_varlen": "results/paper/bytetransformer_readme_a100_fp16_latency.csv",
    "bert_mha": "results/paper/bytetransformer_readme_a100_fp16_latency.csv",
    "llm_ablation": "results/paper/megascale_table3_ablation_175b_256gpu.csv",
    "vwn_scaling": "results/paper/vwn_table1_a0.8b_m8_500b_tokens.csv",
}
BERT_CLAIMS = "results/paper/bytetransformer_abstract_claims.csv"
SECTIONS = [*BERT_JOBS, *LLM_EXPERIMENTS, *PRETRAIN_PLAN]
CLAIM_SECTIONS = list(PRETRAIN_PLAN)  # sections with a measured claims table of their own


def figure_inputs(wildcards):
    inputs = {"table": f"{RESULTS}/{wildcards.experiment}/table.csv"}
    if wildcards.experiment in PAPER_OF:
        inputs["paper"] = PAPER_OF[wildcards.experiment]
    if wildcards.experiment.startswith("bert_"):
        inputs["claims"] = BERT_CLAIMS
    if wildcards.experiment in PRETRAIN_PLAN:
        inputs["curves"] = f"{RESULTS}/{wildcards.experiment}/curves.csv"
    if wildcards.experiment == "bert_varlen":  # the roofline panel's library lines
        inputs["peak"] = rules.peak.output[0]
    return inputs


def figure_flags(wildcards, input):
    return " ".join(f"--{k} {v}" for k, v in input.items() if k in ("paper", "claims", "curves",
                                                                       "peak"))

