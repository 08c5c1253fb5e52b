"""The canonical models every baseline starts from: HF PyTorch models built from a config with
seeded random weights (nothing is downloaded), so every process builds the same weights."""

from __future__ import annotations

import torch

from suite.config import BertDims


def canonical_bert(dims: BertDims, max_position: int, seed: int = 0) -> torch.nn.Module:
    """An fp32 CPU ``BertModel`` (no pooler), eager attention, in eval mode."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=dims.vocab_size, hidden_size=dims.hidden,
                     num_hidden_layers=dims.layers, num_attention_heads=dims.heads,
                     intermediate_size=dims.intermediate,
                     max_position_embeddings=max(512, max_position))
    cfg._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertModel(cfg, add_pooling_layer=False)
    return model.eval()
