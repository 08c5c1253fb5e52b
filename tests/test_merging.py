"""Checkpoint merging (PMA): the weights of SMA, WMA and EMA, the merged tensors, and errors."""

from __future__ import annotations

import math

import pytest
import torch

from reference_impl.merging import merge_checkpoints, merge_weights


def _checkpoints(n: int = 4, dtype: torch.dtype = torch.float32) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [{"w": torch.randn(3, 4, generator=g).to(dtype),
             "b": torch.randn(4, generator=g).to(dtype),
             "step": torch.tensor(100 * (i + 1)),
             "mask": torch.tensor([True, i % 2 == 0])} for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 10])
def test_sma_and_wma_weights(n):
    assert merge_weights(n, "sma") == pytest.approx([1 / n] * n)
    wma = merge_weights(n, "wma")
    assert wma == pytest.approx([2 * i / (n * (n + 1)) for i in range(1, n + 1)])
    assert all(a < b for a, b in zip(wma, wma[1:]))  # the newest heaviest
    assert math.fsum(wma) == pytest.approx(1.0)


def test_wma_weights_by_hand():
    assert merge_weights(3, "wma") == pytest.approx([1 / 6, 2 / 6, 3 / 6])


@pytest.mark.parametrize("n, alpha", [(1, 0.2), (2, 0.2), (10, 0.2), (10, 0.1), (6, 1.0)])
def test_ema_weights_closed_form(n, alpha):
    weights = merge_weights(n, "ema", alpha)
    expected = [(1 - alpha) ** (n - 1)] + [alpha * (1 - alpha) ** (n - i) for i in range(2, n + 1)]
    assert weights == pytest.approx(expected)
    assert math.fsum(weights) == pytest.approx(1.0)
    # the recursion M_1 = C_1, M_i = alpha C_i + (1 - alpha) M_{i-1} on unit vectors
    basis = torch.eye(n, dtype=torch.float64)
    acc = basis[0]
    for i in range(1, n):
        acc = alpha * basis[i] + (1 - alpha) * acc
    assert acc.tolist() == pytest.approx(weights)


def test_ema_weights_by_hand():
    assert merge_weights(3, "ema", 0.2) == pytest.approx([0.64, 0.16, 0.2])


@pytest.mark.parametrize("method", ["sma", "wma", "ema"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_merged_tensors_are_the_weighted_sums(method, dtype):
    cks = _checkpoints(dtype=dtype)
    merged = merge_checkpoints(cks, method, alpha=0.3)
    weights = merge_weights(len(cks), method, alpha=0.3)
    for key in ("w", "b"):
        expected = sum(w * ck[key].double() for w, ck in zip(weights, cks)).to(dtype)
        assert merged[key].dtype == dtype
        torch.testing.assert_close(merged[key], expected)  # float64 inside: within one rounding
    assert torch.equal(merged["step"], torch.tensor(400))  # integer buffer from the newest
    assert torch.equal(merged["mask"], cks[-1]["mask"])  # bool buffer too
    assert list(merged) == list(cks[0])


def test_one_checkpoint_is_itself():
    ck = _checkpoints(1)
    for method in ("sma", "wma", "ema"):
        merged = merge_checkpoints(ck, method)
        assert all(torch.equal(merged[k], ck[0][k]) for k in ck[0])


def test_accumulates_in_float64():
    # in float32, 1e8/3 + 1/3 - 1e8/3 loses the 1/3 (the spacing near 3e7 is 2); float64 keeps it
    cks = [{"x": torch.tensor([v], dtype=torch.float32)} for v in (1e8, 1.0, -1e8)]
    assert merge_checkpoints(cks, "sma")["x"].item() == torch.tensor(1 / 3).item()


def test_errors_name_the_key_and_checkpoint():
    cks = _checkpoints(3)
    with pytest.raises(ValueError, match="empty"):
        merge_checkpoints([])
    bad = [dict(ck) for ck in cks]
    del bad[2]["b"]
    with pytest.raises(ValueError, match=r"'b'.*checkpoint 2"):
        merge_checkpoints(bad)
    bad = [dict(ck) for ck in cks]
    bad[1]["extra"] = torch.zeros(1)
    with pytest.raises(ValueError, match=r"'extra'.*checkpoint 1"):
        merge_checkpoints(bad)
    bad = [dict(ck) for ck in cks]
    bad[1]["w"] = torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"'w'.*\(4, 3\) in checkpoint 1"):
        merge_checkpoints(bad)
    bad = [dict(ck) for ck in cks]
    bad[2]["w"] = bad[2]["w"].half()
    with pytest.raises(ValueError, match=r"'w'.*float16 in checkpoint 2"):
        merge_checkpoints(bad)


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5, True])
def test_alpha_outside_unit_interval(alpha):
    with pytest.raises(ValueError, match=r"alpha=.*\(0, 1\]"):
        merge_checkpoints(_checkpoints(2), "ema", alpha=alpha)
    with pytest.raises(ValueError, match=r"alpha=.*\(0, 1\]"):
        merge_weights(2, "ema", alpha=alpha)


def test_bad_method_and_count():
    with pytest.raises(ValueError, match=r"method='avg'.*'sma', 'ema', 'wma'"):
        merge_weights(3, "avg")
    with pytest.raises(ValueError, match="n=0"):
        merge_weights(0)
