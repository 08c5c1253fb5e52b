"""The cluster-scale model: each term on hand-computed cases, the fit, and the validation against
published runs (suite.scale_model, suite.scale_datasets, suite.scale_whatif)."""

import json
from dataclasses import replace
from math import log

import pandas as pd
import pytest

from suite.cli import main
from suite.mfu import megatron_flops_per_token
from suite.scale_datasets import (
    CALIBRATION,
    GPT_175B,
    all_runs,
    fit,
    korthikanti_runs,
    load_paper,
    predict,
    summarize,
)
from suite.scale_model import (
    A100_CLUSTER,
    NCCL_BASE_LATENCY,
    Hardware,
    Layout,
    ModelConfig,
    Terms,
    allreduce_latency,
    bubble_fraction,
    dp_bandwidth,
    dp_bytes_per_iteration,
    dp_ranks_per_node,
    elementwise_bytes_per_microbatch,
    estimate,
    fit_efficiency,
    fit_system,
    is_scaling_pair,
    loss_bytes_per_microbatch,
    pp_bytes_per_microbatch,
    ring_latency,
    tp_bytes_per_microbatch,
    tree_latency,
    uneven_bubble_slots,
)
from suite.env import REPO_ROOT

SMALL = ModelConfig(layers=4, hidden=8, heads=2, seq_len=16, vocab=100)
HW = Hardware(peak_flops=1e12, gemm_efficiency=0.5, nvlink_bw=1e9, network_bw=1e8)
BANDWIDTH_ONLY = Terms.none()


def _layout(**kw) -> Layout:
    base = {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1, "global_batch": 8, "virtual_stages": 1}
    return Layout(**{**base, **kw})


@pytest.fixture(scope="module")
def paper():
    return load_paper(REPO_ROOT / "results" / "paper")


@pytest.fixture(scope="module")
def runs(paper):
    return all_runs(paper)


@pytest.fixture(scope="module")
def predictions(runs):
    return predict(runs)


# --- the terms, one at a time ---------------------------------------------------------------

def test_bubble_fraction_and_the_uneven_bubble():
    assert bubble_fraction(8, 6, 192) == pytest.approx(7 / (6 * 192))
    assert bubble_fraction(1, 1, 4) == 0
    # m = 6 micro-batches on p = 4 stages, v = 2: the last group of r = 2 leaves the first
    # stage waiting p - r = 2 chunk-steps at each of v - 1 = 1 chunk change, forward and
    # backward: 2 x 2 steps of 1/v slot = (v-1)(p-r)/v = 1 slot
    assert uneven_bubble_slots(4, 2, 6) == 1.0
    assert uneven_bubble_slots(4, 3, 5) == pytest.approx(2 * 3 / 3)
    assert uneven_bubble_slots(4, 2, 8) == 0  # a multiple of the stages
    assert uneven_bubble_slots(4, 1, 6) == 0  # no interleaving: 1F1B takes any m
    even = estimate(SMALL, HW, _layout(pp=4, dp=1, global_batch=8, virtual_stages=2,
                                       tp=1, micro_batch=1))
    uneven = estimate(SMALL, HW, _layout(pp=4, dp=1, global_batch=6, virtual_stages=2,
                                         tp=1, micro_batch=1))
    flat = estimate(SMALL, HW, _layout(pp=4, dp=1, global_batch=6, virtual_stages=2, tp=1),
                    replace(Terms(), uneven_bubble=False))
    assert uneven.bubble_s == pytest.approx(flat.bubble_s * (3 / 2 + 1) / (3 / 2))
    assert even.bubble_s == pytest.approx(flat.bubble_s * 6 / 6)  # same slot time, no extra


def test_ring_factor():
    from suite.scale_model import ring_factor

    assert (ring_factor(1), ring_factor(2), ring_factor(8)) == (0, 1, 1.75)


