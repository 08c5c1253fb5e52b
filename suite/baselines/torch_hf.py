"""HF transformers encoders in PyTorch, padded: the paper's "PyTorch" and "PyTorch JIT" baselines,
plus SDPA attention and ``torch.compile`` of the same model.

All four run the HF model itself on the padded ``[B, S]`` batch, so they compute (and are
charged for) every padding position; the framework is what differs.
"""

from __future__ import annotations

import copy
import time
import warnings

import torch

from suite.baselines.base import Baseline, FirstCalls, Supports
from suite.models import hf_inputs
from suite.workloads import BertBatch


class TorchEager(Baseline):
    """Padded (not padding-free): HF runs every position of the ``[B, S]`` batch."""

    name = "torch-eager"
    description = "HF encoder (BertModel, ...), eager attention, padded to max_seq_len"
    attn_implementation = "eager"

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        self.model = copy.deepcopy(model).to(device, dtype).eval()
        self.model.config._attn_implementation = self.attn_implementation

    def inputs(self, batch: BertBatch) -> dict[str, torch.Tensor]:
        """The keyword arguments HF takes for this batch (no token types for DistilBERT...)."""
        return hf_inputs(self.model, batch.input_ids, batch.attention_mask, batch.token_type_ids)

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        return self.model(**self.inputs(batch)).last_hidden_state

    def details(self) -> dict:
        return {"attn_implementation": self.model.config._attn_implementation}


class TorchSdpa(TorchEager):
    """Padded: HF with ``F.scaled_dot_product_attention``; the padding mask goes to the kernel."""

    name = "torch-sdpa"
    description = "HF encoder, SDPA attention (F.scaled_dot_product_attention), padded"
    attn_implementation = "sdpa"

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        if not getattr(model, "_supports_sdpa", False):
            # Setting the config would silently keep the model's own attention.
            raise ValueError(f"{type(model).__name__} has no SDPA attention in transformers")
        super().prepare(model, device, dtype)


