"""The bucketed static-buffer path of ``reference_impl.graphs`` (what a CUDA graph replays), run
without capture on CPU: the same buffers, the same padding of tokens, batch and longest length."""

import pytest
import torch

from reference_impl import PaddingFreeBert
from reference_impl.graphs import BucketKey, GraphedEncoder, token_bucket, token_buckets
from reference_impl.packing import pack_info_from_lengths
from suite.config import BertDims
from suite.models import canonical_bert
from suite.workloads import bert_batch

from conftest import TINY_MODEL


@pytest.mark.parametrize("tokens", [1, 15, 16, 17, 100, 513, 1000, 1024, 1025, 4095, 70000])
def test_token_buckets_hold_the_batch_and_add_under_a_sixteenth_or_16_rows(tokens):
    bucket = token_bucket(tokens)
    assert 0 <= bucket - tokens < max(16, tokens / 16)
    assert bucket % 16 == 0


@pytest.mark.parametrize("most", [1, 16, 17, 700, 8192])
def test_a_servers_token_buckets_are_every_bucket_up_to_its_largest_batch(most):
    buckets = token_buckets(most)
    assert buckets == sorted(set(buckets), reverse=True)  # largest first, each once
    assert {token_bucket(t) for t in range(1, most + 1)} == set(buckets)


def test_bucket_keys_round_batch_and_longest_length_to_powers_of_two():
    info = pack_info_from_lengths([5, 0, 9], 16)
    assert BucketKey.of(info) == BucketKey(tokens=16, batch=4, max_seqlen=16)
    info = pack_info_from_lengths([33] * 5, 64)
    assert BucketKey.of(info) == BucketKey(tokens=176, batch=8, max_seqlen=64)
    assert str(BucketKey(176, 8, 64)) == "T176_B8_L64"


def _model(backend="torch", **switches):
    hf = canonical_bert(BertDims(**TINY_MODEL), max_position=32, seed=0)
    return PaddingFreeBert.from_hf(hf, backend=backend, **switches)


def _both(model, graphed, lengths, seed, types=True):
    batch = bert_batch(lengths, 32, TINY_MODEL["vocab_size"], seed=seed)
    args = (batch.input_ids, batch.attention_mask, batch.token_type_ids if types else None)
    with torch.inference_mode():
        return (model(*args, lengths=batch.lengths), graphed(*args, lengths=batch.lengths),
                batch.attention_mask.bool())


def test_static_buffers_give_the_eager_forward_for_every_batch_that_shares_or_makes_a_bucket():
    """Batches that land in one bucket with fewer tokens leave stale rows behind and fewer
    sequences (the rest empty); rows no sequence covers must never reach a valid token."""
    model = _model()
    graphed = GraphedEncoder(model, max_tokens=64)
    cases = [[20, 5, 9], [17, 3], [1], [20, 5, 9], [0, 12, 32, 7, 2], [32, 32, 32]]
    for seed, lengths in enumerate(cases):
        eager, got, valid = _both(model, graphed, lengths, seed, types=seed % 2 == 0)
        torch.testing.assert_close(got[valid], eager[valid], rtol=0, atol=1e-5)
        assert (got[~valid] == 0).all()
    assert graphed.buckets.keys() == {BucketKey.of(pack_info_from_lengths(n, 32))
                                      for n in cases[:-1]}
    assert graphed.calls == {"graph": 5, "eager": 1}  # 96 tokens > max_tokens: eager
    assert graphed.details()["execution"] == "static-buckets (no capture)"