def test_ring_and_tree_latency_with_nodes():
    hw = A100_CLUSTER
    # 16 ranks, one per node: ring 2(n-1) = 30 network steps; tree 2 log2(16) = 8
    assert ring_latency(16, 16, hw) == pytest.approx(NCCL_BASE_LATENCY + 30 * 9.6e-6)
    assert tree_latency(16, 16, hw) == pytest.approx(NCCL_BASE_LATENCY + 8 * 9.6e-6)
    assert allreduce_latency(16, 16, hw) == tree_latency(16, 16, hw)
    # 8 ranks in one node: ring 14 NVLink steps; tree chains them: 2 x 7 NVLink steps
    assert ring_latency(8, 1, hw) == pytest.approx(NCCL_BASE_LATENCY + 14 * 3.4e-6)
    assert tree_latency(8, 1, hw) == pytest.approx(NCCL_BASE_LATENCY + 14 * 3.4e-6)
    # the ring grows linearly with the nodes, the tree with log2: 4x the nodes adds 4 tree hops
    assert ring_latency(64, 64, hw) - ring_latency(16, 16, hw) == pytest.approx(96 * 9.6e-6)
    assert tree_latency(64, 64, hw) - tree_latency(16, 16, hw) == pytest.approx(4 * 9.6e-6)
    assert ring_latency(1, 1, hw) == tree_latency(1, 1, hw) == 0


def test_gemm_tile_and_wave_quantization():
    from suite.scale_model import gemm_size_factor, tile_efficiency

    # 175B QKV at TP 8: 2048 x 4608 -> 16 x 18 = 288 tiles of 128 x 256 on 108 SMs: 3 waves
    assert tile_efficiency(2048, 4608, 108) == pytest.approx(2048 * 4608 / (3 * 108 * 128 * 256))
    assert tile_efficiency(128 * 108, 256, 108) == 1.0  # exactly one full wave
    lay = Layout(tp=8, pp=8, dp=4, micro_batch=1, global_batch=768, virtual_stages=6)
    q = gemm_size_factor(GPT_175B, lay, A100_CLUSTER)
    assert q == pytest.approx(8 / 9)  # all four layer GEMMs run at 8/9 here
    hw = replace(A100_CLUSTER, gemm_efficiency=0.7)
    on = estimate(GPT_175B, hw, lay, replace(Terms(), gemm_size=True))
    assert on.compute_s > estimate(GPT_175B, hw, lay).compute_s


def test_recompute_flops():
    model = ModelConfig(layers=24, hidden=4096, heads=32, seq_len=2048, vocab=51200)
    l, h, s, v = 24, 4096, 2048, 51200
    # full recompute runs the forward again: 4/3 of the transformer layers' training FLOPs;
    # the logits (not recomputed) stay at 3x their forward
    layer_part = 72 * l * h * h * (1 + s / (6 * h))
    logits = 6 * h * v
    assert model.flops_per_token == pytest.approx(layer_part + logits)
    assert model.hardware_flops_per_token("full") == pytest.approx(4 / 3 * layer_part + logits)
    assert model.hardware_flops_per_token("selective") == pytest.approx(
        megatron_flops_per_token(l, h, s, v, "selective"))
    lay = _layout(tp=1, pp=1, dp=1, global_batch=1)
    none = estimate(model, A100_CLUSTER, lay, BANDWIDTH_ONLY)
    full = estimate(model, A100_CLUSTER, replace(lay, recompute="full"), BANDWIDTH_ONLY)
    assert full.compute_s / none.compute_s == pytest.approx(
        model.hardware_flops_per_token("full") / model.flops_per_token)
    assert full.mfu < none.mfu and full.hfu == pytest.approx(none.hfu)


