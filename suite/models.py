"""The canonical models every baseline starts from: HF PyTorch models built from a config with
seeded random weights (nothing is downloaded), so every process builds the same weights.

``kind`` picks the BERT-family member; all take their size from the same ``BertDims`` so that a
variant comparison is between models of one size: ALBERT with factorized embeddings (E =
min(128, H)) and one shared layer, DistilBERT with half the layers, DeBERTa-v2/v3 with
disentangled relative-position attention (DeBERTa-v3-base settings).
"""

from __future__ import annotations

from typing import Any

import torch

from suite.config import BertDims

KINDS = ("bert", "albert", "distilbert", "deberta")


def canonical_model(kind: str, dims: BertDims, max_position: int, seed: int = 0) -> torch.nn.Module:
    """An fp32 CPU HF encoder of the given family (no pooler), eager attention, in eval mode."""
    import transformers as tf

    if kind not in KINDS:
        raise ValueError(f"model kind {kind!r} is not one of {KINDS}")
    common = {"vocab_size": dims.vocab_size, "max_position_embeddings": max(512, max_position)}
    if kind == "bert":
        cfg = tf.BertConfig(hidden_size=dims.hidden, num_hidden_layers=dims.layers,
                            num_attention_heads=dims.heads, intermediate_size=dims.intermediate,
                            **common)
        build = lambda: tf.BertModel(cfg, add_pooling_layer=False)  # noqa: E731
    elif kind == "albert":
        cfg = tf.AlbertConfig(embedding_size=min(128, dims.hidden), hidden_size=dims.hidden,
                              num_hidden_layers=dims.layers, num_attention_heads=dims.heads,
                              intermediate_size=dims.intermediate, **common)
        build = lambda: tf.AlbertModel(cfg, add_pooling_layer=False)  # noqa: E731
    elif kind == "distilbert":
        cfg = tf.DistilBertConfig(dim=dims.hidden, n_layers=max(1, dims.layers // 2),
                                  n_heads=dims.heads, hidden_dim=dims.intermediate, **common)
        build = lambda: tf.DistilBertModel(cfg)  # noqa: E731
    else:
        cfg = tf.DebertaV2Config(hidden_size=dims.hidden, num_hidden_layers=dims.layers,
                                 num_attention_heads=dims.heads,
                                 intermediate_size=dims.intermediate, relative_attention=True,
                                 pos_att_type=["p2c", "c2p"], position_buckets=256,
                                 max_relative_positions=-1, norm_rel_ebd="layer_norm",
                                 share_att_key=True, position_biased_input=False,
                                 type_vocab_size=0, **common)
        build = lambda: tf.DebertaV2Model(cfg)  # noqa: E731
    cfg._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    return model.eval()


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
