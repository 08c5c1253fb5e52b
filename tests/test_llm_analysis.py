"""Training records -> tidy table -> ablation vs MegaScale Table 3 -> figures -> report sections,
from real (one-process, tiny) training runs; and the scale-model section."""

import pandas as pd
import pytest
from test_trainers import fake_peak

from conftest import report_section
from suite.analysis.llm_tables import ablation_vs_paper, llm_curves, llm_table
from suite.env import REPO_ROOT
from suite.experiments.llm_plan import jobs
from suite.experiments.llm_train import run_training
from suite.records import write_record
from suite.report.render import render_report
from suite.scale.datasets import load_paper, validation_table

CONFIG = {"llm": {
    "train": {"seq_len": 16, "global_batch": 2, "steps": 4, "warmup_steps": 1, "threads": 1},
    "sizes": {"t": {"n_layer": 1, "n_embd": 32, "n_head": 2}},
    "mfu": {"enabled": False}, "engines": {"enabled": False}, "pipeline": {"enabled": False},
    "ablation": {"size": "t", "trainer": "single", "sliding_window": 4},
    "loss": {"size": "t", "steps": 8, "eval_batches": 2, "seeds": [0],
             "lrs": {"adamw": [0.002], "lamb": [0.006]}},
}}
TABLE3 = pd.read_csv(REPO_ROOT / "results/paper/megascale_table3_ablation_175b_256gpu.csv")


def run_jobs(tmp_path, experiment, upto=None):
    paths = []
    for i, job in enumerate(jobs(CONFIG)[experiment][:upto]):
        # a folder that is not the label: the label must come from the record
        out = tmp_path / experiment / f"run{i}" / f"{job.trainer}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        rec = run_training(job.train, job.trainer, out.with_suffix(".steps.jsonl"),
                           peak=fake_peak(threads=1), check_steps=job.check_steps,
                           experiment=experiment, out=out, label=job.label)
        assert rec.point["label"] == job.label
        write_record(rec, out)
        paths.append(out)
    return paths


@pytest.fixture(scope="module")
def ablation(tmp_path_factory):
    return llm_table(run_jobs(tmp_path_factory.mktemp("abl"), "llm_ablation", upto=3))


def test_table_rows_carry_mfu_with_formula_and_peak(ablation):
    assert list(ablation.status) == ["ok"] * 3 and list(ablation.step) == [0, 1, 2]
    r = ablation.iloc[0]
    assert r.mfu_percent == pytest.approx(100 * r.tokens_per_s * r.flops_per_token / 5e10)
    assert r.flop_formula.startswith("detailed(") and "measured" in r.peak_source
    assert r.gate_passed and r.median_step_ms > 0 and r.n_samples == 3
    # the sliding-window step counts fewer FLOPs; the fixed-count MFU uses step 0's
    sw = ablation.iloc[2]
    assert sw.flops_per_token < r.flops_per_token
    assert sw.mfu_fixed_percent == pytest.approx(
        100 * sw.tokens_per_s * r.flops_per_token / sw.peak_flops)


def test_the_mfu_label_names_the_peak_the_runs_divided_by(ablation):
    """A GPU run's MFU divides by the datasheet peak: its headline and figure say so, not
    "the measured peak" (the first H200 run's did)."""
    from suite.analysis.llm_tables import mfu_denominator

    assert mfu_denominator(ablation.peak_source) == "the measured peak"
    assert mfu_denominator(["H200 bf16 datasheet dense", None]) == \
        "the H200 bf16 datasheet dense peak"
    assert mfu_denominator(["H200 bf16 datasheet dense", "measured fp32 GEMM peak: x"]) == \
        "each run's peak (table)"


def test_ablation_gains_beside_the_papers(ablation):
    rows = ablation_vs_paper(ablation, TABLE3)
    assert pd.isna(rows.gain_points[0]) and pd.isna(rows.paper_gain_points[0])
    assert rows.gain_points[1] == pytest.approx(ablation.mfu_fixed_percent[1]
                                                - ablation.mfu_fixed_percent[0])
    assert rows.paper_gain_points[1] == pytest.approx(52.3 - 47.7)  # + parallel block
    assert rows.paper_gain_points[2] == pytest.approx(53.3 - 52.3)  # + sliding window
    full = ablation_vs_paper(pd.concat([ablation, ablation.iloc[[0]].assign(
        step=5, technique="+ communication overlap", paper_steps="3,4,5")]), TABLE3)
    assert full.paper_gain_points.iloc[-1] == pytest.approx(59.5 - 53.3)  # rows 3-5 summed


def test_figures_and_report_sections(ablation, tmp_path):
    loss = llm_table(run_jobs(tmp_path, "llm_loss"))
    assert (loss.eval_loss > 0).all() and loss.tokens_seen.nunique() == 1
    scale = validation_table(load_paper(REPO_ROOT / "results" / "paper"))
    curves = llm_curves(loss)
    assert set(curves.record) == set(loss.record) and (curves.loss > 0).all()
    sections = [report_section(tmp_path, "llm_ablation", ablation),
                report_section(tmp_path, "llm_loss", loss, curves=curves),
                report_section(tmp_path, "llm_scale", scale)]
    assert all(s.figure_svg.stat().st_size > 10_000 for s in sections)
    html = render_report(sections, tmp_path / "index.html").read_text()
    assert "Gain of each step in MFU points: + parallel block (one input GEMM):" in html
    assert "vs +4.6 in the paper" in html
    assert "LAMB (batch 8, best LR 0.006 of 1): held-out" in html
    assert "AdamW (batch 2, best LR 0.002 of 1): held-out" in html
    assert "these datasets): megascale_table2 / Megatron-LM (6 runs): iteration time off by" in html
    assert "narayanan2021 / Megatron-LM 2021 (Selene) (8 runs)" in html
    # every dataset of the table, each timed one with llm-analysis (same rows fitted) beside it
    for dataset in scale.dataset.unique():
        assert f"{dataset} / " in html, dataset
    timed = scale[~scale.calibration & scale.paper_iteration_time_s.notna()]
    assert html.count("; llm-analysis ") == timed.groupby(["dataset", "system"]).ngroups
    assert html.count('<h2 id="llm_') == 3