def test_the_last_stage_carries_the_output_layer():
    """1F1B runs at the slowest stage: the last one's layers/p share plus the logits' 6 h V."""
    from suite.scale_model import stage_flops_per_token

    l, h, s, v = 4, 8, 16, 100
    logits = 6 * h * v
    layers = 72 * l * h * h * (1 + s / (6 * h))
    lay = _layout(tp=1, pp=2, dp=1, global_batch=4)
    assert stage_flops_per_token(SMALL, lay) == pytest.approx(layers / 2 + logits)
    assert stage_flops_per_token(SMALL, lay, imbalance=False) == pytest.approx(
        (layers + logits) / 2)
    one = replace(lay, pp=1)
    assert stage_flops_per_token(SMALL, one) == stage_flops_per_token(SMALL, one, False)
    on = estimate(SMALL, HW, lay, replace(BANDWIDTH_ONLY, stage_imbalance=True))
    off = estimate(SMALL, HW, lay, BANDWIDTH_ONLY)
    assert on.compute_s / off.compute_s == pytest.approx(
        (layers / 2 + logits) / ((layers + logits) / 2))


def test_comm_volumes_by_hand():
    layout = _layout(tp=2, pp=2, dp=4, micro_batch=2, global_batch=16, virtual_stages=2)
    # activation b*s*h*2 bytes = 2*16*8*2 = 512; TP: 4 per layer, 4/2 = 2 layers, ring 1
    assert tp_bytes_per_microbatch(SMALL, layout) == 4 * 2 * 1 * 512
    # full recompute repeats the forward's 2 collectives; sequence parallelism moves as much
    assert tp_bytes_per_microbatch(SMALL, replace(layout, recompute="full")) == 6 * 2 * 512
    assert tp_bytes_per_microbatch(SMALL, replace(layout, sequence_parallel=True)) == 4 * 2 * 512
    # PP: v*p - 1 = 3 boundaries, fwd + bwd, averaged over 2 stages, 1/tp slice each
    assert pp_bytes_per_microbatch(SMALL, layout) == 2 * 3 / 2 * 512 / 2
    # DP: N = 12*4*64 + 13*4*8 + (100+16)*8 = 3072 + 416 + 928 = 4416; ring(4) = 1.5
    assert SMALL.n_params == 4416
    assert replace(SMALL, tied_embeddings=False).n_params == 4416 + 800
    assert dp_bytes_per_iteration(SMALL, layout) == 1.5 * 4416 / 4 * 4
    # distributed optimizer: reduce-scatter at 4 bytes + all-gather at 2, (d-1)/d each
    assert dp_bytes_per_iteration(SMALL, replace(layout, distributed_optimizer=True)) == \
        pytest.approx(0.75 * 4416 / 4 * 6)


def test_sequence_parallel_shards_the_elementwise_traffic():
    lay = _layout(tp=2, pp=2, dp=1, micro_batch=1, global_batch=1, flash_attention=True)
    # per token and layer, in units of h: 42 (14 forward, 28 backward) on the whole b*s*h,
    # and the GELU's 20 (8 forward, 12 backward) on the TP-split 4h: 42 + 20 / 2 = 52;
    # x 16 tokens x h 8 x 2 bytes x 2 layers
    assert elementwise_bytes_per_microbatch(SMALL, lay) == 52 * 16 * 8 * 2 * 2
    # sequence parallelism shards the 42, the GELU was split already: 42 / 2 + 10 = 31
    assert elementwise_bytes_per_microbatch(SMALL, replace(lay, sequence_parallel=True)) == \
        31 * 16 * 8 * 2 * 2
    # full recompute repeats both forwards: 14 + 42 + (8 + 20) / 2 = 70
    assert elementwise_bytes_per_microbatch(SMALL, replace(lay, recompute="full")) == \
        70 * 16 * 8 * 2 * 2
    # materialized scores: b x heads/tp x s^2 x layers x (13 + 23) bytes
    scores = 1 * (2 / 2) * 16 ** 2 * 2 * 36
    assert elementwise_bytes_per_microbatch(SMALL, replace(lay, flash_attention=False)) == \
        52 * 16 * 8 * 2 * 2 + scores
    hw = replace(A100_CLUSTER, gemm_efficiency=0.6)
    model = ModelConfig(layers=8, hidden=4096, heads=32, seq_len=2048, vocab=51200)
    base = Layout(tp=8, pp=1, dp=1, micro_batch=1, global_batch=4, flash_attention=True)
    assert estimate(model, hw, replace(base, sequence_parallel=True)).iteration_time_s < \
        estimate(model, hw, base).iteration_time_s


