"""The suite's own padding-free reference (``reference_impl``), wrapped like any framework."""

from __future__ import annotations

from dataclasses import asdict

import torch

from reference_impl import PaddingFreeBert, Switches
from suite.baselines.base import Baseline
from suite.models import uses_token_types
from suite.workloads import BertBatch


class Reference(Baseline):
    name = "reference"
    description = "reference_impl.PaddingFreeBert: GEMMs on valid tokens only, fused kernels"
    padding_free = True

    def __init__(self, **switches) -> None:
        self.switches = Switches(**switches)
        self.padding_free = self.switches.padding_free

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        self.token_types = uses_token_types(model)
        self.model = PaddingFreeBert.from_hf(model, **asdict(self.switches)).to(device, dtype)
        self.device = device

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        """The batch's lengths go along (known on the host): the packing is planned without
        reading the device back."""
        types = batch.token_type_ids if self.token_types else None
        return self.model(batch.input_ids, batch.attention_mask, types, lengths=batch.lengths)

    def details(self) -> dict:
        out = {"switches": asdict(self.switches), "model": type(self.model).__name__}
        if self.device.type == "cuda":  # its attention runs the Triton kernel with this launch
            from reference_impl.kernels.triton_attention import ACTIVE

            out["triton_tuning"] = asdict(ACTIVE)
        return out
