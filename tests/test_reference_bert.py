import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import PaddingFreeBert, Switches, varlen_attention
from suite.config import BertDims
from suite.models import canonical_bert
from suite.workloads import bert_batch

from conftest import TINY_MODEL, assert_token_types_default_to_zero, count_onednn_calls


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


def assert_matches_hf(hf, ours, batch, atol, token_types=True):
    """Our output equals HF's on the valid positions and is zero on the padding."""
    kwargs = {"token_type_ids": batch.token_type_ids} if token_types else {}
    with torch.inference_mode():
        expected = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                      **kwargs).last_hidden_state
        got = ours(batch.input_ids, batch.attention_mask, kwargs.get("token_type_ids"))
    valid = batch.attention_mask.bool()
    assert got.shape == expected.shape and torch.isfinite(got).all()
    torch.testing.assert_close(got[valid], expected[valid], rtol=0, atol=atol)
    assert (got[~valid] == 0).all()


@pytest.mark.parametrize("lengths", [[5, 0, 16, 1], [16, 16], [0, 0, 3]])
def test_padding_free_bert_matches_hf_on_valid_positions(lengths):
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=16, seed=0).double()
    ours = PaddingFreeBert.from_hf(hf)
    assert next(ours.parameters()).dtype == torch.float64
    assert_matches_hf(hf, ours, bert_batch(lengths, 16, TINY_MODEL["vocab_size"], seed=2), 1e-10)


def test_token_types_default_to_zero():
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8, seed=0)
    ours = PaddingFreeBert.from_hf(hf)
    assert_token_types_default_to_zero(ours, bert_batch([4, 2], 8, TINY_MODEL["vocab_size"]))


def test_unsupported_configs_are_refused():
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8)
    hf.config.position_embedding_type = "relative_key"
    with pytest.raises(ValueError, match="position_embedding_type='relative_key' unsupported"):
        PaddingFreeBert.from_hf(hf)
    with pytest.raises(ValueError, match="hidden=30 is not divisible by heads=4"):
        PaddingFreeBert(vocab_size=10, hidden=30, layers=1, heads=4, intermediate=8,
                        max_position=8, type_vocab_size=2)


SWITCHES = ["padding_free", "fused_layernorm", "fused_gemm_gelu", "fused_mha"]


@pytest.mark.parametrize("combo", [c for c in __import__("itertools").product([False, True],
                                                                              repeat=4)])
def test_every_switch_combination_matches_hf(combo):
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=16, seed=0).double()
    ours = PaddingFreeBert.from_hf(hf, **dict(zip(SWITCHES, combo)))
    batch = bert_batch([5, 0, 16, 1, 9, 9], 16, TINY_MODEL["vocab_size"], seed=1)
    assert_matches_hf(hf, ours, batch, 1e-10)


def test_switches_select_the_code_paths(monkeypatch):
    """Each switch really swaps the computation: count calls into each kernel."""
    import reference_impl.bert as bert
    from reference_impl.switches import LADDER

    calls = {"varlen": 0, "padded": 0, "ln": 0, "gelu": 0}

    def spy(name, fn):
        def wrapped(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(bert, "varlen_attention", spy("varlen", bert.varlen_attention))
    monkeypatch.setattr(bert, "padded_attention", spy("padded", bert.padded_attention))
    monkeypatch.setattr(bert, "add_bias_residual_layernorm",
                        spy("ln", bert.add_bias_residual_layernorm))
    monkeypatch.setattr(bert, "bias_gelu", spy("gelu", bert.bias_gelu))
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8)
    batch = bert_batch([3, 8], 8, TINY_MODEL["vocab_size"])
    layers = TINY_MODEL["layers"]
    for name, sw in LADDER:
        calls.update(dict.fromkeys(calls, 0))
        PaddingFreeBert.from_hf(hf, **sw.__dict__)(batch.input_ids, batch.attention_mask)
        assert calls == {"varlen": layers * sw.fused_mha, "padded": layers * (not sw.fused_mha),
                         "ln": 2 * layers * sw.fused_layernorm,
                         "gelu": layers * sw.fused_gemm_gelu}, name


def test_configure_changes_switches_and_names_bad_ones():
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8)
    m = PaddingFreeBert.from_hf(hf)
    assert m.switches == Switches()
    m.configure(fused_mha=False)
    assert m.switches == Switches(fused_mha=False)
    with pytest.raises(ValueError, match=r"unknown switch\(es\) \['fused_everything'\]"):
        m.configure(fused_everything=True)


