"""Table, figure and report from hand-made records: speedups, and the degenerate cases."""

from pathlib import Path

import pandas as pd
import pytest

from suite.analysis.plots import latency_figure
from suite.analysis.tables import tidy_table
from suite.records import Record, Status, write_record
from suite.report.render import render_report
from conftest import report_section
from suite.measure.stats import summarize

ROOT = Path(__file__).resolve().parent.parent
PAPER = pd.read_csv(ROOT / "results/paper/bytetransformer_readme_a100_fp16_latency.csv")


def record(baseline, max_len, samples=None, status=Status.OK, reason="", padding_free=False):
    rec = Record("bert_varlen", baseline,
                 {"batch_size": 1, "max_seq_len": max_len, "distribution": "bytetransformer",
                  "seed": 0, "dtype": "fp32"}, {"seed": 0}, status, reason,
                 env={"machine": "m", "git": {"commit": "abc"}, "cpu_model": "Test CPU"},
                 workload={"lengths": [max_len // 2], "total_tokens": max_len // 2,
                           "gemm_flop_bound": 2.0, "attention_flop_bound": 4.0})
    if samples:
        rec.timing = {"samples": samples, "stats": summarize(samples), "threads": 2,
                      "timer": "time.perf_counter",
                      "policy": {"warmup": 1, "min_repeats": 3, "min_time_s": 0}}
        rec.derived = {"padding_free": padding_free, "tokens_per_s": 1.0,
                       "useful_flops_per_s": 2e9, "pct_of_measured_peak": 10.0}
    return rec


def write_all(tmp_path, recs):
    return [write_record(r, tmp_path / f"{r.system}_{r.point['max_seq_len']}.json")
            for r in recs]


def test_speedups_pair_records_of_the_same_point(tmp_path):
    paths = write_all(tmp_path, [
        record("torch-eager", 64, [0.010, 0.011, 0.012]),
        record("reference", 64, [0.004, 0.005, 0.006], padding_free=True),
        record("torch-eager", 128, [0.020, 0.020, 0.020]),
        record("reference", 128, [0.008, 0.008, 0.008], padding_free=True),
    ])
    df = tidy_table(paths).set_index(["system", "max_seq_len"])
    assert df.loc[("reference", 64), "speedup_vs_padded"] == pytest.approx(0.011 / 0.005)
    assert df.loc[("reference", 128), "speedup_vs_padded"] == pytest.approx(2.5)
    assert df.loc[("reference", 128), "pct_of_gemm_bound"] == pytest.approx(125.0)
    assert df.loc[("torch-eager", 64), "speedup_vs_padded"] == 1.0
    assert pd.isna(df.loc[("torch-eager", 64), "pct_of_gemm_bound"])
    assert df.loc[("reference", 64), "median_ms"] == pytest.approx(5.0)


def test_each_timed_row_names_the_fastest_other_system_at_its_point_and_its_lead(tmp_path):
    """The lead: the fastest other system's median over this one's. The reference's eager form
    is not its competitor; a failed system is nobody's."""
    paths = write_all(tmp_path, [
        record("torch-eager", 64, [0.010, 0.011, 0.012]),
        record("torch-sdpa", 64, [0.007, 0.007, 0.007]),
        record("reference-eager", 64, [0.0055, 0.0055, 0.0055], padding_free=True),
        record("reference", 64, [0.005, 0.005, 0.005], padding_free=True),
        record("torch-compile", 64, status=Status.FAILED, reason="compile error"),
        record("reference", 128, [0.008, 0.008, 0.008], padding_free=True),
    ])
    df = tidy_table(paths).set_index(["system", "max_seq_len"])
    ref = df.loc[("reference", 64)]
    assert ref.fastest_other == "torch-sdpa" and ref.lead_over_fastest == pytest.approx(1.4)
    assert ref.lead_ci_low <= 1.4 <= ref.lead_ci_high
    eager = df.loc[("reference-eager", 64)]
    assert eager.fastest_other == "torch-sdpa"
    assert eager.lead_over_fastest == pytest.approx(0.007 / 0.0055)
    sdpa = df.loc[("torch-sdpa", 64)]
    assert sdpa.fastest_other == "reference" and sdpa.lead_over_fastest == pytest.approx(5 / 7)
    for alone in (("torch-compile", 64), ("reference", 128)):  # failed; no other system
        assert pd.isna(df.loc[alone, "lead_over_fastest"]) and pd.isna(df.loc[alone,
                                                                              "fastest_other"])


def test_failed_padded_baseline_means_no_speedup_and_a_listed_failure(tmp_path):
    paths = write_all(tmp_path, [
        record("torch-eager", 64, status=Status.FAILED, reason="out of memory"),
        record("reference", 64, [0.004, 0.005], padding_free=True),
    ])
    df = tidy_table(paths)
    assert pd.isna(df.set_index("system").loc["reference", "speedup_vs_padded"])
    section = report_section(tmp_path, "bert_varlen", df, records=paths)
    html = render_report([section], tmp_path / "index.html").read_text()
    assert "out of memory" in html and "failed" in html
    assert "Test CPU" in html


def test_all_failed_still_renders(tmp_path):
    paths = write_all(tmp_path, [record("torch-eager", 64, status=Status.UNAVAILABLE,
                                        reason="no GPU")])
    section = report_section(tmp_path, "bert_varlen", tidy_table(paths), records=paths)
    assert section.figure_svg.stat().st_size > 0
    html = render_report([section], tmp_path / "index.html").read_text()
    assert "no GPU" in html and "unavailable" in html


def test_an_analysis_of_another_version_is_not_rendered_half_understood(tmp_path):
    """An analysis.json from before claims had kinds: the report names the file and the fix
    instead of failing inside the template."""
    import json

    paths = write_all(tmp_path, [record("torch-eager", 64, [0.01, 0.011]),
                                 record("reference", 64, [0.004, 0.005], padding_free=True)])
    section = report_section(tmp_path, "bert_varlen", tidy_table(paths), records=paths)
    html = render_report([section], tmp_path / "index.html").read_text()
    assert "ByteTransformer's claims, measured here" in html and "size tested" in html
    old = json.loads(section.analysis.read_text())
    section.analysis.write_text(json.dumps({**old, "analysis_version": 2}))
    with pytest.raises(ValueError, match=r"analysis_version 2, this suite renders 3: build it "
                                         r"again"):
        render_report([section], tmp_path / "index.html")


def test_each_row_names_the_weights_its_gate_ran_with_and_the_report_counts_the_old_ones(
        tmp_path):
    """A record gated with the drawn weights says their version; one of the same gate without
    it was gated against HF's own initialization (version 1), and the report says how many
    such rows a machine has; another gate's record (a kernel's) has none."""
    from suite.measure.correctness import REFERENCE
    from suite.models import WEIGHTS

    new, old, kernel = (record("torch-eager", n, [0.01, 0.011]) for n in (64, 128, 256))
    new.correctness = {"passed": True, "max_abs_err": 1e-6, "reference": REFERENCE,
                       "weights": WEIGHTS.as_dict()}
    old.correctness = {"passed": True, "max_abs_err": 1e-6, "reference": REFERENCE}
    kernel.correctness = {"passed": True, "max_abs_err": 1e-6,
                          "reference": "float64 torch attention"}
    df = tidy_table(write_all(tmp_path, [new, old, kernel])).set_index("max_seq_len")
    assert df.gate_weights[64] == WEIGHTS.version == 2
    assert df.gate_weights[128] == 1 and pd.isna(df.gate_weights[256])
    section = report_section(tmp_path, "bert_varlen", df.reset_index())
    html = render_report([section], tmp_path / "index.html").read_text()
    assert "Rows gated before version 2" in html and "test-machine 1;" in html


def test_roofline_panel_draws_a_line_per_library_and_the_known_theoretical_peak(tmp_path):
    import matplotlib.pyplot as plt

    from suite.analysis.plots import roofline_panel

    paths = write_all(tmp_path, [record("torch-eager", 64, [0.02, 0.021, 0.019]),
                                 record("reference", 64, [0.01, 0.011, 0.009],
                                        padding_free=True)])
    table = tidy_table(paths)
    peak = {"peaks": {"fp32": {
        "libraries": {"torch.matmul": {"flops_per_s": 197e9}, "onednn": {"flops_per_s": 446e9},
                      "onnxruntime": {"flops_per_s": None, "status": "unavailable"}},
        "theoretical": {"flops_per_s": 512e9}}}}
    fig, ax = plt.subplots()
    roofline_panel(ax, table[table.status == "ok"], peak)
    lines = {round(line.get_ydata()[0]) for line in ax.lines if len(set(line.get_ydata())) == 1}
    assert {197, 446, 512} <= lines  # a line per library that ran, plus the theoretical
    labels = [t.get_text() for t in ax.texts]
    assert "onednn 446" in labels and "theoretical 512" in labels
    assert not any(t.startswith("onnxruntime") for t in labels)  # unavailable: no line
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"reference", "torch-eager"}
    plt.close(fig)
    # and the full figure renders with and without a peak
    assert latency_figure(table, PAPER, tmp_path / "with", peak)
    assert latency_figure(table, PAPER, tmp_path / "without")


