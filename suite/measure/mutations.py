"""Mis-mappings of the canonical weights that a system could make, each one parameter wrong in
every layer (as a weight-mapping loop gets it wrong), for showing that the correctness gate
catches it.

``mutate(model, name)`` returns a mis-mapped copy of a canonical HF encoder; a system prepared
from that copy computes what a system with the bug would. ``tests/test_gate_mutations.py`` runs
each one through a real point run (and through the external protocol's example program,
``--mutate``) and expects an ``incorrect`` record; ``benchmarks/gate_sensitivity.py`` prints
each one's error against every dtype's tolerance.

``ACCEPTED`` is an approximation, not a mis-mapping: GELU's tanh form differs from the exact
GELU by at most 4.7e-4 per activation (at x = 2.70), and it is what ByteTransformer's and
FasterTransformer's kernels compute. With the canonical weights it moves the output by less
than the tolerance (BERT-family base at fp32: 5e-4 to 8e-4 against 1e-3; at the tests' size
3e-4), so a correct system that uses it passes; the tests hold it to that.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from suite.models import PARTS, LayerParts, kind_of

MUTATIONS = {
    "bias-dropped": "the FFN's first bias left out",
    "qk-swapped": "the query and key projections swapped",
    "kv-bias-swapped": "the key and value biases swapped",
    "norms-swapped": "the attention block's and the FFN block's LayerNorm swapped",
    "gelu-sigmoid": "GELU computed as x * sigmoid(1.702 x) (HF's quick_gelu)",
}
ACCEPTED = {
    "gelu-tanh": "GELU's tanh approximation where the model has the exact form (or the "
                 "reverse, for ALBERT)",
}


def mutate(model: nn.Module, name: str) -> nn.Module:
    """A copy of ``model`` with mutation ``name`` (``MUTATIONS`` or ``ACCEPTED``) in every
    layer; ``model`` is left as it was."""
    if name not in _APPLY:
        raise ValueError(f"mutation {name!r} is not one of {sorted(_APPLY)}")
    parts = PARTS[kind_of(model)]
    out = copy.deepcopy(model)
    with torch.no_grad():
        _APPLY[name](out, parts)
    return out


Apply = Callable[[nn.Module, LayerParts], None]


def _each_layer(change: Callable[[Callable[[str], nn.Module], LayerParts], None]) -> Apply:
    """A mutation made in every layer: ``change(part, parts)``, ``part`` the layer's
    ``get_submodule``."""
    def apply(model: nn.Module, parts: LayerParts) -> None:
        for layer in model.get_submodule(parts.layers):
            change(layer.get_submodule, parts)
    return apply


def _swap(a: nn.Module, b: nn.Module, names: tuple[str, ...] = ("weight", "bias")) -> None:
    for n in names:
        x, y = getattr(a, n), getattr(b, n)
        kept = x.detach().clone()
        x.copy_(y)
        y.copy_(kept)


def _activation(to: Callable[[str], str]) -> Apply:
    """Every layer's activation module replaced, and the config's name for it (systems that map
    the weights read the name; HF's modules call the module)."""
    def apply(model: nn.Module, parts: LayerParts) -> None:
        from transformers.activations import ACT2FN

        attr = "hidden_act" if hasattr(model.config, "hidden_act") else "activation"
        new = to(getattr(model.config, attr))
        parent, _, leaf = parts.activation.rpartition(".")
        for layer in model.get_submodule(parts.layers):
            setattr(layer.get_submodule(parent) if parent else layer, leaf, ACT2FN[new])
        setattr(model.config, attr, new)
    return apply


def _tanh_for_exact(current: str) -> str:
    flips = {"gelu": "gelu_new", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu"}
    if current not in flips:
        raise ValueError(f"activation {current!r} is not a GELU this mutation knows: "
                         f"{sorted(flips)}")
    return flips[current]


_APPLY: dict[str, Apply] = {
    "bias-dropped": _each_layer(lambda part, p: part(p.ffn_in).bias.zero_()),
    "qk-swapped": _each_layer(lambda part, p: _swap(part(p.query), part(p.key))),
    "kv-bias-swapped": _each_layer(lambda part, p: _swap(part(p.key), part(p.value), ("bias",))),
    "norms-swapped": _each_layer(lambda part, p: _swap(part(p.attn_norm), part(p.ffn_norm))),
    "gelu-sigmoid": _activation(lambda current: "quick_gelu"),
    "gelu-tanh": _activation(_tanh_for_exact),
}
assert set(_APPLY) == set(MUTATIONS) | set(ACCEPTED)


@torch.no_grad()
def attention_entropy(model: nn.Module, batch) -> list[float]:
    """Per layer, the mean normalized entropy of the attention rows of ``batch``'s valid
    tokens (each row over its own sequence's keys, divided by log n): 1.0 is uniform attention,
    under which swapping Q and K changes nothing; 0 is one key per query. Float64, eager."""
    from suite.models import hf_inputs

    m = copy.deepcopy(model).to(torch.float64)
    m.config._attn_implementation = "eager"
    out = m(**hf_inputs(m, batch.input_ids, batch.attention_mask, batch.token_type_ids),
            output_attentions=True)
    per_layer = []
    for probs in out.attentions:  # [B, heads, S, S]
        rows = []
        for i, n in enumerate(batch.lengths):
            if n > 1:
                p = probs[i, :, :n, :n]
                rows.append((-(p * p.clamp_min(1e-300).log()).sum(-1) / torch.log(
                    torch.tensor(float(n), dtype=torch.float64))).flatten())
        per_layer.append(float(torch.cat(rows).mean()))
    return per_layer