def hf_variant(kind, dtype=torch.float64, embedding_size=16):
    from transformers import AlbertConfig, AlbertModel, DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    if kind == "albert":
        cfg = AlbertConfig(embedding_size=embedding_size, hidden_size=32, num_hidden_layers=4,
                           num_attention_heads=4, intermediate_size=64, vocab_size=100,
                           num_hidden_groups=2, max_position_embeddings=32)
        cfg._attn_implementation = "eager"
        model = AlbertModel(cfg, add_pooling_layer=False)
    else:
        cfg = DistilBertConfig(dim=32, n_heads=4, hidden_dim=64, n_layers=2, vocab_size=100,
                               max_position_embeddings=32,
                               sinusoidal_pos_embds=kind == "distilbert-sin")
        cfg._attn_implementation = "eager"
        model = DistilBertModel(cfg)
    return model.to(dtype).eval()


@pytest.mark.parametrize("kind", ["albert", "albert-e=h", "distilbert", "distilbert-sin"])
@pytest.mark.parametrize("padding_free", [True, False])
def test_bert_variants_match_hf(kind, padding_free):
    hf = hf_variant(kind.removesuffix("-e=h"), embedding_size=32 if "e=h" in kind else 16)
    ours = PaddingFreeBert.from_hf(hf, padding_free=padding_free)
    assert_matches_hf(hf, ours, bert_batch([7, 0, 16, 1], 16, 100, seed=3), 1e-10,
                      token_types=not kind.startswith("distil"))


def test_albert_shares_layers():
    ours = PaddingFreeBert.from_hf(hf_variant("albert"))
    assert len(ours.layers) == 4 and len(set(map(id, ours.layers))) == 2
    assert ours.layers[0] is ours.layers[1] and ours.layers[2] is ours.layers[3]
    assert ours.embed_proj is not None  # factorized embeddings: 16 -> 32


def test_unknown_model_is_named():
    with pytest.raises(ValueError, match="unsupported model Linear; supported: "):
        PaddingFreeBert.from_hf(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("lengths", [[5, 0, 16, 1, 9, 9], [150, 140, 200, 130, 100, 180], [7]])
def test_length_buckets_cover_every_sequence_within_the_waste_bound(lengths):
    from reference_impl.kernels import length_buckets
    from reference_impl.kernels.attention import BUCKET_WASTE

    buckets = length_buckets(lengths)
    assert sorted(i for b in buckets for i in b) == [i for i, n in enumerate(lengths) if n]
    for b in buckets:
        longest = max(lengths[i] for i in b)
        assert longest ** 2 * len(b) <= (1 + BUCKET_WASTE) * sum(lengths[i] ** 2 for i in b)
    assert len(length_buckets([100] * 16)) == 1  # equal lengths: one batched call


@pytest.mark.parametrize("padding_free", [True, False])
def test_triton_backend_end_to_end(padding_free):
    """The GPU path of the whole model (Triton attention, LayerNorm and GELU kernels), run by
    Triton's interpreter on CPU, against HF."""
    pytest.importorskip("triton")
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=16, seed=0)
    ours = PaddingFreeBert.from_hf(hf, backend="triton", padding_free=padding_free)
    assert_matches_hf(hf, ours, bert_batch([5, 0, 16, 1, 9], 16, TINY_MODEL["vocab_size"], seed=4),
                      2e-5)


# ----------------------------------------------------------------------------- CPU GEMM path

ODD = [7, 0, 13, 1, 9, 16]  # empty, single-token, odd lengths and one at the padded length


def _fp64_oracle(hf, batch, token_types=True):
    hf64 = __import__("copy").deepcopy(hf).double()
    kwargs = {"token_type_ids": batch.token_type_ids} if token_types else {}
    with torch.inference_mode():
        return hf64(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    **kwargs).last_hidden_state


@pytest.mark.parametrize("padding_free", [True, False])
@pytest.mark.parametrize("cpu_gemm", ["torch", "onednn", "auto"])
def test_cpu_gemm_paths_match_the_float64_oracle_on_odd_lengths(monkeypatch, cpu_gemm,
                                                                  padding_free):
    import reference_impl.bert as bert

    calls = count_onednn_calls(monkeypatch, bert)
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=16, seed=0)  # fp32
    ours = PaddingFreeBert.from_hf(hf, cpu_gemm=cpu_gemm, padding_free=padding_free)
    batch = bert_batch(ODD, 16, TINY_MODEL["vocab_size"], seed=4)
    with torch.inference_mode():
        got = ours(batch.input_ids, batch.attention_mask, batch.token_type_ids)
    expected = _fp64_oracle(hf, batch)
    valid = batch.attention_mask.bool()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got[valid].double(), expected[valid], rtol=0, atol=1e-4)
    assert (got[~valid] == 0).all()
    # 4 linear layers per encoder layer on oneDNN, none on torch
    want = 0 if cpu_gemm == "torch" else 4 * TINY_MODEL["layers"]
    assert calls["onednn"] == want


