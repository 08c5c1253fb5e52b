"""The suite's own padding-free reference (``reference_impl``), wrapped like any framework.

``reference`` replays its padding-free forward from CUDA graphs on a GPU (``reference_impl.graphs``:
static buffers in token-count buckets) wherever its switches allow; ``reference-eager`` launches
every kernel from Python, as the forward is written. Each record says which ran and why."""

from __future__ import annotations

from dataclasses import asdict

import torch

from reference_impl import PaddingFreeBert, Switches
from suite.baselines.base import Baseline
from suite.models import uses_token_types
from suite.workloads import BertBatch


class Reference(Baseline):
    name = "reference"
    description = ("reference_impl.PaddingFreeBert: GEMMs on valid tokens only, fused kernels, "
                   "CUDA graphs on a GPU")
    padding_free = True

    def __init__(self, cuda_graphs: bool = True, **switches) -> None:
        self.switches = Switches(**switches)
        self.padding_free = self.switches.padding_free
        self.cuda_graphs = cuda_graphs

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        self.token_types = uses_token_types(model)
        self.model = PaddingFreeBert.from_hf(model, **asdict(self.switches)).to(device, dtype)
        self.device = device
        self.eager_because = self._eager_because()
        self.graphed = None
        if not self.eager_because:
            from reference_impl.graphs import GraphedEncoder

            self.graphed = GraphedEncoder(self.model)

    def _eager_because(self) -> str:
        """Why this model runs eagerly here; "" where it is replayed from CUDA graphs."""
        sw = self.switches
        if not self.cuda_graphs:
            return "cuda_graphs=False"
        if not isinstance(self.model, PaddingFreeBert):
            return f"{type(self.model).__name__} has no graphed path"
        if not (sw.padding_free and sw.fused_mha):
            return "padding_free and fused_mha are off: the padded path attends over every row"
        if self.device.type != "cuda":
            return f"device {self.device.type}: CUDA graphs need a GPU"
        return ""

    def prepare_serving(self, max_batch: int, max_len: int) -> None:
        """Graphed: every token bucket of the server's batches captured before the first
        request (``GraphedEncoder.for_serving``); eager: nothing to do."""
        if self.graphed is not None:
            with torch.inference_mode():
                self.graphed.for_serving(max_batch, max_len)

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        """The batch's lengths go along (known on the host): the packing is planned without
        reading the device back."""
        types = batch.token_type_ids if self.token_types else None
        forward = self.graphed or self.model
        return forward(batch.input_ids, batch.attention_mask, types, lengths=batch.lengths)

    def details(self) -> dict:
        out = {"switches": asdict(self.switches), "model": type(self.model).__name__,
               "execution": "eager"}
        if self.graphed is not None:
            out["cuda_graphs"] = self.graphed.details()
            out["execution"] = out["cuda_graphs"]["execution"]
        else:
            out["eager_because"] = self.eager_because
        if self.device.type == "cuda":  # its attention runs the Triton kernel with this launch
            from reference_impl.kernels.triton_attention import ACTIVE

            out["triton_tuning"] = asdict(ACTIVE)
        return out


class ReferenceEager(Reference):
    name = "reference-eager"
    description = ("reference_impl.PaddingFreeBert launched kernel by kernel from Python (no CUDA "
                   "graphs): the launch path's cost beside reference")

    def __init__(self, **switches) -> None:
        super().__init__(cuda_graphs=False, **switches)
