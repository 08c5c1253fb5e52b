import pandas as pd
import pytest

from suite.analysis.claims import claims_table

CLAIMS = pd.DataFrame([
    {"claim": "fused MHA speedup", "baseline": "PyTorch", "value": 6.13, "unit": "x",
     "setting": "A100"},
    {"claim": "end-to-end BERT forward speedup", "baseline": "PyTorch JIT", "value": 87,
     "unit": "percent", "setting": "A100"},
    {"claim": "end-to-end BERT forward speedup", "baseline": "TensorFlow XLA", "value": 131,
     "unit": "percent", "setting": "A100"},
    {"claim": "end-to-end BERT forward speedup", "baseline": "DeepSpeed-Inference", "value": 74,
     "unit": "percent", "setting": "A100"},
    {"claim": "end-to-end BERT forward speedup", "baseline": "NVIDIA FasterTransformer",
     "value": 55, "unit": "percent", "setting": "A100"},
])


def row(baseline, b, s, ms, status="ok", reason=""):
    return {"system": baseline, "batch_size": b, "max_seq_len": s, "median_ms": ms,
            "status": status, "reason": reason}


def test_verdicts_from_measured_ratios():
    varlen = pd.DataFrame([
        row("reference", 1, 64, 10.0), row("reference", 16, 64, 20.0),
        row("torch-jit", 1, 64, 20.0), row("torch-jit", 16, 64, 80.0),  # ratios 2 and 4
        row("tensorflow-xla", 1, 64, 15.0), row("tensorflow-xla", 16, 64, 30.0),  # 1.5, 1.5
        row("deepspeed-inference", 1, 64, 9.0), row("deepspeed-inference", 16, 64, 18.0),
    ])
    mha = pd.DataFrame([{**row("varlen", 1, 64, 1.0), "speedup_vs_padded": 1.2},
                        {**row("varlen", 16, 256, 1.0), "speedup_vs_padded": 3.4}])
    t = claims_table(CLAIMS, varlen, mha).set_index("paper_baseline")
    assert t.loc["PyTorch JIT", "measured_x"] == pytest.approx(8 ** 0.5)  # geometric mean of 2, 4
    assert t.loc["PyTorch JIT", "claimed_x"] == pytest.approx(1.87)
    assert t.loc["PyTorch JIT", "verdict"] == "reproduced"
    assert t.loc["TensorFlow XLA", "verdict"] == "direction holds"  # 1.5 < 2.31
    assert t.loc["DeepSpeed-Inference", "verdict"] == "not reproduced"  # 0.9: slower
    assert t.loc["PyTorch", "measured_x"] == pytest.approx(3.4)  # the largest MHA point
    assert t.loc["PyTorch", "verdict"] == "direction holds"
    ft = t.loc["NVIDIA FasterTransformer"]
    assert ft.verdict == "not measured" and "docs/external-baselines.md" in ft.note
    assert "external program 'fastertransformer'" in ft.note


def test_a_failed_baseline_is_named_with_its_reason():
    varlen = pd.DataFrame([row("reference", 1, 64, 10.0),
                           row("torch-jit", 1, 64, None, "failed", "trace error")])
    t = claims_table(CLAIMS, varlen, None).set_index("paper_baseline")
    assert t.loc["PyTorch JIT", "verdict"] == "not measured"
    assert "failed: trace error" in t.loc["PyTorch JIT", "note"]
    assert t.loc["PyTorch", "note"] == "no bert_mha results"