def test_gemm_library_column_gives_the_calls_each_library_took():
    from suite.analysis.tables import gemm_library_text

    assert gemm_library_text({"onednn_gemm_calls": 48, "mkl_gemm_calls": 12672}) == \
        "oneDNN 48 + MKL 12672"
    assert gemm_library_text({"onednn_gemm_calls": 0, "mkl_gemm_calls": 96}) == "MKL 96"
    assert gemm_library_text({"onednn_gemm_calls": 0, "mkl_gemm_calls": 0}) == \
        "its own (not torch's MKL or oneDNN)"
    assert gemm_library_text(None) is None


def test_a_table_from_before_schema_2_still_plots_and_reports(tmp_path):
    """Tables written before the rename name the system column ``baseline``; the workflow does
    not rebuild them (their command did not change), so the next stages must read them."""
    from suite.analysis.tidy import read_table

    paths = write_all(tmp_path, [record("torch-eager", 64, [0.02, 0.021, 0.019]),
                                 record("reference", 64, [0.01, 0.011, 0.009],
                                        padding_free=True)])
    old = tmp_path / "old.csv"
    tidy_table(paths).rename(columns={"system": "baseline"}).to_csv(old, index=False)
    table = read_table(old)
    assert "system" in table and "baseline" not in table
    assert set(table.system) == {"torch-eager", "reference"}
    section = report_section(tmp_path, "bert_varlen", table, records=paths)
    html = render_report([section], tmp_path / "index.html").read_text()
    assert "reference" in html and "torch-eager" in html


