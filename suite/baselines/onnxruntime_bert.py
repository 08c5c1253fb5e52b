"""ONNX Runtime on the HF encoder, padded: what a CPU user reaches for first for BERT inference.

The canonical model is exported once (``torch.onnx.export``, TorchScript exporter, dynamic batch
and sequence axes, so one graph serves every point) and run by an ``InferenceSession`` with ORT's
default graph optimizations (``ORT_ENABLE_ALL``: constant folding, GEMM and element-wise
fusions, MLAS kernels). ``fusion = True`` additionally runs ORT's transformer optimizer
(``onnxruntime.transformers.optimizer``, model type ``bert``: fused Attention, SkipLayerNorm,
BiasGelu), which is the path ORT recommends for GPUs; on the 2-core CPU we measured it slower
than the plain graph, so it is off by default and its record says which graph ran.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.baselines.base import Baseline, Supports
from suite.baselines.torch_hf import LastHiddenState
from suite.models import hf_inputs
from suite.workloads import BertBatch

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
OPSET = 17


class OnnxRuntime(Baseline):
    """Padded: every position of the ``[B, S]`` batch is computed."""

    name = "onnxruntime"
    description = "ONNX Runtime (export of the HF encoder, ORT_ENABLE_ALL graph), padded"
    supports = Supports(dtypes=("fp32",))  # an fp16 graph needs a conversion pass not done here
    fusion = False  # see the module docstring

    def available(self) -> tuple[bool, str]:
        try:
            import onnx  # noqa: F401  (the exporter needs it)
            import onnxruntime  # noqa: F401
        except Exception as e:  # noqa: BLE001 - a missing package is a reason, not a crash
            return False, (f"onnxruntime or onnx cannot be imported ({type(e).__name__}: {e}); "
                           "pip install 'seedbench[onnx]'")
        return True, ""

    def can_run(self, task: str, device: str, dtype: str) -> tuple[bool, str]:
        ok, why = super().can_run(task, device, dtype)
        if ok:
            import onnxruntime as ort

            if PROVIDERS[device] not in ort.get_available_providers():
                return False, (f"onnxruntime {ort.__version__} has no {PROVIDERS[device]} "
                               f"(has {ort.get_available_providers()})")
        return ok, why

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        import onnxruntime as ort

        self.device = device
        self.names = list(hf_inputs(model, *self._example()).keys())
        self.fused_ops: dict[str, int] = {}
        self.fuse_s: float | None = None
        # the exported graph (BERT-base: 440 MB) lives only until the session has loaded it
        with tempfile.TemporaryDirectory(prefix="seedbench-onnx-") as workdir:
            path = Path(workdir) / "encoder.onnx"
            start = time.perf_counter()
            self._export(model, path)
            self.export_s = time.perf_counter() - start
            graph = self._fuse(model, path) if self.fusion else str(path)
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.intra_op_num_threads = torch.get_num_threads()
            start = time.perf_counter()
            self.session = ort.InferenceSession(graph, options,
                                                providers=[PROVIDERS[device.type]])
            self.session_s = time.perf_counter() - start
        self.version = ort.__version__

    @staticmethod
    def _example() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A small padded batch to trace; the axes are declared dynamic, and the correctness
        gate checks the graph on the real batch."""
        ids = torch.ones(2, 16, dtype=torch.long)
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, 9:] = 0
        return ids, mask, torch.zeros_like(ids)

    def _export(self, model: torch.nn.Module, path: Path) -> None:
        wrapped = LastHiddenState(model, self.names).eval()
        example = tuple(hf_inputs(model, *self._example()).values())
        axes = {name: {0: "batch", 1: "seq"} for name in [*self.names, "last_hidden_state"]}
        with torch.no_grad(), warnings.catch_warnings():
            # The TorchScript exporter is deprecated in favour of the dynamo one (which needs
            # onnxscript); it still exports this encoder exactly.
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapped, example, str(path), dynamo=False, opset_version=OPSET,
                              input_names=self.names, output_names=["last_hidden_state"],
                              dynamic_axes=axes)
        model.eval()  # the exporter restores the training flag it found; keep eval for certain

    def _fuse(self, model: torch.nn.Module, path: Path) -> str:
        """The transformer optimizer's graph, written beside ``path``. The weights move to a
        file of their own first (ONNX external data): the optimizer's shape inference copies the
        graph over and over, and with BERT-base's 440 MB inline that was 7 of its 10 s on a
        2-core EPYC. It reads the weights it merges (Q, K and V into one) from that file,
        relative to the working directory, so it runs in the graph's folder."""
        import onnx
        from onnx.external_data_helper import convert_model_to_external_data
        from onnxruntime.transformers import optimizer

        start = time.perf_counter()
        graph = onnx.load(str(path))
        convert_model_to_external_data(graph, all_tensors_to_one_file=True,
                                       location=f"{path.stem}.weights", size_threshold=1024)
        onnx.save(graph, str(path))  # writes the weights out and leaves ``graph`` without them
        c = model.config
        cwd = os.getcwd()
        os.chdir(path.parent)
        try:
            fused = optimizer.optimize_model(graph, model_type="bert",
                                             num_heads=c.num_attention_heads,
                                             hidden_size=c.hidden_size, opt_level=0)
        finally:
            os.chdir(cwd)
        self.fused_ops = {k: v for k, v in fused.get_fused_operator_statistics().items() if v}
        out = path.with_name(f"{path.stem}.fused.onnx")
        onnx.save(fused.model, str(out))  # merged weights inline, the rest still in the file
        self.fuse_s = time.perf_counter() - start
        return str(out)

    def run(self, batch: BertBatch) -> np.ndarray:
        tensors = (batch.input_ids, batch.attention_mask, batch.token_type_ids)
        feed = {name: t.cpu().numpy() for name, t in zip(("input_ids", "attention_mask",
                                                           "token_type_ids"), tensors)
                if name in self.names}
        return self.session.run(None, feed)[0]

    def details(self) -> dict[str, Any]:
        return {"onnxruntime": self.version, "opset": OPSET,
                "provider": PROVIDERS[self.device.type],
                "graph": "transformer-optimizer fused" if self.fusion else "ORT_ENABLE_ALL",
                "fused_ops": self.fused_ops, "export_s": self.export_s,
                "fuse_s": self.fuse_s, "session_s": self.session_s}


class OnnxRuntimeFused(OnnxRuntime):
    name = "onnxruntime-fused"
    description = ("ONNX Runtime with its BERT transformer optimizer (fused Attention, "
                   "SkipLayerNorm, BiasGelu), padded")
    fusion = True
