"""The paper's claims beside what this machine measured.

A claim names a competing framework and the advantage ByteTransformer has over it. Here the
advantage is the reference's over that framework's baseline, from the same run: the geometric
mean over every measured point of (framework latency / reference latency). The fused-MHA claim is
read from the attention micro-benchmark at its largest point (the paper's headline setting is
batch 16, long sequences). The verdict compares the measured advantage with the claimed one:

- reproduced: measured >= claimed;
- direction holds: the reference is faster, by less than claimed;
- not reproduced: the reference is not faster;
- not measured: the baseline did not run here (the reason is given).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# The paper's framework names -> this suite's baselines. The two without a Python package come
# in as external programs under these names (docs/external-baselines.md).
BASELINE_OF = {
    "PyTorch": "padded-unfused",  # the fused-MHA claim: against PyTorch's padded attention
    "PyTorch JIT": "torch-jit",
    "TensorFlow XLA": "tensorflow-xla",
    "Tencent TurboTransformer": "external-turbotransformers",
    "DeepSpeed-Inference": "deepspeed-inference",
    "NVIDIA FasterTransformer": "external-fastertransformer",
}

NO_PACKAGE = {
    name: (f"{project} has no pip package: build it and configure it as external program "
           f"{name.removeprefix('external-')!r} (docs/external-baselines.md)")
    for name, project in (("external-turbotransformers", "TurboTransformers"),
                          ("external-fastertransformer", "FasterTransformer"))}


def framework_claims(inputs) -> pd.DataFrame:
    """The analysis step's entry (``ExperimentSpec.claims`` of bert_varlen): the paper's claims
    CSV against this run's bert_varlen table and, when it ran, the bert_mha table."""
    return claims_table(inputs.paper["claims"], inputs.table, inputs.tables.get("bert_mha"))


def claims_table(claims: pd.DataFrame, varlen: pd.DataFrame | None,
                 mha: pd.DataFrame | None, reference: str = "reference") -> pd.DataFrame:
    rows = []
    for _, c in claims.iterrows():
        baseline = BASELINE_OF.get(c.baseline, c.baseline)
        claimed = c.value if c.unit == "x" else 1 + c.value / 100
        if c.claim == "fused MHA speedup":
            measured, points, why = _mha_speedup(mha, baseline)
        else:
            measured, points, why = _e2e_advantage(varlen, baseline, reference)
        rows.append({"claim": c.claim, "paper_baseline": c.baseline, "system": baseline,
                     "claimed_x": claimed, "paper_setting": c.setting,
                     "measured_x": measured, "points": points,
                     "verdict": _verdict(claimed, measured), "note": why})
    return pd.DataFrame(rows)


def _e2e_advantage(df: pd.DataFrame | None, baseline: str, reference: str):
    if df is None or df.empty:
        return None, 0, "no bert_varlen results"
    if "median_ms" not in df:  # a table with no timed row has no timing columns
        return None, 0, "no bert_varlen run was timed"
    ok = df[df.status == "ok"]
    keys = ["batch_size", "max_seq_len"]
    ref = ok[ok.system == reference].set_index(keys).median_ms
    other = ok[ok.system == baseline].set_index(keys).median_ms
    common = ref.index.intersection(other.index)
    if common.empty:
        rows = df[df.system == baseline]
        why = (NO_PACKAGE.get(baseline, f"{baseline} was not run") if rows.empty else
               f"{baseline}: {rows.status.iloc[0]}: {str(rows.reason.iloc[0])[:160]}")
        return None, 0, why
    ratios = other.loc[common] / ref.loc[common]
    return float(np.exp(np.log(ratios).mean())), len(common), ""


def _mha_speedup(df: pd.DataFrame | None, baseline: str):
    if df is None or df.empty:
        return None, 0, "no bert_mha results"
    if "speedup_vs_padded" not in df:
        return None, 0, "no bert_mha run was timed"
    ok = df[(df.status == "ok") & (df.system == "varlen")]
    if ok.empty:
        return None, 0, "varlen attention did not run"
    top = ok.sort_values(["batch_size", "max_seq_len"]).iloc[-1]
    return (float(top.speedup_vs_padded), 1,
            f"batch {top.batch_size}, max len {top.max_seq_len}, vs {baseline}")


def _verdict(claimed: float, measured: float | None) -> str:
    if measured is None:
        return "not measured"
    if measured >= claimed:
        return "reproduced"
    return "direction holds" if measured > 1 else "not reproduced"
