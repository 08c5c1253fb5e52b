from dataclasses import replace

import pandas as pd
import pytest

from suite.mfu import megatron_flops_per_token
from suite.scale_model import (
    A100_CLUSTER,
    CALIBRATION_ROWS,
    GPT_175B,
    Hardware,
    Layout,
    ModelConfig,
    bubble_fraction,
    calibrate,
    dp_bytes_per_iteration,
    estimate,
    fit_efficiency,
    load_table2,
    pp_bytes_per_microbatch,
    predict_fig9,
    predict_table2,
    ring_factor,
    summarize,
    tp_bytes_per_microbatch,
)

SMALL = ModelConfig(layers=4, hidden=8, heads=2, seq_len=16, vocab=100)
HW = Hardware(peak_flops=1e12, gemm_efficiency=0.5, nvlink_bw=1e9, network_bw=1e8)


def _layout(**kw) -> Layout:
    base = {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1, "global_batch": 8, "virtual_stages": 1}
    return Layout(**{**base, **kw})


@pytest.fixture(scope="module")
def table2_predictions() -> pd.DataFrame:
    return predict_table2()


def test_bubble_fraction():
    assert bubble_fraction(8, 6, 192) == pytest.approx(7 / (6 * 192))
    assert bubble_fraction(1, 1, 4) == 0
    assert bubble_fraction(4, 1, 3) == 1
    with pytest.raises(ValueError, match="micro_batches=0"):
        bubble_fraction(4, 1, 0)


def test_ring_factor():
    assert ring_factor(1) == 0
    assert ring_factor(2) == 1
    assert ring_factor(8) == pytest.approx(1.75)


def test_comm_volumes_by_hand():
    layout = _layout(tp=2, pp=2, dp=4, micro_batch=2, global_batch=16, virtual_stages=2)
    # activation b*s*h*2 bytes = 2*16*8*2 = 512; TP: 4 per layer, 4/2 = 2 layers, ring 1
    assert tp_bytes_per_microbatch(SMALL, layout) == 4 * 2 * 1 * 512
    # PP: v*p - 1 = 3 boundaries, fwd + bwd, averaged over 2 stages, 1/tp slice each
    assert pp_bytes_per_microbatch(SMALL, layout) == 2 * 3 / 2 * 512 / 2
    assert pp_bytes_per_microbatch(SMALL, replace(layout, pp=1, virtual_stages=1)) == 0
    # DP: N = 12*4*64 + 13*4*8 + (100+16)*8 = 3072 + 416 + 928 = 4416; ring(4) = 1.5
    assert SMALL.n_params == 4416
    assert dp_bytes_per_iteration(SMALL, layout) == 1.5 * 4416 / 4 * 4


def test_estimate_by_hand():
    layout = _layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8)
    m = 4
    compute = SMALL.flops_per_token * 16 / 4 / (1e12 * 0.5)
    tp = tp_bytes_per_microbatch(SMALL, layout) / 1e9
    pp = pp_bytes_per_microbatch(SMALL, layout) / 1e8
    dp = dp_bytes_per_iteration(SMALL, layout) / 1e8
    est = estimate(SMALL, HW, layout)
    assert est.iteration_time_s == pytest.approx((m + 1) * (compute + tp + pp) + dp)
    assert est.compute_s + est.bubble_s + est.tp_exposed_s + est.pp_exposed_s \
        + est.dp_exposed_s == pytest.approx(est.iteration_time_s)
    assert est.tokens_per_s == pytest.approx(8 * 16 / est.iteration_time_s)
    assert est.mfu == pytest.approx(est.tokens_per_s * SMALL.flops_per_token / (8 * 1e12))
    hidden = estimate(SMALL, HW, replace(layout, tp_overlap=1, pp_overlap=1, dp_overlap=1))
    assert hidden.iteration_time_s == pytest.approx((m + 1) * compute)
    assert hidden.mfu == pytest.approx(0.5 * m / (m + 1))


def test_more_overlap_is_faster():
    layout = _layout()
    for kind in ("tp_overlap", "pp_overlap", "dp_overlap"):
        times = [estimate(SMALL, HW, replace(layout, **{kind: x})).iteration_time_s
                 for x in (0.0, 0.3, 0.7, 1.0)]
        assert times == sorted(times, reverse=True) and times[0] > times[-1], kind


def test_more_gpus_at_fixed_batch_lowers_mfu():
    hw = replace(A100_CLUSTER, gemm_efficiency=0.6)
    mfus = [estimate(GPT_175B, hw, Layout(tp=8, pp=8, dp=dp, micro_batch=1, global_batch=768,
                                          virtual_stages=6)).mfu for dp in (4, 8, 12, 16)]
    assert all(a > b for a, b in zip(mfus, mfus[1:]))


