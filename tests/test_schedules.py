"""Learning-rate schedules: endpoints, monotonicity per phase, where the WSD decay starts."""

from __future__ import annotations

import math

import pytest
import torch

from reference_impl.schedules import DECAY_SHAPES, constant, cosine, make_schedule, wsd


def _values(fn, steps):
    return [fn(s) for s in steps]


def _non_increasing(xs):
    return all(a >= b for a, b in zip(xs, xs[1:]))


def _increasing(xs):
    return all(a < b for a, b in zip(xs, xs[1:]))


def test_constant():
    assert _values(lambda s: constant(s, warmup_steps=4), range(8)) == \
        [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert constant(0) == 1.0  # no warm-up


def test_cosine_endpoints_and_monotone():
    kw = dict(total_steps=100, warmup_steps=10, min_lr_ratio=0.1)
    assert cosine(0, **kw) == pytest.approx(0.1)  # (0 + 1) / 10
    assert cosine(9, **kw) == 1.0  # the last warm-up step runs at the peak
    assert cosine(10, **kw) == 1.0  # p = 0
    assert cosine(55, **kw) == pytest.approx(0.1 + 0.9 * 0.5)  # half way: the mid point
    assert cosine(100, **kw) == pytest.approx(0.1)
    assert cosine(150, **kw) == pytest.approx(0.1)  # past the end it stays
    assert _increasing(_values(lambda s: cosine(s, **kw), range(10)))
    assert _non_increasing(_values(lambda s: cosine(s, **kw), range(10, 101)))
    assert cosine(5, total_steps=5, warmup_steps=5) == 0.0  # no cosine phase at all


@pytest.mark.parametrize("shape", DECAY_SHAPES)
@pytest.mark.parametrize("fraction", [0.1, 0.2, 0.3, 0.25, 1.0])
def test_wsd_phases(shape, fraction):
    total, warmup, low = 1000, 50, 0.01
    kw = dict(total_steps=total, warmup_steps=warmup, decay_fraction=fraction, shape=shape,
              min_lr_ratio=low)
    start = round((1 - fraction) * total)
    if fraction < 1.0:
        assert _increasing(_values(lambda s: wsd(s, **kw), range(warmup)))
        stable = _values(lambda s: wsd(s, **kw), range(warmup, start + 1))
        assert stable == [1.0] * len(stable)  # the decay has not started at (1 - f) total
    else:
        kw["warmup_steps"] = 0
    assert wsd(start + 1, **kw) < 1.0  # ... and has one step later
    decay = _values(lambda s: wsd(s, **kw), range(start, total + 1))
    assert _non_increasing(decay) and decay[0] == 1.0
    assert decay[-1] == pytest.approx(low)  # reaches min_lr_ratio at total_steps
    assert wsd(total + 10, **kw) == pytest.approx(low)


def test_wsd_shapes_by_value():
    kw = dict(total_steps=100, decay_fraction=0.5, min_lr_ratio=0.0)
    # step 75 is half way through the decay (50 .. 100)
    assert wsd(75, shape="linear", **kw) == pytest.approx(0.5)
    assert wsd(75, shape="cosine", **kw) == pytest.approx(0.5)
    assert wsd(75, shape="sqrt", **kw) == pytest.approx(1 - math.sqrt(0.5))
    assert wsd(60, shape="cosine", **kw) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.2)))
    assert wsd(75, shape="exp", total_steps=100, decay_fraction=0.5, min_lr_ratio=0.01) == \
        pytest.approx(0.1)  # geometric: sqrt(0.01)
    assert wsd(75, shape="linear", total_steps=100, decay_fraction=0.5, min_lr_ratio=0.2) == \
        pytest.approx(0.6)


@pytest.mark.parametrize("call, match", [
    (lambda: wsd(0, total_steps=100, decay_fraction=0.0), r"decay_fraction=0.0.*\(0, 1\]"),
    (lambda: wsd(0, total_steps=100, decay_fraction=1.5), r"decay_fraction=1.5"),
    (lambda: wsd(0, total_steps=100, shape="step"), r"shape='step'.*'linear', 'cosine'"),
    (lambda: wsd(0, total_steps=100, shape="exp"), r"min_lr_ratio=0.0"),
    (lambda: wsd(0, total_steps=100, warmup_steps=95, decay_fraction=0.1), r"warmup_steps=95"),
    (lambda: wsd(-1, total_steps=100), r"step=-1"),
    (lambda: wsd(0, total_steps=0), r"total_steps=0"),
    (lambda: cosine(0, total_steps=10, warmup_steps=11), r"warmup_steps=11"),
    (lambda: cosine(0, total_steps=10, min_lr_ratio=2.0), r"min_lr_ratio=2.0.*\[0, 1\]"),
    (lambda: constant(0, warmup_steps=-2), r"warmup_steps=-2"),
    (lambda: make_schedule("linear"), r"kind='linear'.*'constant', 'cosine', 'wsd'"),
    (lambda: make_schedule("wsd", total_steps=10, decay_fraction=2), r"decay_fraction=2"),
])
def test_errors_name_the_bad_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_works_with_lambda_lr():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, make_schedule("wsd", total_steps=10, warmup_steps=2, decay_fraction=0.5))
    lrs = []
    for _ in range(11):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.25, 0.5, 0.5, 0.5, 0.5, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0])