def test_the_cross_entropy_reads_and_writes_each_logit_52_bytes_on_the_last_stage():
    """Megatron's unfused vocab-parallel cross entropy: 38 bytes per fp32 logit forward, 14
    backward, over the b*s*V/tp logits of a GPU; the last stage paces 1F1B."""
    lay = _layout(tp=2, pp=2, dp=1, micro_batch=3, global_batch=6, flash_attention=True)
    assert loss_bytes_per_microbatch(SMALL, lay) == 52 * 3 * 16 * 100 / 2
    hw = replace(HW, hbm_bw=1e9)
    only = replace(BANDWIDTH_ONLY, loss=True)
    m = lay.micro_batches
    # with stage_imbalance off the loss is spread over the 2 stages, as the logits' FLOPs are
    extra = (estimate(SMALL, hw, lay, only).compute_s
             - estimate(SMALL, hw, lay, BANDWIDTH_ONLY).compute_s)
    assert extra == pytest.approx(m * 52 * 3 * 16 * 100 / 2 / 2 / 1e9)
    both = replace(only, stage_imbalance=True)
    extra = (estimate(SMALL, hw, lay, both).compute_s
             - estimate(SMALL, hw, lay, replace(both, loss=False)).compute_s)
    assert extra == pytest.approx(m * 52 * 3 * 16 * 100 / 2 / 1e9)  # the last stage's all


def test_dp_ranks_of_a_node_share_its_nics():
    """A DP ring leaves a node once per channel: the node's r ranks of the group move their
    traffic over r NICs (capped by NVLink); inside one node it is NVLink alone."""
    hw = replace(A100_CLUSTER, gemm_efficiency=0.6)  # 8 GPUs, NIC 25 GB/s, NVLink 300 GB/s
    lay = Layout(tp=1, pp=1, dp=48, micro_batch=1, global_batch=48)
    assert dp_ranks_per_node(lay, hw) == 8
    assert dp_bandwidth(lay, hw, 8) == 8 * 25e9  # 200 GB/s < NVLink
    assert dp_bandwidth(replace(lay, tp=2, dp=24, global_batch=24), hw, 4) == 4 * 25e9
    assert dp_ranks_per_node(replace(lay, tp=8, dp=6, global_batch=6), hw) == 1
    assert dp_bandwidth(lay, hw, 1) == 25e9  # TP = 8, or the term off
    inside = replace(lay, dp=4, global_batch=4)
    assert dp_ranks_per_node(inside, hw) == 4 and dp_bandwidth(inside, hw, 4) == 300e9
    assert dp_bandwidth(lay, replace(hw, nvlink_bw=150e9), 8) == 150e9  # NVLink binds
    # in the estimate: the DP traffic of TP = 1 moves 8x faster with the term on
    model = ModelConfig(layers=24, hidden=2048, heads=16, seq_len=2048, vocab=51200)
    on = estimate(model, hw, lay, replace(BANDWIDTH_ONLY, dp_nic_sharing=True))
    off = estimate(model, hw, lay, BANDWIDTH_ONLY)
    dp = dp_bytes_per_iteration(model, lay)
    assert off.dp_exposed_s == pytest.approx(dp / 25e9)
    assert on.dp_exposed_s == pytest.approx(dp / 200e9)


