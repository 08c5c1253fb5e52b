import numpy as np
import pytest

from suite.workloads import bert_batch, flop_bounds, varlen_lengths


@pytest.mark.parametrize("max_len", [64, 100, 256, 1024])
def test_bytetransformer_lengths_follow_the_papers_rule(max_len):
    avg = max_len * 60 // 100
    lengths = varlen_lengths(20000, max_len, "bytetransformer", seed=1)
    assert min(lengths) == 2 * avg - max_len
    assert max(lengths) == max_len
    # uniform on [2avg - max, max] has mean avg (to within rounding of the integer bounds)
    assert np.mean(lengths) == pytest.approx((2 * avg - max_len + max_len) / 2, rel=0.01)


def test_lengths_are_deterministic_per_seed():
    assert varlen_lengths(16, 256, seed=3) == varlen_lengths(16, 256, seed=3)
    assert varlen_lengths(16, 256, seed=3) != varlen_lengths(16, 256, seed=4)


def test_other_distributions():
    assert varlen_lengths(4, 128, "fixed") == [128] * 4
    uniform = varlen_lengths(5000, 128, "uniform")
    assert min(uniform) == 1 and max(uniform) == 128
    tail = varlen_lengths(5000, 512, "longtail")
    assert 1 <= min(tail) and max(tail) == 512  # clipped, and the tail reaches the cap
    assert np.median(tail) == pytest.approx(512 / 8, rel=0.15)
    assert np.mean(tail) > np.median(tail)  # right-skewed


def test_explicit_lengths():
    assert varlen_lengths(3, 10, [0, 1, 10]) == [0, 1, 10]
    with pytest.raises(ValueError, match=r"\[11\] lie outside \[0, max_seq_len=10\]"):
        varlen_lengths(2, 10, [3, 11])
    with pytest.raises(ValueError, match="hold 1 sequences, batch_size is 2"):
        varlen_lengths(2, 10, [3])


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0, "max_seq_len": 8}, "batch_size must be an integer >= 1, got 0"),
    ({"batch_size": 2, "max_seq_len": 0}, "max_seq_len must be an integer >= 1, got 0"),
    ({"batch_size": 2, "max_seq_len": 8, "distribution": "zipf"},
     "unknown distribution 'zipf'; valid: .*bytetransformer"),
])
def test_bad_input_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        varlen_lengths(**kwargs)


def test_bert_batch_is_right_padded():
    b = bert_batch([3, 0, 5], 6, vocab_size=50, seed=0)
    assert b.attention_mask.tolist() == [[1, 1, 1, 0, 0, 0], [0] * 6, [1] * 5 + [0]]
    assert (b.input_ids[b.attention_mask == 0] == 0).all()
    assert (b.input_ids[b.attention_mask == 1] >= 1).all()
    # second half of each sequence is segment 1, padding segment 0
    assert b.token_type_ids.tolist() == [[0, 0, 1, 0, 0, 0], [0] * 6, [0, 0, 0, 1, 1, 0]]
    with pytest.raises(ValueError, match="outside"):
        bert_batch([7], 6, vocab_size=50)


def test_flop_bounds():
    bounds = flop_bounds([2, 4], 4)
    assert bounds["gemm_flop_bound"] == pytest.approx(8 / 6)
    assert bounds["attention_flop_bound"] == pytest.approx(32 / 20)
