import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_impl.packing import pack, pack_info, packed_positions, unpack


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