def test_on_a_gpu_in_fp16_the_latency_panel_draws_the_readme_s_a100_bytetransformer_beside():
    """The paper's setting: the README's A100 ByteTransformer on the same axes (up to the
    longest length measured); elsewhere (CPU, fp32) not; a log scale past a 20x spread."""
    import matplotlib.pyplot as plt

    from suite.analysis.plots import _latency_panel

    def rows(device, dtype, ms):
        return pd.DataFrame([{"system": s, "max_seq_len": n, "median_ms": v * k, "q1_ms": v * k,
                              "q3_ms": v * k, "device": device, "dtype": dtype}
                             for s, k in (("reference", 1), ("torch-nested", ms))
                             for n, v in ((64, 1.0), (128, 1.5))])

    paper = PAPER[PAPER.batch_size == 16]
    for device, dtype, spread, drawn, log in (("cuda:0", "fp16", 30, True, True),
                                              ("cpu", "fp32", 2, False, False)):
        fig, ax = plt.subplots()
        _latency_panel(ax, rows(device, dtype, spread), 16, paper)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(t.startswith("ByteTransformer, paper: A100") for t in labels) is drawn
        if drawn:
            line = next(x for x in ax.lines if x.get_label().startswith("ByteTransformer"))
            assert list(line.get_xdata()) == [64, 128]
            assert list(line.get_ydata()) == list(paper[(paper.framework == "ByteTransformer")
                                                        & (paper.max_seq_len <= 128)]
                                                  .sort_values("max_seq_len").latency_ms)
        assert (ax.get_yscale() == "log") is log
        plt.close(fig)
