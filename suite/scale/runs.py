"""Measured training runs as a CSV, one row per run: the one way runs enter the scale model,
whether a paper's (``suite.scale.datasets`` turns each published table into these rows) or a
user's (``seedbench scale-model validate RUNS.csv``).

Columns (empty = not given; names are exact, an unknown column is an error):
  id            name of the run (required), unique within its dataset and system
  group         runs of one layout sweep, ranked by time per sequence; default: the same model,
                sequence length and GPU count
  system        whose overlaps, attention kernel and DP mode fill the empty layout columns
                (``suite.scale.systems.SYSTEMS``; ``--system-like`` for a whole file)
  dataset       where the row comes from (default: the file's name)
  model         layers, hidden, heads, seq_len, vocab (required); kv_heads (= heads),
                ffn_hidden (= 4 hidden), gated_mlp (false; true: SwiGLU, three matrices),
                tied_embeddings (true), position_embeddings (true: learned; false: rotary),
                dropout (true), norm (layernorm | rmsnorm)
  GPU           gpu: a preset (``suite.scale.hardware.HARDWARE``), or its numbers: peak_tflops
                (dense bf16), hbm_gbps, nvlink_gbps and network_gbps (GB/s per GPU, one
                direction), sms; optional hbm_gb, hbm_efficiency (0.88: the fraction of
                hbm_gbps that streaming kernels reach), gpus_per_node (8), network_busbw_gbps (the
                bus bandwidth an all-reduce across nodes was measured at, nccl-tests' busbw:
                caps every transfer between nodes, for a fabric slower than its NICs),
                nccl_channels_node (24) and nccl_channels_network (16: NCCL's ring channels
                inside a node and across nodes, one SM each while a hidden collective runs;
                the second is twice the NICs of a node); numbers given with a preset override
                it
  layout        tp, pp, micro_batch, global_batch (required); gpus or dp; virtual_stages (1),
                first_stage_layers, last_stage_layers, recompute (none | selective | full),
                recompute_fraction (the share of layers full recompute covers, 1),
                recompute_early_stop (false; true: PyTorch's non-reentrant checkpoint from
                torch 2.1, which does not re-run the MLP's output projection),
                sequence_parallel (false), attention (unfused | fused_softmax | flash1 |
                flash2 | flash), attention_unpad (false; true: the kernel called through
                flash-attn's unpad_input / pad_input copies, llm-foundry's MPT with flash),
                dp_mode (allreduce | zero1 | zero1_allreduce | zero2 | fsdp |
                fsdp2 | fsdp_grad_op), tp_overlap, pp_overlap, dp_overlap (fractions hidden),
                grad_bytes (4: a gradient's bytes, held and reduced; zero1_allreduce holds fp32
                and reduces at these), loss (megatron | eager | fused: the cross entropy's kernels,
                ``suite.scale.layout.LOSS_KINDS``), logit_metrics (0: the training metrics
                computed on each micro-batch's logits outside autograd, an eager cross entropy
                each; Composer's trainer computes 2)
  measured      iteration_time_s, or tokens_per_s (the whole job's), or only mfu_percent (then
                MFU is what is compared), or layer_time_ms: one layer's forward + backward (and
                recompute) per micro-batch on its TP group, as a benchmark of one layer times it
                (then that is what is compared and fitted: it leaves out the optimizer, the
                embeddings and the step's fixed costs); at least one, unless the run ran out
                of memory
  memory        outcome (ok | oom: the run ran out of memory, and has no time), memory_gib
                (the peak on the fullest GPU, GiB, as nvidia-smi or torch's max reserved
                shows it): compared with the memory model (``suite.scale.memory``), never fitted
Booleans read true/false/1/0/yes/no. Each bad row is one error line naming the file, the row (1
= the first data row), its id and the column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import jsonschema
import pandas as pd

from suite.scale.hardware import HARDWARE, Hardware, preset
from suite.scale.layout import ATTENTION, DP_MODES, LOSS_KINDS, RECOMPUTE, Layout
from suite.scale.model import NORMS, ModelConfig
from suite.scale.step import stage_works
from suite.scale.systems import SYSTEMS, System

INTEGER = ("layers", "hidden", "heads", "seq_len", "vocab", "kv_heads", "ffn_hidden", "gpus",
           "tp", "pp", "dp", "virtual_stages", "micro_batch", "global_batch",
           "first_stage_layers", "last_stage_layers", "grad_bytes", "gpus_per_node", "sms",
           "nccl_channels_node", "nccl_channels_network")
COUNT = ("logit_metrics",)  # integers that may be 0
NUMBER = ("peak_tflops", "hbm_gbps", "hbm_gb", "hbm_efficiency", "nvlink_gbps", "network_gbps",
          "network_busbw_gbps", "iteration_time_s", "tokens_per_s", "mfu_percent",
          "layer_time_ms", "memory_gib")
FRACTION = ("tp_overlap", "pp_overlap", "dp_overlap", "recompute_fraction")
BOOLEAN = ("gated_mlp", "tied_embeddings", "position_embeddings", "dropout", "sequence_parallel",
           "recompute_early_stop", "attention_unpad")
OUTCOMES = ("ok", "oom")  # ran; ran out of memory
CHOICES = {"gpu": tuple(sorted(HARDWARE)), "system": tuple(sorted(SYSTEMS)),
           "recompute": RECOMPUTE, "attention": ATTENTION, "dp_mode": DP_MODES, "norm": NORMS,
           "loss": tuple(LOSS_KINDS), "outcome": OUTCOMES}
TEXT = ("id", "group", "dataset", "notes")
CUSTOM_GPU = ("peak_tflops", "hbm_gbps", "nvlink_gbps", "network_gbps", "sms")
MEASURED = ("iteration_time_s", "tokens_per_s", "mfu_percent", "layer_time_ms")
COLUMNS = TEXT + INTEGER + COUNT + NUMBER + FRACTION + BOOLEAN + tuple(CHOICES)
# A user's runs without a system: nothing overlapped, FlashAttention, DDP.
PLAIN = System(hardware="", attention="flash")

ROW_SCHEMA = {
    "type": "object",
    "required": ["id", "layers", "hidden", "heads", "seq_len", "vocab", "tp", "pp",
                 "micro_batch", "global_batch"],
    "additionalProperties": False,
    "properties": {
        **{c: {"type": "string", "minLength": 1} for c in TEXT},
        **{c: {"type": "integer", "minimum": 1} for c in INTEGER},
        **{c: {"type": "integer", "minimum": 0} for c in COUNT},
        **{c: {"type": "number", "exclusiveMinimum": 0} for c in NUMBER},
        **{c: {"type": "number", "minimum": 0, "maximum": 1} for c in FRACTION},
        **{c: {"type": "boolean"} for c in BOOLEAN},
        **{c: {"enum": list(v)} for c, v in CHOICES.items()},
    },
}
_VALIDATOR = jsonschema.Draft202012Validator(ROW_SCHEMA)


@dataclass(frozen=True)
class Run:
    """One measured run as the model's inputs and what was measured."""
    dataset: str
    system: str
    id: str
    group: str
    model: ModelConfig
    layout: Layout
    hardware: Hardware
    iteration_time_s: float | None
    mfu_percent: float | None
    layer_time_s: float | None = None  # one layer's measured time (``layer_time_ms``)
    memory_gib: float | None = None  # the measured peak on the fullest GPU
    outcome: str = "ok"  # "oom": ran out of memory, no time

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @property
    def timed(self) -> str:
        """What the run's measured time covers: "iteration", or one "layer"."""
        return "iteration" if self.layer_time_s is None else "layer"

    @property
    def measured_s(self) -> float | None:
        """The measured seconds of what ``timed`` names (None where only MFU was measured)."""
        return self.iteration_time_s if self.layer_time_s is None else self.layer_time_s


