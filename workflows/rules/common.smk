# Config validation, shared paths and wildcard constraints.
import json

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from suite import config as suite_config
from suite.baselines import registry
from suite.experiments import llm_plan
from suite.trainers import registry as trainer_registry
from suite.config import BertVarlenConfig
from suite.env import machine_slug


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


wildcard_constraints:
    baseline=r"[a-z0-9][a-z0-9_-]*",
    batch=r"\d+",
    experiment=r"(bert|llm)_[a-z_]+",
    subject=r"[a-z0-9_]+",
    max_len=r"\d+",
    program=r"[a-z0-9][a-z0-9_]*",
