"""ByteTransformer's claims beside what this machine measured.

A claim names a competing framework and the advantage ByteTransformer has over it "on average"
(the paper's abstract; A100, fp16, variable-length inputs). Here the advantage is the padding-free
reference's over that framework's baseline from the same run, read over the grid as the paper
states it (``verdicts.grid_claim``): the geometric mean of (framework latency / reference
latency) over every measured point, with the range and every point in the note. The fused-MHA
claim is read the same way over the attention micro-benchmark's grid (varlen against PyTorch's
padded, unfused attention). Each row is a size claim: the size is judged only on the paper's
dtype on a GPU; points measured elsewhere judge the direction alone and say so.
"""

from __future__ import annotations

import pandas as pd

from suite.analysis.verdicts import CLAIM_COLUMNS, Size, grid_claim, not_tested

PAPER = "ByteTransformer"
PAPER_SETTING = "the paper's setting (fp16 on a GPU; the paper: A100)"
PAPER_DTYPE, PAPER_DEVICE = "fp16", "cuda"
SUBJECT = "bert"  # the claims are about BERT-base

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

# Where the paper's system did not run (no TensorFlow on the GPU machines), a system with the
# same compiler stands in, and the claim's row says so.
STAND_IN = {"tensorflow-xla": ("jax-xla", "JAX's XLA stands in (the same compiler, another "
                                          "front end)")}

# Baselines that are the paper's competitor only on one device kind, and why not elsewhere.
COMPETITOR_ONLY_ON = {
    "deepspeed-inference": ("cuda", "DeepSpeed-Inference's kernel injection is GPU-only: here the "
                                    "baseline is HF eager behind DeepSpeed's engine, not the "
                                    "paper's DeepSpeed-Inference"),
}
FRAMEWORK_COLUMNS = CLAIM_COLUMNS + ["paper_baseline", "system", "paper_setting"]


def framework_claims(inputs) -> pd.DataFrame:
    """The analysis step's entry (``ExperimentSpec.claims`` of bert_varlen): the paper's claims
    CSV against this run's bert_varlen table and, when it ran, the bert_mha table."""
    return claims_table(inputs.paper["claims"], inputs.table, inputs.tables.get("bert_mha"))


def claims_table(claims: pd.DataFrame, varlen: pd.DataFrame | None,
                 mha: pd.DataFrame | None, reference: str = "reference") -> pd.DataFrame:
    rows = []
    for _, c in claims.iterrows():
        baseline = BASELINE_OF.get(c.baseline, c.baseline)
        claimed = float(c.value) if c.unit == "x" else 1 + float(c.value) / 100
        text = f"{c.claim} over {c.baseline} (on average)"
        paper_value = f"{claimed:.2f}x ({c.setting})"
        if c.claim == "fused MHA speedup":
            ratios, why = _mha_speedups(mha)
        else:
            ratios, why = _e2e_advantages(varlen, baseline, reference)
        stood_in = ""
        if ratios is None and baseline in STAND_IN:
            other, because = STAND_IN[baseline]
            alt, _ = _e2e_advantages(varlen, other, reference)
            if alt is not None:
                ratios, stood_in, baseline = alt, f"{why}: {because}", other
        row = (not_tested(PAPER, text, paper_value, "x", why, kind="size") if ratios is None
               else _scored(text, paper_value, claimed, baseline, ratios, stood_in))
        rows.append({**row, "paper_baseline": c.baseline, "system": baseline,
                     "paper_setting": c.setting})
    return pd.DataFrame(rows, columns=FRAMEWORK_COLUMNS)


def _scored(text: str, paper_value: str, claimed: float, baseline: str,
            ratios: pd.DataFrame, stood_in: str = "") -> dict:
    """The grid claim on the paper's setting's points, unless the baseline is not the paper's
    competitor on the device the points ran on; ``stood_in``: why another system is scored."""
    points, where = _paper_setting(ratios)
    only = COMPETITOR_ONLY_ON.get(baseline)
    if only and not points.device.str.startswith(only[0]).all():
        return not_tested(PAPER, text, paper_value, "x",
                          f"not scored: {only[1]} (measured on "
                          f"{', '.join(sorted(set(points.device)))})", kind="size")
    return grid_claim(PAPER, text, paper_value, dict(zip(points.label, points.ratio)),
                      size=Size(claimed, expected=where is None, setting=PAPER_SETTING),
                      note="; ".join(n for n in (stood_in, where) if n))


def _paper_setting(ratios: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """The points on the paper's dtype and device kind if there are any (then None), else every
    point with a sentence saying where they were measured."""
    same = ratios[(ratios.dtype == PAPER_DTYPE) & ratios.device.str.startswith(PAPER_DEVICE)]
    if not same.empty:
        return same, None
    where = ", ".join(sorted({f"{d.split(':')[0]} {t}" for d, t in
                              zip(ratios.device, ratios.dtype)}))
    return ratios, f"measured on {where}, not the paper's fp16 on a GPU: the size is not tested"


def _label(df: pd.DataFrame) -> pd.Series:
    return ("b" + df.batch_size.astype(int).astype(str) + " L"
            + df.max_seq_len.astype(int).astype(str) + " " + df.dtype.astype(str))


def _e2e_advantages(df: pd.DataFrame | None, baseline: str, reference: str):
    """Per point (batch, length, dtype, device): framework / reference latency."""
    if df is None or df.empty:
        return None, "no bert_varlen results"
    if "median_ms" not in df:  # a table with no timed row has no timing columns
        return None, "no bert_varlen run was timed"
    ok = df[(df.status == "ok")]
    if "subject" in ok:
        ok = ok[ok.subject == SUBJECT]
    keys = ["batch_size", "max_seq_len", "dtype", "device"]
    ref = ok[ok.system == reference].set_index(keys).median_ms
    other = ok[ok.system == baseline].set_index(keys).median_ms
    common = ref.index.intersection(other.index)
    if common.empty:
        rows = df[df.system == baseline]
        why = (NO_PACKAGE.get(baseline, f"{baseline} was not run") if rows.empty else
               f"{baseline}: {rows.status.iloc[0]}: {str(rows.reason.iloc[0])[:160]}")
        return None, why
    out = (other.loc[common] / ref.loc[common]).rename("ratio").reset_index()
    return out.assign(label=_label(out)), ""


def _mha_speedups(df: pd.DataFrame | None):
    """Per point: PyTorch's padded unfused attention / the varlen attention."""
    if df is None or df.empty:
        return None, "no bert_mha results"
    if "speedup_vs_padded" not in df:
        return None, "no bert_mha run was timed"
    ok = df[(df.status == "ok") & (df.system == "varlen")]
    if ok.empty:
        return None, "varlen attention did not run"
    out = ok[["batch_size", "max_seq_len", "dtype", "device", "speedup_vs_padded"]] \
        .rename(columns={"speedup_vs_padded": "ratio"}).reset_index(drop=True)
    return out.assign(label=_label(out)), ""