class RunsError(ValueError):
    """Bad rows: one line each."""


def _coerce(column: str, text: str):
    """A CSV cell as its column's type; a cell that does not parse is returned as is, for the
    schema to name."""
    if column in INTEGER or column in COUNT:
        try:
            value = float(text)
            return int(value) if value.is_integer() else text
        except ValueError:
            return text
    if column in NUMBER or column in FRACTION:
        try:
            return float(text)
        except ValueError:
            return text
    if column in BOOLEAN:
        return {"true": True, "1": True, "yes": True, "false": False, "0": False,
                "no": False}.get(text.strip().lower(), text)
    return text


def _row_errors(row: dict, system_like: str | None) -> list[str]:
    errors = []
    for e in sorted(_VALIDATOR.iter_errors(row), key=lambda e: list(e.path)):
        if e.validator == "additionalProperties":
            extra = sorted(set(row) - set(ROW_SCHEMA["properties"]))
            errors.append(f"unknown column(s) {extra}; valid: {sorted(COLUMNS)}")
        elif e.path:
            errors.append(f"column {e.path[0]}: {e.message}")
        else:
            errors.append(e.message)
    has_system = "system" in row or system_like is not None
    if "gpu" not in row and not has_system and not all(c in row for c in CUSTOM_GPU):
        errors.append(f"column gpu: empty; give a preset {sorted(HARDWARE)} or all of "
                      f"{list(CUSTOM_GPU)}")
    if "gpus" not in row and "dp" not in row:
        errors.append("column gpus: empty (give gpus or dp)")
    if row.get("outcome") == "oom":
        if any(c in row for c in MEASURED):
            errors.append("column outcome: oom, so the run has no time; leave "
                          f"{[c for c in MEASURED if c in row]} empty")
    elif not any(c in row for c in MEASURED):
        errors.append(f"column iteration_time_s: empty; a run needs one of {list(MEASURED)} "
                      "(or outcome oom)")
    if "layer_time_ms" in row and any(c in row for c in MEASURED if c != "layer_time_ms"):
        errors.append("column layer_time_ms: one layer's time, so the row measures nothing else; "
                      "give iteration_time_s, tokens_per_s and mfu_percent on a row of their own")
    return errors


