"""The correctness gate: a baseline's output against the float64 reference, valid positions only.

Errors are absolute and relative to the reference's largest magnitude (normwise): element-wise
relative error is meaningless where the reference is near zero. A result names the weights the
reference ran with (``suite.models.WEIGHTS``): the gate only sees a parameter that they make
matter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from suite.models import WEIGHTS

# Max abs error allowed against the float64 reference for BERT hidden states (unit scale after
# LayerNorm). fp32 leaves ~1e-5 after 12 layers; low-precision dtypes carry ~3 significant digits
# through every layer.
TOLERANCE = {"fp32": 1e-3, "fp16": 5e-2, "bf16": 2e-1}

REFERENCE = "HF BertModel, eager attention, float64, each sequence alone without padding"


def compare(output: Any, reference: torch.Tensor, attention_mask: torch.Tensor,
            dtype: str) -> dict[str, Any]:
    """Max abs / rel error of ``output`` against ``reference`` on positions where mask == 1."""
    if dtype not in TOLERANCE:
        raise ValueError(f"dtype={dtype!r} has no tolerance; known: {sorted(TOLERANCE)}")
    gate = {"tolerance_abs": TOLERANCE[dtype], "reference": REFERENCE,
            "weights": WEIGHTS.as_dict()}
    problem = _output_problem(output)
    if problem:
        return {"passed": False, "reason": problem, **gate}
    out = _as_float64(output)
    ref = reference.detach().to("cpu", torch.float64)
    if out.shape != ref.shape:
        return {"passed": False, "reason": f"output shape {tuple(out.shape)} != reference "
                f"shape {tuple(ref.shape)}", **gate}
    valid = attention_mask.to("cpu").bool()
    diff = (out - ref)[valid]
    scale = ref[valid].abs().max().item() if valid.any() else 0.0
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    finite = bool(torch.isfinite(out[valid]).all())
    passed = finite and max_abs <= TOLERANCE[dtype]
    result = {"passed": passed, "max_abs_err": max_abs,
              "max_rel_err": max_abs / scale if scale else 0.0, **gate}
    if not passed:
        result["reason"] = ("non-finite values at valid positions" if not finite else
                            f"max abs error {max_abs:.3g} > tolerance {TOLERANCE[dtype]:g}")
    return result


def weights_version(correctness: dict[str, Any]) -> int | None:
    """Which canonical weights a record's gate ran with: the version it recorded; 1 for a
    record of this gate made before versions were recorded (HF's own initialization, under
    which a dropped bias or swapped norms passed); None for the record of another gate."""
    if "weights" in correctness:
        return correctness["weights"]["version"]
    return 1 if correctness.get("reference") == REFERENCE else None


def _output_problem(x: Any) -> str | None:
    """Why ``x`` cannot be a hidden state at all (a plugin's wrong type, dtype or device), or
    None: such an output is incorrect, said plainly, rather than a conversion error."""
    if isinstance(x, torch.Tensor):
        if x.is_meta:
            return "output on device meta: a tensor without values"
        if not x.is_floating_point():
            return f"output dtype {x.dtype}: a hidden state is floating point"
        return None
    if isinstance(x, np.ndarray):
        if x.dtype.kind != "f":
            return f"output dtype {x.dtype}: a hidden state is floating point"
        return None
    return f"output of type {type(x).__name__}: expected a tensor or a numpy array"


def _as_float64(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64)
    return torch.from_numpy(np.asarray(x, dtype=np.float64))
