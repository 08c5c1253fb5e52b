"""HF transformers encoders in PyTorch, padded: the paper's "PyTorch" baseline."""

from __future__ import annotations

import copy

import torch

from suite.baselines.base import Baseline
from suite.models import hf_inputs
from suite.workloads import BertBatch


class TorchEager(Baseline):
    name = "torch-eager"
    description = "HF encoder (BertModel, ...), eager attention, padded to max_seq_len"
    attn_implementation = "eager"

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        self.model = copy.deepcopy(model).to(device, dtype).eval()
        self.model.config._attn_implementation = self.attn_implementation

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        return self.model(**hf_inputs(self.model, batch.input_ids, batch.attention_mask,
                                      batch.token_type_ids)).last_hidden_state

    def details(self) -> dict:
        return {"attn_implementation": self.model.config._attn_implementation}