class LastHiddenState(torch.nn.Module):
    """HF model -> a plain tensor function of positional tensors, which tracing needs."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, tensors))).last_hidden_state


class TorchJit(TorchEager):
    """Padded: a TorchScript trace of the HF model (eager attention), frozen.

    Tracing needs example inputs and gives a shape-specialized graph, so the model is traced
    per ``[B, S]`` shape in ``build`` (before the correctness gate's call, never in a timed one;
    ``run`` builds a shape it has not seen, as in serving), then ``torch.jit.freeze`` and
    ``torch.jit.optimize_for_inference``. Under tracing HF always builds the padding mask (no
    data-dependent skip), so one trace serves any lengths.
    """

    name = "torch-jit"
    description = "TorchScript trace of the HF encoder (eager attention), frozen, padded"
    optimize = True  # torch.jit.optimize_for_inference after freeze

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        super().prepare(model, device, dtype)
        self.scripted: dict[tuple[int, ...], torch.jit.ScriptModule] = {}
        self.build_s: dict[str, dict[str, float]] = {}  # "BxS" -> {"trace_s", "freeze_s"}

    def _script(self, batch: BertBatch) -> torch.jit.ScriptModule:
        kwargs = self.inputs(batch)
        module = LastHiddenState(self.model, list(kwargs)).eval()
        start = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            # Python ints of shapes become constants: intended, the trace is per shape. TorchScript
            # is deprecated in favour of torch.compile (which is its own baseline).
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)  # HF internals, under tracing only
            traced = torch.jit.trace(module, tuple(kwargs.values()), check_trace=False)
            traced_at = time.perf_counter()
            scripted = torch.jit.freeze(traced)
            if self.optimize:
                scripted = torch.jit.optimize_for_inference(scripted)
        done = time.perf_counter()
        self.build_s["x".join(map(str, batch.input_ids.shape))] = {
            "trace_s": traced_at - start, "freeze_s": done - traced_at}
        return scripted

    def build(self, batch: BertBatch) -> None:
        shape = tuple(batch.input_ids.shape)
        if shape not in self.scripted:
            self.scripted[shape] = self._script(batch)

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        with torch.inference_mode(False):  # tracing and freezing need normal tensors
            self.build(batch)
        return self.scripted[tuple(batch.input_ids.shape)](*self.inputs(batch).values())

    def details(self) -> dict:
        first = next(iter(self.build_s.values()), {})
        return {**super().details(), "optimize_for_inference": self.optimize,
                "trace_s": first.get("trace_s"), "freeze_s": first.get("freeze_s"),
                "traced_shapes": self.build_s}


class TorchCompile(TorchEager):
    """Padded: ``torch.compile`` (inductor, default mode) of the HF model (eager attention).

    Compilation happens on the first call of a shape (the correctness-gate call, never a timed
    one); that call's time is recorded as ``compile_s``. Dynamo reuses compiled code within a
    process, so a second instance prepared in the same process reports a much smaller
    ``compile_s`` (the workflow runs every job in its own process). Where one process measures
    several shapes (``run_points``), dynamo's default holds: the second shape recompiles with
    dynamic sizes and later shapes reuse that code; each shape's first call is in
    ``first_call_s``.
    """

    name = "torch-compile"
    description = "torch.compile (inductor, default mode) of the HF encoder, padded"

    def available(self) -> tuple[bool, str]:
        try:
            from torch._inductor.cpp_builder import get_cpp_compiler

            get_cpp_compiler()  # inductor's CPU code (and its wrappers) needs a C++ compiler
        except Exception as e:  # noqa: BLE001 - any failure here means inductor cannot run
            return False, f"torch.compile (inductor) unusable: {type(e).__name__}: {e}"
        return True, ""

    def can_run(self, task: str, device: str, dtype: str) -> tuple[bool, str]:
        ok, why = super().can_run(task, device, dtype)
        if ok and device == "cuda":
            from torch.utils._triton import has_triton

            if not has_triton():
                return False, "torch.compile (inductor) on CUDA needs triton"
        return ok, why

    mode = "default"

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        super().prepare(model, device, dtype)
        self.compiled = torch.compile(self.model, mode=self.mode)
        self.first_calls = FirstCalls()

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        return self.first_calls.call(batch, lambda: self._call(batch), synchronize_output)

    def _call(self, batch: BertBatch) -> torch.Tensor:
        return self.compiled(**self.inputs(batch)).last_hidden_state

    def details(self) -> dict:
        return {**super().details(), "backend": "inductor", "mode": self.mode,
                "compile_s": self.first_calls.by_shape.get(self.first_calls.last),
                "first_call_s": dict(self.first_calls.by_shape)}


class TorchCompileGraphs(TorchCompile):
    """Padded: ``torch.compile(mode="reduce-overhead")``: inductor's kernels replayed as CUDA
    graphs, so a call costs one launch from the host instead of one per kernel. What a PyTorch
    user tries first when the host is the bottleneck (short sequences on a fast GPU), and the
    bar a padding-free system that launches every kernel from Python has to clear.

    A graph is recorded per input shape after a warm-up call; each call marks a new step
    (``cudagraph_mark_step_begin``), so a call's output stays valid until the next call, which
    overwrites it (the gate compares it before that). CUDA only: on a CPU there is no graph to
    replay and the mode is the default's."""

    name = "torch-compile-cudagraphs"
    description = ("torch.compile (inductor, mode='reduce-overhead': CUDA graphs) of the HF "
                   "encoder, padded")
    supports = Supports(devices=("cuda",))
    mode = "reduce-overhead"

    def _call(self, batch: BertBatch) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return super()._call(batch)


def synchronize_output(out: torch.Tensor) -> None:
    """Wait for the kernels that produce ``out`` (a no-op on CPU)."""
    if out.device.type == "cuda":
        torch.cuda.synchronize(out.device)
