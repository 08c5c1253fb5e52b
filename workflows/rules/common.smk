# Config validation, shared paths, the job plans and the input functions of the rules (these
# live here and the rules in their own files, as the Snakemake linter asks).
import json
import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from suite import config as suite_config
from suite.baselines.external_build import BUILD_ROOT, STAMP as EXTERNAL_STAMP
from suite.baselines.registry import baselines
from suite.config import EXTERNAL_PREFIX, BertVarlenConfig
from suite.env import machine_slug
from suite.experiments import llm_plan, pretrain_plan
from suite.experiments import registry as experiments
from suite.experiments.plan import jobs, speedup_baseline
from suite.trainers import registry as trainer_registry


# Our own pass first: its messages name the key, the bad value and what is allowed. Then the
# Snakemake validate checks against the same schema and fills in the defaults.
try:
    suite_config.validate(config)
except suite_config.ConfigError as e:
    raise WorkflowError(str(e))
validate(config, str(suite_config.SCHEMA_PATH))

MACHINE = machine_slug() if config["machine"] == "auto" else config["machine"]
RESULTS = f"results/{MACHINE}"
REPORTS = "reports"
# Timed jobs claim every core so that nothing runs beside them. `workflow.cores` raises where no
# --cores is given (--report, --lint), where the value does not matter.
TIMED_THREADS = workflow._cores or 1
REPORT_HTML = f"{REPORTS}/index.html"
try:
    BERT = BertVarlenConfig.from_dict(config["bert_varlen"])
    baselines.check_names(BERT.registered_baselines())
except (suite_config.ConfigError, KeyError) as e:
    raise WorkflowError(f"bert_varlen: {e.args[0]}")
try:
    trainer_registry.check_names(llm_plan.trainers(config))
except (suite_config.ConfigError, KeyError) as e:
    raise WorkflowError(f"llm: {e.args[0]}")



# ---- jobs of the ByteTransformer family (suite.experiments.plan)

EXTERNAL_BUILDS = BUILD_ROOT.as_posix()
BERT_SECTION = json.dumps(BERT.to_dict(), sort_keys=True)

BERT_JOBS = jobs(BERT)


def external_build_stamp(wildcards):
    """An external program with a source checkout is built before its runs."""
    name = wildcards.system.removeprefix(EXTERNAL_PREFIX)
    if wildcards.system.startswith(EXTERNAL_PREFIX) and BERT.external[name]["source"]:
        return [f"{EXTERNAL_BUILDS}/{name}/{EXTERNAL_STAMP}"]
    return []


# ---- the MegaScale runs (suite.experiments.llm_plan)

LLM_JOBS = {job.path(RESULTS): job for js in llm_plan.jobs(config).values() for job in js}
LLM_EXPERIMENTS = sorted({job.experiment for job in LLM_JOBS.values()}) + (
    ["llm_scale"] if config["llm"]["enabled"] and config["llm"]["scale"]["enabled"] else [])


def llm_steplogs(wildcards):
    """The step log beside each training record: the source of the loss curves."""
    return [p.removesuffix(".json") + ".steps.jsonl" for p in records(wildcards)]


def llm_job(wildcards, output):
    return LLM_JOBS[output.record]


# ---- the VWN and PMA loss runs (suite.experiments.pretrain_plan)

try:
    PRETRAIN_PLAN = pretrain_plan.jobs(config)
except suite_config.ConfigError as e:
    raise WorkflowError(str(e))
PRETRAIN_JOBS = {job.path(RESULTS): job for js in PRETRAIN_PLAN.values() for job in js}
def pretrain_job(output):
    return PRETRAIN_JOBS[output.record]


def pretrain_checkpoints(output):
    """The merging study writes its checkpoints beside its record (removed after the job
    unless pma.keep_checkpoints)."""
    if pretrain_job(output).experiment != "pma_merging":
        return ""
    stem = output.record.removesuffix(".json")
    return f"--checkpoints {stem}.checkpoints"


def pretrain_threads(wildcards):
    """The thread count of the run (1 on CPU: jobs run side by side, one per core); 0 means
    the run takes the machine."""
    path = f"{RESULTS}/{wildcards.experiment}/{wildcards.label}/seed{wildcards.seed}.json"
    job = PRETRAIN_JOBS[path]
    train = job.spec["train"] if job.experiment == "pma_merging" else job.spec
    return train.get("threads") or TIMED_THREADS


# ---- sections of the report: every experiment this config runs, in registry order.
# What the figure and analysis of each read is declared by its spec (suite.experiments.registry).
RUN = {*BERT_JOBS, *LLM_EXPERIMENTS, *PRETRAIN_PLAN}
SECTIONS = [name for name in experiments.names() if name in RUN]


def records_of(experiment):
    """The records behind the table of one experiment (none for the analytical scale model)."""
    family = experiments.get(experiment).family
    if family == "bert":
        return [job.path(RESULTS) for job in BERT_JOBS[experiment]]
    if family == "llm":
        return sorted(p for p, job in LLM_JOBS.items() if job.experiment == experiment)
    if family == "pretrain":
        return [job.path(RESULTS) for job in PRETRAIN_PLAN[experiment]]
    return []


def records(wildcards):
    return records_of(wildcards.experiment)


def paper_inputs(experiment):
    """The paper CSVs the spec of an experiment declares, as named inputs paper_<role>."""
    return {f"paper_{role}": path
            for role, path in experiments.get(experiment).paper_paths().items()}


def paper_flags(experiment, input):
    """--paper ROLE=PATH for each declared paper CSV, from the named inputs paper_<role>."""
    named = dict(input.items())
    return " ".join(f"--paper {role}={named[key]}" for role in experiments.get(experiment).paper
                    if (key := f"paper_{role}") in named)


def figure_inputs(wildcards):
    spec = experiments.get(wildcards.experiment)
    inputs = {"table": f"{RESULTS}/{spec.name}/table.csv", **paper_inputs(spec.name)}
    if spec.curves:
        inputs["curves"] = f"{RESULTS}/{spec.name}/curves.csv"
    if spec.roofline:
        inputs["peak"] = rules.peak.output[0]
    return inputs


def figure_flags(wildcards, input):
    flags = [paper_flags(wildcards.experiment, input)]
    flags += [f"--{k} {input[k]}" for k in ("curves", "peak") if k in input.keys()]
    return " ".join(flags)


def analysis_inputs(wildcards):
    spec = experiments.get(wildcards.experiment)
    inputs = {"table": f"{RESULTS}/{spec.name}/table.csv", **paper_inputs(spec.name),
              "records": records_of(spec.name)}
    for other in spec.reads_tables:
        if other in SECTIONS:
            inputs[f"table_of_{other}"] = f"{RESULTS}/{other}/table.csv"
    if spec.family == "pretrain":  # its table step measured the claims
        inputs["claims"] = f"{RESULTS}/{spec.name}/claims.csv"
    return inputs


def analysis_flags(wildcards, input):
    spec = experiments.get(wildcards.experiment)
    flags = [paper_flags(spec.name, input)]
    named = dict(input.items())
    flags += [f"--table-of {o}={named[key]}" for o in spec.reads_tables
              if (key := f"table_of_{o}") in named]
    if "claims" in input.keys():
        flags.append(f"--claims {input.claims}")
    return " ".join(flags)
