"""DeepSpeed-Inference on the HF encoder, padded: the paper's "DeepSpeed" baseline.

``deepspeed.init_inference`` wraps (a copy of) the canonical HF ``BertModel``. On CUDA it injects
DeepSpeed's fused inference kernels (``replace_with_kernel_inject=True``), which is what the
paper measured; those kernels are GPU-only, so on CPU the engine wraps the HF model unchanged
and the point measures HF eager behind DeepSpeed's engine. The record says which
(``details()["kernel_inject"]``).

DeepSpeed's communication layer expects a launcher's environment even for one process; this
baseline provides a single local rank (RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, MASTER_ADDR=127.0.0.1,
a free MASTER_PORT), only for variables that are not already set. On CUDA it then initializes
DeepSpeed's process group (the accelerator's backend, NCCL), as the launcher would for the
kernel-injected model. On CPU it does not by default: with tp_size 1 and no injection
``init_inference`` never touches ``deepspeed.comm``, and DeepSpeed's CPU backend compiles a
shared-memory comm op on its first initialization (minutes, once per machine). Set
``cpu_process_group = True`` to initialize one anyway (gloo). Each job runs in its own process,
so this global state ends with the job.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from datetime import timedelta
from typing import Any

import torch

from suite.baselines.torch_hf import TorchEager
from suite.devices import DTYPE_NAMES, torch_dtype
from suite.models import hf_inputs
from suite.launch.ports import free_port
from suite.workloads import BertBatch



def single_rank_env() -> dict[str, str]:
    """Set the launcher's variables for one local rank where unset; return what was set."""
    wanted = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    set_here = {k: v for k, v in wanted.items() if k not in os.environ}
    if "MASTER_PORT" not in os.environ:
        set_here["MASTER_PORT"] = str(free_port())
    os.environ.update(set_here)
    return set_here


def _accelerator_for(device_type: str):
    """DeepSpeed's accelerator for the run's device. A CPU point on a GPU machine gets the CPU
    accelerator (DeepSpeed would otherwise move the module to the GPU)."""
    from deepspeed.accelerator import get_accelerator

    accel = get_accelerator()
    if device_type == "cpu" and accel.device_name() != "cpu":
        from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

        return CPU_Accelerator()
    return accel


class DeepSpeedInference(TorchEager):
    name = "deepspeed-inference"
    description = ("DeepSpeed-Inference (init_inference) on the HF encoder, padded; fused kernels "
                   "injected on CUDA only")
    cpu_process_group: bool = False  # see the module docstring

    def available(self) -> tuple[bool, str]:
        try:
            import deepspeed  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure is a reason, not a crash
            return False, f"deepspeed cannot be imported: {type(e).__name__}: {e}"
        return True, ""

    def can_run(self, task: str, device: str, dtype: str) -> tuple[bool, str]:
        ok, why = super().can_run(task, device, dtype)
        if not ok:
            return ok, why
        accel = _accelerator_for(device)
        if torch_dtype(dtype) not in accel.supported_dtypes():
            have = [DTYPE_NAMES.get(d, str(d)) for d in accel.supported_dtypes()]
            return False, (f"DeepSpeed's {accel.device_name()} accelerator does not support "
                           f"{dtype} here (supports {have})")
        return True, ""

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        import deepspeed
        import deepspeed.comm as dist
        from deepspeed.accelerator import get_accelerator, set_accelerator

        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        accel = _accelerator_for(device.type)
        if accel is not get_accelerator():
            set_accelerator(accel)
        if device.type == "cuda" and accel.device_name() != "cuda":
            raise RuntimeError(f"device cuda requested but DeepSpeed's accelerator is "
                               f"{accel.device_name()!r}")

        self.kernel_inject = device.type == "cuda"
        self.env_set = single_rank_env()
        self.backend = "gloo" if device.type == "cpu" else accel.communication_backend_name()
        self.initialized_dist = False
        want_group = device.type != "cpu" or self.cpu_process_group
        if want_group and not dist.is_initialized():
            deepspeed.init_distributed(dist_backend=self.backend, auto_mpi_discovery=False,
                                       verbose=False, timeout=timedelta(seconds=120))
            self.initialized_dist = True
            atexit.register(_destroy_process_group)

        super().prepare(model, device, dtype)  # a private copy, on the device, eager attention
        t0 = time.perf_counter()
        self.engine = deepspeed.init_inference(
            self.model,
            config={"dtype": dtype, "replace_with_kernel_inject": self.kernel_inject,
                    "tensor_parallel": {"tp_size": 1}})
        self.init_s = time.perf_counter() - t0
        self.engine.eval()
        self.module = self.engine.module
        self.accelerator = accel.device_name()

    @torch.inference_mode()
    def run(self, batch: BertBatch) -> torch.Tensor:
        out = self.engine(**hf_inputs(self.module, batch.input_ids, batch.attention_mask,
                                      batch.token_type_ids)).last_hidden_state
        # Injected BERT layers return (hidden, mask) tuples; with transformers 5 the encoder
        # passes the tuple through to last_hidden_state.
        return out[0] if isinstance(out, tuple) else out

    def details(self) -> dict[str, Any]:
        import deepspeed

        return {
            "deepspeed_version": deepspeed.__version__,
            "accelerator": self.accelerator,
            "kernel_inject": self.kernel_inject,
            "note": ("DeepSpeed fused inference kernels injected" if self.kernel_inject else
                     "no kernel injection (GPU-only): HF eager modules behind DeepSpeed's "
                     "InferenceEngine"),
            "process_group": (self.backend if self.initialized_dist else
                              "already initialized" if _ds_dist_initialized() else None),
            "dist_env_set": sorted(self.env_set),
            "init_inference_s": self.init_s,
            "attn_implementation": getattr(getattr(self.module, "config", None),
                                           "_attn_implementation", None),
        }


def _ds_dist_initialized() -> bool:
    import deepspeed.comm as dist

    return dist.is_initialized()


def _destroy_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
