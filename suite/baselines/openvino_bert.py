"""OpenVINO: the canonical HF encoder converted by OpenVINO's PyTorch frontend
(``openvino.convert_model``, shapes left dynamic) and compiled for its CPU plugin with the
latency hint, padded to max_seq_len: the engine many CPU users pick first.

The precision is asked for, not left to the plugin: on a CPU with bf16 instructions (AVX512_BF16,
AMX) the plugin runs an fp32 model in bf16 unless ``INFERENCE_PRECISION_HINT`` says f32, which
would be a bf16 system in an fp32 table (and fail the fp32 gate). The record says the precision
the compiled model reports, and the time conversion and compilation took (untimed, in
``build``).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from suite.baselines.base import Baseline, Supports, Unavailable
from suite.models import hf_inputs
from suite.workloads import BertBatch

_PRECISION = {torch.float32: "f32", torch.bfloat16: "bf16"}


class _LastHiddenState(torch.nn.Module):
    """The HF encoder as a function of positional tensors (what the frontend traces)."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, tensors))).last_hidden_state


class OpenVino(Baseline):
    name = "openvino"
    description = ("OpenVINO: convert_model (PyTorch frontend) of the HF encoder, CPU plugin, "
                   "latency hint, padded")
    supports = Supports(devices=("cpu",), dtypes=("fp32", "bf16"))

    def available(self) -> tuple[bool, str]:
        try:
            import openvino  # noqa: F401
        except ImportError as e:
            return False, f"openvino is not installed ({e}); pip install -e '.[openvino]'"
        return True, ""

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        if dtype not in _PRECISION:
            raise Unavailable(f"openvino here runs {sorted(map(str, _PRECISION))}, not {dtype}")
        self.model, self.dtype = model, dtype
        self.threads = torch.get_num_threads()
        self.compiled = None
        self.build_s: dict[str, float] = {}

    def build(self, batch: BertBatch) -> None:
        """Convert once (dynamic shapes: one compiled model serves every batch) and compile."""
        if self.compiled is not None:
            return
        import openvino as ov

        inputs = self._inputs(batch)
        start = time.perf_counter()
        with torch.no_grad():
            converted = ov.convert_model(
                _LastHiddenState(self.model, tuple(inputs)).eval(),
                example_input=tuple(torch.from_numpy(a) for a in inputs.values()))
        converted_at = time.perf_counter()
        self.compiled = ov.Core().compile_model(converted, "CPU", {
            "INFERENCE_NUM_THREADS": self.threads, "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": _PRECISION[self.dtype]})
        self.build_s = {"convert_s": converted_at - start,
                        "compile_s": time.perf_counter() - converted_at}

    def _inputs(self, batch: BertBatch) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in hf_inputs(self.model, batch.input_ids,
                                                   batch.attention_mask,
                                                   batch.token_type_ids).items()}

    def run(self, batch: BertBatch) -> np.ndarray:
        self.build(batch)
        return self.compiled(list(self._inputs(batch).values()))[0]

    def details(self) -> dict:
        import openvino as ov

        precision = (self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
                     if self.compiled is not None else None)
        return {"openvino": ov.__version__, "threads": self.threads,
                "inference_precision": precision, **self.build_s}