def test_estimate_by_hand_with_bandwidth_terms_only():
    layout = _layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8)
    m = 4
    compute = SMALL.flops_per_token * 16 / 4 / (1e12 * 0.5)
    tp = tp_bytes_per_microbatch(SMALL, layout) / 1e9
    pp = pp_bytes_per_microbatch(SMALL, layout) / 1e8
    dp = dp_bytes_per_iteration(SMALL, layout) / 1e8
    est = estimate(SMALL, HW, layout, BANDWIDTH_ONLY)
    assert est.iteration_time_s == pytest.approx((m + 1) * (compute + tp + pp) + dp)
    assert sum(est.breakdown.values()) == pytest.approx(est.iteration_time_s)
    assert est.tokens_per_s == pytest.approx(8 * 16 / est.iteration_time_s)
    assert est.mfu == pytest.approx(est.tokens_per_s * SMALL.flops_per_token / (8 * 1e12))
    hidden = estimate(SMALL, HW, replace(layout, tp_overlap=1, pp_overlap=1, dp_overlap=1),
                      BANDWIDTH_ONLY)
    assert hidden.iteration_time_s == pytest.approx((m + 1) * compute)


def test_each_term_adds_time_and_the_parts_sum_up():
    model = GPT_175B
    hw = replace(A100_CLUSTER, gemm_efficiency=0.7, straggler=0.03)
    layout = Layout(tp=8, pp=8, dp=48, micro_batch=1, global_batch=6144, virtual_stages=6)
    full = estimate(model, hw, layout)
    assert sum(full.breakdown.values()) == pytest.approx(full.iteration_time_s)
    for term in ("latency", "straggler", "memory", "loss", "optimizer"):
        off = estimate(model, hw, layout, replace(Terms(), **{term: False}))
        assert off.iteration_time_s < full.iteration_time_s, term
    # the straggler stretch is straggler x ln(nodes) of every slot
    off = estimate(model, hw, layout, replace(Terms(), straggler=False))
    assert full.sync_s == pytest.approx(
        (full.iteration_time_s - full.sync_s - full.dp_exposed_s - full.optimizer_s)
        * 0.03 * log(384))
    assert off.sync_s == 0


def test_the_dp_window_bounds_what_overlap_hides():
    """Fewer micro-batches than stages shrink the window the overlapped DP traffic hides in."""
    hw = replace(A100_CLUSTER, gemm_efficiency=0.7)
    lay = Layout(tp=8, pp=8, dp=64, micro_batch=1, global_batch=128, virtual_stages=2,
                 dp_overlap=0.5)  # m = 2 < p
    on = estimate(GPT_175B, hw, lay)
    off = estimate(GPT_175B, hw, lay, replace(Terms(), dp_window=False))
    dp_time = (dp_bytes_per_iteration(GPT_175B, lay) / hw.network_bw)
    assert off.dp_exposed_s < on.dp_exposed_s <= dp_time * 1.01
    roomy = replace(lay, global_batch=64 * 64)  # m = 64 >= p: the window holds it
    assert estimate(GPT_175B, hw, roomy).dp_exposed_s == pytest.approx(
        estimate(GPT_175B, hw, roomy, replace(Terms(), dp_window=False)).dp_exposed_s)


