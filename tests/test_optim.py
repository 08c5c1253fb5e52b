"""LAMB against the update rule written out by hand in plain Python floats."""

from __future__ import annotations

import math

import pytest
import torch

from reference_impl.optim import Lamb


class ReferenceLamb:
    """One parameter tensor's LAMB state and update, element by element (You et al. 2019, Alg. 2
    with decoupled weight decay and bias correction)."""

    def __init__(self, w, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, max_norm=10.0,
                 bias_correction=True):
        self.w, self.lr, self.eps, self.wd = list(w), lr, eps, weight_decay
        self.b1, self.b2 = betas
        self.max_norm, self.bias_correction = max_norm, bias_correction
        self.m, self.v, self.t = [0.0] * len(w), [0.0] * len(w), 0

    def step(self, g):
        self.t += 1
        self.m = [self.b1 * m + (1 - self.b1) * gi for m, gi in zip(self.m, g)]
        self.v = [self.b2 * v + (1 - self.b2) * gi * gi for v, gi in zip(self.v, g)]
        c1 = 1 - self.b1 ** self.t if self.bias_correction else 1.0
        c2 = 1 - self.b2 ** self.t if self.bias_correction else 1.0
        r = [(m / c1) / (math.sqrt(v / c2) + self.eps) + self.wd * w
             for m, v, w in zip(self.m, self.v, self.w)]
        w_norm = math.sqrt(sum(w * w for w in self.w))
        if self.max_norm is not None:
            w_norm = min(w_norm, self.max_norm)
        r_norm = math.sqrt(sum(x * x for x in r))
        trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
        self.w = [w - self.lr * trust * x for w, x in zip(self.w, r)]
        return trust


def _param(values) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.tensor(values, dtype=torch.float64))


def test_one_step_matches_reference():
    w, g = [1.0, -2.0, 2.0], [0.1, 0.2, -0.3]
    p = _param(w)
    p.grad = torch.tensor(g, dtype=torch.float64)
    Lamb([p], lr=0.1, weight_decay=0.01).step()
    ref = ReferenceLamb(w, lr=0.1, weight_decay=0.01)
    trust = ref.step(g)
    assert p.tolist() == pytest.approx(ref.w, rel=1e-12, abs=1e-14)
    # first step, bias-corrected: r = sign(g) + wd w (eps aside), ||w|| = 3
    r = [1 + 0.01, 1 - 0.02, -1 + 0.02]
    assert trust == pytest.approx(3 / math.sqrt(sum(x * x for x in r)), rel=1e-5)


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("max_norm", [10.0, 2.0, None])
def test_several_steps_match_reference(bias_correction, max_norm):
    g = torch.Generator().manual_seed(0)
    cases = {  # name: (initial weights, weight decay)
        "decayed": ([0.5, -1.5, 3.0, 0.25], 0.1),
        "big": ([30.0, 40.0], 0.01),  # ||w|| = 50: clamped to max_norm when there is one
        "zero_weights": ([0.0, 0.0, 0.0], 0.0),  # ||w|| = 0: trust 1, a plain Adam step
        "no_decay": ([1.0, 2.0], 0.0),
    }
    params = {name: _param(w) for name, (w, _) in cases.items()}
    opt = Lamb([{"params": [params[n]], "weight_decay": wd} for n, (_, wd) in cases.items()],
               lr=0.05, betas=(0.8, 0.95), eps=1e-8, max_weight_norm=max_norm,
               bias_correction=bias_correction)
    refs = {n: ReferenceLamb(w, lr=0.05, betas=(0.8, 0.95), eps=1e-8, weight_decay=wd,
                             max_norm=max_norm, bias_correction=bias_correction)
            for n, (w, wd) in cases.items()}
    for step in range(6):
        for name, p in params.items():
            grad = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if name == "no_decay" and step == 0:
                grad.zero_()  # a zero update: ||r|| = 0, trust 1, the weights stay
            p.grad = grad
            refs[name].step(grad.tolist())
        opt.step()
        for name, p in params.items():
            assert p.tolist() == pytest.approx(refs[name].w, rel=1e-10, abs=1e-12), (name, step)
        if step == 0:
            assert params["no_decay"].tolist() == [1.0, 2.0]
    assert any(x != 0 for x in params["zero_weights"].tolist())  # it moved off zero


def test_zero_weights_and_zero_grad_stay_put():
    p = _param([0.0, 0.0])
    p.grad = torch.zeros(2, dtype=torch.float64)
    Lamb([p], lr=1.0, weight_decay=0.1).step()
    assert p.tolist() == [0.0, 0.0]  # 0/0 would be nan: trust is 1 and the update is 0


def test_reduces_a_quadratic():
    torch.manual_seed(0)
    A = torch.randn(8, 8) / 3 + torch.eye(8)
    target = torch.randn(8)
    w = torch.nn.Parameter(torch.randn(8))
    opt = Lamb([w], lr=0.05)

    def loss_fn():
        return (A @ w - target).pow(2).sum()

    first = loss_fn().item()
    for _ in range(200):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
    assert loss_fn().item() < 1e-2 * first


def test_closure_and_skipped_params():
    w, frozen = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    opt = Lamb([w, frozen], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (w * torch.tensor([1.0, 2.0, 3.0])).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == pytest.approx(6.0)
    assert frozen.tolist() == [1.0, 1.0] and frozen not in opt.state
    assert w.tolist() != [1.0, 1.0, 1.0]


def test_bf16_weights_keep_fp32_moments():
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    p.grad = torch.full((4,), 0.5, dtype=torch.bfloat16)
    opt = Lamb([p], lr=0.01)
    opt.step()
    assert opt.state[p]["exp_avg"].dtype == torch.float32 and p.dtype == torch.bfloat16
    assert p.float().lt(1.0).all()


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": -1.0}, "lr=-1.0"), ({"betas": (0.9, 1.0)}, "betas=(0.9, 1.0)"),
    ({"eps": -1e-8}, "eps=-1e-08"), ({"weight_decay": -0.1}, "weight_decay=-0.1"),
    ({"max_weight_norm": 0.0}, "max_weight_norm=0.0"),
])
def test_bad_hyperparameters_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Lamb([torch.nn.Parameter(torch.ones(1))], **kwargs)
