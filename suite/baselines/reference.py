"""The suite's own padding-free reference (``reference_impl``), wrapped like any framework."""

from __future__ import annotations

import torch

from reference_impl import PaddingFreeBert
from suite.baselines.base import Baseline
from suite.workloads import BertBatch


class Reference(Baseline):
    name = "reference"
    description = "reference_impl.PaddingFreeBert: GEMMs on valid tokens only, varlen attention"
    padding_free = True

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        self.model = PaddingFreeBert.from_hf(model).to(device, dtype)

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        return self.model(batch.input_ids, batch.attention_mask, batch.token_type_ids)