def test_fits_reproduce_their_rows():
    layout = _layout(tp_overlap=0.2)
    time = estimate(SMALL, HW, layout).iteration_time_s
    assert fit_efficiency(SMALL, replace(HW, gemm_efficiency=1.0), layout, time) == \
        pytest.approx(0.5)
    with pytest.raises(ValueError, match="shorter than the modelled communication"):
        fit_efficiency(SMALL, HW, layout, 1e-12)
    # two rows at different node counts: efficiency and straggler recovered exactly
    truth = replace(A100_CLUSTER, gemm_efficiency=0.62, straggler=0.04)
    small = Layout(tp=8, pp=8, dp=4, micro_batch=1, global_batch=768, virtual_stages=6)
    large = replace(small, dp=48, global_batch=6144)
    rows = [(GPT_175B, lay, estimate(GPT_175B, truth, lay).iteration_time_s)
            for lay in (small, large)]
    eff, sigma = fit_system(rows, A100_CLUSTER)
    assert (eff, sigma) == (pytest.approx(0.62), pytest.approx(0.04))
    # two models (or layouts) are not a scaling pair: their difference is not only scale,
    # so the straggler stays 0 whatever their times say
    other = ModelConfig(layers=48, hidden=8192, heads=64, seq_len=2048, vocab=64000)
    assert is_scaling_pair(rows[0][:2], rows[1][:2])
    assert not is_scaling_pair((GPT_175B, small), (other, large))
    assert not is_scaling_pair((GPT_175B, small), (GPT_175B, replace(large, tp=4, dp=96)))
    assert not is_scaling_pair((GPT_175B, small), (GPT_175B, replace(small, global_batch=384)))
    mixed = [rows[0], (other, large, estimate(other, truth, large).iteration_time_s)]
    assert fit_system(mixed, A100_CLUSTER)[1] == 0
    # a larger run relatively faster than no straggler allows: straggler 0, least squares
    rows[1] = (rows[1][0], rows[1][1], rows[1][2] * 0.8)
    eff, sigma = fit_system(rows, A100_CLUSTER)
    hw = replace(A100_CLUSTER, gemm_efficiency=eff)
    errors = [estimate(m, hw, lay).iteration_time_s / t - 1 for m, lay, t in rows]
    assert sigma == 0 and errors[0] < 0 < errors[1]  # the least-squares compromise
    assert abs(errors[0] + errors[1]) < 0.01


def test_validation():
    with pytest.raises(ValueError, match="global_batch=10 is not a multiple of dp"):
        _layout(global_batch=10, dp=4)
    with pytest.raises(ValueError, match="tp_overlap=1.5 must be a fraction"):
        _layout(tp_overlap=1.5)
    with pytest.raises(ValueError, match="recompute='some'"):
        _layout(recompute="some")
    with pytest.raises(ValueError, match="gemm_efficiency=1.2"):
        replace(HW, gemm_efficiency=1.2)
    with pytest.raises(ValueError, match="straggler=-0.1"):
        replace(HW, straggler=-0.1)
    with pytest.raises(ValueError, match="tp=16 spans nodes"):
        estimate(SMALL, HW, _layout(tp=16, pp=1, dp=1, global_batch=1))


# --- the published runs ---------------------------------------------------------------------

def test_published_runs_as_model_inputs(runs):
    by = {(r.dataset, r.label): r for r in runs}
    assert sum(r.dataset == "megascale_table2" for r in runs) == 16
    assert sum(r.dataset == "megascale_fig9" for r in runs) == 6
    assert sum(r.dataset == "narayanan2021" for r in runs) == 10
    assert sum(r.dataset == "megatron_h100" for r in runs) == 11
    # Narayanan Table 1: Eq. (3) FLOPs (full recompute) / the aggregate rate
    first = by[("narayanan2021", "1.7B 32 GPUs")]
    assert first.iteration_time_s == pytest.approx(
        96 * 512 * 2048 * 24 * 2304 ** 2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
        / 4.4e15)
    assert first.layout.recompute == "full" and first.layout.micro_batch == 16
    assert by[("narayanan2021", "76.1B 1024 GPUs")].layout.virtual_stages == 3  # 15 / 5
    h100 = by[("megatron_h100", "177B 2304 GPUs")]
    assert (h100.layout.tp, h100.layout.pp, h100.layout.dp) == (8, 6, 48)
    assert h100.layout.sequence_parallel and h100.layout.distributed_optimizer
    assert h100.layout.virtual_stages == 16  # one layer per virtual stage: 96 / 6
    assert by[("megatron_h100", "16B 192 GPUs")].layout.virtual_stages == 1  # no PP
    assert by[("megascale_fig9", "530B b3840 4480 GPUs")].layout.micro_batches == 240
    assert sum(r.dataset == "korthikanti2022" for r in runs) == 10
    # Korthikanti 2022: the paper's v = 3 for 175B and 530B, 1T not interleaved; full
    # recompute without sequence parallelism, the paper's method selective with it; the
    # backward's 2 TP collectives hidden of the 4 (6 under full recompute)
    full, present = (by[("korthikanti2022", f"175B 64 GPUs, {m}")]
                     for m in ("full recompute", "present work"))
    assert full.layout.virtual_stages == present.layout.virtual_stages == 3
    assert (full.layout.recompute, full.layout.sequence_parallel) == ("full", False)
    assert (present.layout.recompute, present.layout.sequence_parallel) == ("selective", True)
    assert full.layout.tp_overlap == pytest.approx(1 / 3) and present.layout.tp_overlap == 0.5
    assert by[("korthikanti2022", "1T 512 GPUs, present work")].layout.virtual_stages == 1
    small = by[("korthikanti2022", "22B 8 GPUs, present work")].layout
    assert (small.micro_batch, small.micro_batches, small.dp) == (4, 1, 1)
    # the 2240-GPU full-recompute run is published as MFU only: its time is the one at which
    # the model FLOPs (no recompute) run at 42.1% of 312 TFLOP/s on 2240 GPUs
    mfu_only = by[("korthikanti2022", "530B 2240 GPUs, full recompute")]
    assert mfu_only.layout.dp == 8 and mfu_only.mfu_percent == 42.1
    assert mfu_only.iteration_time_s == pytest.approx(
        mfu_only.model.flops_per_token * 2240 * 2048 / (2240 * 312e12 * 0.421))


