"""The canonical models every baseline starts from: HF PyTorch models built from a config with
seeded random weights (nothing is downloaded), so every process builds the same weights.

``kind`` picks the BERT-family member; all take their size from the same ``BertDims`` so that a
variant comparison is between models of one size: ALBERT with factorized embeddings (E =
min(128, H)) and one shared layer, DistilBERT with half the layers, DeBERTa-v2/v3 with
disentangled relative-position attention (DeBERTa-v3-base settings).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from suite.config import BertDims

KINDS = ("bert", "albert", "distilbert", "deberta")
CACHE_FORMAT = 1  # bump when what a cached folder holds changes


def canonical_model(kind: str, dims: BertDims, max_position: int, seed: int = 0,
                    cache: Path | None = None) -> torch.nn.Module:
    """An fp32 CPU HF encoder of the given family (no pooler), eager attention, in eval mode.

    ``cache``: a folder the jobs of one run share. The first job to build a model writes it
    there (``save_pretrained``); later jobs load it (``from_pretrained``, which skips the random
    init: 0.1 s instead of 1.0 s for BERT-base on a 2-core EPYC, over the 16 BERT-base jobs of
    the quick run). A folder is named by everything the weights depend on, so it is only ever
    read for the same model; one that cannot be read is built and written again."""
    import transformers as tf

    if kind not in KINDS:
        raise ValueError(f"model kind {kind!r} is not one of {KINDS}")
    cls, cfg, kwargs = _family(tf, kind, dims, max_position)
    folder = None if cache is None else Path(cache) / _cache_name(kind, dims, max_position, seed)
    if folder is not None and (folder / "config.json").is_file():
        try:
            return _load(tf, cls, folder, kwargs)
        except Exception:  # noqa: BLE001 - a damaged folder is replaced below
            shutil.rmtree(folder, ignore_errors=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(cfg, **kwargs)
    if folder is not None:
        _save(model, folder)
    return model.eval()


def _family(tf, kind: str, dims: BertDims, max_position: int) -> tuple[type, Any, dict]:
    """The HF class, its config (eager attention) and constructor arguments of one family."""
    common = {"vocab_size": dims.vocab_size, "max_position_embeddings": max(512, max_position)}
    no_pooler = {"add_pooling_layer": False}
    if kind == "bert":
        cfg = tf.BertConfig(hidden_size=dims.hidden, num_hidden_layers=dims.layers,
                            num_attention_heads=dims.heads, intermediate_size=dims.intermediate,
                            **common)
        cls, kwargs = tf.BertModel, no_pooler
    elif kind == "albert":
        cfg = tf.AlbertConfig(embedding_size=min(128, dims.hidden), hidden_size=dims.hidden,
                              num_hidden_layers=dims.layers, num_attention_heads=dims.heads,
                              intermediate_size=dims.intermediate, **common)
        cls, kwargs = tf.AlbertModel, no_pooler
    elif kind == "distilbert":
        cfg = tf.DistilBertConfig(dim=dims.hidden, n_layers=max(1, dims.layers // 2),
                                  n_heads=dims.heads, hidden_dim=dims.intermediate, **common)
        cls, kwargs = tf.DistilBertModel, {}
    else:
        cfg = tf.DebertaV2Config(hidden_size=dims.hidden, num_hidden_layers=dims.layers,
                                 num_attention_heads=dims.heads,
                                 intermediate_size=dims.intermediate, relative_attention=True,
                                 pos_att_type=["p2c", "c2p"], position_buckets=256,
                                 max_relative_positions=-1, norm_rel_ebd="layer_norm",
                                 share_att_key=True, position_biased_input=False,
                                 type_vocab_size=0, **common)
        cls, kwargs = tf.DebertaV2Model, {}
    cfg._attn_implementation = "eager"
    return cls, cfg, kwargs


def _cache_name(kind: str, dims: BertDims, max_position: int, seed: int) -> str:
    import transformers

    key = json.dumps({"format": CACHE_FORMAT, "kind": kind, "dims": asdict(dims),
                      "max_position": max_position, "seed": seed, "torch": torch.__version__,
                      "transformers": transformers.__version__}, sort_keys=True)
    return f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _load(tf, cls: type, folder: Path, kwargs: dict) -> torch.nn.Module:
    bars = tf.utils.logging.is_progress_bar_enabled()
    verbosity = tf.utils.logging.get_verbosity()
    tf.utils.logging.disable_progress_bar()
    tf.utils.logging.set_verbosity_error()
    try:
        model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                    **kwargs)
    finally:
        tf.utils.logging.set_verbosity(verbosity)
        if bars:
            tf.utils.logging.enable_progress_bar()
    return model.eval()


def _save(model: torch.nn.Module, folder: Path) -> None:
    """Atomically: a job killed mid-write leaves no folder that looks whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    part = folder.with_name(f".{folder.name}.{os.getpid()}.part")
    shutil.rmtree(part, ignore_errors=True)
    model.save_pretrained(part)
    try:
        part.rename(folder)
    except OSError:  # another job's folder got there first
        shutil.rmtree(part, ignore_errors=True)


def canonical_bert(dims: BertDims, max_position: int, seed: int = 0) -> torch.nn.Module:
    return canonical_model("bert", dims, max_position, seed)


def uses_token_types(model: torch.nn.Module) -> bool:
    """DistilBERT has no token types; DeBERTa-v3 has type_vocab_size 0."""
    return getattr(model.config, "type_vocab_size", 0) > 0


def hf_inputs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              token_type_ids: torch.Tensor) -> dict[str, Any]:
    kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if uses_token_types(model):
        kwargs["token_type_ids"] = token_type_ids
    return kwargs