def _hardware(row: dict) -> Hardware:
    hw = preset(row["gpu"]) if "gpu" in row else Hardware(
        "custom", peak_flops=1.0, nvlink_bw=1.0, network_bw=1.0, hbm_bw=1.0, hbm_bytes=80e9,
        sms=row["sms"])
    scale = {"peak_tflops": ("peak_flops", 1e12), "hbm_gbps": ("hbm_bw", 1e9),
             "nvlink_gbps": ("nvlink_bw", 1e9), "network_gbps": ("network_bw", 1e9),
             "network_busbw_gbps": ("network_busbw", 1e9),
             "hbm_gb": ("hbm_bytes", 1e9), "hbm_efficiency": ("hbm_efficiency", 1),
             "gpus_per_node": ("gpus_per_node", 1), "sms": ("sms", 1),
             "nccl_channels_node": ("nccl_channels_node", 1),
             "nccl_channels_network": ("nccl_channels_network", 1)}
    given = {field: row[c] * unit for c, (field, unit) in scale.items() if c in row}
    return replace(hw, **given)


def _run(row: dict, dataset: str, system_like: str | None) -> Run:
    name = row.get("system", system_like)
    spec = SYSTEMS[name] if name else PLAIN
    hw = _hardware(row) if "gpu" in row or name is None else _hardware(
        {"gpu": spec.hardware, **row})
    model_fields = ("layers", "hidden", "heads", "seq_len", "vocab", "kv_heads", "ffn_hidden",
                    "gated_mlp", "tied_embeddings", "position_embeddings", "dropout", "norm")
    model = ModelConfig(**{f: row[f] for f in model_fields if f in row})
    tp, pp = row["tp"], row["pp"]
    if "dp" in row:
        dp = row["dp"]
        if "gpus" in row and row["gpus"] != tp * pp * dp:
            raise ValueError(f"gpus={row['gpus']} is not tp * pp * dp = {tp * pp * dp}")
    else:
        if row["gpus"] % (tp * pp):
            raise ValueError(f"gpus={row['gpus']} is not a multiple of tp * pp = {tp * pp}")
        dp = row["gpus"] // (tp * pp)
    v, recompute = row.get("virtual_stages", 1), row.get("recompute", "none")
    full = row.get("recompute_fraction", 1.0) if recompute == "full" else 0.0
    layout_fields = ("virtual_stages", "recompute", "sequence_parallel", "attention", "dp_mode",
                     "tp_overlap", "pp_overlap", "dp_overlap", "grad_bytes",
                     "first_stage_layers", "last_stage_layers", "recompute_fraction", "loss",
                     "recompute_early_stop", "logit_metrics", "attention_unpad")
    settings = {**spec.layout_defaults(v, full, row.get("sequence_parallel", False)),
                **{f: row[f] for f in layout_fields if f in row}}
    layout = Layout(tp=tp, pp=pp, dp=dp, micro_batch=row["micro_batch"],
                    global_batch=row["global_batch"], **settings)
    stage_works(model, layout, hw)  # a layout that cannot exist fails here, not later
    if "iteration_time_s" in row:
        time = row["iteration_time_s"]
    elif "tokens_per_s" in row:
        time = layout.global_batch * model.seq_len / row["tokens_per_s"]
    else:
        time = None
    group = row.get("group") or (f"{model.layers}x{model.hidden} s{model.seq_len} "
                                 f"{layout.gpus} GPUs")
    layer = row["layer_time_ms"] / 1e3 if "layer_time_ms" in row else None
    return Run(row.get("dataset", dataset), name or "(plain)", row["id"], group, model, layout,
               hw, time, row.get("mfu_percent"), layer, row.get("memory_gib"),
               row.get("outcome", "ok"))


def runs_from_frame(frame: pd.DataFrame, source: str, system_like: str | None = None) -> list[Run]:
    """Runs from rows in the schema above (cells as text or typed); every bad row is reported
    at once, one line each."""
    if system_like is not None and system_like not in SYSTEMS:
        raise RunsError(f"--system-like {system_like!r} is not one of {sorted(SYSTEMS)}")
    if frame.empty:
        raise RunsError(f"{source}: no rows")
    runs, errors, seen = [], [], set()
    for i, record in enumerate(frame.to_dict("records"), start=1):
        row = {c: _coerce(c, str(v).strip()) for c, v in record.items()
               if not (pd.isna(v) or str(v).strip() == "")}
        rid = row.get("id", "?")
        key = (row.get("dataset"), row.get("system"), rid)
        problems = _row_errors(row, system_like)
        if not problems and key in seen:
            problems = [f"column id: {rid!r} is used by an earlier row"]
        if not problems:
            try:
                runs.append(_run(row, Path(source).stem, system_like))
            except ValueError as e:
                problems = [f"layout cannot exist: {e}"]
        seen.add(key)
        errors += [f"{source}: row {i} (id {rid}): {p}" for p in problems]
    if errors:
        raise RunsError("\n".join(errors))
    return runs


def read_runs(path: Path, system_like: str | None = None) -> list[Run]:
    """Runs from a CSV file in the schema above."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    return runs_from_frame(frame, str(path), system_like)
