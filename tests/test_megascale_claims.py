"""MegaScale's claims rows (suite.analysis.megascale_claims) on hand-made tables whose rows point
at records carrying the timed samples and the pipeline's per-step bubbles."""

import numpy as np
import pandas as pd
import pytest

from suite.analysis.analyze import AnalysisInputs
from suite.analysis.megascale_claims import (CPU_OVERLAP, LAMB_MARGIN, ablation_claims,
                                             engines_claims, lamb_claims, pipeline_claims)
from suite.analysis.verdicts import CLAIM_COLUMNS
from suite.records import Status, new_record, write_record

TABLE3 = pd.read_csv("results/paper/megascale_table3_ablation_175b_256gpu.csv")


def _record(tmp_path, name, samples, bubbles=None):
    rec = new_record("llm_ablation", "x", {}, {})
    rec.status = Status.OK
    rec.timing = {"samples": list(samples)}
    rec.derived = {"trainer": {"bubble_fraction_steps": list(bubbles or [])}}
    return str(write_record(rec, tmp_path / f"{name}.json"))


def _step(tmp_path, step, technique, paper_steps, ms, system="pipeline", spread=0.01,
          device="cpu", noisy=False, batch=8, seed=0):
    samples = ms * (1 + spread * np.random.default_rng(seed + step).standard_normal(12))
    return {"step": step, "technique": technique, "paper_steps": paper_steps, "status": "ok",
            "system": system, "device": device, "global_batch": batch, "seq_len": 64,
            "tokens_per_s": batch * 64 / (ms / 1e3), "mechanism": f"mechanism {step}",
            "attention_path": "window 8, the band only", "block_path": "parallel",
            "noisy": noisy, "noise_reason": "CV 0.3 > 0.15" if noisy else None,
            "record": _record(tmp_path, f"step{step}", samples / 1e3)}


def test_ladder_rows_take_their_interval_from_the_timed_samples(tmp_path):
    table = pd.DataFrame([
        _step(tmp_path, 0, "baseline", "0", 10.0),
        _step(tmp_path, 1, "+ parallel block", "1", 10.0 / 1.2),
        _step(tmp_path, 2, "+ sliding window", "2", 10.0 / 1.2, spread=0.3),  # straddles 1
        _step(tmp_path, 3, "+ fused operators", "6", 5.0, noisy=True),
        _step(tmp_path, 4, "+ torch.compile", "", 5.0),
        _step(tmp_path, 6, "+ LAMB, larger batch", "8", 12.0, batch=24),
    ])
    c = ablation_claims(AnalysisInputs(table, {"table3": TABLE3}))
    assert list(c.columns) == CLAIM_COLUMNS and len(c) == 6
    block, window, fused, compiled, lamb, overlap = (c.iloc[i] for i in range(6))
    assert block.measured == pytest.approx(1.2, rel=0.02) and block.kind == "size"
    assert block.ci_low < block.measured < block.ci_high and block.ci_high / block.ci_low < 1.05
    assert (block.verdict, block.size_verdict) == ("reproduced", "not expected")
    assert block.paper_value.startswith("1.096x (Table 3 rows 1)")
    assert "mechanism 1" in block.claim  # each row names what ran
    assert window.verdict == "inconclusive"
    assert fused.verdict == "not tested" and "noisy machine: CV 0.3" in fused.reading
    assert compiled.kind == "direction" and compiled.paper_value == "not in Table 3"
    # tokens per step count: 3x the batch in 2.4x the time is 1.25x the throughput
    assert lamb.measured == pytest.approx(3 * 5.0 / 12.0, rel=0.03)
    assert lamb.verdict == "reproduced"  # on the pipeline the step is scored
    assert overlap.verdict == "not tested" and "no overlap step on pipeline" in overlap.note


def test_lamb_without_a_pipeline_and_overlap_on_a_cpu_are_not_scored(tmp_path):
    table = pd.DataFrame([
        _step(tmp_path, 4, "+ torch.compile", "", 10.0, system="fsdp2-noprefetch"),
        _step(tmp_path, 5, "+ communication overlap", "5", 9.0, system="fsdp2"),
        _step(tmp_path, 6, "+ LAMB, larger batch", "8", 10.0, system="fsdp2", batch=24),
    ])
    c = ablation_claims(AnalysisInputs(table, {"table3": TABLE3}))
    overlap, lamb = c.iloc[0], c.iloc[1]
    assert len(c) == 2  # fsdp2 has its overlap step: no extra row
    assert overlap.verdict == "not tested" and CPU_OVERLAP in overlap.reading
    assert overlap.measured == pytest.approx(10 / 9, rel=0.02)  # measured, not scored
    assert lamb.verdict == "not tested" and "not the paper's mechanism" in lamb.reading
    on_gpu = table.assign(device="cuda:0")
    overlap = ablation_claims(AnalysisInputs(on_gpu, {"table3": TABLE3})).iloc[0]
    assert overlap.verdict == "reproduced"


