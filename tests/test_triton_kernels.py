"""Triton kernels against float64 torch references.

Without a GPU they run in Triton's interpreter, which has to be switched on before any kernel is
decorated, hence the environment line above the imports.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

pytest.importorskip("triton")

import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.kernels import triton_attention as ta
from reference_impl.kernels.attention import varlen_attention
from reference_impl.kernels.triton_attention import (
    BLOCK_M, LONG_BLOCK_N, SHORT_BLOCK_M, SHORT_SEQ_MAX, choose_variant, triton_varlen_attention,
)
from reference_impl.kernels.triton_gelu import triton_bias_gelu
from reference_impl.kernels.triton_norm import triton_add_bias_residual_layernorm

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# Against float64 references computed from the same (already rounded) inputs. The fp16/bf16 rows
# cover rounding of the output and, in attention, of the probabilities fed to the second product.
# The interpreter runs fp16 and bf16 (its tl.dot mishandles bf16, triton-lang/triton#11584, so the
# attention kernel upcasts bf16 dot operands there; see triton_attention._dot).
TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=3e-3, rtol=3e-3),
    torch.bfloat16: dict(atol=3e-2, rtol=2e-2),
}
if DEVICE == "cuda":  # on a GPU tl.dot takes fp32 operands as TF32 (10-bit mantissa)
    TOL[torch.float32] = dict(atol=5e-3, rtol=5e-3)


def assert_close(actual, expected, dtype):
    assert actual.dtype == dtype
    torch.testing.assert_close(actual.double(), expected.double(), **TOL[dtype])


# ---------------------------------------------------------------------------------------------
# attention


def cu_seqlens_of(lengths):
    bounds = [0, *torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()]
    return torch.tensor(bounds, dtype=torch.int32, device=DEVICE)


def random_qkv(lengths, heads, head_dim, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (sum(lengths), heads, head_dim)
    return [torch.randn(shape, generator=g).to(dtype=dtype, device=DEVICE) for _ in range(3)]


def reference_attention(q, k, v, cu_seqlens, causal, scale):
    """softmax(q k^T * scale) v per sequence and head, in float64."""
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    bounds = cu_seqlens.tolist()
    for start, end in zip(bounds[:-1], bounds[1:]):
        n = end - start
        if n == 0:
            continue
        qs, ks, vs = (t[start:end].double().transpose(0, 1) for t in (q, k, v))  # (heads, n, d)
        scores = qs @ ks.transpose(-1, -2) * scale
        if causal:
            later = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(later, float("-inf"))
        out[start:end] = (scores.softmax(-1) @ vs).transpose(0, 1)
    return out


def check_attention(lengths, *, causal, variant, heads=2, head_dim=32, dtype=torch.float32, seed=0):
    q, k, v = random_qkv(lengths, heads, head_dim, dtype, seed)
    cu = cu_seqlens_of(lengths)
    out = triton_varlen_attention(q, k, v, cu, max(lengths), causal=causal, variant=variant)
    assert out.shape == q.shape
    assert_close(out, reference_attention(q, k, v, cu, causal, head_dim ** -0.5), dtype)


LENGTH_CASES = {
    "zero-one-odd": [0, 1, 7, 13, 0],
    "key-tile-exact": [16, 3],  # short: BLOCK_N = 16 exactly
    "key-tile-plus-one": [17, 16],  # short: BLOCK_N = 32, one key past 16
    "query-block-edge": [BLOCK_M, BLOCK_M + 1, 0],  # one block exactly, then one row over
    "fewer-tokens-than-batch": [0, 0, 1, 0, 2],
    "several-key-blocks": [2 * LONG_BLOCK_N + 3, 5],  # long: three steps of the online softmax
}


@pytest.mark.parametrize("variant", ["short", "long"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lengths", LENGTH_CASES.values(), ids=LENGTH_CASES.keys())
def test_attention_matches_reference(lengths, causal, variant):
    check_attention(lengths, causal=causal, variant=variant)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant", ["short", "long"])
def test_attention_half_precision(dtype, variant):
    rows = BLOCK_M if variant == "long" else SHORT_BLOCK_M
    check_attention([1, 13, rows + 1], causal=True, variant=variant, head_dim=64, dtype=dtype)


@pytest.mark.parametrize("head_dim", [8, 16, 32, 48, 64, 128])  # 8 and 48 exercise the padding
def test_attention_head_dims(head_dim):
    check_attention([7, 20], causal=False, variant="auto", heads=1, head_dim=head_dim)


def test_attention_strided_views_and_scale():
    # q, k, v as views of one fused (T, 3, H, D) projection: token stride 3*H*D, no copies.
    lengths, heads, head_dim = [5, 0, 11], 2, 16
    qkv = torch.randn(sum(lengths), 3, heads, head_dim, device=DEVICE)
    q, k, v = qkv.unbind(1)
    v = v.transpose(1, 2).contiguous().transpose(1, 2)  # and one whose last dim is not contiguous
    assert not q.is_contiguous() and v.stride(-1) != 1
    cu = cu_seqlens_of(lengths)
    out = triton_varlen_attention(q, k, v, cu, max(lengths), causal=True, softmax_scale=0.3)
    assert_close(out, reference_attention(q, k, v, cu, True, 0.3), torch.float32)


def test_attention_agrees_with_torch_backend():
    lengths = [9, 0, 4]
    q, k, v = random_qkv(lengths, 2, 16)
    cu = cu_seqlens_of(lengths)
    expected = varlen_attention(q, k, v, cu, max(lengths), causal=True, backend="torch")
    out = triton_varlen_attention(q, k, v, cu, max(lengths), causal=True)
    torch.testing.assert_close(out, expected, **TOL[torch.float32])


def test_attention_empty_inputs():
    q, k, v = random_qkv([0, 0], 2, 16)
    out = triton_varlen_attention(q, k, v, cu_seqlens_of([0, 0]), 0)
    assert out.shape == (0, 2, 16)
    q, k, v = random_qkv([], 2, 16)
    assert triton_varlen_attention(q, k, v, cu_seqlens_of([]), 0).shape == (0, 2, 16)  # batch 0


def test_auto_dispatch_rule(monkeypatch):
    assert choose_variant(1) == "short"
    assert choose_variant(SHORT_SEQ_MAX) == "short"
    assert choose_variant(SHORT_SEQ_MAX + 1) == "long"

    launched = []
    real = ta._varlen_attention_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append(kwargs["SINGLE_PASS"])
                return real[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(ta, "_varlen_attention_kernel", Spy())
    lengths = [3, 6]
    q, k, v = random_qkv(lengths, 1, 16)
    cu = cu_seqlens_of(lengths)
    expected = reference_attention(q, k, v, cu, False, 0.25)
    # max_seqlen may overstate the longest length; here it pushes auto over the threshold.
    for max_seqlen in (6, SHORT_SEQ_MAX + 1):
        out = triton_varlen_attention(q, k, v, cu, max_seqlen)
        assert_close(out, expected, torch.float32)
    assert launched == [True, False]


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 70), min_size=1, max_size=4),
    heads=st.integers(1, 2),
    causal=st.booleans(),
    variant=st.sampled_from(["short", "long"]),
    seed=st.integers(0, 2**16),
)
def test_attention_property(lengths, heads, causal, variant, seed):
    check_attention(lengths, causal=causal, variant=variant, heads=heads, head_dim=16, seed=seed)


def test_attention_errors(monkeypatch):
    q, k, v = random_qkv([3, 4], 2, 16)
    cu = cu_seqlens_of([3, 4])
    with pytest.raises(ValueError, match=r"variant='medium'.*'short'"):
        triton_varlen_attention(q, k, v, cu, 4, variant="medium")
    with pytest.raises(ValueError, match="share one .* shape"):
        triton_varlen_attention(q, k[:, :1], v, cu, 4)
    with pytest.raises(ValueError, match="share one .* shape"):
        triton_varlen_attention(q[0], k[0], v[0], cu, 4)
    with pytest.raises(ValueError, match="dtype"):
        triton_varlen_attention(q, k.half(), v, cu, 4)
    with pytest.raises(ValueError, match="cu_seqlens"):
        triton_varlen_attention(q, k, v, cu.long(), 4)
    for head_dim in (0, 256):
        big = torch.zeros(7, 2, head_dim, device=DEVICE)
        with pytest.raises(ValueError, match=rf"head_dim={head_dim} .*1\.\.128"):
            triton_varlen_attention(big, big, big, cu, 4)
    if DEVICE == "cpu":  # outside the interpreter a CPU tensor must be refused, not launched
        monkeypatch.setattr(ta, "_INTERPRETED", False)
        with pytest.raises(RuntimeError, match="CUDA"):
            triton_varlen_attention(q, k, v, cu, 4)


# ---------------------------------------------------------------------------------------------
# add-bias + residual + LayerNorm


def reference_layernorm(x, bias, residual, weight, ln_bias, eps):
    h = x.double() + residual.double() + (0 if bias is None else bias.double())
    return F.layer_norm(h, h.shape[-1:], weight.double(), ln_bias.double(), eps)


def layernorm_inputs(shape, dtype, param_dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    hidden = shape[-1]
    x = (torch.randn(shape, generator=g) * 3 + 1).to(dtype=dtype, device=DEVICE)
    residual = torch.randn(shape, generator=g).to(dtype=dtype, device=DEVICE)
    bias, weight, ln_bias = (torch.randn(hidden, generator=g).to(dtype=param_dtype, device=DEVICE)
                             for _ in range(3))
    return x, bias, residual, weight, ln_bias


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("hidden", [48, 768, 1000])  # none a power of two: padded, masked
def test_layernorm_matches_reference(hidden, with_bias):
    x, bias, residual, weight, ln_bias = layernorm_inputs((5, hidden), torch.float32)
    bias = bias if with_bias else None
    y = triton_add_bias_residual_layernorm(x, bias, residual, weight, ln_bias, 1e-12)
    assert_close(y, reference_layernorm(x, bias, residual, weight, ln_bias, 1e-12), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layernorm_half_precision(dtype):
    # fp16/bf16 activations with the parameters in their own dtype, as under autocast-free fp16.
    x, bias, residual, weight, ln_bias = layernorm_inputs((6, 48), dtype, param_dtype=dtype)
    y = triton_add_bias_residual_layernorm(x, bias, residual, weight, ln_bias, 1e-5)
    assert_close(y, reference_layernorm(x, bias, residual, weight, ln_bias, 1e-5), dtype)


def test_layernorm_leading_dims_strided_and_empty():
    x, bias, residual, weight, ln_bias = layernorm_inputs((2, 3, 40), torch.float32)
    residual = residual.transpose(0, 1).contiguous().transpose(0, 1)  # not contiguous
    y = triton_add_bias_residual_layernorm(x, bias, residual, weight, ln_bias, 1e-5)
    assert y.shape == x.shape
    assert_close(y, reference_layernorm(x, bias, residual, weight, ln_bias, 1e-5), torch.float32)
    empty = x[:0]
    y = triton_add_bias_residual_layernorm(empty, bias, empty, weight, ln_bias, 1e-5)
    assert y.shape == (0, 3, 40)


def test_layernorm_errors():
    x, bias, residual, weight, ln_bias = layernorm_inputs((4, 8), torch.float32)
    with pytest.raises(ValueError, match="residual"):
        triton_add_bias_residual_layernorm(x, bias, residual[:2], weight, ln_bias, 1e-5)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        triton_add_bias_residual_layernorm(x, bias, residual, weight[:4], ln_bias, 1e-5)
    with pytest.raises(ValueError, match=r"bias must have shape \(8,\)"):
        triton_add_bias_residual_layernorm(x, bias[:3], residual, weight, ln_bias, 1e-5)
    wide = torch.zeros(1, 20000, device=DEVICE)
    vec = torch.zeros(20000, device=DEVICE)
    with pytest.raises(ValueError, match="hidden=20000"):
        triton_add_bias_residual_layernorm(wide, None, wide, vec, vec, 1e-5)


# ---------------------------------------------------------------------------------------------
# bias + GELU


# The interpreter's numpy exp overflows to inf on the tails (sigmoid -> 0, as on a GPU) and warns.
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_bias_gelu_matches_reference(approximate, dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(7, 50, generator=g) * 3
    x[0, :6] = torch.tensor([-60.0, -12.0, -5.0, 0.0, 5.0, 60.0])  # tails: no overflow, no NaN
    x = x.to(dtype=dtype, device=DEVICE)
    bias = torch.randn(50, generator=g).to(dtype=dtype, device=DEVICE)
    bias[:6] = 0
    y = triton_bias_gelu(x, bias, approximate)
    assert_close(y, F.gelu(x.double() + bias.double(), approximate=approximate), dtype)


def test_bias_gelu_wide_rows_and_leading_dims():
    # 1500 columns > BLOCK_N_MAX: each row is split over two programs.
    x = torch.randn(2, 1, 1500, device=DEVICE)
    bias = torch.randn(1500, device=DEVICE)
    y = triton_bias_gelu(x, bias)
    assert y.shape == x.shape
    assert_close(y, F.gelu(x.double() + bias.double()), torch.float32)
    assert triton_bias_gelu(x[:0], bias).shape == (0, 1, 1500)


def test_bias_gelu_errors():
    x, bias = torch.zeros(3, 8, device=DEVICE), torch.zeros(8, device=DEVICE)
    with pytest.raises(ValueError, match=r"approximate='sigmoid'.*'tanh'"):
        triton_bias_gelu(x, bias, "sigmoid")
    with pytest.raises(ValueError, match=r"bias must have shape \(8,\)"):
        triton_bias_gelu(x, bias[:5])
