"""Variable-length BERT inference: one (baseline, batch size, max length) point -> one record.

Flow of one point: lengths -> padded batch -> canonical HF model -> float64 reference output ->
the baseline prepares its system -> correctness gate -> timing -> statistics and derived metrics.
"""

from __future__ import annotations

import sys
import traceback
from datetime import datetime, timezone
from typing import Any

import torch

from suite import env as envmod
from suite.baselines import registry
from suite.config import BertVarlenConfig
from suite.correctness import compare
from suite.mfu import bert_encoder_flops
from suite.models import canonical_bert
from suite.records import Record, Status
from suite.stats import summarize
from suite.timing import measure, timer_name
from suite.workloads import bert_batch, flop_bounds, varlen_lengths

EXPERIMENT = "bert_varlen"
TASK = "bert-encoder"
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class Unavailable(RuntimeError):
    """This point cannot run on this machine (not a failure of the baseline)."""


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise Unavailable("device 'cuda' requested but torch.cuda.is_available() is False")
    return torch.device(name)


def point_dict(cfg: BertVarlenConfig, batch_size: int, max_seq_len: int) -> dict[str, Any]:
    return {"batch_size": batch_size, "max_seq_len": max_seq_len,
            "distribution": cfg.distribution, "seed": cfg.seed, "dtype": cfg.dtype}


def run_point(cfg: BertVarlenConfig, baseline: str, batch_size: int, max_seq_len: int,
              peak: dict[str, Any] | None = None, show_progress: bool = True) -> Record:
    """Measure one point. Never raises for a problem of the baseline: the record says it."""
    record = Record(EXPERIMENT, baseline, point_dict(cfg, batch_size, max_seq_len),
                    cfg.to_dict(), Status.FAILED,
                    created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    try:
        _run(record, cfg, baseline, batch_size, max_seq_len, peak, show_progress)
    except Unavailable as e:
        record.status, record.reason = Status.UNAVAILABLE, str(e)
    except Exception as e:  # noqa: BLE001 - any error of a run becomes a failed record
        record.status = Status.FAILED
        message = e.args[0] if isinstance(e, KeyError) and e.args else e  # no repr quotes
        record.reason = f"{type(e).__name__}: {message}"
        record.derived["traceback"] = traceback.format_exc(limit=8)
    record.env = envmod.capture()
    return record


def _run(record: Record, cfg: BertVarlenConfig, baseline: str, batch_size: int,
         max_seq_len: int, peak: dict[str, Any] | None, show_progress: bool) -> None:
    threads = cfg.threads or envmod.usable_cores()
    torch.set_num_threads(threads)
    lengths = varlen_lengths(batch_size, max_seq_len, cfg.distribution, seed=cfg.seed)
    batch = bert_batch(lengths, max_seq_len, cfg.model.vocab_size, seed=cfg.seed)
    record.workload = {"lengths": lengths, "total_tokens": sum(lengths),
                       "padded_tokens": batch_size * max_seq_len,
                       **flop_bounds(lengths, max_seq_len)}

    system = registry.create(baseline)
    device = resolve_device(cfg.device)
    ok, why = system.can_run(TASK, device.type, cfg.dtype)
    if not ok:
        raise Unavailable(why)

    model = canonical_bert(cfg.model, max(cfg.max_seq_lens), seed=cfg.seed)
    reference = _reference_output(model, batch, device)
    system.prepare(model, device, TORCH_DTYPES[cfg.dtype])
    dev_batch = batch.to(device)

    check = compare(system.run(dev_batch), reference, batch.attention_mask, cfg.dtype)
    record.correctness = check
    if not check["passed"]:
        record.status, record.reason = Status.INCORRECT, check["reason"]
        return

    progress = _progress_printer(baseline, batch_size, max_seq_len) if show_progress else None
    samples = measure(lambda: system.run(dev_batch), device, cfg.timing, progress)
    stats = summarize(samples)
    record.timing = {"unit": "s", "timer": timer_name(device), "threads": threads,
                     "device": str(device), "policy": cfg.timing.as_dict(),
                     "samples": samples, "stats": stats}
    record.derived = {**derived_metrics(cfg, lengths, max_seq_len, stats["median"],
                                        system.padding_free, device, peak),
                      "system": system.details()}
    record.status, record.reason = Status.OK, ""


@torch.inference_mode()
def _reference_output(model: torch.nn.Module, batch, device: torch.device) -> torch.Tensor:
    """The oracle: HF eager in float64, each sequence run alone with no padding at all, so the
    check also catches a baseline whose padding leaks into valid positions."""
    import copy

    ref_device = device if device.type == "cuda" else torch.device("cpu")
    ref = copy.deepcopy(model).to(ref_device, torch.float64)
    b = batch.to(ref_device)
    out = torch.zeros(*b.input_ids.shape, model.config.hidden_size, dtype=torch.float64)
    for i, n in enumerate(b.lengths):
        if n == 0:
            continue
        hidden = ref(input_ids=b.input_ids[i:i + 1, :n],
                     attention_mask=b.attention_mask[i:i + 1, :n],
                     token_type_ids=b.token_type_ids[i:i + 1, :n]).last_hidden_state
        out[i, :n] = hidden[0].cpu()
    return out


def derived_metrics(cfg: BertVarlenConfig, lengths: list[int], max_seq_len: int,
                    median_s: float, padding_free: bool, device: torch.device,
                    peak: dict[str, Any] | None) -> dict[str, Any]:
    dims = cfg.model
    useful = bert_encoder_flops(dims.layers, dims.hidden, dims.intermediate, lengths)
    padded = bert_encoder_flops(dims.layers, dims.hidden, dims.intermediate,
                                [max_seq_len] * len(lengths))
    out: dict[str, Any] = {
        "latency_ms": median_s * 1e3,
        "tokens_per_s": sum(lengths) / median_s,
        "useful_flops": useful,
        "executed_flops": useful if padding_free else padded,
        "useful_flops_per_s": useful / median_s,
        "padding_free": padding_free,
    }
    out.update(peak_fractions(out["useful_flops_per_s"], cfg.dtype, device, peak))
    return out


def peak_fractions(flops_per_s: float, dtype: str, device: torch.device,
                   peak: dict[str, Any] | None) -> dict[str, Any]:
    """Useful FLOP/s as a fraction of the measured and the datasheet peak, naming both."""
    entry = (peak or {}).get("peaks", {}).get(dtype)
    if entry is None or peak.get("device_type") != device.type:
        return {"pct_of_measured_peak": None,
                "peak_note": f"no measured {dtype} peak for {device.type} (run seedbench peak)"}
    measured = entry["measured"]["flops_per_s"]
    sheet = entry.get("datasheet")
    return {
        "pct_of_measured_peak": 100 * flops_per_s / measured,
        "measured_peak_flops_per_s": measured,
        "pct_of_datasheet_peak": 100 * flops_per_s / sheet["flops_per_s"] if sheet else None,
        "datasheet_peak": sheet,
        "peak_note": (f"measured {dtype} matmul peak of {peak['device']} "
                      f"({peak['threads']} threads)" + ("" if sheet else
                                                        "; no datasheet peak for this device")),
    }


def _progress_printer(baseline: str, batch_size: int, max_seq_len: int):
    def show(n: int) -> None:
        if n == 1 or n % 10 == 0:
            print(f"[{baseline} b={batch_size} L={max_seq_len}] sample {n}", file=sys.stderr,
                  flush=True)
    return show
