"""An example third-party baseline: the simplest padding-free strategy there is.

Instead of padding the batch, run HF's model once per sequence on exactly its valid tokens.
No compute goes to padding, but B small forwards replace one large one: a useful contrast to the
packed reference, and a template for wrapping your own framework.
"""

from __future__ import annotations

import copy

import torch

from suite.baselines import Baseline
from suite.models import hf_inputs
from suite.workloads import BertBatch


class PerSequenceEager(Baseline):
    name = "example-per-sequence"
    description = "example plugin: HF eager, one unpadded forward per sequence"
    padding_free = True

    def available(self) -> tuple[bool, str]:
        return True, ""  # only needs torch and transformers, which seedbench already has

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        self.model = copy.deepcopy(model).to(device, dtype).eval()

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        b, s = batch.input_ids.shape
        out = None
        for i, n in enumerate(batch.lengths):
            if n == 0:
                continue
            inputs = hf_inputs(self.model, batch.input_ids[i:i + 1, :n],
                               batch.attention_mask[i:i + 1, :n], batch.token_type_ids[i:i + 1, :n])
            hidden = self.model(**inputs).last_hidden_state[0]
            if out is None:
                out = hidden.new_zeros(b, s, hidden.shape[-1])
            out[i, :n] = hidden
        if out is None:  # every sequence empty
            width = getattr(self.model.config, "hidden_size", None) or self.model.config.dim
            out = torch.zeros(b, s, width, device=batch.input_ids.device)
        return out

    def details(self) -> dict:
        return {"strategy": "one forward per sequence, no padding"}
