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


def row(baseline, b, s, ms, status="ok", reason="", dtype="fp16", device="cuda:0"):
    return {"system": baseline, "batch_size": b, "max_seq_len": s, "median_ms": ms,
            "status": status, "reason": reason, "dtype": dtype, "device": device,
            "subject": "bert"}


def test_gpu_fp16_rows_judge_direction_and_size_over_the_grid():
    varlen = pd.DataFrame([
        row("reference", 1, 64, 10.0), row("reference", 16, 64, 20.0),
        row("torch-jit", 1, 64, 20.0), row("torch-jit", 16, 64, 80.0),  # ratios 2 and 4
        row("tensorflow-xla", 1, 64, 15.0), row("tensorflow-xla", 16, 64, 30.0),  # 1.5, 1.5
        row("deepspeed-inference", 1, 64, 9.0), row("deepspeed-inference", 16, 64, 24.0),
        # another subject at the same point is not BERT-base's claim
        {**row("torch-jit", 1, 64, 1.0), "subject": "distilbert"},
    ])
    mha = pd.DataFrame([{**row("varlen", 16, 128, 1.0), "speedup_vs_padded": 3.0},
                        {**row("varlen", 16, 1024, 1.0), "speedup_vs_padded": 12.0}])
    t = claims_table(CLAIMS, varlen, mha).set_index("paper_baseline")
    assert set(t.kind) == {"size"}
    jit = t.loc["PyTorch JIT"]
    assert jit.measured == pytest.approx(8 ** 0.5)  # geometric mean of 2 and 4
    assert (jit.ci_low, jit.ci_high, jit.n) == (2.0, 4.0, 2)  # the range over the grid
    assert (jit.verdict, jit.size_verdict, jit.size_tested) == ("reproduced", "reproduced", True)
    assert "b1 L64 fp16: 2.00x; b16 L64 fp16: 4.00x" in jit.note
    xla = t.loc["TensorFlow XLA"]  # faster everywhere, by less than the paper's 2.31x
    assert (xla.verdict, xla.size_verdict) == ("reproduced", "not reproduced")
    assert xla.reading.startswith("direction reproduced; size not reproduced (size 0.65x")
    ds = t.loc["DeepSpeed-Inference"]  # 0.9x and 1.25x: faster at one point of two
    assert ds.verdict == "inconclusive" and "faster at 1 of 2 points" in ds.note
    mha_row = t.loc["PyTorch"]  # over the grid (geometric mean 6), not its best point (12)
    assert mha_row.measured == pytest.approx(6.0)
    assert (mha_row.verdict, mha_row.size_verdict) == ("reproduced", "not reproduced")
    ft = t.loc["NVIDIA FasterTransformer"]
    assert ft.verdict == "not tested" and "docs/external-baselines.md" in ft.note
    assert "external program 'fastertransformer'" in ft.note


def test_cpu_fp32_rows_judge_the_direction_only_and_deepspeed_is_not_its_competitor():
    cpu = dict(dtype="fp32", device="cpu")
    varlen = pd.DataFrame([
        row("reference", 1, 64, 10.0, **cpu), row("torch-jit", 1, 64, 20.0, **cpu),
        row("reference", 16, 64, 10.0, **cpu), row("torch-jit", 16, 64, 40.0, **cpu),
        row("deepspeed-inference", 1, 64, 30.0, **cpu),
        row("deepspeed-inference", 16, 64, 30.0, **cpu)])
    t = claims_table(CLAIMS, varlen, None).set_index("paper_baseline")
    jit = t.loc["PyTorch JIT"]
    assert (jit.verdict, jit.size_verdict, jit.size_tested) == ("reproduced", "not expected",
                                                                False)
    assert "measured on cpu fp32" in jit.note and "not tested" in jit.reading
    ds = t.loc["DeepSpeed-Inference"]  # 3x faster, but not against the paper's competitor
    assert ds.verdict == "not tested" and "kernel injection is GPU-only" in ds.note


def test_a_failed_baseline_is_named_with_its_reason():
    varlen = pd.DataFrame([row("reference", 1, 64, 10.0),
                           row("torch-jit", 1, 64, None, "failed", "trace error")])
    t = claims_table(CLAIMS, varlen, None).set_index("paper_baseline")
    assert t.loc["PyTorch JIT", "verdict"] == "not tested"
    assert "failed: trace error" in t.loc["PyTorch JIT", "note"]
    assert t.loc["PyTorch", "note"] == "no bert_mha results"


def test_where_tensorflow_did_not_run_jax_s_xla_stands_in_and_the_row_says_so():
    varlen = pd.DataFrame([
        row("reference", 16, 64, 10.0), row("reference", 16, 128, 20.0),
        row("jax-xla", 16, 64, 25.0), row("jax-xla", 16, 128, 45.0),  # 2.5x and 2.25x
        row("tensorflow-xla", 16, 64, None, status="unavailable",
            reason="tensorflow is not installed"),
    ])
    xla = claims_table(CLAIMS, varlen, None).set_index("paper_baseline").loc["TensorFlow XLA"]
    assert xla.system == "jax-xla" and xla.measured == pytest.approx((2.5 * 2.25) ** 0.5)
    assert "tensorflow-xla: unavailable: tensorflow is not installed" in xla.note
    assert "JAX's XLA stands in" in xla.note
    # where TensorFlow's XLA ran, it is the one scored
    both = pd.concat([varlen[varlen.system != "tensorflow-xla"], pd.DataFrame([
        row("tensorflow-xla", 16, 64, 30.0), row("tensorflow-xla", 16, 128, 60.0)])])
    xla = claims_table(CLAIMS, both, None).set_index("paper_baseline").loc["TensorFlow XLA"]
    assert xla.system == "tensorflow-xla" and xla.measured == pytest.approx(3.0)
    assert "stands in" not in xla.note
