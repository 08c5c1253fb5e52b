import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import PaddingFreeBert, varlen_attention
from suite.config import BertDims
from suite.models import canonical_bert
from suite.workloads import bert_batch

from conftest import TINY_MODEL


def naive_attention(q, k, v, causal):
    """float64 softmax(q k^T / sqrt(d)) v for one sequence, (len, heads, d)."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[0]
        scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=5), st.booleans())
def test_varlen_attention_matches_per_sequence_softmax(lengths, causal):
    total, heads, d = sum(lengths), 2, 4
    q, k, v = (torch.randn(total, heads, d, dtype=torch.float64) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    out = varlen_attention(q, k, v, cu, max(lengths), causal=causal)
    for i, n in enumerate(lengths):
        lo, hi = cu[i].item(), cu[i + 1].item()
        if n:
            expected = naive_attention(q[lo:hi], k[lo:hi], v[lo:hi], causal)
            torch.testing.assert_close(out[lo:hi], expected, rtol=0, atol=1e-12)


def test_varlen_attention_rejects_bad_input():
    q = torch.randn(3, 2, 4)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="backend='cuda-magic' is not one of"):
        varlen_attention(q, q, q, cu, 3, backend="cuda-magic")
    with pytest.raises(ValueError, match="share one"):
        varlen_attention(q, q[:2], q, cu, 3)


@pytest.mark.parametrize("lengths", [[5, 0, 16, 1], [16, 16], [0, 0, 3]])
def test_padding_free_bert_matches_hf_on_valid_positions(lengths):
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=16, seed=0).double()
    ours = PaddingFreeBert.from_hf(hf)
    assert next(ours.parameters()).dtype == torch.float64
    batch = bert_batch(lengths, 16, TINY_MODEL["vocab_size"], seed=2)
    with torch.inference_mode():
        expected = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      token_type_ids=batch.token_type_ids).last_hidden_state
        got = ours(batch.input_ids, batch.attention_mask, batch.token_type_ids)
    valid = batch.attention_mask.bool()
    assert got.shape == expected.shape
    torch.testing.assert_close(got[valid], expected[valid], rtol=0, atol=1e-10)
    assert (got[~valid] == 0).all()


def test_token_types_default_to_zero():
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8, seed=0)
    ours = PaddingFreeBert.from_hf(hf)
    batch = bert_batch([4, 2], 8, TINY_MODEL["vocab_size"])
    with torch.inference_mode():
        a = ours(batch.input_ids, batch.attention_mask)
        b = ours(batch.input_ids, batch.attention_mask, torch.zeros_like(batch.input_ids))
        c = ours(batch.input_ids, batch.attention_mask, batch.token_type_ids)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)  # the sentence-pair types do reach the embeddings


def test_unsupported_configs_are_refused():
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8)
    hf.config.position_embedding_type = "relative_key"
    with pytest.raises(ValueError, match="position_embedding_type='relative_key' unsupported"):
        PaddingFreeBert.from_hf(hf)
    with pytest.raises(ValueError, match="hidden=30 is not divisible by heads=4"):
        PaddingFreeBert(vocab_size=10, hidden=30, layers=1, heads=4, intermediate=8,
                        max_position=8, type_vocab_size=2)