def test_korthikanti_methods_are_checked(paper):
    table = paper["korthikanti"].copy()
    table.loc[0, "method"] = "partial"
    with pytest.raises(ValueError, match="method 'partial' is not one of"):
        korthikanti_runs(table)


def test_each_system_is_fitted_on_its_declared_runs_only(runs, predictions):
    cal = predictions[predictions.calibration]
    assert {(r.system, r.dataset, r.label) for r in cal.itertuples()} == {
        (system, d, label) for system, rows in CALIBRATION.items() for d, label in rows}
    for system, g in cal.groupby("system"):
        if g.straggler.iloc[0] > 0:  # two numbers, two runs: both reproduced
            assert g.iteration_time_rel_error.abs().max() < 1e-6, system
        else:  # straggler 0: the least-squares efficiency sits between the two
            assert g.iteration_time_rel_error.min() < 0 < g.iteration_time_rel_error.max()
    declared = {(d, label) for rows in CALIBRATION.values() for d, label in rows}
    # a held-out run changed 3x leaves every fit as it was
    doctored = [r if (r.dataset, r.label) in declared or r.iteration_time_s is None
                else replace(r, iteration_time_s=3 * r.iteration_time_s) for r in runs]
    assert fit(doctored) == fit(runs)
    # a declared run changed moves its system's fit
    moved = [replace(r, iteration_time_s=1.1 * r.iteration_time_s)
             if (r.dataset, r.label) == ("megascale_table2", "175B b768 256 GPUs")
             and r.system == "Megatron-LM" else r for r in runs]
    assert fit(moved)["Megatron-LM"] != fit(runs)["Megatron-LM"]
    assert fit(moved)["MegaScale"] == fit(runs)["MegaScale"]


