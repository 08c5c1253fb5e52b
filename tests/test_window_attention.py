"""The sliding-window kernels (reference_impl.kernels.window_attention): equal to masked dense
attention (output and gradients, float64), and computing the band only (their work grows with
s * w, counted from what they run, not timed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from reference_impl.kernels import window_attention as wa


def _qkv(T, heads=3, d=8, batch=2, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, T, d, generator=g, dtype=dtype).requires_grad_()
            for _ in range(3)]


def _fwd_bwd(fn, q, k, v, dout):
    out = fn(q, k, v)
    return [out, *torch.autograd.grad(out, (q, k, v), dout)]


@pytest.mark.parametrize("kernel", [wa.window_attention, wa.banded_attention])
@pytest.mark.parametrize("T,w", [(64, 16), (70, 16), (33, 8), (40, 7), (9, 1), (16, 16),
                                 (12, 30)])
def test_equals_masked_reference_with_gradients(kernel, T, w):
    q, k, v = _qkv(T)
    dout = torch.randn(q.shape, dtype=q.dtype, generator=torch.Generator().manual_seed(1))
    want = _fwd_bwd(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=wa.window_mask(T, w, q.device)), q, k, v, dout)
    got = _fwd_bwd(lambda q, k, v: kernel(q, k, v, w), q, k, v, dout)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


def test_bf16_close_to_float64():
    q, k, v = _qkv(96, dtype=torch.float64)
    want = wa.banded_attention(q, k, v, 16)
    got = wa.window_attention(*(t.detach().bfloat16() for t in (q, k, v)), 16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), want, rtol=0, atol=3e-2)


def test_a_wrong_window_differs():
    """The reference would see a window off by one: the check has teeth."""
    q, k, v = _qkv(40)
    masked = F.scaled_dot_product_attention(q, k, v, attn_mask=wa.window_mask(40, 9, q.device))
    assert not torch.allclose(wa.window_attention(q, k, v, 8), masked)


def _fused_scores(monkeypatch, T, w) -> int:
    """Scores the fused CPU path computes: its flash calls run the causal triangle of each
    block (the kernel skips the blocks above the diagonal), L(L+1)/2 per query block of L."""
    counted = []
    real = wa._flash

    def counting(q, k, v, scale):
        L = q.shape[-2]
        counted.append(q.shape[0] * q.shape[1] * L * (L + 1) // 2)
        return real(q, k, v, scale)

    monkeypatch.setattr(wa, "_flash", counting)
    q, k, v = _qkv(T, heads=1, batch=1)
    wa.window_attention(q, k, v, w).sum().backward()
    return sum(counted)


def test_fused_work_is_the_band(monkeypatch):
    """The fused path computes about s*w scores (the band), not the s(s+1)/2 of the causal
    triangle: linear in s at a fixed window, and about the band's own count."""
    w = 16
    scores = {T: _fused_scores(monkeypatch, T, w) for T in (128, 256, 512)}
    for T, n in scores.items():
        band = w * (w + 1) // 2 + (T - w) * w
        assert band <= n <= band + T, (T, n, band)  # at most one extra diagonal per query
        assert n < 0.25 * T * (T + 1) / 2 or T == 128
    # linear in s: each doubling adds twice what the previous one added
    assert scores[512] - scores[256] == 2 * (scores[256] - scores[128])


def test_banded_flops_grow_with_s_times_w():
    """The explicit form's matmul FLOPs (torch's FLOP counter): linear in s at a fixed window
    and linear in w at a fixed s, about 2 s w scores; dense attention's grow with s^2."""
    def flops(fn, T, w):
        q, k, v = (t.detach() for t in _qkv(T, heads=1, batch=1, d=16))
        with FlopCounterMode(display=False) as counter:
            fn(q, k, v, w)
        return counter.get_total_flops()

    banded = {(T, w): flops(wa.banded_attention, T, w)
              for T, w in ((256, 16), (512, 16), (512, 32))}
    assert banded[(512, 16)] == 2 * banded[(256, 16)]
    assert banded[(512, 32)] == 2 * banded[(512, 16)]
    assert banded[(512, 16)] == 2 * 2 * 512 * (2 * 16) * 16  # QK^T and PV over w x 2w blocks
    dense = lambda q, k, v, w: q @ k.transpose(-2, -1) @ v  # noqa: E731
    assert flops(dense, 512, 16) == 4 * flops(dense, 256, 16)


def test_band_fraction():
    assert wa.band_fraction(8192, 1024) == pytest.approx(0.2343, abs=1e-4)
    assert wa.band_fraction(100, 100) == 1.0
    assert wa.band_fraction(100, 200) == 1.0