def test_runs_that_predate_the_papers_mechanisms_are_not_scored(tmp_path):
    """Records of the old ladder: DDP's bucketing as the overlap step, window and parallel
    block without their recorded code path."""
    table = pd.DataFrame([
        _step(tmp_path, 1, "+ parallel block", "1", 10.0, system="ddp"),
        _step(tmp_path, 2, "+ sliding window", "2", 9.0, system="ddp"),
        _step(tmp_path, 4, "+ torch.compile", "", 8.5, system="ddp"),
        _step(tmp_path, 5, "+ communication overlap", "5", 8.0, system="ddp"),
    ]).assign(attention_path=None)
    c = ablation_claims(AnalysisInputs(table, {"table3": TABLE3}))
    assert len(c) == 3  # the old overlap step has its row: no extra one
    window, compiled, overlap = (c.iloc[i] for i in range(3))
    assert window.verdict == "not tested" and "did not record its code path" in window.reading
    assert compiled.verdict == "reproduced"
    assert "not the paper's mechanism: DDP's bucketed all-reduce" in overlap.reading


def test_engines_overlap_rows(tmp_path):
    rows = [_step(tmp_path, i, "", "", ms, system=s)
            for i, (s, ms) in enumerate([("fsdp2", 9.0), ("fsdp2-noprefetch", 10.0),
                                         ("zero1", 10.0)])]
    c = engines_claims(AnalysisInputs(pd.DataFrame(rows), {"table3": TABLE3}))
    assert len(c) == 1 and "fsdp2 over fsdp2-noprefetch" in c.claim.iloc[0]
    assert c.paper_value.iloc[0] == "1.026x (Table 3 row 5)"
    assert c.verdict.iloc[0] == "not tested" and c.measured.iloc[0] == pytest.approx(10 / 9,
                                                                                      rel=0.02)


def _pipe(tmp_path, m, bubbles):
    return {"status": "ok", "micro_batches": m, "world_size": 2,
            "bubble_fraction": float(np.mean(bubbles)),
            "bubble_ci_low": float(np.mean(bubbles)) - 0.01,
            "bubble_ci_high": float(np.mean(bubbles)) + 0.01, "bubble_steps": len(bubbles),
            "bubble_formula": 1 / (m + 1), "record": _record(tmp_path, f"m{m}", [1.0], bubbles)}


def test_pipeline_bubble_against_the_formula(tmp_path):
    table = pd.DataFrame([_pipe(tmp_path, 2, [0.33, 0.34, 0.32, 0.33]),
                          _pipe(tmp_path, 8, [0.20, 0.21, 0.19, 0.20])])
    c = pipeline_claims(AnalysisInputs(table))
    m2, m8, fall = c.iloc[0], c.iloc[1], c.iloc[2]
    assert (m2.kind, m2.size_verdict) == ("size", "reproduced")  # 0.33 vs 1/3
    assert m8.size_verdict == "not reproduced"  # 0.20 vs 1/9: outside 1.2x
    assert fall.measured == pytest.approx(0.2 / 0.33, rel=0.02) and fall.verdict == "reproduced"
    assert fall.size_verdict == "not reproduced"  # the formula says 1/3
    empty = pipeline_claims(AnalysisInputs(table.iloc[0:0]))
    assert empty.verdict.iloc[0] == "not tested"


def test_lamb_at_each_optimizers_best_lr_paired_by_seed():
    def row(opt, lr, tail, loss, seed, batch):
        return {"optimizer": opt, "lr": lr, "tail_loss": tail, "eval_loss": loss, "seed": seed,
                "global_batch": batch, "tokens_seen": 4096, "status": "ok",
                "created_at": "2026-12-06T00:00:00"}

    rows = []
    for seed in range(3):
        rows += [row("adamw", 1e-3, 2.5, 2.50, seed, 8), row("adamw", 2e-3, 2.3, 2.30 + seed / 100,
                                                             seed, 8),
                 row("lamb", 1e-2, 2.6, 2.60, seed, 32), row("lamb", 2e-2, 2.4, 2.31 + seed / 100,
                                                            seed, 32)]
    c = lamb_claims(AnalysisInputs(pd.DataFrame(rows))).iloc[0]
    assert (c.kind, c.verdict, c.n) == ("equivalence", "reproduced", 3)
    assert c.measured == pytest.approx(0.01)  # chosen by training loss: 2e-3 and 2e-2
    assert "batch 4x here" in c.claim and f"±{LAMB_MARGIN:g}" in c.reading
    assert "AdamW [0.001, 0.002] -> 0.002, LAMB [0.01, 0.02] -> 0.02" in c.note
    assert "at its sweep's edge" in c.note  # both best at the top of their sweeps
    far = pd.DataFrame(rows).assign(eval_loss=lambda t: t.eval_loss + (t.optimizer == "lamb"))
    assert lamb_claims(AnalysisInputs(far)).iloc[0].verdict == "not reproduced"
    # an older run of a seed still on disk: the latest counts
    stale = row("lamb", 2e-2, 2.4, 9.0, 0, 32) | {"created_at": "2026-12-01T00:00:00"}
    again = lamb_claims(AnalysisInputs(pd.DataFrame([stale, *rows]))).iloc[0]
    assert again.measured == pytest.approx(0.01) and again.n == 3
    none = lamb_claims(AnalysisInputs(pd.DataFrame(rows[:2]))).iloc[0]
    assert none.verdict == "not tested"
