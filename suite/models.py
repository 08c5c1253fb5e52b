"""The canonical models every baseline starts from: HF PyTorch models built from a config with
seeded random weights (nothing is downloaded), so every process builds the same weights.

``kind`` picks the BERT-family member; all take their size from the same ``BertDims`` so that a
variant comparison is between models of one size: ALBERT with factorized embeddings (E =
min(128, H)) and one shared layer, DistilBERT with half the layers, DeBERTa-v2/v3 with
disentangled relative-position attention (DeBERTa-v3-base settings).

The weights are drawn here (``WEIGHTS``), not left at HF's initialization, because the
correctness gate can only see what the weights make visible. HF sets every bias to 0 and every
LayerNorm to weight 1, bias 0, and draws Q and K at std 0.02, which leaves the attention nearly
uniform: a system that dropped a bias, swapped two norms or (on a small model) swapped Q and K
matched the float64 oracle. Drawn as below, every parameter changes the output far beyond the
gate's tolerance (``tests/test_gate_mutations.py``, ``benchmarks/gate_sensitivity.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from suite.config import BertDims

KINDS = ("bert", "albert", "distilbert", "deberta")
CACHE_FORMAT = 2  # bump when what a cached folder holds changes (2: WEIGHTS drawn)


@dataclass(frozen=True)
class WeightScheme:
    """How the canonical weights are drawn, from one generator seeded with the model's seed, in
    module order. Every Linear weight is N(0, gain^2 / fan_in), so each projection keeps its
    input's scale: gain sqrt(logit_std) for Q and K, which makes the attention logits' std
    about ``logit_std`` (attention far from uniform: the mean normalized entropy of a row is
    0.61 on BERT-base at L128, 0.45 on DeBERTa, 0.75 on ALBERT, whose one shared layer draws
    its tokens together with depth; 1.0 is uniform); ``branch_gain`` for the two output
    projections that feed the residual stream (so that twelve post-LN layers keep their tokens
    apart instead of collapsing them onto one direction); 1 elsewhere. Every bias is
    N(0, bias_std^2), every LayerNorm weight 1 + N(0, norm_std^2) (kept small: a LayerNorm's
    weight multiplies the residual stream's channel at every layer, and at 0.2 the product grew
    outlier channels that tripled the fp16 error of a correct system), every embedding N(0, 1),
    the padding token's row included. Measured by ``benchmarks/gate_sensitivity.py``. Part of
    every fingerprint of a model: its cache folder's name, the oracle's file and each record's
    ``correctness.weights``."""
    version: int = 2  # 1 was HF's own initialization (records without correctness.weights)
    logit_std: float = 3.0
    branch_gain: float = 0.3
    bias_std: float = 0.1
    norm_std: float = 0.05

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


WEIGHTS = WeightScheme()


@dataclass(frozen=True)
class LayerParts:
    """Where one family keeps the parts of an encoder layer: ``layers`` from the model's root,
    the rest from one layer. The one map of these names (the weights' gains, the gate's
    mutations)."""
    layers: str
    query: str
    key: str
    value: str
    attn_out: str
    attn_norm: str
    ffn_in: str
    activation: str
    ffn_out: str
    ffn_norm: str


PARTS = {
    "bert": LayerParts("encoder.layer", "attention.self.query", "attention.self.key",
                       "attention.self.value", "attention.output.dense",
                       "attention.output.LayerNorm", "intermediate.dense",
                       "intermediate.intermediate_act_fn", "output.dense", "output.LayerNorm"),
    "albert": LayerParts("encoder.albert_layer_groups.0.albert_layers", "attention.query",
                         "attention.key", "attention.value", "attention.dense",
                         "attention.LayerNorm", "ffn", "activation", "ffn_output",
                         "full_layer_layer_norm"),
    "distilbert": LayerParts("transformer.layer", "attention.q_lin", "attention.k_lin",
                             "attention.v_lin", "attention.out_lin", "sa_layer_norm",
                             "ffn.lin1", "ffn.activation", "ffn.lin2", "output_layer_norm"),
    "deberta": LayerParts("encoder.layer", "attention.self.query_proj",
                          "attention.self.key_proj", "attention.self.value_proj",
                          "attention.output.dense", "attention.output.LayerNorm",
                          "intermediate.dense", "intermediate.intermediate_act_fn",
                          "output.dense", "output.LayerNorm"),
}
_HF_CLASSES = {"BertModel": "bert", "AlbertModel": "albert", "DistilBertModel": "distilbert",
               "DebertaV2Model": "deberta"}


def kind_of(model: torch.nn.Module) -> str:
    """The family of a canonical (or equally built) HF encoder."""
    name = type(model).__name__
    if name not in _HF_CLASSES:
        raise ValueError(f"model class {name} is not a canonical family; known: "
                         f"{sorted(_HF_CLASSES)}")
    return _HF_CLASSES[name]


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
    model = hf_initialized(kind, dims, max_position, seed)
    draw_weights(model, kind, seed)
    if folder is not None:
        _save(model, folder)
    return model


def hf_initialized(kind: str, dims: BertDims, max_position: int, seed: int = 0
                   ) -> torch.nn.Module:
    """The family's HF encoder as HF initializes it from ``seed`` (the canonical weights before
    scheme 2: zero biases, identity norms, near-uniform attention), in eval mode:
    ``canonical_model`` draws over it, ``benchmarks/gate_sensitivity.py`` measures it. HF's
    draws stay off the caller's generator."""
    import transformers as tf

    cls, cfg, kwargs = _family(tf, kind, dims, max_position)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(cfg, **kwargs).eval()


@torch.no_grad()
def draw_weights(model: torch.nn.Module, kind: str, seed: int,
                 scheme: WeightScheme = WEIGHTS) -> None:
    """Draw every parameter of ``model`` as ``scheme`` says (in place)."""
    parts = PARTS[kind]
    gains: dict[str, float] = {}
    for i in range(len(model.get_submodule(parts.layers))):
        layer = f"{parts.layers}.{i}"
        for name in (parts.query, parts.key):
            gains[f"{layer}.{name}"] = math.sqrt(scheme.logit_std)
        for name in (parts.attn_out, parts.ffn_out):
            gains[f"{layer}.{name}"] = scheme.branch_gain
    g = torch.Generator().manual_seed(seed)
    for name, module in model.named_modules():
        own = dict(module.named_parameters(recurse=False))
        if not own:
            continue
        unknown = set(own) - {"weight", "bias"}
        if unknown:
            raise TypeError(f"{kind}: module {name} has parameters {sorted(unknown)} that the "
                            f"canonical weights do not draw")
        if isinstance(module, torch.nn.Linear):
            module.weight.normal_(0.0, gains.get(name, 1.0) / math.sqrt(module.in_features),
                                  generator=g)
        elif isinstance(module, torch.nn.LayerNorm):
            module.weight.normal_(1.0, scheme.norm_std, generator=g)
        elif isinstance(module, torch.nn.Embedding):
            module.weight.normal_(0.0, 1.0, generator=g)
        else:
            raise TypeError(f"{kind}: module {name} is a {type(module).__name__}; the canonical "
                            f"weights are drawn for Linear, LayerNorm and Embedding only")
        if own.get("bias") is not None:
            own["bias"].normal_(0.0, scheme.bias_std, generator=g)


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

    key = json.dumps({"format": CACHE_FORMAT, "weights": WEIGHTS.as_dict(), "kind": kind,
                      "dims": asdict(dims), "max_position": max_position, "seed": seed,
                      "torch": torch.__version__, "transformers": transformers.__version__},
                     sort_keys=True)
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
