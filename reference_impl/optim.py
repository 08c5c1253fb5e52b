"""LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in 76
minutes"): Adam's step rescaled per parameter tensor by a trust ratio ||w|| / ||update||, so
that each layer moves by a fixed fraction of its own norm whatever the batch size.

Our own implementation: among the packages for torch 2.x, ``pytorch-lamb`` (2019) is unmaintained,
apex's ``FusedLAMB`` needs a CUDA build, and timm's / pytorch-optimizer's ``Lamb`` are maintained
but are whole libraries for one optimizer, and timm's default adds global grad-norm clipping, a
variant of the paper's rule.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch.optim import Optimizer


class Lamb(Optimizer):
    """LAMB, per parameter tensor ``w`` with gradient ``g`` at step ``t``:

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``r = m_hat / (sqrt(v_hat) + eps) + weight_decay * w`` (``m_hat``, ``v_hat`` bias-corrected),
    ``trust = phi(||w||) / ||r||``, or 1 when either norm is 0 (a fresh zero bias; no update),
    ``w -= lr * trust * r``, where ``phi(x) = min(x, max_weight_norm)`` (no clamp when None).

    Weight decay is decoupled (added to the update, not the gradient) as in the paper; turn it
    off for biases and norms with param groups.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, max_weight_norm: float | None = 10.0,
                 bias_correction: bool = True):
        if not lr >= 0.0:
            raise ValueError(f"lr={lr!r} must be >= 0")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas={betas!r} must both be in [0, 1)")
        if not eps >= 0.0:
            raise ValueError(f"eps={eps!r} must be >= 0")
        if not weight_decay >= 0.0:
            raise ValueError(f"weight_decay={weight_decay!r} must be >= 0")
        if max_weight_norm is not None and not max_weight_norm > 0.0:
            raise ValueError(f"max_weight_norm={max_weight_norm!r} must be > 0, or None for no "
                             f"clamp")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        max_weight_norm=max_weight_norm, bias_correction=bias_correction)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                dtype = torch.promote_types(p.dtype, torch.float32)  # bf16 weights: fp32 math
                grad = p.grad.to(dtype)
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, dtype=dtype)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype)
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if group["bias_correction"]:
                    m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
                else:
                    m_hat, v_hat = m, v
                w = p.to(dtype)
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(w, alpha=group["weight_decay"])
                w_norm, u_norm = w.norm(), update.norm()
                if group["max_weight_norm"] is not None:
                    w_norm = w_norm.clamp(max=group["max_weight_norm"])
                # on-device: no host sync per tensor
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm,
                                    torch.ones_like(w_norm))
                p.add_((update * (-group["lr"] * trust)).to(p.dtype))
        return loss
