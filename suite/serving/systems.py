"""The systems a serving run compares, each one batching policy over one BERT baseline.

- ``padded-<baseline>``: dynamic batching, the batch padded to its longest request (what a
  padded framework's server does);
- ``bucketed-<baseline>``: the same within length buckets (the usual mitigation);
- ``packed-reference``: dynamic batching into the padding-free reference, which computes on
  the batch's valid tokens only (``cu_seqlens`` inside; ByteTransformer's serving case); on a
  GPU it replays CUDA graphs, every bucket the server's batches can fill captured before the
  first request (``Baseline.prepare_serving``);
- ``packed-reference-eager``: the same launched kernel by kernel, like the frameworks beside
  it: its ratio to ``packed-reference`` is the launches' share (on CPU the two are one path);
- ``padded-reference`` / ``bucketed-reference``: the reference with its padding-free switches
  off (padded GEMMs and attention; the same fused kernels and GEMM library; eager, as the padded
  path has no graphs): the control, whose ratio to ``packed-reference-eager`` is the padding's
  alone, whatever the frameworks' libraries.

Every system runs the same requests through ``run_batch(indices)``: the library's rows,
trimmed to the batch's longest request. The gate (``check``) has LoadGen issue a sample of
requests in its accuracy mode, batched by the system's policy as it would serve them, and
compares each request's hidden states with the float64 oracle of that request alone; a system
that fails it is not timed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from suite.baselines.base import Baseline
from suite.measure.correctness import compare
from suite.measure.timing import synchronize
from suite.serving import loadgen
from suite.serving.batching import BatchPolicy
from suite.workloads import BertBatch, bert_batch


def create_baseline(batching: str, baseline: str) -> Baseline:
    """The baseline a system serves (see the module doc for the reference served padded)."""
    from suite.baselines.registry import baselines

    if baseline == "reference" and batching != "packed":
        return baselines.create(baseline, padding_free=False, fused_mha=False)
    return baselines.create(baseline)


def policy_for(batching: str, max_batch: int, window_s: float,
               buckets: Sequence[int]) -> BatchPolicy:
    return BatchPolicy(max_batch, window_s, tuple(buckets) if batching == "bucketed" else ())


class RequestLibrary:
    """LoadGen's sample library: one request per length, token ids drawn once (seeded)."""

    def __init__(self, lengths: Sequence[int], max_len: int, vocab_size: int, seed: int = 0):
        self.lengths = [int(n) for n in lengths]
        self._rows = bert_batch(self.lengths, max_len, vocab_size, seed=seed)

    def __len__(self) -> int:
        return len(self.lengths)

    def batch(self, indices: Sequence[int], device: torch.device | str = "cpu") -> BertBatch:
        """The requests at ``indices``, right-padded to the longest of them."""
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        longest = max(self.lengths[i] for i in indices)
        rows = self._rows
        return BertBatch(rows.input_ids[idx, :longest], rows.attention_mask[idx, :longest],
                         rows.token_type_ids[idx, :longest],
                         tuple(self.lengths[i] for i in indices)).to(device)


@dataclass
class ServingSystem:
    name: str
    baseline: Baseline
    policy: BatchPolicy
    library: RequestLibrary
    device: torch.device

    def run_batch(self, indices: list[int]) -> Any:
        """The batch's output, computed: LoadGen is told of a batch's completion when this
        returns, and on a GPU the baselines return with their kernels still queued."""
        out = self.baseline.run(self.library.batch(indices, self.device))
        synchronize(self.device)
        return out

    def check(self, indices: Sequence[int], oracle: torch.Tensor, dtype: str, logs: Path,
              timeout_s: float = 600.0) -> dict[str, Any]:
        """The gate: LoadGen's accuracy mode (Offline: all at once) issues each of ``indices``
        once, the policy batches them (bucketed: within buckets), and each request's output
        is compared with ``oracle``: ``[len(indices), longest, hidden]``, float64, the requests
        padded to the longest of them, as ``suite.experiments.bert_oracle.reference_output``
        gives it. LoadGen's logs of the run go to ``logs``."""
        out = torch.zeros_like(oracle)

        def run_batch(group: list[int]) -> None:  # positions k in ``indices``
            got = self.run_batch([indices[k] for k in group])
            if not isinstance(got, torch.Tensor):
                got = torch.as_tensor(got)
            for row, k in enumerate(group):
                n = self.library.lengths[indices[k]]
                out[k, :n] = got[row, :n].to("cpu", torch.float64)

        settings = loadgen.RunSettings("Offline", target_qps=len(indices), accuracy=True)
        loadgen.run(settings, [self.library.lengths[i] for i in indices], run_batch,
                    self.policy, logs, timeout_s=timeout_s)
        return compare(out, oracle, self.library.batch(indices).attention_mask, dtype)

