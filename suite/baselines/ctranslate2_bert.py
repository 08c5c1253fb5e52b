"""CTranslate2: the canonical BERT converted by CTranslate2's Transformers converter and run by
its ``Encoder``, each sequence at its own length (a dense ``[B, S]`` id array with the lengths
beside it): a padding-free engine, the closest a CPU user gets to ByteTransformer off the
shelf.

The converter reads ``position_embedding_type``, which transformers 5 dropped from
``BertConfig``; the model folder written for it says ``"absolute"`` (the only kind the
canonical models have, and the only one the converter accepts). It also loads the model with a
pooler, which it initializes at random: the pooler is not part of the last hidden state the gate
compares. BERT only: the converter has no ALBERT or DeBERTa loader.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from suite.baselines.base import Baseline, Supports, Unavailable
from suite.models import kind_of
from suite.workloads import BertBatch

_COMPUTE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


class CTranslate2(Baseline):
    name = "ctranslate2"
    description = ("CTranslate2 Encoder (TransformersConverter of the HF BERT), each sequence "
                   "at its own length")
    padding_free = True
    supports = Supports(devices=("cpu", "cuda"))

    def available(self) -> tuple[bool, str]:
        try:
            import ctranslate2  # noqa: F401
        except ImportError as e:
            return False, f"ctranslate2 is not installed ({e}); pip install -e '.[ctranslate2]'"
        return True, ""

    def can_run(self, task: str, device: str, dtype: str) -> tuple[bool, str]:
        ok, why = super().can_run(task, device, dtype)
        if ok and device == "cuda":
            import ctranslate2

            if ctranslate2.get_cuda_device_count() == 0:
                return False, ("this ctranslate2 build sees no CUDA device "
                               "(ctranslate2.get_cuda_device_count() == 0)")
        return ok, why

    def prepare(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
        import ctranslate2
        from ctranslate2.converters import TransformersConverter

        if kind_of(model) != "bert":
            raise Unavailable(f"ctranslate2's converter has no {type(model).__name__} loader "
                              "here (BERT only)")
        self.device, self.threads = device, torch.get_num_threads()
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="seedbench-ct2-") as tmp:
            hf_dir, ct2_dir = Path(tmp) / "hf", Path(tmp) / "ct2"
            model.save_pretrained(hf_dir)
            config = json.loads((hf_dir / "config.json").read_text())
            config["position_embedding_type"] = "absolute"  # what the converter reads
            (hf_dir / "config.json").write_text(json.dumps(config))
            TransformersConverter(str(hf_dir)).convert(str(ct2_dir), force=True)
            converted_at = time.perf_counter()
            self.encoder = ctranslate2.Encoder(
                str(ct2_dir), device=device.type, device_index=device.index or 0,
                compute_type=_COMPUTE[dtype], intra_threads=self.threads)
        self.build_s = {"convert_s": converted_at - start,
                        "load_s": time.perf_counter() - converted_at}

    def run(self, batch: BertBatch) -> np.ndarray | torch.Tensor:
        import ctranslate2

        ids = _view(ctranslate2, batch.input_ids.to(torch.int32).contiguous())
        lengths = _view(ctranslate2, torch.tensor(batch.lengths, dtype=torch.int32,
                                                  device=batch.input_ids.device))
        out = self.encoder.forward_batch(ids, lengths,
                                         token_type_ids=batch.token_type_ids.tolist())
        hidden = out.last_hidden_state  # [B, longest, H]: pad to the batch's max_seq_len
        if self.device.type == "cuda":
            states = torch.as_tensor(hidden, device=self.device)
        else:
            states = torch.from_numpy(np.array(hidden))
        padded = states.new_zeros(*batch.input_ids.shape, states.shape[-1])
        padded[:, :states.shape[1]] = states
        return padded

    def details(self) -> dict:
        import ctranslate2

        return {"ctranslate2": ctranslate2.__version__, "threads": self.threads,
                "compute_type": self.encoder.compute_type, **self.build_s}


def _view(ctranslate2, t: torch.Tensor):
    """A StorageView over ``t``'s memory: numpy's array interface on a CPU, the CUDA one on a
    GPU (no copy either way)."""
    return ctranslate2.StorageView.from_array(t.numpy() if t.device.type == "cpu" else t)
