"""PaddingFreeDebertaV2 against HF's DebertaV2Model (random weights, no hub access)."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DebertaV2Config, DebertaV2Model
from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

from reference_impl.deberta import PaddingFreeDebertaV2, log_bucket
from suite.workloads import bert_batch

from conftest import assert_token_types_default_to_zero, count_onednn_calls

VOCAB = 100
BASE = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
# deberta-v3-base's attention settings.
V3 = dict(relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=256,
          max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True,
          position_biased_input=False, type_vocab_size=0)
CONFIGS = {
    # DebertaV2Config's own defaults: no relative attention, absolute positions.
    "defaults": {},
    "v3_base_style": V3,
    # Few buckets and a short max distance, so the batches (S = 24) reach the log buckets and
    # distances past max_relative_positions.
    "bucketed": {**V3, "position_buckets": 8, "max_relative_positions": 16},
    "types_and_absolute_positions": {**V3, "type_vocab_size": 2, "position_biased_input": True},
    "c2p_only": {**V3, "pos_att_type": ["c2p"], "position_buckets": 8,
                 "max_relative_positions": 16},
    # Own pos_key/pos_query projections, no bucketing (clamped at +-6), no rel LayerNorm, and an
    # embedding projection (embedding_size != hidden_size).
    "unshared_unbucketed_embed_proj": dict(
        relative_attention=True, pos_att_type="p2c|c2p", share_att_key=False,
        max_relative_positions=6, norm_rel_ebd="none", embedding_size=16),
    # HF counts pos_att_type in the softmax scale even without relative attention.
    "pos_att_type_without_relative": dict(pos_att_type=["p2c", "c2p"]),
}
# (lengths, padded length): an empty sequence, length 1, odd lengths, one at the full padded
# length, fewer tokens than sequences, and nothing at all.
BATCHES = [([5, 0, 24, 1, 13], 24), ([24, 24], 24), ([0, 1, 0, 0], 8), ([7, 3, 11], 12),
           ([0, 0], 4)]
ATOL_F64 = 1e-12  # observed <= ~1e-15
ATOL_F32 = 1e-5  # observed ~1e-6: float32 GEMMs summed in a different order than HF's


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These models are tiny: intra-op threads buy nothing, and on a CPU shared with a benchmark
    their barriers made the file several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@functools.lru_cache(maxsize=None)
def hf_model(name: str, dtype: torch.dtype = torch.float64) -> DebertaV2Model:
    """A small HF DeBERTa-v2 with random weights. All parameters are nudged off their init so
    that LayerNorm weights/biases and linear biases (init 1 / 0) are exercised by the copy too."""
    torch.manual_seed(0)
    model = DebertaV2Model(DebertaV2Config(**BASE, **CONFIGS[name]))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.to(dtype).eval()


def run_both(name, lengths, padded_len, dtype=torch.float64, seed=1):
    hf = hf_model(name, dtype)
    ours = PaddingFreeDebertaV2.from_hf(hf)
    batch = bert_batch(lengths, padded_len, VOCAB, seed=seed)
    with torch.inference_mode():
        expected = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      token_type_ids=batch.token_type_ids).last_hidden_state
        got = ours(batch.input_ids, batch.attention_mask, batch.token_type_ids)
    return batch, expected, got


def assert_matches_on_valid(batch, expected, got, atol):
    # HF's rows for an all-padding sequence are softmax over nothing-but-masked keys: garbage.
    # Only valid positions are compared; padded ones must be exactly zero in ours.
    valid = batch.attention_mask.bool()
    assert got.shape == expected.shape
    torch.testing.assert_close(got[valid], expected[valid], rtol=0, atol=atol)
    assert (got[~valid] == 0).all()


@pytest.mark.parametrize("lengths, padded_len", BATCHES)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_hf_on_valid_positions_float64(name, lengths, padded_len):
    batch, expected, got = run_both(name, lengths, padded_len)
    assert got.dtype == torch.float64
    assert_matches_on_valid(batch, expected, got, ATOL_F64)


@pytest.mark.parametrize("name", ["v3_base_style", "bucketed"])
def test_matches_hf_float32(name):
    batch, expected, got = run_both(name, [5, 0, 24, 1, 13], 24, dtype=torch.float32)
    assert got.dtype == torch.float32
    assert_matches_on_valid(batch, expected, got, ATOL_F32)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_padding_does_not_change_valid_outputs(name):
    """Each sequence run alone through HF, unpadded, gives what we give inside a padded batch."""
    hf = hf_model(name)
    ours = PaddingFreeDebertaV2.from_hf(hf)
    batch = bert_batch([5, 0, 24, 1, 13], 24, VOCAB, seed=3)
    with torch.inference_mode():
        got = ours(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        for i, n in enumerate(batch.lengths):
            if n == 0:
                continue
            alone = hf(input_ids=batch.input_ids[i:i + 1, :n],
                       attention_mask=torch.ones(1, n, dtype=torch.long),
                       token_type_ids=batch.token_type_ids[i:i + 1, :n]).last_hidden_state[0]
            torch.testing.assert_close(got[i, :n], alone, rtol=0, atol=ATOL_F64)
            assert (got[i, n:] == 0).all()


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(list(CONFIGS)), st.lists(st.integers(0, 20), min_size=1, max_size=5),
       st.integers(0, 3), st.integers(0, 2**16))
def test_random_length_lists_match_hf(name, lengths, extra_padding, seed):
    padded_len = max(max(lengths) + extra_padding, 1)  # HF cannot run a [B, 0] batch
    batch, expected, got = run_both(name, lengths, padded_len, seed=seed)
    assert_matches_on_valid(batch, expected, got, ATOL_F64)


@pytest.mark.parametrize("buckets, max_position", [(8, 16), (8, 64), (6, 7), (32, 100),
                                                   (256, 512), (256, 64), (255, 1024)])
def test_log_bucket_matches_hf(buckets, max_position):
    rel = torch.arange(-1100, 1100)[:, None] - torch.zeros(1, dtype=torch.long)
    assert torch.equal(log_bucket(rel, buckets, max_position),
                       make_log_bucket_position(rel, buckets, max_position).long())


def test_copy_keeps_dtype_and_returns_eval_mode():
    hf = hf_model("v3_base_style", torch.float32).train()
    try:
        ours = PaddingFreeDebertaV2.from_hf(hf)
    finally:
        hf.eval()
    assert not ours.training
    assert {p.dtype for p in ours.parameters()} == {torch.float32}
    assert {p.device for p in ours.parameters()} == {next(hf.parameters()).device}


def test_token_types_default_to_zero():
    ours = PaddingFreeDebertaV2.from_hf(hf_model("types_and_absolute_positions"))
    assert_token_types_default_to_zero(ours, bert_batch([6, 3], 8, VOCAB))


def _tiny(**overrides) -> DebertaV2Model:
    return DebertaV2Model(DebertaV2Config(**{**BASE, **V3, "num_hidden_layers": 1, **overrides}))


@pytest.mark.parametrize("overrides, message", [
    ({"conv_kernel_size": 3}, r"conv_kernel_size=3 unsupported .*only conv_kernel_size=0"),
    ({"pos_att_type": ["c2p", "p2p"]}, r"pos_att_type=\['c2p', 'p2p'\] unsupported; only entries"),
    ({"hidden_act": "silu"}, r"hidden_act='silu' unsupported; one of"),
    ({"norm_rel_ebd": "layer_norm|scale"}, r"norm_rel_ebd='layer_norm\|scale' unsupported"),
])
def test_unsupported_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        PaddingFreeDebertaV2.from_hf(_tiny(**overrides))


def test_z_steps_and_left_padding_are_refused():
    model = _tiny()
    model.z_steps = 2
    with pytest.raises(ValueError, match="z_steps=2 unsupported"):
        PaddingFreeDebertaV2.from_hf(model)
    ours = PaddingFreeDebertaV2.from_hf(_tiny())
    with pytest.raises(ValueError, match="right-padded"):
        ours(torch.ones(1, 3, dtype=torch.long), torch.tensor([[0, 1, 1]]))


def test_empty_padded_length():
    """A [B, 0] batch (which HF cannot run) gives a [B, 0, H] result."""
    ours = PaddingFreeDebertaV2.from_hf(hf_model("v3_base_style"))
    empty = torch.zeros(2, 0, dtype=torch.long)
    with torch.inference_mode():
        assert ours(empty, empty).shape == (2, 0, BASE["hidden_size"])


@pytest.mark.parametrize("cpu_gemm", ["torch", "onednn"])
@pytest.mark.parametrize("name", ["v3_base_style", "bucketed"])
def test_cpu_gemm_paths_match_the_float64_oracle(monkeypatch, name, cpu_gemm):
    import reference_impl.deberta as deberta

    calls = count_onednn_calls(monkeypatch, deberta)
    hf = hf_model(name, torch.float32)
    ours = PaddingFreeDebertaV2.from_hf(hf, cpu_gemm=cpu_gemm)
    batch = bert_batch([5, 0, 23, 1, 13], 24, VOCAB, seed=2)
    with torch.inference_mode():
        got = ours(batch.input_ids, batch.attention_mask, batch.token_type_ids)
        oracle = hf_model(name)  # the same weights in float64 (hf_model is cached: no .double())
        expected = oracle(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                          token_type_ids=batch.token_type_ids).last_hidden_state
    assert got.dtype == torch.float32
    assert_matches_on_valid(batch, expected, got.double(), ATOL_F32)
    # q, k, v, attention output, two FFN GEMMs per layer
    assert calls["onednn"] == (6 * len(ours.layers) if cpu_gemm == "onednn" else 0)