def test_rows_past_the_batch_cannot_reach_a_valid_token_even_when_not_finite():
    """The rows past T hold whatever the buffers held; make them NaN after the embeddings and
    the valid rows must not change by a bit (attention sees cu_seqlens only, the rest works row
    by row)."""
    model = _model()
    graphed = GraphedEncoder(model)
    lengths, total = [30, 2, 11], 43
    _, clean, valid = _both(model, graphed, lengths, 1)
    rows = next(iter(graphed.buckets)).tokens
    assert rows > total

    def poison(module, args, out):
        return torch.cat([out[:total], torch.full_like(out[total:], float("nan"))]) \
            if out.shape[0] == rows else out

    model.ln_embed.register_forward_hook(poison)
    _, got, _ = _both(model, graphed, lengths, 1)
    assert torch.isnan(next(iter(graphed.buckets.values())).out[total:]).all()
    assert torch.equal(got[valid], clean[valid]) and (got[~valid] == 0).all()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_server_builds_every_bucket_first_and_its_batches_only_replay_them(backend):
    """``for_serving``: one batch and length bucket for every batch within the server's shape,
    so the token buckets are all there is to build, and all are built before a request (on
    buffers whose sequences are all empty: the GPU's capture warms up on them); the batches
    after it add none and still give the eager forward (Triton's kernels interpreted)."""
    if backend == "triton":
        pytest.importorskip("triton")
    model = _model(backend=backend)
    graphed = GraphedEncoder(model, max_tokens=64)
    shape = graphed.for_serving(max_batch=3, max_seqlen=20)
    expected = {BucketKey(t, 4, 32) for t in token_buckets(60)}  # 3 x 20 tokens at most
    assert graphed.buckets.keys() == expected and shape["buckets"] == len(expected) == 4
    assert shape["batch"] == 4 and shape["max_seqlen"] == 32 and shape["seconds"] >= 0
    cases = [[20, 5, 9], [1], [17, 20], [20, 20, 20], [3, 0, 8]]
    for seed, lengths in enumerate(cases):
        eager, got, valid = _both(model, graphed, lengths, seed)
        torch.testing.assert_close(got[valid], eager[valid], rtol=0, atol=2e-5)
    assert graphed.buckets.keys() == expected and graphed.calls == {"graph": 5, "eager": 0}
    # outside the shape, a batch keys as it would without a server (here, a new bucket)
    eager, got, valid = _both(model, graphed, [5] * 5, 9)
    torch.testing.assert_close(got[valid], eager[valid], rtol=0, atol=2e-5)
    assert BucketKey(32, 8, 16) in graphed.buckets and len(graphed.buckets) == 5
    assert graphed.details()["serving"] == shape
    with pytest.raises(ValueError, match="max_batch=0 and max_seqlen=8 must be >= 1"):
        graphed.for_serving(0, 8)


def test_triton_kernels_on_static_buffers_with_empty_sequences_and_stale_rows():
    """The GPU's kernels (Triton, interpreted here) on a bucket whose batch is padded with empty
    sequences: the varlen kernel's grid covers them and returns at once."""
    pytest.importorskip("triton")
    model = _model(backend="triton")
    graphed = GraphedEncoder(model)
    for seed, lengths in enumerate([[9, 30, 4], [5, 1]]):
        eager, got, valid = _both(model, graphed, lengths, seed)
        torch.testing.assert_close(got[valid], eager[valid], rtol=0, atol=2e-5)


def test_refuses_what_a_graph_cannot_replay():
    with pytest.raises(ValueError, match="padding_free and fused_mha"):
        GraphedEncoder(_model(padding_free=False))
    with pytest.raises(ValueError, match="needs a CUDA model"):
        GraphedEncoder(_model(), capture=True)
    with pytest.raises(ValueError, match="max_tokens=8 must be >= 16"):
        GraphedEncoder(_model(), max_tokens=8)


def test_the_reference_replays_graphs_only_where_they_can_run():
    """Which path ``reference`` takes, decided without a GPU (the device is only named): graphs
    for the padding-free BERT on CUDA; eager, with the reason, everywhere else."""
    from suite.baselines.reference import Reference, ReferenceEager

    def why(system, model, device):
        system.model, system.device = model, torch.device(device)
        return system._eager_because()

    model = _model()
    assert why(Reference(), model, "cuda") == ""
    assert why(Reference(), model, "cpu") == "device cpu: CUDA graphs need a GPU"
    assert why(ReferenceEager(), model, "cuda") == "cuda_graphs=False"
    assert "padded path" in why(Reference(padding_free=False), model, "cuda")
    assert "has no graphed path" in why(Reference(), torch.nn.Linear(2, 2), "cuda")
