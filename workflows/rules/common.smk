# Config validation, shared paths, the job plans and the input functions of the rules (these
# live here and the rules in their own files, as the Snakemake linter asks).
import json
import os
import re
import shutil

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from suite import config as suite_config
from suite.baselines.external_build import BUILD_ROOT, STAMP as EXTERNAL_STAMP
from suite.baselines.registry import baselines
from suite.config import EXTERNAL_PREFIX, BertVarlenConfig
from suite.env import machine_slug
from suite import machine_results
from suite.experiments import llm_plan, pretrain_plan, serving_plan
from suite.experiments import registry as experiments
from suite.experiments.plan import jobs, speedup_baseline
from suite.workflow.source_digest import digest as source_digest
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
# report_only (make report): every machine folder is read from disk and nothing runs.
REPORT_ONLY = config["report_only"]
# Timed jobs claim every core so that nothing runs beside them. `workflow.cores` raises where no
# --cores is given (--report, --lint), where the value does not matter.
TIMED_THREADS = workflow._cores or 1
REPORT_HTML = f"{REPORTS}/index.html"
# The derived rules (tables, figures, analyses, the report) carry the suite's source digest: a
# new version of the package builds them again from the same records; timed rules do not.
SUITE_DIGEST = source_digest()
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


# The end-to-end experiments' points share their float64 oracle through this folder: the first
# system's job at a point computes it, the others read it (suite.experiments.bert_oracle). A
# cache of the run, removed when the run succeeds (bert_varlen.smk).
ORACLE_DIR = f"{RESULTS}/oracles"


def oracle_flag(wildcards):
    return f"--oracle-dir {ORACLE_DIR}" if experiments.shares_oracle(wildcards.experiment) else ""


# ---- the MegaScale runs (suite.experiments.llm_plan)

LLM_JOBS = {job.path(RESULTS): job for js in llm_plan.jobs(config).values() for job in js}
LLM_WINDOW_JOBS = {job.label: job for job in llm_plan.window_jobs(config)}
LLM_RESILIENCE_JOBS = {f"{job.trainer}-{job.group}": job
                       for job in llm_plan.resilience_jobs(config)}
RESILIENCE_SYSTEMS = {job.group: job.systems for job in LLM_RESILIENCE_JOBS.values()}


def resilience_param(group, key):
    """A param of a trainer's resilience job of ``group``, from the wildcards alone (JSON for
    the dicts, keys sorted)."""

    def param(wildcards):
        value = getattr(LLM_RESILIENCE_JOBS[f"{wildcards.trainer}-{group}"], key)
        return json.dumps(value, sort_keys=True) if isinstance(value, dict) else value

    return param


LLM_EXPERIMENTS = sorted({job.experiment for job in LLM_JOBS.values()}) + (
    [llm_plan.WINDOW_EXPERIMENT] if LLM_WINDOW_JOBS else []) + (
    [llm_plan.RESILIENCE_EXPERIMENT] if LLM_RESILIENCE_JOBS else []) + (
    ["llm_scale"] if config["llm"]["enabled"] and config["llm"]["scale"]["enabled"] else [])


def llm_steplogs(wildcards):
    """The step log beside each training record: the source of the loss curves (the attention
    benchmark's and the resilience runs' records have none)."""
    if wildcards.experiment in (llm_plan.WINDOW_EXPERIMENT, llm_plan.RESILIENCE_EXPERIMENT):
        return []
    return [p.removesuffix(".json") + ".steps.jsonl" for p in records(wildcards)]


def llm_job(wildcards):
    """The planned run of an llm_point job, from the wildcards alone: Snakemake's params trigger
    counts only params that are functions of the wildcards (resources get no output either)."""
    return LLM_JOBS[f"{RESULTS}/{wildcards.experiment}/{wildcards.label}/{wildcards.trainer}.json"]


# ---- the VWN and PMA loss runs (suite.experiments.pretrain_plan)

try:
    PRETRAIN_PLAN = pretrain_plan.jobs(config)
except suite_config.ConfigError as e:
    raise WorkflowError(str(e))
PRETRAIN_JOBS = {job.path(RESULTS): job for js in PRETRAIN_PLAN.values() for job in js}
def pretrain_record(wildcards):
    return f"{RESULTS}/{wildcards.experiment}/{wildcards.label}/seed{wildcards.seed}.json"


def pretrain_job(wildcards):
    return PRETRAIN_JOBS[pretrain_record(wildcards)]


def pretrain_checkpoints(wildcards):
    """The merging study writes its checkpoints beside its record (removed after the job
    unless pma.keep_checkpoints)."""
    if pretrain_job(wildcards).experiment != "pma_merging":
        return ""
    stem = pretrain_record(wildcards).removesuffix(".json")
    return f"--checkpoints {stem}.checkpoints"


def pretrain_threads(wildcards):
    """The thread count of the run (1 on CPU: jobs run side by side, one per core); 0 means
    the run takes the machine."""
    job = pretrain_job(wildcards)
    train = job.spec["train"] if job.experiment == "pma_merging" else job.spec
    return train.get("threads") or TIMED_THREADS


# ---- the serving runs under MLPerf LoadGen (suite.experiments.serving_plan)

try:
    SERVING, SERVING_PLAN = serving_plan.jobs(config)
    baselines.check_names(SERVING.baselines() if SERVING_PLAN else [])