def test_prediction_errors(predictions):
    """Held-out errors as of writing (see the closing notes of issue 14 for the full table):
    MegaScale Table 2 iteration time mean |error| 3.3% (Megatron-LM) and 1.4% (MegaScale),
    max 5.3% and 3.0%; Figure 9 MFU within 1.2 and 1.6 points; Narayanan 2021 2.5% mean,
    signed +1.4% (3.0 and +2.2 before the cross-entropy term; 5.8% while its straggler was
    fitted from two different models); Megatron README H100 8.5% mean, signed +2.0% (12% before
    the DP NIC sharing and the interleaving of its PP runs; +6.1% signed before the
    cross-entropy term). Bounds with a margin guard against regressions.
    """
    s = summarize(predictions).set_index(["dataset", "system"])
    t2 = s.loc["megascale_table2"]
    assert (t2.time_mean_abs_pct < 4).all() and (t2.time_max_abs_pct < 8).all()
    assert (t2.time_mean_signed_pct.abs() < 2.5).all()
    assert (s.loc["megascale_fig9"].mfu_mean_abs_points < 3).all()
    narayanan = s.loc["narayanan2021"].iloc[0]
    assert narayanan.time_mean_abs_pct < 3 and abs(narayanan.time_mean_signed_pct) < 1.5
    h100 = s.loc["megatron_h100"].iloc[0]
    assert h100.time_mean_abs_pct < 9 and abs(h100.time_mean_signed_pct) < 3
    # Korthikanti 2022, blind (fourth round): 12.9% mean, every held-out row too slow
    # (+4.6% at 175B to +20% at 1T): the efficiency fitted on the one-node 22B runs does not
    # carry to the larger GEMMs. A bound, not a goal: it records where the model stands.
    korthikanti = s.loc["korthikanti2022"].iloc[0]
    assert korthikanti.time_mean_abs_pct < 14 and korthikanti.time_max_abs_pct < 22
    assert set(predictions.columns) >= {"compute_s", "bubble_s", "tp_exposed_s",
                                        "pp_exposed_s", "dp_exposed_s", "sync_s",
                                        "optimizer_s", "gemm_efficiency", "straggler"}
    parts = predictions[["compute_s", "bubble_s", "tp_exposed_s", "pp_exposed_s",
                         "dp_exposed_s", "sync_s", "optimizer_s"]].sum(axis=1)
    pd.testing.assert_series_equal(parts, predictions.predicted_iteration_time_s,
                                   check_names=False)


def test_what_if_cli(capsys):
    args = ["scale-model", "--layers", "96", "--hidden", "12288", "--heads", "96", "--gpus",
            "1024", "--tp", "8", "--pp", "8", "--vp", "2", "--global-batch", "1536",
            "--recompute", "selective", "--sequence-parallel", "--hardware", "H200",
            "--gemm-efficiency", "0.7", "--straggler", "0.01", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"]["dp"] == 16 and out["micro_batches"] == 96
    assert out["hardware"] == "H200" and out["gemm_efficiency"] == 0.7
    assert sum(out["breakdown_s"].values()) == pytest.approx(out["iteration_time_s"])
    assert 0 < out["mfu_percent"] < out["hfu_percent"] < 100
    assert main(args[:-1]) == 0
    assert "iteration time" in capsys.readouterr().out
    assert main(["scale-model", "--gpus", "1000", "--gemm-efficiency", "0.7",
                 "--straggler", "0"]) == 2
    assert "gpus=1000 is not a multiple of tp * pp = 64" in capsys.readouterr().err


def test_what_if_takes_the_systems_overlaps():
    """A system that hides only the backward's TP collectives hides 2 of 4 per layer, or 2 of
    6 under full recompute; the what-if tool and the published runs use the same rule."""
    from suite.scale_whatif import what_if

    shape = {"layers": 96, "hidden": 12288, "heads": 96, "seq_len": 2048, "vocab": 51200,
             "gpus": 64, "tp": 8, "pp": 8, "micro_batch": 1, "global_batch": 64,
             "hardware": "A100", "system": "Megatron-LM 2022 (Selene)",
             "gemm_efficiency": 0.6, "straggler": 0.0}
    full = what_if(**shape, recompute="full")
    selective = what_if(**shape, recompute="selective", sequence_parallel=True)
    assert full["layout"]["tp_overlap"] == pytest.approx(1 / 3)
    assert selective["layout"]["tp_overlap"] == 0.5
    assert what_if(**{**shape, "system": "Megatron-LM"})["layout"]["tp_overlap"] == 0.0
    assert full["iteration_time_s"] > selective["iteration_time_s"]
