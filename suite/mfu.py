"""FLOP formulas. Efficiency figures count matmul FLOPs only (2 per multiply-add), the
convention of MFU accounting; LayerNorm, softmax and element-wise work are left out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Literal

from reference_impl.configs import CHECKPOINTING, MLPS


def bert_encoder_flops(layers: int, hidden: int, intermediate: int,
                       lengths: Sequence[int]) -> float:
    """Matmul FLOPs of a BERT encoder forward over sequences of the given lengths.

    Per layer and token: QKV 2*3h^2, attention output 2*h^2, FFN 2*2*h*i. Per layer and
    sequence of length l: Q K^T and P V, 2*2*l^2*h. Pass the true lengths for the useful work,
    or the padded lengths for what a padded implementation computes.
    """
    tokens = sum(lengths)
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)
    attention = 4 * hidden * sum(l * l for l in lengths)
    return float(layers * (per_token * tokens + attention))


# --- Model FLOPs utilization (MFU) accounting --------------------------------------------
#
# MFU = achieved model FLOP/s / peak FLOP/s. "Model" FLOPs are what the model needs (forward +
# backward = 3x the forward matmuls, no recompute); "hardware" FLOPs add the forward work that
# activation recomputation repeats, and give HFU. Every figure names its formula and its peak,
# because papers differ on both and a bare percentage cannot be compared.

Recompute = Literal["none", "selective", "full"]


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive finite number")


def _positive_int(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive integer")


def _recompute_mode(recompute: str) -> None:
    if recompute not in CHECKPOINTING:
        raise ValueError(f"recompute={recompute!r} is not one of {list(CHECKPOINTING)}")


def megatron_flops_per_token(layers: int, hidden: int, seq_len: int, vocab: int,
                             recompute: Recompute = "none") -> float:
    """FLOPs per trained token of a GPT, the closed forms of Narayanan et al. (2021).

    The papers give per-iteration counts (times B*s); this is per token so that
    tokens/s x this = FLOP/s. "none" is the model-FLOP count used for MFU (MegaScale Table 2
    uses it); "full" adds one forward of every layer (HFU with full recompute); "selective" is
    Korthikanti et al.'s published form, which charges 3x the forward attention matmuls for the
    recompute (see ``count_flops`` for a count that charges one forward).
    """
    for name, value in (("layers", layers), ("hidden", hidden), ("seq_len", seq_len),
                        ("vocab", vocab)):
        _positive_int(name, value)
    _recompute_mode(recompute)
    l, h, s, v = layers, hidden, seq_len, vocab
    if recompute == "none":
        return 72 * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
    if recompute == "full":
        return 96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72 * l * h * h * (1 + s / (3 * h) + v / (12 * l * h))


def palm_flops_per_token(n_params: float, layers: int, heads: int, head_dim: int,
                         seq_len: int) -> float:
    """PaLM's (Chowdhery et al. 2022, App. B) model FLOPs per token: 6N + 12*L*H*Q*T.

    6N counts every parameter as one multiply-add forward and two backward, so it includes
    the (input) embedding table, which is a lookup, unless the caller leaves it out of N.
    """
    _positive("n_params", n_params)
    for name, value in (("layers", layers), ("heads", heads), ("head_dim", head_dim),
                        ("seq_len", seq_len)):
        _positive_int(name, value)
    return 6 * float(n_params) + 12 * layers * heads * head_dim * seq_len


def mfu(tokens_per_second: float, flops_per_token: float, n_devices: int,
        peak_flops_per_device: float) -> float:
    """Utilization as a fraction (not percent): achieved FLOP/s over the devices' total peak.

    Pass model FLOPs for MFU, hardware FLOPs (``FlopCount.hardware_flops_per_token``) for HFU.
    """
    _positive("tokens_per_second", tokens_per_second)
    _positive("flops_per_token", flops_per_token)
    _positive_int("n_devices", n_devices)
    _positive("peak_flops_per_device", peak_flops_per_device)
    return tokens_per_second * flops_per_token / (n_devices * peak_flops_per_device)


@dataclass(frozen=True)
class TransformerShape:
    """A decoder-only transformer as its matmuls see it.

    ``kv_heads`` < ``heads`` is grouped-query attention (1 = multi-query). ``sliding_window``
    is the number of keys a query attends to at most (None: the whole context). Tied
    embeddings change the parameter count, not the FLOPs: the LM head runs either way.
    """
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    mlp: Literal["gelu", "swiglu"]
    vocab: int
    seq_len: int
    sliding_window: int | None = None
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab",
                     "seq_len"):
            _positive_int(name, getattr(self, name))
        if self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} must be a multiple of "
                             f"kv_heads={self.kv_heads} (grouped-query attention)")
        if self.mlp not in MLPS:
            raise ValueError(f"mlp={self.mlp!r} is not one of {list(MLPS)}")
        if self.sliding_window is not None:
            _positive_int("sliding_window", self.sliding_window)

    @classmethod
    def gpt(cls, layers: int, hidden: int, heads: int, seq_len: int, vocab: int,
            sliding_window: int | None = None) -> TransformerShape:
        """The GPT-3 shape the Megatron formulas assume: MHA, GELU MLP of 4h, untied."""
        if hidden % heads:
            raise ValueError(f"hidden={hidden} must be a multiple of heads={heads}")
        return cls(layers=layers, hidden=hidden, heads=heads, kv_heads=heads,
                   head_dim=hidden // heads, ffn_hidden=4 * hidden, mlp="gelu", vocab=vocab,
                   seq_len=seq_len, sliding_window=sliding_window)


@dataclass(frozen=True)
class FlopCount:
    """FLOPs per trained token: model (for MFU) and hardware (with recompute, for HFU)."""
    model_flops_per_token: float
    hardware_flops_per_token: float
    formula: str


def attention_context(shape: TransformerShape, causal_halving: bool) -> float:
    """Average number of keys whose score and value products one query computes.

    Without causal halving every query is charged the dense row a non-skipping kernel
    computes: s keys, or min(w, s) with a window of w. With halving query i (1-based) sees
    min(i, w) keys; averaged exactly over i = 1..s that is (s+1)/2 without a window and
    (w(w+1)/2 + (s-w)w)/s with one (w < s). Note min(w, (s+1)/2) is not the average: for
    s=2048, w=1024 it says 1024 where the average is 768.25.
    """
    s, w = shape.seq_len, shape.sliding_window
    if w is None or w >= s:
        return (s + 1) / 2 if causal_halving else float(s)
    if not causal_halving:
        return float(w)
    return (w * (w + 1) / 2 + (s - w) * w) / s


def count_flops(shape: TransformerShape, *, causal_halving: bool = False,
                include_embeddings: bool = True, recompute: Recompute = "none",
                recompute_early_stop: bool = False) -> FlopCount:
    """Matmul FLOPs per token of a transformer from its shape (2 FLOPs per multiply-add).

    Forward per layer: Q and O projections 2*2*h*(heads*head_dim), K and V 2*2*h*(kv_heads*
    head_dim), MLP 2*h*ffn per matrix (2 matrices for GELU, 3 for SwiGLU), attention scores and
    P*V 2*2*heads*head_dim*context. With ``include_embeddings`` the LM head adds 2*h*V (the input
    embedding is a lookup, no matmul). Model FLOPs are 3x forward (backward = 2x forward).
    Hardware FLOPs add the recomputed forward: all layers ("full", as Megatron: the LM head is
    not recomputed) or the attention score/softmax/PV block ("selective"; one forward of it,
    where Korthikanti's closed form charges three). With ``recompute_early_stop`` a full
    recompute leaves out each layer's MLP output projection: torch's non-reentrant checkpoint
    (from 2.1, the reference GPT's) stops at the last tensor the backward saved, its input.
    """
    _recompute_mode(recompute)
    h, q = shape.hidden, shape.heads * shape.head_dim
    kv = shape.kv_heads * shape.head_dim
    projections = 2 * h * q * 2 + 2 * h * kv * 2
    mlp = 2 * h * shape.ffn_hidden * (3 if shape.mlp == "swiglu" else 2)
    attention = 4 * q * attention_context(shape, causal_halving)
    layer_fwd = shape.layers * (projections + mlp + attention)
    head_fwd = 2 * h * shape.vocab if include_embeddings else 0
    model = 3 * (layer_fwd + head_fwd)
    extra = {"none": 0.0, "full": layer_fwd, "selective": shape.layers * attention}[recompute]
    early = recompute_early_stop and recompute == "full"
    if early:
        extra -= shape.layers * 2 * h * shape.ffn_hidden
    label = (f"detailed(causal_halving={causal_halving}, embeddings={include_embeddings}, "
             f"recompute={recompute}" + (", early_stop" if early else "")
             + (f", window={shape.sliding_window}" if shape.sliding_window is not None else "")
             + ")")
    return FlopCount(model_flops_per_token=float(model),
                     hardware_flops_per_token=float(model + extra), formula=label)


def parameter_count(shape: TransformerShape, include_embeddings: bool = True) -> int:
    """Weight-matrix parameters (biases and norms left out), for 6N-style counts.

    Embeddings: the input table V*h, plus an LM head V*h unless tied.
    """
    h, q = shape.hidden, shape.heads * shape.head_dim
    kv = shape.kv_heads * shape.head_dim
    per_layer = 2 * h * q + 2 * h * kv + h * shape.ffn_hidden * (3 if shape.mlp == "swiglu" else 2)
    emb = shape.vocab * h * (1 if shape.tied_embeddings else 2) if include_embeddings else 0
    return shape.layers * per_layer + emb


def hfu(tokens_per_second: float, count: FlopCount, n_devices: int,
        peak_flops_per_device: float) -> float:
    """Hardware FLOPs utilization: ``mfu`` with the recompute-inclusive count."""
    return mfu(tokens_per_second, count.hardware_flops_per_token, n_devices,
               peak_flops_per_device)


@dataclass(frozen=True)
class MfuFigure:
    """A utilization figure with what it means: the FLOP formula and the peak it divides by."""
    value: float  # fraction, not percent
    formula: str
    peak_flops: float  # per device
    peak_source: str
    kind: Literal["MFU", "HFU"] = "MFU"

    @property
    def percent(self) -> float:
        return 100 * self.value

    def as_dict(self) -> dict[str, float | str]:
        return {"kind": self.kind, "value": self.value, "percent": self.percent,
                "formula": self.formula, "peak_flops": self.peak_flops,
                "peak_source": self.peak_source}


def mfu_figure(tokens_per_second: float, flops_per_token: float, formula: str, n_devices: int,
               *, device_name: str | None = None, dtype: str | None = None,
               peak_flops: float | None = None, peak_source: str | None = None,
               kind: Literal["MFU", "HFU"] = "MFU") -> MfuFigure:
    """An MFU (or HFU) figure that records its formula and its peak.

    The peak is either given with where it came from (``peak_flops`` + ``peak_source``, e.g. a
    measured matmul peak) or looked up by ``suite.peak.datasheet_peak(device_name, dtype)``.
    No peak is ever guessed: an unknown device or dtype is an error, not a fallback.
    """
    if not formula:
        raise ValueError("formula must name the FLOP count used (e.g. 'megatron(none)')")
    if kind not in ("MFU", "HFU"):
        raise ValueError(f"kind={kind!r} is not one of ['MFU', 'HFU']")
    if peak_flops is not None:
        if not peak_source:
            raise ValueError(f"peak_flops={peak_flops!r} needs a peak_source saying where it "
                             "comes from (datasheet, measured, ...)")
        if device_name is not None or dtype is not None:
            raise ValueError("give either peak_flops + peak_source or device_name + dtype, "
                             "not both")
        peak, source = float(peak_flops), peak_source
    else:
        if device_name is None or dtype is None:
            raise ValueError("no peak: give device_name and dtype for the datasheet peak, or "
                             "peak_flops with peak_source")
        from suite.peak import datasheet_peak  # imports torch; only needed here

        sheet = datasheet_peak(device_name, dtype)
        if sheet is None:
            raise ValueError(f"no datasheet peak for device_name={device_name!r}, "
                             f"dtype={dtype!r}; pass a measured peak_flops with peak_source")
        peak = sheet["flops_per_s"]
        source = f"{sheet['device']} {dtype} {sheet['source']}"
    value = mfu(tokens_per_second, flops_per_token, n_devices, peak)
    return MfuFigure(value=value, formula=formula, peak_flops=peak, peak_source=source, kind=kind)


def megatron_formula_label(recompute: Recompute = "none") -> str:
    """The label ``mfu_figure`` records for ``megatron_flops_per_token``."""
    _recompute_mode(recompute)
    return f"megatron-narayanan2021(recompute={recompute})"
