"""The float64 oracle of one end-to-end BERT point, computed once and read by every system.

Why: every system measured at a point is checked against the same reference output (HF eager
in float64, each sequence alone: ``reference_output``). Computed in each system's job it cost
4.3 s of a ~19 s BERT-base b16 l128 job on a 2-core AVX2 EPYC, seven times over for seven
systems. With a shared folder (``seedbench run --oracle-dir``; the workflow's
``results/<machine>/oracles``, removed when a run succeeds) the first job of a point computes
it and writes it there, and the others read it.

A cache, not a workflow file: declared as a (temporary) rule output, the oracle of a point
would have to be made again whenever one of its points is forced to run again (``make
rerun-noisy``), and Snakemake would then re-run every other system at that point too.

A file is only used for the point it was made for: it carries a fingerprint of everything
the output depends on (model family, dimensions, seed, lengths, the input tensors, a checksum
of the weights as the job built them, torch and transformers versions). A file whose
fingerprint differs from the reading job's (an older run's, or a damaged one) is replaced, and
the record says so.
"""

from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from suite.config import BertVarlenConfig
from suite.models import WEIGHTS, hf_inputs
from suite.workloads import BertBatch, bert_batch, varlen_lengths

FORMAT = 2  # 2: the weights' scheme in the fingerprint


def fingerprint(cfg: BertVarlenConfig, distribution: str, model_kind: str,
                lengths: list[int], batch: BertBatch, model: torch.nn.Module) -> dict[str, Any]:
    """What the oracle's output depends on, as the job that reads (or writes) it sees it."""
    import transformers

    inputs = hashlib.sha256()
    for t in (batch.input_ids, batch.attention_mask, batch.token_type_ids):
        inputs.update(t.contiguous().cpu().numpy().tobytes())
    with torch.no_grad():  # equal code and versions build equal weights: bit-equal sums
        weights = sum(float(p.sum(dtype=torch.float64)) for p in model.parameters())
    return {"format": FORMAT, "weights": WEIGHTS.as_dict(), "model": model_kind,
            "dims": asdict(cfg.model),
            "max_position": cfg.max_len, "seed": cfg.seed, "distribution": distribution,
            "lengths": list(lengths), "max_seq_len": int(batch.input_ids.shape[1]),
            "inputs_sha256": inputs.hexdigest(), "weights_sum": weights,
            "torch": str(torch.__version__), "transformers": str(transformers.__version__)}


def point_inputs(cfg: BertVarlenConfig, distribution: str, batch_size: int,
                 max_seq_len: int) -> tuple[list[int], BertBatch]:
    """A point's sequence lengths and padded batch: the same in every job of that point."""
    lengths = varlen_lengths(batch_size, max_seq_len, distribution, seed=cfg.seed)
    return lengths, bert_batch(lengths, max_seq_len, cfg.model.vocab_size, seed=cfg.seed)


@torch.inference_mode()
def reference_output(model: torch.nn.Module, batch: BertBatch,
                      device: torch.device) -> torch.Tensor:
    """The oracle: HF eager in float64, each sequence run alone with no padding at all, so the
    check also catches a system whose padding leaks into valid positions."""
    ref_device = device if device.type == "cuda" else torch.device("cpu")
    ref = copy.deepcopy(model).to(ref_device, torch.float64)
    b = batch.to(ref_device)
    out = torch.zeros(*b.input_ids.shape, _hidden_size(model.config), dtype=torch.float64)
    for i, n in enumerate(b.lengths):
        if n == 0:
            continue
        inputs = hf_inputs(ref, b.input_ids[i:i + 1, :n], b.attention_mask[i:i + 1, :n],
                           b.token_type_ids[i:i + 1, :n])
        out[i, :n] = ref(**inputs).last_hidden_state[0].cpu()
    return out


def _hidden_size(config) -> int:
    return getattr(config, "hidden_size", None) or config.dim  # DistilBERT calls it dim


def shared(path: Path, expected: dict[str, Any],
           compute: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, str]:
    """The point's oracle and where it came from: read from ``path`` when an earlier job wrote
    it for this very point (``expected``: this job's ``fingerprint``), else ``compute()``d here
    and written to ``path`` for the next job."""
    stale = ""
    if path.exists():
        try:
            return read(path, expected), f"shared file {path.name} (an earlier job's)"
        except Exception as e:  # noqa: BLE001 - any unreadable or foreign file is replaced
            stale = f"; the file there was not this point's ({type(e).__name__}: {e})"
    output = compute()
    write({"fingerprint": expected, "output": output}, path)
    return output, f"computed by this job, shared as {path.name}{stale}"


def write(oracle: dict[str, Any], path: Path) -> None:
    """Atomically: a job killed mid-write leaves no file that looks whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    torch.save(oracle, part)
    part.replace(path)


def read(path: Path, expected: dict[str, Any]) -> torch.Tensor:
    """The output stored in ``path``, after checking it was made for ``expected``'s point."""
    oracle = torch.load(path, weights_only=True)
    found = oracle.get("fingerprint", {})
    for key, want in expected.items():
        if found.get(key) != want:
            raise ValueError(f"oracle {path} was made for another point: {key} is "
                             f"{_short(found.get(key))}, this job's is {_short(want)}")
    return oracle["output"]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