def test_fit_efficiency_inverts_estimate():
    layout = _layout(tp_overlap=0.2)
    time = estimate(SMALL, HW, layout).iteration_time_s
    assert fit_efficiency(SMALL, replace(HW, gemm_efficiency=1.0), layout, time) == \
        pytest.approx(0.5)
    with pytest.raises(ValueError, match="shorter than the modelled exposed communication"):
        fit_efficiency(SMALL, HW, layout, 1e-12)


def test_layout_and_hardware_validation():
    with pytest.raises(ValueError, match="global_batch=10 is not a multiple of dp"):
        _layout(global_batch=10, dp=4)
    with pytest.raises(ValueError, match="tp_overlap=1.5 must be a fraction"):
        _layout(tp_overlap=1.5)
    with pytest.raises(ValueError, match="gemm_efficiency=1.2"):
        replace(HW, gemm_efficiency=1.2)
    with pytest.raises(ValueError, match="tp=16 spans nodes"):
        estimate(SMALL, HW, _layout(tp=16, pp=1, dp=1, global_batch=1))
    with pytest.raises(ValueError, match="at most two calibration rows"):
        calibrate(rows={"Megatron-LM": (768, 256), "MegaScale": (768, 256), "x": (1, 1)})


def test_calibration_uses_only_the_declared_rows(table2_predictions):
    assert set(table2_predictions[table2_predictions.calibration].apply(
        lambda r: (r.system, r.batch_size, r.gpus), axis=1)) == {
        (name, batch, gpus) for name, (batch, gpus) in CALIBRATION_ROWS.items()}
    cal = table2_predictions[table2_predictions.calibration]
    assert cal.iteration_time_rel_error.abs().max() < 1e-9  # fitted exactly
    doctored = load_table2()
    held = ~doctored.apply(lambda r: CALIBRATION_ROWS.get(r.system) == (r.batch_size, r.gpus),
                           axis=1)
    doctored.loc[held, ["iteration_time_s", "mfu_percent", "throughput_tokens_per_s"]] *= 3
    again = predict_table2(doctored)
    pd.testing.assert_series_equal(again.predicted_iteration_time_s,
                                   table2_predictions.predicted_iteration_time_s)
    pd.testing.assert_series_equal(again.predicted_mfu_percent,
                                   table2_predictions.predicted_mfu_percent)
    # and the calibration rows do matter
    doctored = load_table2()
    doctored.loc[~held, "iteration_time_s"] *= 1.1
    moved = predict_table2(doctored)
    assert (moved.predicted_iteration_time_s > table2_predictions.predicted_iteration_time_s).all()


def test_table2_prediction_errors(table2_predictions):
    """Held-out errors, fitted on one 256-GPU row per system (efficiency 0.592 and 0.669).

    As of writing: iteration time mean |rel err| 7.5% (Megatron-LM) and 8.5% (MegaScale);
    MFU mean |err| 3.7 and 6.1 points. The model under-predicts the drop in MFU with scale
    for both systems: every held-out row comes out faster than the paper.
    """
    pred = table2_predictions
    assert len(pred) == 16 and pred.calibration.sum() == 2
    assert set(pred.columns) >= {"system", "gpus", "batch_size", "paper_iteration_time_s",
                                 "predicted_iteration_time_s", "iteration_time_rel_error",
                                 "paper_mfu_percent", "predicted_mfu_percent", "mfu_rel_error",
                                 "calibration"}
    summary = summarize(pred)
    assert list(summary.index) == ["Megatron-LM", "MegaScale", "all"]
    assert (summary.rows == [7, 7, 14]).all()
    assert summary.notna().all().all()
    # loose bounds that hold with margin: within 20% on time, 12 points on MFU
    held = pred[~pred.calibration]
    assert held.iteration_time_rel_error.abs().max() < 0.2
    assert held.mfu_error_points.abs().max() < 12
    assert (held.iteration_time_rel_error < 0).all()  # optimistic, see the docstring
    effs = calibrate()
    assert 0.55 < effs["Megatron-LM"] < effs["MegaScale"] < 0.75


def test_fig9_predictions():
    pred = predict_fig9()
    assert len(pred) == 6 and not pred.calibration.any()
    assert pred.paper_iteration_time_s.isna().all()
    assert list(pred.batch_size) == [1920, 1920, 3840, 3840, 9600, 9600]
    summary = summarize(pred)
    assert summary.loc["all", "mfu_mean_abs_error_points"] > 0
    # weak scaling at fixed micro-batches per pipeline: MFU nearly flat, as in the figure
    for _, group in pred.groupby("system"):
        assert group.predicted_mfu_percent.max() - group.predicted_mfu_percent.min() < 0.5


def test_model_flops_match_mfu_module():
    assert GPT_175B.flops_per_token == megatron_flops_per_token(96, 12288, 2048, 64000)