@pytest.mark.parametrize("kind", ["albert", "distilbert"])
def test_variants_take_the_onednn_path_and_match_the_oracle(monkeypatch, kind):
    import reference_impl.bert as bert

    calls = count_onednn_calls(monkeypatch, bert)
    hf = hf_variant(kind, dtype=torch.float32)
    ours = PaddingFreeBert.from_hf(hf, cpu_gemm="onednn")
    batch = bert_batch(ODD, 16, 100, seed=5)
    with torch.inference_mode():
        got = ours(batch.input_ids, batch.attention_mask,
                   None if kind == "distilbert" else batch.token_type_ids)
    expected = _fp64_oracle(hf, batch, token_types=kind != "distilbert")
    valid = batch.attention_mask.bool()
    torch.testing.assert_close(got[valid].double(), expected[valid], rtol=0, atol=1e-4)
    assert calls["onednn"] == 4 * len(ours.layers)


def test_onednn_path_refuses_what_it_cannot_run_and_auto_falls_back():
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8).double()
    batch = bert_batch([3, 8], 8, TINY_MODEL["vocab_size"])
    with torch.inference_mode(), pytest.raises(ValueError, match="cpu_gemm='onednn' cannot run "
                                                                 "here: dtype torch.float64"):
        PaddingFreeBert.from_hf(hf, cpu_gemm="onednn")(batch.input_ids, batch.attention_mask)
    with pytest.raises(ValueError, match="cpu_gemm='mkl' is not one of"):
        Switches(cpu_gemm="mkl")
    with torch.inference_mode():  # float64: auto runs F.linear
        PaddingFreeBert.from_hf(hf, cpu_gemm="auto")(batch.input_ids, batch.attention_mask)


def test_packed_weights_follow_weight_updates():
    """A weight changed in place after the first call is repacked, not served stale."""
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=8)
    ours = PaddingFreeBert.from_hf(hf, cpu_gemm="onednn")
    batch = bert_batch([3, 8], 8, TINY_MODEL["vocab_size"])
    with torch.inference_mode():
        before = ours(batch.input_ids, batch.attention_mask)
    with torch.no_grad():
        ours.layers[0].ffn_in.weight.mul_(2)
    with torch.inference_mode():
        after = ours(batch.input_ids, batch.attention_mask)
        ref = PaddingFreeBert.from_hf(hf, cpu_gemm="torch")
        ref.load_state_dict(ours.state_dict())
        expected = ref(batch.input_ids, batch.attention_mask)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, expected, rtol=0, atol=1e-5)


def test_bucket_plan_is_the_same_attention_as_planning_per_call():
    from reference_impl.kernels import bucket_plan

    lengths = [9, 0, 3, 9, 1, 7, 16]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    q, k, v = (torch.randn(sum(lengths), 2, 4, dtype=torch.float64) for _ in range(3))
    plan = bucket_plan(cu)
    rows = torch.cat([b.rows for b in plan]).sort().values
    assert torch.equal(rows, torch.arange(sum(lengths)))  # every token once
    got = varlen_attention(q, k, v, cu, 16, backend="torch", plan=plan)
    for i in range(len(lengths)):
        s = slice(int(cu[i]), int(cu[i + 1]))
        torch.testing.assert_close(got[s], naive_attention(q[s], k[s], v[s], False))


@pytest.mark.parametrize("lengths, starts", [([11], [0]), ([0, 5, 5, 2], [0, 10]),
                                             ([3, 6, 3], [3, None])])
def test_buckets_that_are_one_run_of_rows_are_views(lengths, starts):
    """Batch 1 (and equal-length neighbours) need no gather: the plan marks the run."""
    from reference_impl.kernels import bucket_plan

    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    plan = bucket_plan(cu)
    assert [b.start for b in plan] == starts
    q, k, v = (torch.randn(sum(lengths), 2, 4, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        got = varlen_attention(q, k, v, cu, max(lengths), causal=causal, plan=plan)
        for i in range(len(lengths)):
            s = slice(int(cu[i]), int(cu[i + 1]))
            torch.testing.assert_close(got[s], naive_attention(q[s], k[s], v[s], causal))