except (suite_config.ConfigError, KeyError) as e:
    raise WorkflowError(f"{serving_plan.SECTION}: {e.args[0]}")
SERVING_SECTION = json.dumps(SERVING.to_dict(), sort_keys=True)


# ---- the machines of the report: this run's folder (its records are the plan's, run here when
# missing) and every other machine folder under results/ and results/published/ (their records
# are what is on disk: suite.machine_results). Derived files go beside each machine's records.
# What the figure and analysis of each section read is declared by its spec
# (suite.experiments.registry).
RUN = {*BERT_JOBS, *LLM_EXPERIMENTS, *PRETRAIN_PLAN,
       *(job.experiment for job in SERVING_PLAN)}
PLANNED = None if REPORT_ONLY else RESULTS
MACHINES = {m.path: m for m in machine_results.discover()}
if PLANNED:
    MACHINES[PLANNED] = machine_results.MachineResults(PLANNED, published=False)
if not MACHINES:
    raise WorkflowError("no machine's results under results/ or results/published/ (a folder "
                        "with a peak.json): run `make reproduce` first")
MACHINE_ROOTS = sorted(MACHINES, key=lambda p: (p != PLANNED, MACHINES[p].published, p))


def sections_of(root):
    """The experiments a machine folder's report sections cover, in registry order."""
    if root == PLANNED:
        return [name for name in experiments.names() if name in RUN]
    return machine_results.experiments_on_disk(root)


SECTIONS = {root: sections_of(root) for root in MACHINE_ROOTS}


wildcard_constraints:
    root="|".join(re.escape(root) for root in MACHINE_ROOTS),


def records_of(root, experiment):
    """The records behind the table of one experiment in one machine folder (none for the
    analytical scale model)."""
    if root != PLANNED:
        return machine_results.records_on_disk(root, experiment)
    family = experiments.get(experiment).family
    if family == "bert":
        return [job.path(RESULTS) for job in BERT_JOBS[experiment]]
    if experiment == llm_plan.WINDOW_EXPERIMENT:
        return [p for job in LLM_WINDOW_JOBS.values() for p in job.paths(RESULTS)]
    if experiment == llm_plan.RESILIENCE_EXPERIMENT:
        return [p for job in LLM_RESILIENCE_JOBS.values() for p in job.paths(RESULTS)]
    if family == "llm":
        return sorted(p for p, job in LLM_JOBS.items() if job.experiment == experiment)
    if family == "pretrain":
        return [job.path(RESULTS) for job in PRETRAIN_PLAN[experiment]]
    if family == "serving":
        return [job.path(RESULTS) for job in SERVING_PLAN if job.experiment == experiment]
    return []


def records(wildcards):
    return records_of(wildcards.root, wildcards.experiment)


def padded_baseline(wildcards):
    """What the speedups of a BERT table divide by: this config's padded baseline, or the one
    the records on disk were run with."""
    if wildcards.root == PLANNED:
        padded = BERT.padded_baseline
    else:
        section = machine_results.record_config(records(wildcards))
        padded = section.get("padded_baseline", BERT.padded_baseline)
    return speedup_baseline(padded, wildcards.experiment)


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
    spec, root = experiments.get(wildcards.experiment), wildcards.root
    inputs = {"table": f"{root}/{spec.name}/table.csv", **paper_inputs(spec.name)}
    if spec.curves:
        inputs["curves"] = f"{root}/{spec.name}/curves.csv"
    if spec.roofline:
        inputs["peak"] = f"{root}/peak.json"
    return inputs


def figure_flags(wildcards, input):
    flags = [paper_flags(wildcards.experiment, input)]
    flags += [f"--{k} {input[k]}" for k in ("curves", "peak") if k in input.keys()]
    return " ".join(flags)


def analysis_inputs(wildcards):
    spec, root = experiments.get(wildcards.experiment), wildcards.root
    inputs = {"table": f"{root}/{spec.name}/table.csv", **paper_inputs(spec.name),
              "records": records_of(root, spec.name)}
    for other in spec.reads_tables:
        if other in SECTIONS[root]:
            inputs[f"table_of_{other}"] = f"{root}/{other}/table.csv"
    if spec.table:  # its table step measured the claims
        inputs["claims"] = f"{root}/{spec.name}/claims.csv"
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


# ---- the report: every section of every machine folder, each machine's peak.json
REPORT_SECTIONS = [(root, e) for root in MACHINE_ROOTS for e in SECTIONS[root]]


def report_inputs(wildcards):
    return {
        "tables": [f"{root}/{e}/table.csv" for root, e in REPORT_SECTIONS],
        "figures": [f"{root}/figures/{e}.svg" for root, e in REPORT_SECTIONS],
        "analyses": [f"{root}/{e}/analysis.json" for root, e in REPORT_SECTIONS],
        "peaks": [f"{root}/peak.json" for root in MACHINE_ROOTS],
    }


def report_flags(wildcards, input):
    """--machine PATH LABEL PEAK per machine, --section PATH EXPERIMENT TABLE SVG ANALYSIS."""
    flags = [f"--machine {root} {MACHINES[root].label(PLANNED)!r} {peak}"
             for root, peak in zip(MACHINE_ROOTS, input.peaks)]
    flags += [f"--section {root} {e} {t} {f} {a}" for (root, e), t, f, a
              in zip(REPORT_SECTIONS, input.tables, input.figures, input.analyses)]
    return " ".join(flags)
