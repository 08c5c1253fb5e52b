"""DeepSpeed ZeRO stages 1, 2 and 3 (``deepspeed.initialize``), one registered name per stage.

Stage 1 shards the optimizer state, 2 also the gradients, 3 also the parameters. The DeepSpeed
config is built from the train config (``ds_config``): micro batch = global batch / ranks,
no gradient accumulation, ``gradient_clipping`` = ``grad_clip``, bf16 or fp32 (DeepSpeed's
fp16 loss scaling does not run on CPU; bf16 does).

The optimizer is ours (AdamW or LAMB), passed as DeepSpeed's *client optimizer*: DeepSpeed
then neither builds its CPU-Adam / fused-Adam ops (this install has none compiled) nor swaps in
its own optimizer. ZeRO wraps the client optimizer and hands it flat fp32 partitions: one flat
tensor per parameter group per rank. Element-wise optimizers (AdamW) are unaffected, but LAMB's
per-tensor trust ratio becomes a per-partition ratio, which is not LAMB; the correctness gate
reports such a run as incorrect (``details()["optimizer_partitioning"]`` says so up front).

Launch: torchrun, like DDP and FSDP2, so that the engines' comparison differs in the engine
alone: the engine only needs the process group, which the training run creates from the
launcher's environment (gloo on CPU, nccl on CUDA) and ``deepspeed.init_distributed`` adopts.
DeepSpeed's own launcher (``deepspeed --num_gpus N --no_local_rank --module ...``) runs on
request (``suite.launch.command(launcher="deepspeed")``, tested with gloo on CPU, where
``--num_gpus`` just counts processes) and wherever a hostfile is given. On one node it costs a
second launcher process (its runner starts ``deepspeed.launcher.launch``, which starts the
ranks): a ZeRO-2 point of the quick run took 7.9 s under it and 4.2 s under torchrun on a
2-core Genoa, the same steps timed.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from suite.trainers.base import DistInfo, StepResult, Trainer, build_optimizer, loss_fn


def ds_config(train_cfg, stage: int, world_size: int, overlap_comm: bool | None = None
              ) -> dict[str, Any]:
    """The DeepSpeed config of a run: what the train config asks, nothing DeepSpeed would
    otherwise infer differently between stages."""
    if train_cfg.global_batch % world_size:
        raise ValueError(f"global_batch={train_cfg.global_batch} is not divisible by "
                         f"world_size={world_size}")
    return {
        "train_batch_size": train_cfg.global_batch,
        "train_micro_batch_size_per_gpu": train_cfg.global_batch // world_size,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": float(train_cfg.grad_clip),
        # overlap_comm None: DeepSpeed's default (on for stage 3: parameter prefetch and
        # gradient reduce on a side stream while compute goes on)
        "zero_optimization": {"stage": stage, **({} if overlap_comm is None
                                                 else {"overlap_comm": overlap_comm})},
        "bf16": {"enabled": train_cfg.dtype == "bf16"},
        "fp16": {"enabled": False},
        # our AdamW / LAMB instead of DeepSpeed's (uncompiled) ops
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class ZeroTrainer(Trainer):
    name = "zero1"
    description = "DeepSpeed ZeRO stage 1 (optimizer state sharded)"
    stage = 1
    overlap_comm: bool | None = None  # DeepSpeed's default for the stage

    checkpoint_unsupported = (
        "DeepSpeed keeps ZeRO's partitioned optimizer state in its own checkpoint format "
        "(engine.save_checkpoint), which torch.distributed.checkpoint's get_state_dict does "
        "not read; the resilience runs use torch-native engines (ddp, fsdp2)")

    def available(self) -> tuple[bool, str]:
        ok, why = super().available()
        if not ok:
            return ok, why
        try:
            import deepspeed  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure is a reason, not a crash
            return False, f"deepspeed cannot be imported: {type(e).__name__}: {e}"
        return True, ""

    def setup(self, model: nn.Module, train_cfg, dist: DistInfo) -> None:
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from deepspeed.utils import logger as ds_logger

        if not dist.distributed:
            raise RuntimeError(f"{self.name} needs an initialized process group (run under a "
                               f"launcher: deepspeed or torchrun)")
        ds_logger.setLevel(logging.WARNING)
        logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
        accel = get_accelerator().device_name()
        if accel != dist.device.type:
            raise RuntimeError(f"DeepSpeed's accelerator is {accel!r} but the run's device is "
                               f"{dist.device.type!r}")
        self._bind(model, train_cfg, dist)
        self.shm_note = _skip_cpu_shm_comm_op() if dist.device.type == "cpu" else None
        # adopt the run's process group (gloo on CPU) instead of the accelerator's default
        deepspeed.init_distributed(dist_backend=dist.backend, auto_mpi_discovery=False,
                                   verbose=False)
        self.client_optimizer = build_optimizer(model, train_cfg)
        self.config = ds_config(train_cfg, self.stage, dist.world_size, self.overlap_comm)
        self.engine, self.ds_optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=self.client_optimizer, config=self.config)
        self.engine.train()

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepResult:
        logits, _ = self.engine(inputs)
        loss = loss_fn(logits, targets)
        self.engine.backward(loss)
        self.engine.step()  # reduce(-scatter), clip, optimizer step, zero_grad
        norm = self.engine.get_global_grad_norm()
        norm = float(norm.item() if isinstance(norm, torch.Tensor) else
                     norm if norm is not None else float("nan"))
        return StepResult(loss=self.global_mean(loss), grad_norm=norm)

    def details(self) -> dict[str, Any]:
        import deepspeed
        from deepspeed.accelerator import get_accelerator

        e = self.engine
        zero = {"stage": e.zero_optimization_stage(),
                "reduce_bucket_size": e.zero_reduce_bucket_size(),
                "allgather_bucket_size": e.zero_allgather_bucket_size(),
                "overlap_comm": e.zero_overlap_comm(),
                "contiguous_gradients": e.zero_contiguous_gradients(),
                "reduce_scatter": e.zero_reduce_scatter()}
        return {"engine": f"DeepSpeed {deepspeed.__version__} ZeRO stage {self.stage}",
                "accelerator": get_accelerator().device_name(),
                "process_group": self.dist.backend,
                "zero": zero,
                "client_optimizer": type(self.client_optimizer).__name__,
                "deepspeed_optimizer": type(self.ds_optimizer).__name__,
                "module_param_dtype": str(next(e.module.parameters()).dtype),
                "optimizer_partitioning": (
                    "ZeRO hands the client optimizer flat fp32 partitions (one tensor per group "
                    "per rank): exact for element-wise AdamW; LAMB's per-tensor trust ratio "
                    "becomes per-partition" if self.cfg.optimizer == "lamb" else
                    "ZeRO hands the client optimizer flat fp32 partitions (one tensor per group "
                    "per rank); AdamW is element-wise, so this is exact"),
                "precision": ("bf16 module, fp32 master partitions in the ZeRO optimizer"
                              if self.bf16 else "fp32"),
                "ds_config": self.config,
                "cpu_shm_comm_op": self.shm_note,
                "compiled_blocks": self.compiled}

    def teardown(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None and hasattr(engine, "destroy"):
            engine.destroy()


def _skip_cpu_shm_comm_op() -> str:
    """Keep DeepSpeed's CPU comm backend from JIT-building its shared-memory all-reduce op.

    ``deepspeed.comm``'s TorchBackend builds (or loads from the torch-extensions cache) that op
    whenever it is created on CPU; only ``inference_all_reduce`` (tensor-parallel inference) uses
    it, never ZeRO training, and a rebuild costs tens of seconds of compilation on each rank.
    DeepSpeed caches its op-compatibility table in ``deepspeed.ops.__compatible_ops__`` and
    honours edits to it, so marking the op incompatible skips it."""
    import deepspeed.comm as ds_comm
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    if ds_comm.is_initialized():
        return "deepspeed.comm was already initialized in this process; left as it was"
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None:
        return "no shared-memory comm op on this accelerator"
    deepspeed.ops.__compatible_ops__[builder.NAME] = False
    return (f"{builder.NAME} not built/loaded: used only by inference_all_reduce, not by ZeRO; "
            f"all collectives go through torch.distributed (gloo)")


class Zero2Trainer(ZeroTrainer):
    name = "zero2"
    description = "DeepSpeed ZeRO stage 2 (optimizer state and gradients sharded)"
    stage = 2


class Zero3Trainer(ZeroTrainer):
    name = "zero3"
    description = "DeepSpeed ZeRO stage 3 (optimizer state, gradients and parameters sharded)"
    stage = 3


class Zero3NoOverlapTrainer(Zero3Trainer):
    name = "zero3-nooverlap"
    description = ("DeepSpeed ZeRO stage 3 with overlap_comm off (no prefetch or reduce beside "
                   "compute)")
    overlap_comm = False
