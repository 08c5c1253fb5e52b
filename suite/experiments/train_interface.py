"""The arguments of one training run, defined once: ``seedbench train`` takes them, its
launcher hands them to every rank (``rank_argv``), and each rank reads them with the same
definition (``suite.experiments.llm_train``). Torch-free: building the CLI imports it."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_CHECK_STEPS = 3  # steps of the correctness gate against the single-process reference

RUN_ARGUMENTS: tuple[tuple[str, dict], ...] = (
    ("--trainer", {"required": True, "help": "a registered trainer (seedbench trainers)"}),
    ("--train-json", {"required": True, "help": "the run's TrainConfig section as JSON"}),
    ("--label", {"help": "the run's name in its experiment (a size, an ablation step), kept in "
                         "the record"}),
    ("--check-steps", {"type": int, "default": DEFAULT_CHECK_STEPS,
                       "help": "steps compared with the single-process reference (0: no gate)"}),
    ("--peak", {"type": Path, "help": "peak.json from `seedbench peak`"}),
    ("--out", {"type": Path, "required": True, "help": "the record (rank 0 writes it)"}),
    ("--steplog", {"type": Path, "required": True,
                   "help": "the JSON-lines step log (rank 0 writes it)"}),
)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, kwargs in RUN_ARGUMENTS:
        parser.add_argument(flag, **kwargs)


def rank_argv(args: argparse.Namespace, experiment: str) -> list[str]:
    """``args``' run arguments as every rank's command line."""
    argv = ["--experiment", experiment]
    for flag, _ in RUN_ARGUMENTS:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is not None:
            argv += [flag, str(value)]
    return argv


# The keys of a training record's ``derived`` (written by ``suite.experiments.llm_train``, read
# by ``suite.analysis.llm_tables`` and the GPU pack): constants, so that a misspelt key is a
# NameError, not a column of None.
TOKENS_PER_S = "tokens_per_s"
TOKENS_PER_STEP = "tokens_per_step"
FLOPS_PER_TOKEN = "flops_per_token"
HARDWARE_FLOPS_PER_TOKEN = "hardware_flops_per_token"
FLOP_FORMULA = "flop_formula"
MFU = "mfu"  # suite.mfu.MfuFigure.as_dict(), or None without a peak
HFU = "hfu"
PEAK_DEVICES = "peak_devices"
PEAK_NOTE = "peak_note"
MFU_DENOMINATORS = "mfu_denominators"
PEAK_MEM_BYTES = "peak_mem_bytes"
PEAK_MEM_BYTES_PER_RANK = "peak_mem_bytes_per_rank"
PEAK_MEM_KIND = "peak_mem_kind"
FIRST_LOSS = "first_loss"
FINAL_LOSS = "final_loss"
EVAL_LOSS = "eval_loss"
EVAL_BATCHES = "eval_batches"
TOKENS_SEEN = "tokens_seen"
FINAL_GRAD_NORM = "final_grad_norm"
LOSSES_FINITE = "losses_finite"
STEPLOG = "steplog"
TRAINER = "trainer"
# the per-rank step monitor (suite.resilience.monitor): each rank's median compute per timed
# step, the median step and the rest; the ranks it names as stragglers and every rank's ratio
RANK_TABLE = "rank_table"
STRAGGLERS = "stragglers"
MODEL_PATHS = "model_paths"  # reference_impl.gpt.GPT.paths(): which code ran attention, blocks
