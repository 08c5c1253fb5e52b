import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl import packing
from reference_impl.packing import (pack, pack_info, pack_info_from_lengths, packed_positions,
                                    unpack)


def mask_for(lengths, s):
    return (torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]).long()


@pytest.mark.parametrize("lengths, s", [
    ([3, 0, 5], 6),   # a zero-length sequence in the middle
    ([1], 1),         # length 1
    ([0, 1, 0, 0], 4),  # total smaller than the batch
    ([0, 0], 3),      # nothing valid at all
    ([8, 8], 8),      # no padding
])
def test_pack_unpack_round_trip(lengths, s):
    mask = mask_for(lengths, s)
    info = pack_info(mask)
    assert info.cu_seqlens.dtype == torch.int32
    assert info.cu_seqlens.tolist() == [0, *torch.tensor(lengths).cumsum(0).tolist()]
    assert info.total_tokens == sum(lengths)
    assert info.max_seqlen == max(lengths)
    x = torch.randn(len(lengths), s, 4)
    packed = pack(x, info)
    assert packed.shape == (sum(lengths), 4)
    back = unpack(packed, info)
    assert torch.equal(back[mask.bool()], x[mask.bool()])
    assert (back[~mask.bool()] == 0).all()
    expected_pos = [p for n in lengths for p in range(n)]
    assert packed_positions(info).tolist() == expected_pos
    _same_info(pack_info_from_lengths(lengths, s), info)


def test_left_padding_is_refused():
    with pytest.raises(ValueError, match="right-padded"):
        pack_info(torch.tensor([[0, 1, 1]]))
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        pack_info(torch.ones(3))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=6), st.integers(0, 4))
def test_packing_property(lengths, extra):
    s = max(lengths) + extra or 1
    mask = mask_for(lengths, s)
    info = pack_info(mask)
    x = torch.arange(len(lengths) * s, dtype=torch.float32).reshape(len(lengths), s, 1)
    packed = pack(x, info)
    # packed tokens come out sequence by sequence, in order
    for i, n in enumerate(lengths):
        lo, hi = info.cu_seqlens[i].item(), info.cu_seqlens[i + 1].item()
        assert hi - lo == n
        assert packed[lo:hi, 0].tolist() == x[i, :n, 0].tolist()
    assert torch.equal(unpack(packed, info) * mask[..., None], x * mask[..., None])
    _same_info(pack_info_from_lengths(lengths, s), info)


def _same_info(got, want):
    for field in ("indices", "cu_seqlens", "seqlens"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and torch.equal(a, b), field
    assert (got.max_seqlen, got.batch_size, got.padded_len) == (
        want.max_seqlen, want.batch_size, want.padded_len)


def test_lengths_known_on_the_host_give_the_mask_s_packing_without_reading_it(monkeypatch):
    """What the reference baseline does with a batch's lengths: the same layout as from the
    mask, and pack_info (three device reads on a GPU) is never called. Mutation tried: the
    forward ignoring ``lengths`` (pack_info called); each model output equal either way."""
    from conftest import TINY_MODEL

    from reference_impl import PaddingFreeBert
    from suite.config import BertDims
    from suite.models import canonical_model
    from suite.workloads import bert_batch

    for kind in ("bert", "deberta"):
        model = PaddingFreeBert.from_hf(canonical_model(kind, BertDims(**TINY_MODEL), 16))
        batch = bert_batch([5, 0, 16, 9], 16, TINY_MODEL["vocab_size"], seed=2)
        with torch.inference_mode():
            want = model(batch.input_ids, batch.attention_mask, batch.token_type_ids)
            with monkeypatch.context() as m:
                m.setattr(packing, "pack_info", lambda mask: pytest.fail("read the mask"))
                got = model(batch.input_ids, batch.attention_mask, batch.token_type_ids,
                            lengths=batch.lengths)
        assert torch.equal(got, want), kind
    from suite.baselines.reference import Reference  # the baseline hands the lengths over

    system = Reference()
    system.prepare(canonical_model("bert", BertDims(**TINY_MODEL), 16), torch.device("cpu"),
                   torch.float32)
    with monkeypatch.context() as m:
        m.setattr(packing, "pack_info", lambda mask: pytest.fail("read the mask"))
        assert system.run(batch).shape == (4, 16, TINY_MODEL["hidden"])
    with pytest.raises(ValueError, match=r"lengths \[17\] lie outside \[0, padded_len=16\]"):
        pack_info_from_lengths([3, 17], 16)
    with pytest.raises(ValueError, match="3 lengths for an attention_mask of shape"):
        packing.packing_of(torch.ones(2, 4), [1, 2, 3])
