"""The canonical HF ``BertModel``'s weights as numpy arrays, in the layout the BERT encoders
written outside torch compute with (``tensorflow_bert``, ``jax_bert``): one mapping for both."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def bert_weights(model: torch.nn.Module) -> dict[str, Any]:
    """The HF ``BertModel``'s weights as float32 numpy arrays, Linear weights transposed to
    ``[in, out]`` (torch stores ``[out, in]``) and Q, K, V concatenated into one ``[H, 3H]``."""
    config = model.config
    if type(model).__name__ != "BertModel":
        raise ValueError(f"this encoder is BERT only, got {type(model).__name__}")
    if config.hidden_act != "gelu":
        raise ValueError(f"hidden_act {config.hidden_act!r} is not supported (only 'gelu')")
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
        raise ValueError("only absolute position embeddings are supported, got "
                         f"{config.position_embedding_type!r}")
    sd = {k: v.detach().to("cpu", torch.float32).numpy() for k, v in model.state_dict().items()}

    def linear(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return sd[f"{prefix}.weight"].T.copy(), sd[f"{prefix}.bias"]

    def norm(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return sd[f"{prefix}.weight"], sd[f"{prefix}.bias"]

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}"
        (wq, bq), (wk, bk), (wv, bv) = (linear(f"{p}.attention.self.{n}")
                                        for n in ("query", "key", "value"))
        layers.append({
            "qkv": (np.concatenate([wq, wk, wv], axis=1), np.concatenate([bq, bk, bv])),
            "attn_out": linear(f"{p}.attention.output.dense"),
            "attn_norm": norm(f"{p}.attention.output.LayerNorm"),
            "ffn_in": linear(f"{p}.intermediate.dense"),
            "ffn_out": linear(f"{p}.output.dense"),
            "ffn_norm": norm(f"{p}.output.LayerNorm"),
        })
    return {
        "word": sd["embeddings.word_embeddings.weight"],
        "position": sd["embeddings.position_embeddings.weight"],
        "token_type": sd["embeddings.token_type_embeddings.weight"],
        "embed_norm": norm("embeddings.LayerNorm"),
        "layers": layers,
    }
