"""The cluster-scale model (suite.scale): each term on hand-computed cases, the memory model, the
fit (declared rows only), the runs CSV and its errors, the search, the peer, and the validation
against published runs."""

import json
import re
from dataclasses import replace
from math import log

import pandas as pd
import pytest

from suite.cli import main
from suite.env import REPO_ROOT
from suite.mfu import TransformerShape, count_flops, megatron_flops_per_token
from suite.scale import peer
from suite.scale.datasets import (
    BLOOM_SYSTEM,
    CALIBRATION,
    GPT_175B,
    all_runs,
    bloom_search_rows,
    embedding_slot_layers,
    korthikanti_rows,
    load_paper,
)
from suite.scale.fit import Row, fit_efficiency, fit_system, fits_straggler, is_scaling_pair
from suite.scale.gemm import backward_gemms, gemm_time, k_efficiency, shape_efficiency, \
    tile_efficiency
from suite.scale.hardware import A100_80GB, H100_SXM, GiB, Hardware
from suite.scale.layout import Layout
from suite.scale.memory import RESERVE_BYTES, layer_activation_bytes, memory, stage_memory
from suite.scale.model import Gemm, ModelConfig
from suite.scale.runs import RunsError, read_runs, runs_from_frame
from suite.scale.search import end_stage_splits, layouts, search
from suite.scale.step import (
    ALL_TERMS,
    BREAKDOWN,
    NCCL_BASE_LATENCY,
    Terms,
    allreduce_latency,
    cross_node_rate,
    dp_bandwidth,
    dp_bytes_per_iteration,
    dp_ranks_per_node,
    estimate,
    forward_reruns,
    fsdp_bytes_per_microbatch,
    fsdp_copy_bytes,
    ring_factor,
    ring_latency,
    stage_params,
    stage_works,
    tied_embedding_sync,
    tree_latency,
    uneven_bubble_slots,
)
from suite.scale.systems import SYSTEMS
from suite.scale.validate import (
    fit,
    memory_summary,
    predict,
    summarize,
    unfitted_straggler,
    user_system,
    weak_calibration,
)
from suite.scale.whatif import search_as_text, search_report

SMALL = ModelConfig(layers=4, hidden=8, heads=2, seq_len=16, vocab=100)
HW = Hardware("test", peak_flops=1e12, nvlink_bw=1e9, network_bw=1e8, hbm_bw=1e12,
              hbm_bytes=80 * GiB, sms=4, gemm_efficiency=0.5, hbm_efficiency=1.0,
              nccl_channels_node=1, nccl_channels_network=1)  # a quarter of the SMs
BANDWIDTH_ONLY = Terms.none()
LLAMA3_8B = ModelConfig(layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
                        gated_mlp=True, vocab=128256, seq_len=8192, tied_embeddings=False,
                        position_embeddings=False, dropout=False, norm="rmsnorm")
GPT175 = ModelConfig(**GPT_175B)


def _layout(**kw) -> Layout:
    base = {"tp": 2, "pp": 2, "dp": 2, "micro_batch": 1, "global_batch": 8}
    return Layout(**{**base, **kw})


@pytest.fixture(scope="module")
def paper():
    return load_paper(REPO_ROOT / "results" / "paper")


@pytest.fixture(scope="module")
def runs(paper):
    return all_runs(paper)


@pytest.fixture(scope="module")
def predictions(runs):
    return predict(runs, CALIBRATION).merge(peer.predict(runs, CALIBRATION),
                                            on=["dataset", "system", "label"])


# --- GEMMs from their shape ---------------------------------------------------------------

def test_tile_and_wave_quantization_on_a_shape_that_wastes_a_wave():
    # 109 tiles of 128 x 256 on 108 SMs: the 109th runs alone in a second wave
    m, n = 128 * 109, 256
    assert tile_efficiency(m, n, (128, 256), 108) == pytest.approx(109 / 216)
    assert tile_efficiency(128 * 108, 256, (128, 256), 108) == 1.0  # exactly one wave
    # tile quantization: N = 300 needs two 256-wide tiles for 300 columns
    assert tile_efficiency(128, 300, (128, 256), 108) == pytest.approx(
        128 * 300 / (1 * 108 * 128 * 256))
    # a batch of 16 outputs of 2048 x 2048: 16 x 16 x 8 = 2048 tiles, 19 waves of 108
    assert tile_efficiency(2048, 2048, (128, 256), 108, batch=16) == pytest.approx(
        2048 / (19 * 108))
    # the library takes its least wasteful tile: 128 x 128 runs 218 tiles in 3 waves (0.67),
    # 256 x 128 gives 55 x 2 = 110 in 2 waves at 13952/14080 of the rows used
    assert tile_efficiency(m, n, (128, 128), 108) == pytest.approx(218 / 324)
    assert tile_efficiency(m, n, (256, 128), 108) == pytest.approx(
        m * n / (2 * 108 * 256 * 128))
    g = Gemm("g", m, n, 4096)
    best = max(tile_efficiency(m, n, t, 108) * k_efficiency(4096, t, A100_80GB)
               for t in A100_80GB.tiles)
    assert shape_efficiency(g, A100_80GB) == pytest.approx(best)
    assert best == pytest.approx(218 / 324 * k_efficiency(4096, (128, 128), A100_80GB))


def test_short_k_and_the_roofline():
    # A100: BK 64, 3 stages, 128 x 256 tile: K0 = 64 x (2 + 128*256/(384*64)) = 213.3
    k0 = 64 * (2 + 128 * 256 / (384 * 64))
    assert k_efficiency(640, (128, 256), A100_80GB) == pytest.approx(640 / (640 + k0))
    assert k_efficiency(640, (128, 256), A100_80GB) == pytest.approx(0.75)
    # the roofline: A, B and C once at the HBM rate kernels reach (88% of the datasheet), when
    # that is the slower (a GPU with 1 GB/s of HBM makes any GEMM memory-bound)
    g = Gemm("g", 2048, 4096, 1024)
    traffic = (2048 * 1024 + 1024 * 4096 + 2048 * 4096) * 2
    compute = g.flops / (A100_80GB.peak_flops * shape_efficiency(g, A100_80GB))
    assert gemm_time(g, A100_80GB) == pytest.approx(compute)
    assert gemm_time(g, replace(A100_80GB, hbm_bw=1e9)) == pytest.approx(traffic / 0.88e9)
    # the backward's two GEMMs: dX (M x K, depth N) and dW (K x N, depth M), same FLOPs
    dgrad, wgrad = backward_gemms(Gemm("x", 2048, 4608, 12288))
    assert (dgrad.m, dgrad.n, dgrad.k) == (2048, 12288, 4608)
    assert (wgrad.m, wgrad.n, wgrad.k) == (12288, 4608, 2048)
    assert dgrad.flops == wgrad.flops == Gemm("x", 2048, 4608, 12288).flops


def test_gqa_swiglu_flops_equal_a_direct_count():
    shape = TransformerShape(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                             ffn_hidden=14336, mlp="swiglu", vocab=128256, seq_len=8192)
    direct = count_flops(shape)
    assert LLAMA3_8B.flops_per_token == pytest.approx(direct.model_flops_per_token)
    assert LLAMA3_8B.hardware_flops_per_token("full") == pytest.approx(
        count_flops(shape, recompute="full").hardware_flops_per_token)
    # by hand per layer and token (forward): Q and O 2 x 2 h^2, K and V 2 x 2 h (kv d),
    # three MLP matrices 3 x 2 h ffn, scores and P V 2 x 2 s h
    h, kv, ffn, s = 4096, 8 * 128, 14336, 8192
    layer = 4 * h * h + 4 * h * kv + 6 * h * ffn + 4 * s * h
    assert LLAMA3_8B.flops_per_token == pytest.approx(3 * (32 * layer + 2 * h * 128256))
    # the GPT shape gives Megatron's closed forms, with recompute too
    assert GPT175.flops_per_token == pytest.approx(
        megatron_flops_per_token(96, 12288, 2048, 64000))
    assert GPT175.hardware_flops_per_token("full") == pytest.approx(
        megatron_flops_per_token(96, 12288, 2048, 64000, "full"))
    # GQA shrinks the QKV GEMM's N on each TP rank: (32 + 2 x 8) x 128 / 4
    qkv = LLAMA3_8B.layer_gemms(1, 4)[0]
    assert (qkv.m, qkv.n, qkv.k) == (8192, 48 * 128 // 4, 4096)


def test_parameter_counts_match_the_published_ones():
    # Llama 3 8B: 8,030,261,248 (untied head, RMSNorm, no biases)
    assert LLAMA3_8B.n_params == 8_030_261_248
    # MPT-7B at sequence 2048 (llm-foundry's NumParams column): learned positions, biases,
    # tied embeddings
    mpt = ModelConfig(layers=32, hidden=4096, heads=32, seq_len=2048, vocab=50368)
    assert mpt.n_params == 6_658_859_008
    assert replace(SMALL, tied_embeddings=False).n_params == SMALL.n_params + 100 * 8


# --- layouts ----------------------------------------------------------------------------------

def test_a_60_layer_model_on_8_stages():
    lay = Layout(tp=1, pp=8, dp=1, micro_batch=1, global_batch=8)
    assert lay.stage_layers(60) == [8, 8, 8, 8, 7, 7, 7, 7]  # DeepSpeed's uniform partition
    explicit = replace(lay, first_stage_layers=6, last_stage_layers=6)
    assert explicit.stage_layers(60) == [6, 8, 8, 8, 8, 8, 8, 6]
    assert replace(lay, last_stage_layers=4).stage_layers(60) == [8] * 7 + [4]
    with pytest.raises(ValueError, match="do not split evenly over 6 middle"):
        replace(lay, first_stage_layers=5, last_stage_layers=6).stage_layers(60)
    with pytest.raises(ValueError, match="virtual_stages=2 chunks"):
        replace(lay, virtual_stages=2).stage_layers(60)
    assert replace(lay, virtual_stages=2).stage_layers(64) == [8] * 8
    # 1F1B runs at the slowest stage's pace: the 8-layer stages (the last adds the logits)
    model = ModelConfig(layers=60, hidden=1024, heads=16, seq_len=1024, vocab=32000)
    terms = replace(BANDWIDTH_ONLY, stage_imbalance=True)
    works = stage_works(model, lay, A100_80GB, terms)
    assert works[0].gemm == pytest.approx(works[1].gemm)
    assert works[3].gemm / works[4].gemm == pytest.approx(8 / 7)
    assert works[7].gemm > works[4].gemm  # 7 layers and the output layer
    est = estimate(model, replace(A100_80GB, gemm_efficiency=0.5), lay, terms)
    slot = max(w.gemm / 0.5 + w.pp for w in works)  # the PP sends: bandwidth terms stay
    assert est.iteration_time_s == pytest.approx((8 + 7) * slot)  # m = 8, p - 1 = 7


def _one_f_one_b(forward: list[float], backward: list[float], m: int) -> float:
    """Makespan of Megatron's non-interleaved 1F1B schedule, simulated op by op: stage k runs
    p - 1 - k warm-up forwards, then one forward and one backward in turn; a forward waits for
    the stage before, a backward for the stage after (the last stage's for its own forward)."""
    p = len(forward)
    orders = []
    for k in range(p):
        warm = min(p - 1 - k, m)
        order = [("F", i) for i in range(warm)]
        for i in range(m):
            order += ([("F", warm + i)] if warm + i < m else []) + [("B", i)]
        orders.append(order)
    done, clock, nxt = {}, [0.0] * p, [0] * p
    while any(nxt[k] < len(orders[k]) for k in range(p)):
        for k in range(p):
            while nxt[k] < len(orders[k]):
                kind, i = orders[k][nxt[k]]
                dep = (0.0 if k == 0 else done.get(("F", k - 1, i))) if kind == "F" else \
                    done.get(("B", k + 1, i) if k < p - 1 else ("F", k, i))
                if dep is None:
                    break
                clock[k] = max(clock[k], dep) + (forward[k] if kind == "F" else backward[k])
                done[(kind, k, i)], nxt[k] = clock[k], nxt[k] + 1
    return max(clock)


def test_the_slowest_stage_paces_the_pipeline_as_a_simulated_1f1b_schedule_does():
    """``slots x slowest slot`` (the stage-imbalance term) against the schedule itself: even
    stages give (m + p - 1) slots exactly; a last stage 6% slower (a 1T model's 2 layers and its
    output layer) costs 5.3% simulated, the model charges 6%: it errs by the bubble's slots."""
    p, m = 16, 128
    even = _one_f_one_b([1.0] * p, [3.0] * p, m)
    assert even == pytest.approx((m + p - 1) * 4)
    slow = _one_f_one_b([1.0] * (p - 1) + [1.06], [3.0] * (p - 1) + [3.18], m)
    assert 1.05 < slow / even < 1.06
    assert slow == pytest.approx(m * 4 * 1.06 + (p - 1) * 4, rel=0.002)


def test_the_embeddings_sit_on_the_end_stages():
    """The first stage holds the word and position embeddings, the last the output layer (a tied
    model keeps its own copy of the word embedding there) and the final norm; one stage, all of
    it once; TP splits each."""
    lay = Layout(tp=2, pp=4, dp=1, micro_batch=1, global_batch=4)
    layer, word, pos, norm = SMALL.layer_params, 100 * 8, 16 * 8, 2 * 8
    assert stage_params(SMALL, lay) == [
        (layer + word + pos) / 2, layer / 2, layer / 2, (layer + word + norm) / 2]
    untied = replace(SMALL, tied_embeddings=False, position_embeddings=False)
    assert stage_params(untied, lay)[0] == (layer + word) / 2
    assert stage_params(untied, lay)[-1] == (layer + word + norm) / 2
    assert sum(stage_params(untied, lay)) * 2 == untied.n_params
    assert stage_params(SMALL, replace(lay, pp=1)) == [SMALL.n_params / 2]
    # the end stage with the most parameters sets the DP bytes of the iteration
    hw = replace(A100_80GB, gemm_efficiency=0.5)
    dp = replace(lay, tp=1, dp=2, global_batch=8)
    est = estimate(SMALL, hw, dp, replace(BANDWIDTH_ONLY, dp_nic_sharing=True))  # NVLink
    assert est.breakdown["dp_exposed_s"] == pytest.approx(
        dp_bytes_per_iteration(SMALL, dp, layer + word + pos) / hw.nvlink_bw)


def test_blooms_partition_gives_the_embeddings_a_layer_slot(runs, paper):
    """``type:transformer|embedding``: (layers + 2) / pp - 1 layers on each end stage; the
    search's transcribed columns agree, and the log's rows (which name the partition) use it."""
    assert embedding_slot_layers(70, 12) == 5 and embedding_slot_layers(100, 6) == 16
    with pytest.raises(ValueError, match="layers=71 \\+ 2 embedding slots do not split over "
                       "pp=12"):
        embedding_slot_layers(71, 12)
    search = paper["bloom_search"]
    assert [embedding_slot_layers(r.layers, r.pp) for r in search.itertuples()] == \
        search.first_stage_layers.tolist() == search.last_stage_layers.tolist()
    logged = [r for r in runs if r.dataset == "bloom176b"]
    assert logged and all(r.layout.stage_layers(70) == [5] + [6] * 10 + [5] for r in logged)


def test_recompute_and_attention_kernels():
    hw = replace(A100_80GB, gemm_efficiency=0.6)
    model = ModelConfig(layers=8, hidden=4096, heads=32, seq_len=4096, vocab=32000)
    base = Layout(tp=1, pp=1, dp=1, micro_batch=1, global_batch=1, attention="flash")
    time = {k: estimate(model, hw, replace(base, recompute=k)).iteration_time_s
            for k in ("none", "selective", "full")}
    assert time["none"] < time["selective"] < time["full"]
    half = estimate(model, hw, replace(base, recompute="full", recompute_fraction=0.5))
    assert time["none"] < half.iteration_time_s < time["full"]
    kinds = {k: estimate(model, hw, replace(base, attention=k)).iteration_time_s
             for k in ("flash", "flash2", "flash1", "fused_softmax", "unfused")}
    # on Ampere the best kernel is FlashAttention-2; FlashAttention-1's generation runs at half
    assert kinds["flash"] == kinds["flash2"] < kinds["flash1"] and \
        kinds["fused_softmax"] < kinds["unfused"]
    hopper = {k: stage_works(model, replace(base, attention=k), H100_SXM)[0].attention
              for k in ("flash", "flash2", "flash1")}
    assert hopper["flash"] < hopper["flash2"] and hopper["flash1"] == pytest.approx(
        2 * hopper["flash2"])
    with pytest.raises(ValueError, match="attention='unfused' is not a tiled kernel"):
        hw.flash_fractions("unfused")
    # flash: causal, so half the dense FLOPs, the backward 2.5x the forward, at the kernel's
    # fractions of peak at the sequence's length: f_inf (s/2) / (s/2 + K0), K0 in keys;
    # selective recompute re-runs the forward once
    s = model.seq_len
    fwd, bwd = (f * (s / 2) / (s / 2 + k0) for f, k0 in zip((hw.flash_fwd, hw.flash_bwd),
                                                           hw.flash_k0))
    assert hw.flash_fractions("flash", s) == pytest.approx((fwd, bwd))
    assert fwd < hw.flash_fwd and hw.flash_fractions("flash") == (hw.flash_fwd, hw.flash_bwd)
    works = stage_works(model, base, hw)[0]
    core = sum(g.flops for g in model.layer_gemms(1, 1) if g.name in ("scores", "context"))
    per_layer = (core / 2 / (hw.peak_flops * fwd) + 2.5 * core / 2 / (hw.peak_flops * bwd))
    assert works.attention == pytest.approx(8 * per_layer)
    sel = stage_works(model, replace(base, recompute="selective"), hw)[0]
    assert sel.attention == pytest.approx(works.attention + 8 * core / 2 / (
        hw.peak_flops * fwd))
    with pytest.raises(ValueError, match="recompute_fraction=0.5 needs recompute='full'"):
        replace(base, recompute_fraction=0.5)


@pytest.mark.parametrize("kv_heads,mlp", [(None, "gelu"), (2, "swiglu")])
def test_the_recomputed_forward_is_what_torchs_checkpoint_reruns(kv_heads, mlp):
    """The reference GPT block (pre-norm) under torch's non-reentrant checkpoint, as its full
    checkpointing runs it: the matmul FLOPs the backward re-runs are the model's recomputed
    GEMMs with ``recompute_early_stop`` (all but the MLP's output projection); under the
    reentrant checkpoint (Megatron's and DeepSpeed's kind), all of them."""
    import torch
    from torch.utils.checkpoint import checkpoint

    from reference_impl.configs import GPTConfig
    from reference_impl.gpt import Block
    from suite.scale.probe import matmul_flops

    b, s, h, heads = 2, 64, 64, 4
    cfg = GPTConfig(n_layer=1, n_embd=h, n_head=heads, n_kv_head=kv_heads, block_size=s,
                    mlp=mlp)
    torch.manual_seed(0)
    block = Block(cfg)

    def x():
        return torch.randn(b, s, h, requires_grad=True)

    class Reentrant(torch.nn.Module):
        def forward(self, inp):
            return checkpoint(block, inp, use_reentrant=True)

    plain = matmul_flops(block, x())
    non_reentrant = matmul_flops(Block(replace(cfg, checkpointing="full")), x())
    reentrant = matmul_flops(Reentrant(), x())
    model = ModelConfig(layers=1, hidden=h, heads=heads, kv_heads=cfg.kv_heads, seq_len=s,
                        vocab=100, ffn_hidden=cfg.ffn_hidden, gated_mlp=mlp == "swiglu")
    full = Layout(tp=1, pp=1, dp=1, micro_batch=b, global_batch=b, recompute="full")
    dense = [g for g in model.layer_gemms(b, 1) if g.name not in ("scores", "context")]

    def rerun(lay):
        return sum(g.flops * forward_reruns(g.name, lay) for g in dense)

    assert non_reentrant - plain == rerun(replace(full, recompute_early_stop=True)) > 0
    assert reentrant - plain == rerun(full) == sum(g.flops for g in dense)
    assert [g.name for g in dense if forward_reruns(
        g.name, replace(full, recompute_early_stop=True)) == 0] == ["mlp_down"]


def test_an_early_stopping_recompute_saves_the_mlp_output_and_its_residual():
    from suite.scale.step import layer_seconds

    hw = replace(A100_80GB, gemm_efficiency=0.6)
    model = ModelConfig(layers=4, hidden=4096, heads=32, seq_len=2048, vocab=32000,
                        dropout=False)
    full = Layout(tp=1, pp=1, dp=1, micro_batch=2, global_batch=2, recompute="full",
                  attention="flash")
    early = replace(full, recompute_early_stop=True)
    down = next(g for g in model.layer_gemms(2, 1) if g.name == "mlp_down")
    unit = 2 * 2048 * 4096 * 2 / hw.hbm_rate  # one h-sized bf16 activation of the micro-batch
    assert layer_seconds(model, full, hw) - layer_seconds(model, early, hw) == pytest.approx(
        gemm_time(down, hw) / hw.gemm_efficiency + 3 * unit)
    # it changes nothing without full recompute
    for kind in ("none", "selective"):
        lay = replace(full, recompute=kind)
        assert layer_seconds(model, lay, hw) == layer_seconds(
            model, replace(lay, recompute_early_stop=True), hw)


def test_train_metrics_on_the_logits_cost_an_eager_cross_entropy_each():
    """Composer's trainer updates two train metrics on every micro-batch's logits after its
    backward (a torch CrossEntropyLoss each, fp32 under autocast): per micro-batch, 14 bytes of
    HBM traffic per logit each on the last stage, and while one runs the logits, their fp32
    copy and the log-probabilities (10 bytes per logit) held beside the state."""
    from suite.scale.step import Terms, stage_works

    hw = replace(A100_80GB, gemm_efficiency=0.6)
    model = ModelConfig(layers=4, hidden=768, heads=12, seq_len=512, vocab=50368,
                        dropout=False)
    plain = Layout(tp=1, pp=2, dp=1, micro_batch=8, global_batch=32, attention="flash",
                   loss="fused")
    metrics = replace(plain, logit_metrics=2)
    logits = 8 * 512 * 50368
    first, last = stage_works(model, plain, hw), stage_works(model, metrics, hw)
    assert last[0] == first[0]  # the first stage holds no logits
    assert last[1].memory - first[1].memory == pytest.approx(2 * 14 * logits / hw.hbm_rate)
    off = replace(Terms(), loss=False)
    assert stage_works(model, metrics, hw, off) == stage_works(model, plain, hw, off)
    # the iteration pays it once per micro-batch on the slowest (the last) stage
    gap = (estimate(model, hw, metrics).iteration_time_s
           - estimate(model, hw, plain).iteration_time_s)
    assert gap == pytest.approx((4 + 1) * 2 * 14 * logits / hw.hbm_rate)  # m + p - 1 slots
    held = memory(model, metrics, hw)
    assert held.stage == 1 and held.transient == pytest.approx(10 * logits)
    assert memory(model, plain, hw).transient == 0
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match=f"logit_metrics={bad!r} must be an integer >= 0"):
            replace(plain, logit_metrics=bad)


def test_flash_attns_unpad_and_pad_copies_cost_their_bytes():
    """llm-foundry's MPT calls flash-attn 2 through bert_padding's unpad_input / pad_input: per
    token and layer, the forward gathers q, k, v (read + write each) and pads the output (fill,
    read, write), the backward scatters q's, k's and v's gradients (fill, read, write each) and
    gathers the output's (read, write); full recompute re-runs the forward's."""
    from suite.scale.step import layer_seconds, unpad_bytes_per_token

    mha = ModelConfig(layers=2, hidden=1024, heads=8, seq_len=512, vocab=1000, dropout=False)
    assert unpad_bytes_per_token(mha, 1) == (2 * 9 * 1024, 2 * 11 * 1024)
    gqa = ModelConfig(layers=2, hidden=4096, heads=32, kv_heads=8, seq_len=512, vocab=1000)
    q, kv = 4096, 2 * 8 * 128  # k and v: 8 heads of 128
    assert unpad_bytes_per_token(gqa, 2) == (2 * (2 * (q + kv) + 3 * q) / 2,
                                             2 * (3 * (q + kv) + 2 * q) / 2)
    hw = replace(A100_80GB, gemm_efficiency=0.6)
    lay = Layout(tp=1, pp=1, dp=1, micro_batch=4, global_batch=4, attention="flash2")
    tokens = 4 * 512
    for recompute, reruns in (("none", 0), ("full", 1)):
        plain = replace(lay, recompute=recompute)
        gap = layer_seconds(mha, replace(plain, attention_unpad=True), hw) \
            - layer_seconds(mha, plain, hw)
        assert gap == pytest.approx(tokens * 2 * 1024 * (9 * (1 + reruns) + 11) / hw.hbm_rate)
    with pytest.raises(ValueError, match="attention_unpad=True needs a tiled kernel"):
        replace(lay, attention="fused_softmax", attention_unpad=True)
    (run,) = runs_from_frame(pd.DataFrame([{**ROW, "attention": "flash2",
                                            "attention_unpad": "true"}]), "runs.csv")
    assert run.layout.attention_unpad
    assert not runs_from_frame(pd.DataFrame([ROW]), "runs.csv")[0].layout.attention_unpad


def test_hbm_bound_time_is_priced_at_the_rate_kernels_reach():
    """Every HBM-bound time (element-wise work, the loss, FSDP's copies, the optimizer, a thin
    GEMM's roofline) runs at hbm_efficiency of the datasheet bandwidth; nothing else moves."""
    model = replace(LLAMA3_8B, layers=4, seq_len=1024)
    lay = Layout(tp=2, pp=2, dp=4, micro_batch=1, global_batch=16, dp_mode="fsdp",
                 attention="flash", loss="eager", logit_metrics=1)
    full, half = replace(A100_80GB, hbm_efficiency=1.0), replace(A100_80GB, hbm_efficiency=0.5)
    assert A100_80GB.hbm_efficiency == 0.88 and A100_80GB.hbm_rate == pytest.approx(0.88 * 2.039e12)
    for a, b in zip(stage_works(model, lay, full), stage_works(model, lay, half)):
        assert b.memory == pytest.approx(2 * a.memory) and a.memory > 0
        assert (b.gemm, b.attention, b.tp, b.pp) == (a.gemm, a.attention, a.tp, a.pp)
    opt = [estimate(model, hw, lay).breakdown["optimizer_s"] for hw in (full, half)]
    assert opt[1] == pytest.approx(2 * opt[0]) and opt[0] > 0
    thin = Gemm("thin", 16, 4096, 4096)  # memory-bound at 100 GB/s
    slow = [replace(hw, hbm_bw=1e11) for hw in (full, half)]
    assert gemm_time(thin, slow[1]) == pytest.approx(2 * gemm_time(thin, slow[0]))
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match=f"hbm_efficiency={bad!r}"):
            replace(A100_80GB, hbm_efficiency=bad)


def test_sequence_parallel_shards_the_elementwise_traffic():
    lay = _layout(tp=2, pp=1, dp=1, micro_batch=1, global_batch=1, attention="flash")
    terms = replace(BANDWIDTH_ONLY, memory=True)
    # per token and layer, in h-sized 2-byte activations: norms + residuals 10, dropouts 4;
    # forward once, backward twice: 42; the GELU on 4h/tp: forward 8/2, backward 12/2: 10
    mem = stage_works(SMALL, lay, HW, terms)[0].memory
    assert mem == pytest.approx((42 + 10) * 16 * 8 * 2 * 4 / HW.hbm_bw)
    sp = stage_works(SMALL, replace(lay, sequence_parallel=True), HW, terms)[0].memory
    assert sp == pytest.approx((42 / 2 + 10) * 16 * 8 * 2 * 4 / HW.hbm_bw)
    # a gated MLP reads two and writes one forward (3 ffn), backward 5 ffn
    gated = replace(SMALL, gated_mlp=True, dropout=False)
    mem = stage_works(gated, lay, HW, terms)[0].memory
    assert mem == pytest.approx((30 + (3 * 4 + 5 * 4) / 2) * 16 * 8 * 2 * 4 / HW.hbm_bw)
    with pytest.raises(ValueError, match="sequence_parallel=True needs tp > 1"):
        replace(lay, tp=1, sequence_parallel=True)


def test_deepspeeds_bf16_optimizer_accumulates_its_fp32_gradients_each_micro_batch():
    """update_hp_grads after every micro-batch's backward: lp.grad.to(fp32) reads 2 bytes and
    writes 4, hp.add_ reads 4 + 4 and writes 4: 18 bytes per parameter of the stage."""
    lay = _layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8, attention="flash",
                  dp_mode="zero1")
    terms = replace(BANDWIDTH_ONLY, memory=True, stage_imbalance=True)  # each stage its own
    plain = stage_works(SMALL, lay, HW, terms)
    bf16 = stage_works(SMALL, replace(lay, dp_mode="zero1_allreduce"), HW, terms)
    params = stage_params(SMALL, lay)
    assert [b.memory - p.memory for b, p in zip(bf16, plain)] == pytest.approx(
        [18 * n / HW.hbm_bw for n in params])
    # the term is part of the memory term: off with it
    off = stage_works(SMALL, replace(lay, dp_mode="zero1_allreduce"), HW, BANDWIDTH_ONLY)
    assert [w.memory for w in off] == [0.0, 0.0]


def test_fsdp_casts_divides_and_copies_around_its_collectives_each_micro_batch():
    """Per parameter of the stage and micro-batch. FullyShardedDataParallel: bf16 gradients
    cast to fp32 (2 + 4) and pre-divided (4 + 4); on the 1/d shard, the fp32 master cast to bf16
    for each of the two all-gathers (2 x (4 + 2)), the post-divide (4 + 4) and, from the second
    micro-batch on, the accumulation (4 + 4 + 4). fully_shard adds the all-gathers' copy-out
    (2 x (2 + 2))."""
    lay = _layout(tp=2, pp=2, dp=2, micro_batch=1, global_batch=8, attention="flash",
                  dp_mode="zero2")  # m = 4 micro-batches
    terms = replace(BANDWIDTH_ONLY, memory=True, stage_imbalance=True)  # each stage its own
    plain = stage_works(SMALL, lay, HW, terms)
    params = stage_params(SMALL, lay)

    def added(**kw) -> list[float]:
        works = stage_works(SMALL, replace(lay, **kw), HW, terms)
        return [w.memory - p.memory for w, p in zip(works, plain)]

    fsdp = 6 + 8 + (12 + 8 + 12 * 3 / 4) / 2
    assert fsdp_copy_bytes(SMALL, replace(lay, dp_mode="fsdp")) == fsdp == 28.5
    assert added(dp_mode="fsdp") == pytest.approx([fsdp * n / HW.hbm_bw for n in params])
    assert added(dp_mode="fsdp2") == pytest.approx([(fsdp + 8) * n / HW.hbm_bw for n in params])
    # SHARD_GRAD_OP gathers once: one cast of the shard
    assert added(dp_mode="fsdp_grad_op") == pytest.approx(
        [(fsdp - 6 / 2) * n / HW.hbm_bw for n in params])
    # reduced in bf16 (Composer's PURE): no cast, the divides and the accumulation at 2 bytes;
    # fully_shard still copies the gradients in
    assert added(dp_mode="fsdp", grad_bytes=2) == pytest.approx(
        [(4 + (12 + 4 + 6 * 3 / 4) / 2) * n / HW.hbm_bw for n in params])
    assert fsdp_copy_bytes(SMALL, replace(lay, dp_mode="fsdp2", grad_bytes=2)) == \
        4 + 4 + 8 + (12 + 4 + 6 * 3 / 4) / 2
    # one micro-batch an iteration accumulates nothing
    assert fsdp_copy_bytes(SMALL, replace(lay, dp_mode="fsdp", global_batch=2)) == 14 + 20 / 2
    # part of the memory term: off with it
    off = stage_works(SMALL, replace(lay, dp_mode="fsdp"), HW, BANDWIDTH_ONLY)
    assert [w.memory for w in off] == [0.0, 0.0]


def test_the_tied_embedding_gradients_cross_the_pipeline_once_per_iteration():
    # BLOOM-176B's layout: 250880 x 14336 / TP 4 fp32 gradients, 2 ranks (each sends them once)
    # over Jean Zay's 6.25 GB/s per GPU
    bloom = ModelConfig(layers=70, hidden=14336, heads=112, seq_len=2048, vocab=250880)
    hw = replace(A100_80GB, network_bw=6.25e9)
    lay = Layout(tp=4, pp=12, dp=8, micro_batch=2, global_batch=2048, grad_bytes=4)
    assert tied_embedding_sync(bloom, lay, hw, latency=False) == pytest.approx(
        250880 * 14336 / 4 * 4 / 6.25e9)  # 0.58 s
    assert tied_embedding_sync(bloom, lay, hw) > tied_embedding_sync(bloom, lay, hw, False)
    assert tied_embedding_sync(bloom, replace(lay, pp=1), hw) == 0.0  # one stage holds both
    untied = replace(bloom, tied_embeddings=False)
    assert tied_embedding_sync(untied, lay, hw) == 0.0
    # a replica inside one node: NVLink
    small = Layout(tp=2, pp=4, dp=1, micro_batch=1, global_batch=8)
    assert tied_embedding_sync(bloom, small, hw, False) == pytest.approx(
        250880 * 14336 / 2 * 4 / hw.nvlink_bw)
    # it is in the iteration, counted with PP's communication
    on, off = (estimate(bloom, replace(hw, gemm_efficiency=0.6), lay, replace(ALL_TERMS, **kw))
               for kw in ({}, {"tied_embedding": False}))
    assert on.iteration_time_s - off.iteration_time_s == pytest.approx(
        tied_embedding_sync(bloom, lay, hw))
    assert on.breakdown["pp_exposed_s"] - off.breakdown["pp_exposed_s"] == pytest.approx(
        tied_embedding_sync(bloom, lay, hw))


def test_fsdp_bytes_per_step():
    """ZeRO-3: per micro-batch the parameters are gathered for the forward and again for the
    backward (2 bytes) and the gradients reduce-scattered (grad_bytes), (d-1)/d of each."""
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=32, dp_mode="fsdp")
    [local] = stage_params(SMALL, lay)
    assert local == SMALL.n_params
    assert fsdp_bytes_per_microbatch(SMALL, lay, local) == pytest.approx(7 / 8 * local * 8)
    assert fsdp_bytes_per_microbatch(SMALL, replace(lay, grad_bytes=2), local) == \
        pytest.approx(7 / 8 * local * 6)
    # SHARD_GRAD_OP keeps the parameters gathered through the backward: one all-gather
    assert fsdp_bytes_per_microbatch(SMALL, replace(lay, dp_mode="fsdp_grad_op"), local) == \
        pytest.approx(7 / 8 * local * 6)
    # unhidden (no prefetch): m = 4 micro-batches each wait for their traffic over NVLink (the
    # 8 ranks share a node)
    terms = replace(BANDWIDTH_ONLY, dp_nic_sharing=True)
    est = estimate(SMALL, HW, lay, terms)
    assert est.breakdown["fsdp_exposed_s"] == pytest.approx(
        4 * 7 / 8 * local * 8 / HW.nvlink_bw)
    # prefetch hides each layer's traffic under the previous layer's compute; the first
    # layer's shows: max(traffic - compute, traffic / layers)
    hidden = estimate(SMALL, HW, replace(lay, dp_overlap=1.0), terms)
    traffic = 7 / 8 * local * 8 / HW.nvlink_bw
    assert hidden.breakdown["fsdp_exposed_s"] == pytest.approx(4 * max(
        traffic - est.breakdown["gemm_s"] / 4, traffic / 4))
    # with NCCL's latency: each of the 4 layers' two all-gathers and reduce-scatter is a ring
    # of 8 ranks on one node, one pass each
    latency = 4 * 3 * ring_latency(8, 1, HW, passes=1)
    assert estimate(SMALL, HW, lay, replace(terms, latency=True)).breakdown[
        "fsdp_exposed_s"] == pytest.approx(4 * (traffic + latency))
    # zero1 / zero2: once per iteration, reduce-scatter at grad_bytes + all-gather at 2 bytes
    z1 = replace(lay, dp_mode="zero1")
    assert dp_bytes_per_iteration(SMALL, z1, local) == pytest.approx(7 / 8 * local * 6)
    assert dp_bytes_per_iteration(SMALL, replace(z1, dp_mode="allreduce"), local) == \
        pytest.approx(ring_factor(8) * local * 4)
    # DeepSpeed's BF16 optimizer under PP: the fp32 gradients all-reduced (2 x 7/8 x 4), then
    # the 2-byte parameters all-gathered (7/8 x 2): 8.75 bytes a parameter against zero1's 5.25
    assert dp_bytes_per_iteration(SMALL, replace(z1, dp_mode="zero1_allreduce"), local) == \
        pytest.approx(8.75 * local)
    assert dp_bytes_per_iteration(SMALL, lay, local) == 0


# --- communication --------------------------------------------------------------------------

def test_ring_and_tree_latency_with_nodes():
    hw = A100_80GB
    assert (ring_factor(1), ring_factor(2), ring_factor(8)) == (0, 1, 1.75)
    assert ring_latency(16, 16, hw) == pytest.approx(NCCL_BASE_LATENCY + 30 * 9.6e-6)
    assert tree_latency(16, 16, hw) == pytest.approx(NCCL_BASE_LATENCY + 8 * 9.6e-6)
    assert allreduce_latency(16, 16, hw) == tree_latency(16, 16, hw)
    assert ring_latency(8, 1, hw) == pytest.approx(NCCL_BASE_LATENCY + 14 * 3.4e-6)
    assert ring_latency(1, 1, hw) == tree_latency(1, 1, hw) == 0
    # an all-gather or a reduce-scatter is one pass around the ring: half the steps
    assert ring_latency(16, 2, hw, passes=1) == pytest.approx(
        NCCL_BASE_LATENCY + 1 * 9.6e-6 + 14 * 3.4e-6)


def test_dp_ranks_of_a_node_share_its_nics():
    hw = A100_80GB  # 8 GPUs, NIC 25 GB/s, NVLink 300 GB/s
    lay = Layout(tp=1, pp=1, dp=48, micro_batch=1, global_batch=48)
    assert dp_ranks_per_node(lay, hw) == 8 and dp_bandwidth(lay, hw, 8) == 8 * 25e9
    assert dp_ranks_per_node(replace(lay, tp=8, dp=6, global_batch=6), hw) == 1
    assert dp_bandwidth(lay, hw, 1) == 25e9
    inside = replace(lay, dp=4, global_batch=4)
    assert dp_bandwidth(inside, hw, dp_ranks_per_node(inside, hw)) == 300e9


def test_a_measured_busbw_caps_what_crosses_nodes():
    # Jean Zay: 4 x 100 Gb/s Omni-Path per 8 GPUs (6.25 GB/s each), NCCL measured at 5.07 GB/s
    hw = replace(A100_80GB, network_bw=6.25e9, network_busbw=5.07e9)
    assert cross_node_rate(hw) == 5.07e9  # one rank per node: 6.25 capped
    assert cross_node_rate(hw, 2) == 5.07e9  # two ranks share 12.5 GB/s of NICs: capped
    assert cross_node_rate(replace(hw, network_busbw=None), 2) == 12.5e9
    # a cap above the NICs' sum does not bind (8 x 6.25), nor above NVLink (16 x 25 > 300)
    assert cross_node_rate(replace(hw, network_busbw=400e9), 8) == 50e9
    assert cross_node_rate(replace(A100_80GB, network_busbw=400e9), 16) == 300e9
    lay = Layout(tp=4, pp=12, dp=8, micro_batch=2, global_batch=2048, grad_bytes=4)
    assert dp_bandwidth(lay, hw, 2) == 5.07e9
    assert dp_bandwidth(replace(lay, dp=2, global_batch=512), hw, 2) == hw.nvlink_bw
    bloom = ModelConfig(layers=70, hidden=14336, heads=112, seq_len=2048, vocab=250880)
    assert tied_embedding_sync(bloom, lay, hw, latency=False) == pytest.approx(
        250880 * 14336 / 4 * 4 / 5.07e9)
    # PP's activations go at the capped rate: the exposed PP part scales by 6.25 / 5.07
    terms = replace(ALL_TERMS, latency=False)
    capped, nic = (stage_works(bloom, lay, h, terms)[0].pp
                   for h in (hw, replace(hw, network_busbw=None)))
    assert capped == pytest.approx(nic * 6.25 / 5.07)
    with pytest.raises(ValueError, match="network_busbw=0"):
        replace(hw, network_busbw=0)


def test_the_uneven_bubble():
    # m = 6 on p = 4, v = 2: the last group of r = 2 leaves p - r = 2 chunk-steps at each of
    # v - 1 = 1 chunk change, forward and backward: (v-1)(p-r)/v = 1 slot
    assert uneven_bubble_slots(4, 2, 6) == 1.0
    assert uneven_bubble_slots(4, 2, 8) == 0 and uneven_bubble_slots(4, 1, 6) == 0


def test_estimate_by_hand_and_the_parts_sum_up():
    lay = _layout(tp=1, pp=1, dp=1, micro_batch=1, global_batch=4, attention="flash")
    est = estimate(SMALL, HW, lay, BANDWIDTH_ONLY)
    # bandwidth terms only: every GEMM at peak x 0.5, flash at its fractions, 4 micro-batches
    gemms = sum(g.flops for g in SMALL.layer_gemms(1, 1) if g.name not in ("scores",
                                                                          "context"))
    core = sum(g.flops for g in SMALL.layer_gemms(1, 1) if g.name in ("scores", "context"))
    fwd, bwd = HW.flash_fractions("flash", SMALL.seq_len)
    slot = (4 * 3 * gemms + 3 * SMALL.logits_gemm(1, 1).flops) / (1e12 * 0.5) \
        + 4 * (core / 2 / (1e12 * fwd) + 2.5 * core / 2 / (1e12 * bwd))
    assert est.iteration_time_s == pytest.approx(4 * slot)
    assert est.tokens_per_s == pytest.approx(4 * 16 / est.iteration_time_s)
    assert est.mfu == pytest.approx(est.tokens_per_s * SMALL.flops_per_token / 1e12)
    hw = replace(A100_80GB, gemm_efficiency=0.7, straggler=0.03)
    big = Layout(tp=8, pp=8, dp=48, micro_batch=1, global_batch=6144, virtual_stages=6)
    full = estimate(GPT175, hw, big)
    assert sum(full.breakdown.values()) == pytest.approx(full.iteration_time_s)
    for term in ("latency", "straggler", "memory", "loss", "optimizer", "gemm_shape",
                 "tied_embedding"):
        off = estimate(GPT175, hw, big, replace(Terms(), **{term: False}))
        assert off.iteration_time_s < full.iteration_time_s, term
    once = full.breakdown["dp_exposed_s"] + full.breakdown["optimizer_s"] + \
        tied_embedding_sync(GPT175, big, hw)  # per iteration, not stretched by the straggler
    assert full.breakdown["sync_s"] == pytest.approx(
        (full.iteration_time_s - full.breakdown["sync_s"] - once) * 0.03 * log(384))


def test_the_dp_window_bounds_what_overlap_hides():
    hw = replace(A100_80GB, gemm_efficiency=0.7, network_bw=2e9)
    lay = Layout(tp=8, pp=8, dp=64, micro_batch=1, global_batch=128, virtual_stages=2,
                 dp_overlap=0.5)  # m = 2 < p
    on = estimate(GPT175, hw, lay)
    off = estimate(GPT175, hw, lay, replace(Terms(), dp_window=False))
    assert off.breakdown["dp_exposed_s"] < on.breakdown["dp_exposed_s"]
    roomy, fast = replace(lay, global_batch=64 * 64), replace(hw, network_bw=25e9)
    assert estimate(GPT175, fast, roomy).breakdown["dp_exposed_s"] == pytest.approx(
        estimate(GPT175, fast, roomy, replace(Terms(), dp_window=False))
        .breakdown["dp_exposed_s"])


def test_nccl_channels_hold_their_share_of_the_sms():
    """NCCL 2.18's ring search: 24 channels inside a DGX node, 16 across nodes with a NIC per
    GPU; one CTA (one SM) each, at most every SM."""
    assert A100_80GB.collective_sm_share(1) == pytest.approx(24 / 108)
    assert A100_80GB.collective_sm_share(4) == pytest.approx(16 / 108)
    assert H100_SXM.collective_sm_share(2) == pytest.approx(16 / 132)
    assert replace(H100_SXM, sms=20).collective_sm_share(1) == 1.0  # no SM left beside it
    with pytest.raises(ValueError, match="nccl_channels_node"):
        replace(H100_SXM, nccl_channels_node=0)
    with pytest.raises(ValueError, match="nodes"):
        A100_80GB.collective_sm_share(0)


def test_hidden_fsdp_traffic_costs_the_compute_its_sms():
    """What FSDP's prefetch hides still runs beside the compute on the channels' SMs: hidden
    time (traffic less what shows) x the share, per micro-batch; nothing without overlap."""
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=32, dp_mode="fsdp",
                 dp_overlap=1.0)
    [local] = stage_params(SMALL, lay)
    terms = replace(BANDWIDTH_ONLY, dp_nic_sharing=True, interference=True)
    on, off = (estimate(SMALL, HW, lay, t) for t in (terms, replace(terms, interference=False)))
    traffic = 7 / 8 * local * 8 / HW.nvlink_bw
    shown = on.breakdown["fsdp_exposed_s"] / 4
    assert shown == pytest.approx(max(traffic - off.breakdown["gemm_s"] / 4, traffic / 4))
    assert on.breakdown["interference_s"] == pytest.approx(4 * (traffic - shown) * 1 / 4)
    assert on.iteration_time_s == pytest.approx(off.iteration_time_s
                                                + on.breakdown["interference_s"])
    exposed = estimate(SMALL, HW, replace(lay, dp_overlap=0.0), terms)
    assert exposed.breakdown["interference_s"] == 0


def test_hidden_dp_traffic_costs_the_compute_its_sms():
    """The DP reduction that fits the window runs beside the compute: hidden x share x the
    compute's part of the slot it hides under; what spills out of the window pays nothing."""
    def slot_parts(hw, lay):
        slowest = max(stage_works(GPT175, lay, hw), key=lambda w: (
            w.gemm / hw.gemm_efficiency + w.attention + w.memory + w.tp + w.pp + w.fsdp))
        compute = slowest.gemm / hw.gemm_efficiency + slowest.attention + slowest.memory
        return compute, compute + slowest.tp + slowest.pp + slowest.fsdp

    share = 16 / 108  # 64 replicas of TP 8: one per node, a ring across nodes
    lay = Layout(tp=8, pp=8, dp=64, micro_batch=1, global_batch=64 * 64, virtual_stages=2,
                 dp_overlap=0.5)
    hw = replace(A100_80GB, gemm_efficiency=0.7)
    unbounded = estimate(GPT175, hw, lay, replace(Terms(), dp_window=False))
    dp = 2 * unbounded.breakdown["dp_exposed_s"]  # half of it is never overlapped
    compute, slot = slot_parts(hw, lay)
    assert unbounded.breakdown["interference_s"] == pytest.approx(
        dp / 2 * share * compute / slot)
    # m = 2 micro-batches on 8 stages: the window is one slot and the other chunk of the group
    tight = replace(lay, global_batch=128)
    slow = replace(hw, network_bw=2e9)
    on = estimate(GPT175, slow, tight)
    off = estimate(GPT175, slow, tight, replace(Terms(), interference=False))
    compute, slot = slot_parts(slow, tight)
    assert on.breakdown["interference_s"] == pytest.approx(
        slot * (1 + 2 * (2 - 1) / 2) * share * compute / slot)
    assert on.breakdown["dp_exposed_s"] == pytest.approx(off.breakdown["dp_exposed_s"])
    assert on.iteration_time_s - off.iteration_time_s == pytest.approx(
        on.breakdown["interference_s"])


def test_interference_grows_as_fsdp_rings_lengthen():
    """Weak scaling across nodes: each ring pays NCCL's latency per rank, so the hidden
    collectives run longer and hold their SMs longer; the signature of llm-foundry's
    large-scale rows, which lose throughput from 128 to 512 GPUs."""
    hw = replace(H100_SXM, gemm_efficiency=0.6)
    model = ModelConfig(layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50368)
    costs = [estimate(model, hw, Layout(tp=1, pp=1, dp=gpus, micro_batch=12,
                                        global_batch=12 * gpus, dp_mode="fsdp_grad_op",
                                        dp_overlap=1.0)).breakdown["interference_s"]
             for gpus in (16, 128, 512)]
    assert 0 < costs[0] < costs[1] < costs[2]


# --- memory ---------------------------------------------------------------------------------

def test_activation_memory_is_korthikantis_on_their_case():
    """MHA, GELU of 4h, dropout: s b h (10 + 24/t + 5 a s/(h t)) bytes per layer (Eq. 2);
    sequence parallelism divides the 10 by t too; selective recompute drops the scores."""
    model = ModelConfig(layers=48, hidden=6144, heads=64, seq_len=2048, vocab=51200)
    s, b, h, a, t = 2048, 4, 6144, 64, 8
    lay = Layout(tp=t, pp=1, dp=1, micro_batch=b, global_batch=b, attention="fused_softmax")
    stored, full = layer_activation_bytes(model, lay)
    assert full == stored == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    sp, _ = layer_activation_bytes(model, replace(lay, sequence_parallel=True))
    assert sp == pytest.approx(s * b * h * (34 / t + 5 * a * s / (h * t)))
    sel, _ = layer_activation_bytes(model, replace(lay, recompute="selective",
                                                   sequence_parallel=True))
    assert sel == pytest.approx(s * b * h * 34 / t)


@pytest.mark.parametrize("kv_heads", [None, 2])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_the_activation_term_is_what_autograd_keeps(kv_heads, recompute):
    """The reference GPT block on its fused path (SDPA's flash kernel, fused LayerNorm and
    bias-GELU, no dropout) in bf16, MHA and GQA: the bytes autograd saves for its backward are
    the memory model's stored activations (full recompute: the block's input alone) within
    0.5%; what it leaves out is fp32 per-row statistics (the norms' mean and rstd)."""
    import torch

    from reference_impl.configs import GPTConfig
    from reference_impl.gpt import Block
    from suite.scale.probe import saved_activation_bytes

    b, s, h, heads = 2, 256, 256, 4
    cfg = GPTConfig(n_layer=1, n_embd=h, n_head=heads, n_kv_head=kv_heads, block_size=s,
                    checkpointing=recompute)
    torch.manual_seed(0)
    block = Block(cfg).to(torch.bfloat16)
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    kept = saved_activation_bytes(block, x)
    model = ModelConfig(layers=1, hidden=h, heads=heads, kv_heads=kv_heads or heads, seq_len=s,
                        vocab=100, dropout=False)
    lay = Layout(tp=1, pp=1, dp=1, micro_batch=b, global_batch=b, attention="flash2",
                 recompute=recompute)
    stored, _ = layer_activation_bytes(model, lay)
    expected = b * s * 2 * h if recompute == "full" else stored
    assert kept == pytest.approx(expected, rel=0.005)


def test_memory_by_hand():
    """A small model, one GPU: 2-byte weights, 4-byte gradients, 12 bytes of Adam, the
    activations of one micro-batch and the logits' 6 bytes (Megatron's loss)."""
    model = ModelConfig(layers=2, hidden=1024, heads=8, seq_len=1024, vocab=1000)
    lay = Layout(tp=1, pp=1, dp=1, micro_batch=2, global_batch=4, attention="flash")
    mem = memory(model, lay, A100_80GB)
    n = model.n_params
    assert (mem.weights, mem.gradients, mem.optimizer) == (2 * n, 4 * n, 12 * n)
    per_token = 10 * 1024 + (2 * 8 * 128 * 2 + 2 * 8 * 128 + 2 * 1024 + 2 * 4096 + 2 * 4096)
    assert mem.activations == pytest.approx(
        2 * 1024 * (per_token + 4 * 8) * 2 + 6 * 2 * 1024 * 1000)
    assert mem.capacity == 80 * GiB - RESERVE_BYTES and mem.fits
    # zero1 shards the 12 over DP; fsdp keeps fp32 shards of weights, gradients and both
    # moments (16 bytes / d) plus two gathered layers (weights and gradients, 2 bytes)
    z1 = memory(model, replace(lay, dp=4, global_batch=8, dp_mode="zero1"), A100_80GB)
    assert z1.optimizer == 12 * n / 4 and z1.gradients == 4 * n
    # DeepSpeed's BF16 optimizer: zero1's state, and the bf16 gradients kept beside the fp32
    bf16 = memory(model, replace(lay, dp=4, global_batch=8, dp_mode="zero1_allreduce"),
                  A100_80GB)
    assert bf16 == replace(z1, gradients=(4 + 2) * n)
    # ... which all-reduces them through a copy in the wire's dtype, once the activations are
    # gone: 2 bytes per parameter with a bf16 wire, beside the state, not the activations
    wire = memory(model, replace(lay, dp=4, global_batch=8, dp_mode="zero1_allreduce",
                                 grad_bytes=2), A100_80GB)
    assert wire == replace(bf16, transient=2 * n)
    state = wire.weights + wire.gradients + wire.optimizer
    assert wire.total == state + wire.activations  # 155 MB of activations, a 55 MB copy
    assert replace(wire, activations=1.0).total == state + 2 * n
    fsdp = memory(model, replace(lay, dp=4, global_batch=8, dp_mode="fsdp"), A100_80GB)
    unit = 2 * model.layer_params
    assert fsdp.weights + fsdp.gradients + fsdp.optimizer == pytest.approx(
        16 * n / 4 + 4 * unit)
    # SHARD_GRAD_OP holds every layer's gathered 2-byte parameters at the backward's start
    grad_op = memory(model, replace(lay, dp=4, global_batch=8, dp_mode="fsdp_grad_op"),
                     A100_80GB)
    assert grad_op.weights == pytest.approx(4 * n / 4 + 2 * n)
    assert (grad_op.gradients, grad_op.optimizer) == (fsdp.gradients, fsdp.optimizer)
    # a 70B model on 8 GPUs with DDP does not fit; the search marks, not ranks, it
    big = ModelConfig(layers=80, hidden=8192, heads=64, seq_len=4096, vocab=32000)
    assert not memory(big, Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8),
                      A100_80GB).fits


def test_pipeline_stages_hold_what_1f1b_keeps_in_flight_and_recompute_recreates():
    """Stage i of 1F1B holds min(m, p - i) micro-batches (2 micro-batches on 4 stages: 2, 2,
    2, 1, not the first stage's 2 scaled down by (p - i)/p); the layer whose backward runs
    re-creates what recompute dropped: all of its activations (full), its scores
    (selective)."""
    model = ModelConfig(layers=8, hidden=1024, heads=8, seq_len=1024, vocab=1000)
    lay = Layout(tp=1, pp=4, dp=1, micro_batch=1, global_batch=2, attention="fused_softmax")
    stored, full = layer_activation_bytes(model, lay)
    logits = 6 * 1024 * 1000  # the last stage's loss, Megatron's 6 bytes a logit
    acts = [m.activations for m in stage_memory(model, lay, A100_80GB)]
    assert acts == pytest.approx([2 * 2 * full, 2 * 2 * full, 2 * 2 * full,
                                  2 * 1 * full + logits])
    selective = replace(lay, recompute="selective")
    kept, _ = layer_activation_bytes(model, selective)
    assert kept < full
    acts = [m.activations for m in stage_memory(model, selective, A100_80GB)]
    assert acts[0] == pytest.approx(2 * 2 * kept + (full - kept))
    layer_input = 1024 * 2 * 1024
    acts = [m.activations for m in stage_memory(model, replace(lay, recompute="full"),
                                                A100_80GB)]
    assert acts[1] == pytest.approx(2 * 2 * layer_input + full)


def test_every_published_run_fits_and_torchtitans_peak_memory(runs, paper):
    """The runs ran, so the memory model must let each of them fit; torchtitan publishes the
    peak memory of its 8B runs on 96 GB H100s: the model within 10% of it. Korthikanti's Table 4
    timed one layer, not the model; of its methods the whole 22B does not fit without recompute
    (Sec. 6.1: "without the memory savings provided by sequence parallelism and selective
    recompute together, none of these models will fit"), and it ran (Table 5) with full
    recompute and with both. Selective recompute alone, which the paper also says does not fit,
    the model puts at 75.8 of 78 GiB: the memory model's known undercount (BLOOM's stage 0 at
    74-82% of what nvidia-smi showed), so it is not asserted."""
    models = [r for r in runs if r.layer_time_s is None and r.outcome == "ok"]
    assert [r.id for r in models if not memory(r.model, r.layout, r.hardware).fits] == []
    layers = {r.id: memory(r.model, r.layout, r.hardware).fits for r in runs
              if r.dataset == "korthikanti2022_layers"}
    del layers["22B layer, selective recompute"]
    assert layers == {"22B layer, no recompute": False, "22B layer, sequence parallel": False,
                      "22B layer, full recompute": True, "22B layer, present work": True}
    titan = paper["torchtitan"]
    rows = titan[(titan.precision == "bf16") & titan.memory_gib.notna()
                 & (titan.torch_compile == "false")]
    assert len(rows) == 2
    for r in rows.itertuples():
        lay = Layout(tp=1, pp=1, dp=int(r.dp), micro_batch=int(r.micro_batch),
                     global_batch=int(r.micro_batch) * int(r.dp), attention="flash",
                     dp_mode="fsdp", loss="eager", recompute="full", recompute_fraction=0.5)
        mem = memory(LLAMA3_8B, lay, replace(A100_80GB, hbm_bytes=96 * GiB))
        assert mem.total / GiB == pytest.approx(float(r.memory_gib), rel=0.10)


def _bloom_search_memory(paper) -> list[tuple[str, float, int, bool]]:
    """(outcome, nvidia-smi GiB, the model's fullest stage, whether the layout fits) of each
    layout of BLOOM's search, as its adapter gives them."""
    runs = runs_from_frame(bloom_search_rows(paper["bloom_search"]), "bloom")
    fullest = [memory(r.model, r.layout, r.hardware) for r in runs]
    return [(r.outcome, r.memory_gib, m.stage, m.fits) for r, m in zip(runs, fullest)]


def test_blooms_nvidia_smi_bounds_the_memory_model(paper, predictions):
    """nvidia-smi on BLOOM's first node, which holds stage 0 (DeepSpeed's rank order: TP, then
    DP, then PP), also shows the allocator's cache, the CUDA context and NCCL's buffers, so the
    model must stay under it: it counts 69-76% of it. Stage 0 is the model's fullest stage in
    every layout that ran, so the fullest GPU's peak that the table compares is the one read."""
    layouts = _bloom_search_memory(paper)
    assert len(layouts) == 20
    assert {stage for outcome, _, stage, _ in layouts if outcome == "ok"} == {0}
    search = predictions[predictions.dataset == "bloom176b_search"]
    ran = search[search.outcome == "ok"]
    ratio = ran.predicted_memory_gib / ran.paper_memory_gib
    assert len(ratio) == 17 and ratio.between(0.65, 0.8).all(), ratio
    summary = summarize(predictions).set_index("dataset").loc["bloom176b_search"]
    mem = memory_summary(predictions).set_index("dataset").loc["bloom176b_search"]
    assert (summary.runs, mem.memory_runs, mem.oom_runs, mem.oom_marked,
            mem.ran_marked_oom) == (17, 17, 3, 2, 0)
    assert mem.memory_ratio_min == pytest.approx(ratio.min())


def test_the_memory_model_marks_blooms_out_of_memory_tp4_pp6_layouts(paper):
    """184B on TP 4 x PP 6 holds 8.0 B parameters per GPU: 70 GB of state, and the bf16 copy
    its gradient all-reduce makes (16 GB) takes it past 80 GiB whatever the micro-batch."""
    runs = _bloom_search_memory(paper)
    oom = [fits for outcome, _, _, fits in runs if outcome == "oom"]
    assert len(oom) == 3 and oom[:2] == [False, False]  # the third: the xfail below
    assert all(fits for outcome, _, _, fits in runs if outcome == "ok")


@pytest.mark.xfail(strict=True, reason="the memory model fits BLOOM's 206B layout (82 x 14336, "
                   "TP 4 x PP 12), which ran out of memory (issue 27's memory validation)")
def test_the_memory_model_marks_blooms_out_of_memory_layouts(paper):
    oom = [fits for outcome, _, _, fits in _bloom_search_memory(paper) if outcome == "oom"]
    assert len(oom) == 3 and not any(oom)


# --- the fit --------------------------------------------------------------------------------

def test_fits_reproduce_their_rows():
    lay = _layout(tp_overlap=0.2)
    time = estimate(SMALL, HW, lay).iteration_time_s
    assert fit_efficiency(SMALL, replace(HW, gemm_efficiency=1.0), lay, time) == \
        pytest.approx(0.5)
    with pytest.raises(ValueError, match="shorter than the model gives"):
        fit_efficiency(SMALL, HW, lay, 1e-12)
    truth = replace(A100_80GB, gemm_efficiency=0.62, straggler=0.04)
    small = Layout(tp=8, pp=8, dp=4, micro_batch=1, global_batch=768, virtual_stages=6)
    large = replace(small, dp=48, global_batch=6144)
    rows = [(GPT175, lay, A100_80GB, estimate(GPT175, truth, lay).iteration_time_s)
            for lay in (small, large)]
    eff, sigma = fit_system(rows)
    assert (eff, sigma) == (pytest.approx(0.62), pytest.approx(0.04))
    assert fits_straggler([Row(*r) for r in rows])  # 32 and 384 nodes
    other = ModelConfig(layers=48, hidden=8192, heads=64, seq_len=2048, vocab=64000)
    assert is_scaling_pair((GPT175, small), (GPT175, large))
    assert not is_scaling_pair((GPT175, small), (other, large))
    mixed = [rows[0], (other, large, A100_80GB, estimate(other, truth, large).iteration_time_s)]
    assert fit_system(mixed)[1] == 0


def test_a_scaling_pair_inside_one_node_fits_no_straggler():
    """The straggler stretches a step by ln(nodes), so a pair on 2 and 4 GPUs of one node
    measures nothing of it: only the ceiling is fitted, between the two rows (the fit used to
    search for a straggler that could not exist and fail)."""
    model = ModelConfig(layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50304)
    two = Layout(tp=1, pp=1, dp=2, micro_batch=4, global_batch=8)
    four = replace(two, dp=4, global_batch=16)
    truth = replace(A100_80GB, gemm_efficiency=0.6)
    rows = [Row(model, two, A100_80GB, estimate(model, truth, two).iteration_time_s),
            Row(model, four, A100_80GB, 1.05 * estimate(model, truth, four).iteration_time_s)]
    assert is_scaling_pair(rows[0][:2], rows[1][:2]) and not fits_straggler(rows)
    eff, sigma = fit_system(rows)
    assert sigma == 0 and 0.6 / 1.05 < eff < 0.6
    across = replace(two, dp=16, global_batch=64)  # 16 GPUs: two nodes
    assert fits_straggler([rows[0], Row(model, across, A100_80GB, 1.0)])


def test_validate_names_the_systems_whose_straggler_is_not_fitted(predictions):
    """Calibrated on one node count, a system's rows on more nodes carry no cost that grows
    with them: ``unfitted_straggler`` names it, with the held-out errors by node count."""
    lines = {u.system: u.line() for u in unfitted_straggler(predictions)}
    assert {"MegaScale", "Megatron-LM"}.isdisjoint(lines)  # a pair on 32 and 384 nodes
    assert not predictions[predictions.system == "MegaScale"].straggler_fitted.eq(False).any()
    assert "torchtitan (A100)" not in lines  # every run on its calibration's 8 nodes
    h100 = predictions[(predictions.system == "llm-foundry (H100)")
                       & ~predictions.calibration.astype(bool)]
    line = lines["llm-foundry (H100)"]
    beyond = h100[h100.nodes > 1]
    assert f"its {len(beyond)} measured iterations on 2-64 nodes, beyond the 1 " in line
    by_nodes = h100.groupby("nodes").iteration_time_rel_error.mean()
    assert f"64: {100 * by_nodes[64]:+.1f}%" in line and f"1: {100 * by_nodes[1]:+.1f}%" in line
    assert unfitted_straggler(predictions.drop(columns="straggler_fitted")) == []
    from suite.analysis.analyze import AnalysisInputs
    from suite.analysis.summaries import llm_scale
    (u,) = [u for u in unfitted_straggler(predictions) if u.system == "llm-foundry (H100)"]
    assert f"llm-foundry (H100) ({u.trend()})" in llm_scale(AnalysisInputs(predictions))


def test_each_system_is_fitted_on_its_declared_runs_only(runs, predictions):
    cal = predictions[predictions.calibration]
    assert {(r.system, r.dataset, r.label) for r in cal.itertuples()} == {
        (system, d, label) for system, rows in CALIBRATION.items() for d, label in rows}
    declared = {(d, label) for rows in CALIBRATION.values() for d, label in rows}
    # a held-out run changed 3x leaves every fit as it was
    doctored = [r if (r.dataset, r.id) in declared else
                replace(r, layer_time_s=3 * r.layer_time_s) if r.layer_time_s is not None else
                r if r.iteration_time_s is None else
                replace(r, iteration_time_s=3 * r.iteration_time_s) for r in runs]
    assert sum(d != r for d, r in zip(doctored, runs)) > 200
    assert any(r.layer_time_s is not None and (r.dataset, r.id) in declared for r in runs)
    assert fit(doctored, CALIBRATION) == fit(runs, CALIBRATION)
    # a declared run changed moves its system's fit, and only its
    moved = [replace(r, iteration_time_s=1.1 * r.iteration_time_s)
             if (r.dataset, r.id, r.system) == ("megascale_table2", "175B b768 256 GPUs",
                                                 "Megatron-LM") else r for r in runs]
    assert fit(moved, CALIBRATION)["Megatron-LM"] != fit(runs, CALIBRATION)["Megatron-LM"]
    assert fit(moved, CALIBRATION)["MegaScale"] == fit(runs, CALIBRATION)["MegaScale"]


# --- runs CSV -------------------------------------------------------------------------------

ROW = {"id": "a", "gpu": "A100", "layers": 32, "hidden": 4096, "heads": 32, "seq_len": 2048,
       "vocab": 50000, "gpus": 8, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 8,
       "tokens_per_s": 1000}


def test_bad_rows_get_one_error_line_each():
    rows = [ROW, {**ROW, "id": "b", "gpu": "B200"}, {**ROW, "id": "c", "global_batch": 12},
            {**ROW, "id": "d", "tokens_per_s": None}, {**ROW, "id": "e", "micro_batch": "one"},
            {**ROW, "id": "f", "colour": "red"}, {**ROW, "id": "g", "ffn_hidden": 1001,
                                                  "tp": 2}, ROW,
            {**ROW, "id": "h", "layer_time_ms": 20.0}, {**ROW, "id": "i", "outcome": "oom"},
            {**ROW, "id": "j", "outcome": "crashed"}]
    with pytest.raises(RunsError) as err:
        runs_from_frame(pd.DataFrame(rows), "runs.csv")
    lines = str(err.value).splitlines()
    assert lines == [
        "runs.csv: row 2 (id b): column gpu: 'B200' is not one of "
        "['A100', 'A100-40GB', 'A100-80GB', 'H100', 'H200']",
        "runs.csv: row 3 (id c): layout cannot exist: global_batch=12 is not a multiple of "
        "dp * micro_batch = 8",
        "runs.csv: row 4 (id d): column iteration_time_s: empty; a run needs one of "
        "['iteration_time_s', 'tokens_per_s', 'mfu_percent', 'layer_time_ms'] (or outcome oom)",
        "runs.csv: row 5 (id e): column micro_batch: 'one' is not of type 'integer'",
        lines[4],
        "runs.csv: row 7 (id g): layout cannot exist: ffn_hidden=1001 is not a multiple of tp=2",
        "runs.csv: row 8 (id a): column id: 'a' is used by an earlier row",
        "runs.csv: row 9 (id h): column layer_time_ms: one layer's time, so the row measures "
        "nothing else; give iteration_time_s, tokens_per_s and mfu_percent on a row of their "
        "own",
        "runs.csv: row 10 (id i): column outcome: oom, so the run has no time; leave "
        "['tokens_per_s'] empty",
        "runs.csv: row 11 (id j): column outcome: 'crashed' is not one of ['ok', 'oom']"]
    assert lines[4].startswith("runs.csv: row 6 (id f): unknown column(s) ['colour']; valid:")
    with pytest.raises(RunsError, match="runs.csv: no rows"):
        runs_from_frame(pd.DataFrame([]), "runs.csv")


def test_memory_and_out_of_memory_runs_enter_through_the_runs_csv():
    """A run that ran out of memory has no time: it is never fitted or timed, only checked
    against the memory model; a measured peak is compared, never fitted."""
    oom = {**ROW, "id": "big", "tokens_per_s": None, "outcome": "oom", "layers": 400}
    small = {**ROW, "layers": 4, "memory_gib": 40.0}
    ran, big = runs_from_frame(pd.DataFrame([small, oom]), "runs.csv")
    assert (ran.outcome, ran.memory_gib, big.outcome, big.measured_s) == ("ok", 40.0, "oom", None)
    table = predict([ran, big], {"(plain)": (("runs", "a"),)})
    assert list(table.outcome) == ["ok", "oom"] and table.paper_iteration_time_s.isna()[1]
    assert table.predicted_fits.tolist() == [True, False]
    assert table.paper_memory_gib[0] == 40.0 and table.predicted_memory_gib[1] > 80
    with pytest.raises(ValueError, match="'big': the row has no measured time .it ran out of "):
        user_system([ran, big], "mine", ["big"])


def test_validate_checks_a_users_memory_readings(tmp_path, capsys):
    """Measured peaks and an out-of-memory run in a user's CSV: the table shows the model's
    GiB beside them, and a line sums the check up over every row (memory is never fitted)."""
    small = {**ROW, "layers": 4, "iteration_time_s": 1.0, "tokens_per_s": None}
    rows = [{**small, "memory_gib": 30.0}, {**small, "id": "b", "tp": 2, "memory_gib": 20.0},
            {**small, "id": "c", "global_batch": 16},
            {**small, "id": "d", "layers": 400, "iteration_time_s": None, "outcome": "oom"}]
    path = tmp_path / "mine.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert main(["scale-model", "validate", str(path), "--calibrate", "a,b"]) == 0
    out = capsys.readouterr().out
    assert "measured_gib  model_gib  fits" in out
    line = next(x for x in out.splitlines() if x.startswith("memory on mine: "))
    assert re.fullmatch(r"memory on mine: the model's peak is [\d.]+-[\d.]+ of the measured on "
                        r"2 runs; it marks 1 of the 1 runs that ran out of memory and 0 of the "
                        r"3 that ran", line), line


def test_logit_metrics_enter_through_the_runs_csv():
    (none, two) = runs_from_frame(pd.DataFrame([{**ROW, "logit_metrics": 0},
                                                {**ROW, "id": "b", "logit_metrics": 2}]),
                                  "runs.csv")
    assert (none.layout.logit_metrics, two.layout.logit_metrics) == (0, 2)
    with pytest.raises(RunsError, match="row 1 .id a.: column logit_metrics: -1 is less than "
                                        "the minimum of 0"):
        runs_from_frame(pd.DataFrame([{**ROW, "logit_metrics": -1}]), "runs.csv")


def test_a_measured_busbw_enters_through_the_runs_csv():
    (run,) = runs_from_frame(pd.DataFrame([{**ROW, "network_busbw_gbps": 5.07}]), "runs.csv")
    assert run.hardware.network_busbw == pytest.approx(5.07e9)
    assert runs_from_frame(pd.DataFrame([ROW]), "runs.csv")[0].hardware.network_busbw is None
    with pytest.raises(RunsError, match="column network_busbw_gbps"):
        runs_from_frame(pd.DataFrame([{**ROW, "network_busbw_gbps": 0}]), "runs.csv")


def test_a_fabrics_nccl_channels_enter_through_the_runs_csv():
    """Jean Zay-like nodes, 4 NICs for 8 GPUs: 8 ring channels across nodes."""
    (run,) = runs_from_frame(pd.DataFrame([{**ROW, "nccl_channels_network": 8}]), "runs.csv")
    assert (run.hardware.nccl_channels_node, run.hardware.nccl_channels_network) == (24, 8)
    assert run.hardware.collective_sm_share(2) == pytest.approx(8 / run.hardware.sms)
    with pytest.raises(RunsError, match="column nccl_channels_node"):
        runs_from_frame(pd.DataFrame([{**ROW, "nccl_channels_node": 0}]), "runs.csv")


def test_a_measured_hbm_efficiency_enters_through_the_runs_csv():
    (run,) = runs_from_frame(pd.DataFrame([{**ROW, "hbm_efficiency": 0.8}]), "runs.csv")
    assert run.hardware.hbm_rate == pytest.approx(0.8 * run.hardware.hbm_bw)
    assert runs_from_frame(pd.DataFrame([ROW]), "runs.csv")[0].hardware.hbm_efficiency == 0.88
    with pytest.raises(RunsError, match="column hbm_efficiency"):
        runs_from_frame(pd.DataFrame([{**ROW, "hbm_efficiency": 0}]), "runs.csv")
    with pytest.raises(RunsError, match="hbm_efficiency=1.5 must be in"):
        runs_from_frame(pd.DataFrame([{**ROW, "hbm_efficiency": 1.5}]), "runs.csv")


def test_a_users_runs_take_the_papers_path(runs):
    """The example runs (torchtitan's A100 table written in the schema) give the same
    predictions as the same runs read through the published dataset."""
    mine = read_runs(REPO_ROOT / "examples/scale/torchtitan_a100_runs.csv")
    theirs = [r for r in runs if r.dataset == "torchtitan_llama"]
    assert [(r.model, r.layout, r.iteration_time_s) for r in mine] == \
        [(r.model, r.layout, pytest.approx(r.iteration_time_s)) for r in theirs]
    ids = [r.id for r in mine[:2]]
    named, calibration = user_system(mine, "mine", ids)
    assert {r.system for r in named} == {"mine"}
    ours = predict(named, calibration)
    published = predict(runs, CALIBRATION).query("dataset == 'torchtitan_llama'")
    assert ours.predicted_iteration_time_s.tolist() == pytest.approx(
        published.predicted_iteration_time_s.tolist())
    with pytest.raises(ValueError, match="--calibrate 'x': no row has this id"):
        user_system(mine, "mine", ["x"])
    with pytest.raises(ValueError, match="names 3 rows"):
        user_system(mine, "mine", ids + ids[:1])


def test_scale_table_cli_reads_the_published_datasets_unless_given(capsys, monkeypatch,
                                                                     tmp_path, predictions):
    monkeypatch.chdir(REPO_ROOT)  # --paper-dir defaults to results/paper
    mine = tmp_path / "search.csv"
    search = pd.read_csv(REPO_ROOT / "results/paper/bloom176b_topology_search.csv")
    search.head(5).to_csv(mine, index=False)  # a role given: that file, the rest published
    out = tmp_path / "table.csv"
    assert main(["scale-table", "--paper", f"bloom_search={mine}", "--out", str(out)]) == 0
    table = pd.read_csv(out)
    counts = table.dataset.value_counts()
    assert counts["bloom176b_search"] == 5  # its first five rows, the fifth out of memory
    assert table[table.dataset == "bloom176b_search"].outcome.tolist() == ["ok"] * 4 + ["oom"]
    assert len(table) == len(predictions) - 20 + 5
    err = capsys.readouterr().err
    assert "of its time in GEMMs" not in err  # no published calibration row is weak
    assert "llm-foundry (H100): its calibration rows cannot fit the straggler constant" in err
    assert main(["scale-table", "--paper-dir", str(tmp_path), "--out", str(out)]) == 2
    assert "no bloom176b_training_log.csv for role 'bloom'" in capsys.readouterr().err


def test_validate_cli(capsys, tmp_path):
    example = str(REPO_ROOT / "examples/scale/torchtitan_a100_runs.csv")
    cal = "Llama-3-8B selective layer mb1,Llama-3-8B selective op mb1"
    out = tmp_path / "pred.csv"
    assert main(["scale-model", "validate", example, "--calibrate", cal, "--json",
                 "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["calibration"] == cal.split(",") and report["peer"] == peer.PEER
    assert report["weak_calibration"] == []  # both rows spend most of their time in GEMMs
    assert report["unfitted_straggler"] == []  # every row on the calibration's node count
    (summary,) = report["summary"]
    assert summary["runs"] == 6 and summary["sweeps"] == 2
    assert len(pd.read_csv(out)) == 8
    assert main(["scale-model", "validate", example, "--calibrate", cal]) == 0
    text = capsys.readouterr().out
    assert "scale model on torchtitan_a100_runs (6 rows not fitted): mean |error|" in text
    assert "llm-analysis 0.2.2 on torchtitan_a100_runs" in text
    # the option given twice is the same; an id holding a comma is taken whole
    first, second = cal.split(",")
    assert main(["scale-model", "validate", example, "--calibrate", first,
                 "--calibrate", second]) == 0
    assert capsys.readouterr().out == text
    commas = tmp_path / "commas.csv"
    pd.read_csv(example).replace({first: "8B, layer", second: "8B, op"}).to_csv(commas,
                                                                             index=False)
    assert main(["scale-model", "validate", str(commas), "--calibrate", "8B, layer",
                 "--calibrate", "8B, op"]) == 0
    assert "scale model on commas (6 rows not fitted)" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    pd.DataFrame([ROW, {**ROW, "id": "b", "gpu": "B200"}]).to_csv(bad, index=False)
    assert main(["scale-model", "validate", str(bad), "--calibrate", "a"]) == 2
    assert f"{bad}: row 2 (id b): column gpu: 'B200' is not one of" in capsys.readouterr().err


def test_layer_seconds_is_one_layer_of_the_stage():
    """``layer_seconds`` (what the GPU pack's layer_intercept step compares against) is what one
    more layer adds to a stage's compute: GEMMs at the ceiling, attention, element-wise."""
    from suite.scale.step import layer_seconds

    hw = replace(A100_80GB, gemm_efficiency=0.6)
    lay = Layout(tp=1, pp=1, dp=1, micro_batch=2, global_batch=2, attention="flash2")

    def compute(layers: int) -> float:
        (w,) = stage_works(replace(SMALL, layers=layers), lay, hw)
        return w.gemm / hw.gemm_efficiency + w.attention + w.memory

    assert layer_seconds(SMALL, lay, hw) == pytest.approx(compute(5) - compute(4))


def test_a_timed_layer_is_its_compute_and_its_exposed_tp_collectives():
    """What a benchmark of one layer measures (Korthikanti et al.'s Table 4): the layer's
    compute plus its TP collectives not hidden, computed here by hand for TP 8 with full
    recompute (6 all-reduces of b s h x 2 bytes, 2 of them hidden); the stage's TP is that, per
    layer, and ``layer_breakdown`` sums to it."""
    from suite.scale.step import layer_breakdown, layer_seconds, timed_layer_seconds

    hw = replace(A100_80GB, gemm_efficiency=0.6)
    model = ModelConfig(layers=48, hidden=6144, heads=64, seq_len=2048, vocab=51200)
    lay = Layout(tp=8, pp=1, dp=1, micro_batch=4, global_batch=4, recompute="full",
                 tp_overlap=1 / 3, attention="fused_softmax")
    ring = 6 * (2 * 7 / 8 * 4 * 2048 * 6144 * 2 / hw.nvlink_bw + ring_latency(8, 1, hw))
    assert timed_layer_seconds(model, lay, hw) == pytest.approx(
        layer_seconds(model, lay, hw) + 2 / 3 * ring)
    (w,) = stage_works(model, lay, hw)
    assert w.tp == pytest.approx(48 * 2 / 3 * ring)
    parts = layer_breakdown(model, lay, hw)
    assert set(parts) == set(BREAKDOWN) and parts["tp_exposed_s"] == pytest.approx(2 / 3 * ring)
    assert sum(parts.values()) == timed_layer_seconds(model, lay, hw)
    assert timed_layer_seconds(model, replace(lay, tp=1, tp_overlap=0.0), hw) == \
        layer_seconds(model, replace(lay, tp=1, tp_overlap=0.0), hw)
    # the passes: the forward's 2 collectives exposed, the backward's 4 less the 2 hidden
    from suite.scale.step import layer_passes
    forward, backward = layer_passes(model, lay, hw)
    assert forward + backward == pytest.approx(timed_layer_seconds(model, lay, hw))
    one = ring / 6  # one all-reduce
    assert (forward - 2 * one) + (backward - 2 * one) == \
        pytest.approx(layer_seconds(model, lay, hw))
    hidden_all = layer_passes(model, replace(lay, tp_overlap=1.0), hw)
    assert hidden_all == (pytest.approx(forward - 2 * one), pytest.approx(backward - 2 * one))
    none_hidden = layer_passes(model, replace(lay, tp_overlap=0.0), hw)
    assert none_hidden == (pytest.approx(forward), pytest.approx(backward + 2 * one))


def test_a_layers_forward_and_backward_are_korthikantis(runs):
    """Korthikanti et al.'s Table 4 times the forward and the backward of one 22B layer apart,
    under five methods; the model, fitted on two of the combined times, splits every one into
    forward and backward within 3% of what they measured (10 numbers not fitted)."""
    from suite.scale.step import layer_passes

    fits = fit(runs, CALIBRATION)
    table = pd.read_csv(REPO_ROOT / "results/paper/korthikanti2022_table5_recompute.csv")
    measured = table.query("experiment == 'table4'").set_index("method")
    layers = [r for r in runs if r.dataset == "korthikanti2022_layers"]
    assert len(layers) == 5
    for r in layers:
        eff, _ = fits[r.system]
        forward, backward = layer_passes(r.model, r.layout,
                                         replace(r.hardware, gemm_efficiency=eff))
        method = r.id.split(", ")[1].replace(" ", "_")
        assert 1e3 * forward == pytest.approx(measured.forward_ms[method], rel=0.03), method
        assert 1e3 * backward == pytest.approx(measured.backward_ms[method], rel=0.03), method


def test_a_layer_time_fits_the_ceiling_and_never_a_straggler():
    """A row that timed one layer fits the ceiling that reproduces it; two layer rows are not
    a scaling pair (a layer has no DP), so the straggler stays 0."""
    from suite.scale.fit import Row
    from suite.scale.step import timed_layer_seconds

    truth = replace(A100_80GB, gemm_efficiency=0.62)
    model = ModelConfig(layers=48, hidden=6144, heads=64, seq_len=2048, vocab=51200)
    lay = Layout(tp=8, pp=1, dp=1, micro_batch=4, global_batch=4, recompute="full")
    time = timed_layer_seconds(model, lay, truth)
    assert fit_system([Row(model, lay, A100_80GB, time, "layer")]) == (pytest.approx(0.62), 0.0)
    other = replace(lay, recompute="selective", sequence_parallel=True)
    rows = [Row(model, lay, A100_80GB, time, "layer"),
            Row(model, other, A100_80GB, timed_layer_seconds(model, other, truth), "layer")]
    assert fit_system(rows) == (pytest.approx(0.62), 0.0)
    with pytest.raises(ValueError, match="timed='step'; valid: \\['iteration', 'layer'\\]"):
        fit_system([Row(model, lay, A100_80GB, time, "step")])


def test_layer_rows_enter_through_the_runs_csv_and_are_predicted_as_layers(tmp_path):
    """A user's layer benchmark (``layer_time_ms``) calibrates a system whose iterations are then
    predicted; the layer row itself is compared as a layer, with no MFU."""
    layer = {**ROW, "id": "layer", "gpus": 1, "global_batch": 1, "tokens_per_s": None,
             "layer_time_ms": 1.0}
    runs = runs_from_frame(pd.DataFrame([ROW, {**layer, "layer_time_ms": 1.0}]), "runs.csv")
    assert runs[1].layer_time_s == pytest.approx(1e-3) and runs[1].iteration_time_s is None
    hw = replace(runs[1].hardware, gemm_efficiency=0.55)
    from suite.scale.step import timed_layer_seconds
    ms = 1e3 * timed_layer_seconds(runs[1].model, runs[1].layout, hw)
    runs = runs_from_frame(pd.DataFrame([ROW, {**layer, "layer_time_ms": ms}]), "runs.csv")
    mine, calibration = user_system(runs, "mine", ["layer"])
    table = predict(mine, calibration).set_index("label")
    assert table.loc["layer", "timed"] == "layer" and table.loc["a", "timed"] == "iteration"
    assert table.loc["layer", "gemm_efficiency"] == pytest.approx(0.55)
    assert table.loc["layer", "predicted_iteration_time_s"] == pytest.approx(ms / 1e3)
    assert pd.isna(table.loc["layer", "predicted_mfu_percent"])
    assert table.loc["a", "predicted_iteration_time_s"] == pytest.approx(
        estimate(runs[0].model, replace(runs[0].hardware, gemm_efficiency=0.55),
                 runs[0].layout).iteration_time_s)


def test_validate_splits_the_errors_by_layout_columns(capsys, predictions):
    """``by`` splits each dataset's held-out rows by a layout column; the slices partition the
    rows and each slice's errors are those of its rows alone."""
    table = predictions.query("dataset == 'llmfoundry_mpt'")
    whole = summarize(table).set_index("system")
    split = summarize(table, by=["recompute"])
    assert set(split.recompute) == {"none", "full"}
    for system, g in split.groupby("system"):
        assert g.runs.sum() == whole.loc[system, "runs"]
    held = table[~table.calibration]
    for r in split.itertuples():
        rows = held[(held.system == r.system) & (held.recompute == r.recompute)]
        err = rows.predicted_iteration_time_s / rows.paper_iteration_time_s - 1
        assert r.runs == len(rows) and r.time_mean_signed_pct == pytest.approx(100 * err.mean())
    with pytest.raises(ValueError, match=r"by=\['colour'\]: not a column to split by; valid: "):
        summarize(table, by=["colour"])
    # the report's sentence gives the split where a dataset has both kinds, and only there
    from suite.analysis.analyze import AnalysisInputs
    from suite.analysis.summaries import llm_scale
    sentence = llm_scale(AnalysisInputs(predictions))
    h100 = split[split.system == "llm-foundry (H100)"].set_index("recompute")
    assert ("llm-foundry (H100) (68 runs): iteration time off by" in sentence
            and f"(signed by recompute: full {h100.loc['full', 'time_mean_signed_pct']:+.1f}% of "
                f"{h100.loc['full', 'runs']}, none {h100.loc['none', 'time_mean_signed_pct']:+.1f}%"
                f" of {h100.loc['none', 'runs']})" in sentence)
    # Korthikanti's iterations and layers, llm-foundry x3, torchtitan
    assert sentence.count("signed by recompute") == 6
    assert "korthikanti2022_layers / Megatron-LM 2022 (Selene) (3 runs): layer time off by" \
        in sentence
    example = str(REPO_ROOT / "examples/scale/torchtitan_a100_runs.csv")
    cal = "Llama-3-8B selective layer mb1,Llama-3-8B selective op mb1"
    assert main(["scale-model", "validate", example, "--calibrate", cal, "--by",
                 "recompute"]) == 0
    text = capsys.readouterr().out
    assert "scale model on torchtitan_a100_runs, recompute=none (1 rows not fitted)" in text
    assert "scale model on torchtitan_a100_runs, recompute=full (5 rows not fitted)" in text
    assert main(["scale-model", "validate", example, "--calibrate", cal, "--by", "tp,colour"]) == 2
    assert "not a column to split by" in capsys.readouterr().err


def test_a_calibration_row_mostly_bubble_is_flagged(capsys, tmp_path):
    """One micro-batch through 8 stages is 1/8 work and 7/8 bubble: the ceiling fitted on it
    would absorb the bubble's errors, so validate warns; 64 micro-batches do not."""
    model, hw = ModelConfig(layers=32, hidden=4096, heads=32, seq_len=2048, vocab=50000), \
        replace(A100_80GB, gemm_efficiency=0.6)
    rows = []
    for rid, batch in (("deep", 1), ("wide", 64)):
        lay = Layout(tp=1, pp=8, dp=1, micro_batch=1, global_batch=batch)
        rows.append({**ROW, "id": rid, "pp": 8, "global_batch": batch, "tokens_per_s": None,
                     "iteration_time_s": estimate(model, hw, lay).iteration_time_s})
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    runs, calibration = user_system(read_runs(path), "mine", ["deep"])
    (line,) = weak_calibration(predict(runs, calibration))
    assert line.startswith("mine: calibration row 'deep' spends ") and "(bubble 8" in line
    assert weak_calibration(predict(*user_system(read_runs(path), "mine", ["wide"]))) == []
    assert main(["scale-model", "validate", str(path), "--calibrate", "deep"]) == 0
    assert "warning: runs: calibration row 'deep' spends" in capsys.readouterr().err


# --- what-if and search ---------------------------------------------------------------------

def test_what_if_cli(capsys):
    args = ["scale-model", "--layers", "96", "--hidden", "12288", "--heads", "96", "--gpus",
            "1024", "--tp", "8", "--pp", "8", "--vp", "2", "--global-batch", "1536",
            "--recompute", "selective", "--sequence-parallel", "--gpu", "H200",
            "--gemm-efficiency", "0.7", "--straggler", "0.01", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"]["dp"] == 16 and out["micro_batches"] == 96
    assert out["gpu"] == "H200" and out["gemm_efficiency"] == 0.7
    assert sum(out["breakdown_s"].values()) == pytest.approx(out["iteration_time_s"])
    assert 0 < out["mfu_percent"] < out["hfu_percent"] < 100 and out["fits"]
    by_stage = out["memory_by_stage_gib"]  # the fullest stage is the one that must fit
    assert len(by_stage) == 8 and out["memory_gib"] == by_stage[out["memory_stage"]] == \
        max(by_stage)
    kinds = out["memory_breakdown_gib"]  # why it fits or not: the fullest stage by kind
    assert kinds["transient"] == 0 and out["memory_gib"] == pytest.approx(
        kinds["weights"] + kinds["gradients"] + kinds["optimizer"] + kinds["activations"])
    assert main(args[:-1]) == 0
    assert "iteration time" in capsys.readouterr().out
    assert main(["scale-model", "--gpus", "1000", "--gemm-efficiency", "0.7",
                 "--straggler", "0"]) == 2
    assert "gpus=1000 is not a multiple of tp * pp = 64" in capsys.readouterr().err
    # a split the search prints (ends 10/14: the middle six stages take 12 each)
    assert main(args[:-1] + ["--first-stage-layers", "10", "--last-stage-layers", "14"]) == 0
    text = capsys.readouterr().out
    assert "(v 2, ends 10/14)" in text and "usable on stage 7 (first stage" in text
    assert re.search(r"\n  weights [\d.]+, gradients [\d.]+, optimizer [\d.]+, "
                     r"activations [\d.]+\n", text)
    # MPT's flash path: the kernel behind flash-attn's unpad/pad copies costs more
    flash = args + ["--attention", "flash2"]
    times = []
    for extra in ([], ["--attention-unpad"]):
        assert main(flash + extra) == 0
        times.append(json.loads(capsys.readouterr().out)["iteration_time_s"])
    assert times[1] > times[0]
    assert main(args[:-1] + ["--attention", "fused_softmax", "--attention-unpad"]) == 2
    assert "attention_unpad=True needs a tiled kernel" in capsys.readouterr().err
    assert main(args + ["--first-stage-layers", "11"]) == 2
    assert "the other 85 of layers=96 do not split evenly over 7 middle" in \
        capsys.readouterr().err
    # full recompute as torch's non-reentrant checkpoint runs it: the system's unless given
    runs = {}
    for flag in ([], ["--recompute-early-stop"], ["--system", "torchtitan (A100)"],
                 ["--system", "torchtitan (A100)", "--no-recompute-early-stop"]):
        assert main([a if a != "selective" else "full" for a in args] + flag) == 0
        out = json.loads(capsys.readouterr().out)
        runs[" ".join(flag)] = (out["layout"]["recompute_early_stop"], out["iteration_time_s"])
    assert runs[""][0] is False and runs["--recompute-early-stop"][0] is True
    assert runs["--recompute-early-stop"][1] < runs[""][1]
    assert runs["--system torchtitan (A100)"][0] is True
    assert runs["--system torchtitan (A100) --no-recompute-early-stop"][0] is False
    # train metrics on the logits: the system's (llm-foundry's Composer: 2) unless given
    metrics = {}
    for flag in ([], ["--logit-metrics", "2"], ["--system", "llm-foundry (H100)"],
                 ["--system", "llm-foundry (H100)", "--logit-metrics", "0"]):
        assert main(args + flag) == 0
        out = json.loads(capsys.readouterr().out)
        metrics[" ".join(flag)] = (out["layout"]["logit_metrics"], out["iteration_time_s"])
    assert [v[0] for v in metrics.values()] == [0, 2, 2, 0]
    assert metrics["--logit-metrics 2"][1] > metrics[""][1]


def test_the_systems_overlaps_follow_recompute():
    """A system hiding only the backward's TP traffic beside its gradient GEMMs hides 2
    all-reduces' worth per layer: of 4, of 6 under full recompute, and with sequence
    parallelism of 5 (7): its backward all-gathers each column-parallel linear's sharded input
    again, half an all-reduce's bytes each, and leaves the output gradient's all-gather
    exposed."""
    from suite.scale.step import tp_collectives_per_layer

    spec = SYSTEMS["Megatron-LM 2022 (Selene)"]
    assert spec.layout_defaults(1, 1.0)["tp_overlap"] == pytest.approx(1 / 3)
    assert spec.layout_defaults(1, 0.0)["tp_overlap"] == 0.5
    assert spec.layout_defaults(1, 0.0, True)["tp_overlap"] == pytest.approx(2 / 5)
    assert spec.layout_defaults(1, 1.0, True)["tp_overlap"] == pytest.approx(2 / 7)
    assert [tp_collectives_per_layer(f, sp) for f in (0.0, 0.5, 1.0) for sp in (False, True)] \
        == [4, 5, 5, 6, 6, 7]
    # an early-stopping recompute does not re-run the MLP output projection's reduction
    assert [tp_collectives_per_layer(f, sp, early_stop=True) for f in (0.0, 1.0)
            for sp in (False, True)] == [4, 5, 5, 6]
    assert SYSTEMS["Megatron-LM"].layout_defaults(1, 0.0, True)["tp_overlap"] == \
        pytest.approx(2 / 5)
    assert SYSTEMS["MegaScale"].layout_defaults(6, 0.0)["dp_overlap"] == pytest.approx(5 / 6)


def test_search_ranks_layouts_that_fit(capsys):
    hw = replace(A100_80GB, gemm_efficiency=0.6)
    model = ModelConfig(layers=32, hidden=4096, heads=32, seq_len=4096, vocab=32000)
    result = search(model, 64, 256, hw, SYSTEMS["Megatron-LM"])
    assert result.considered > 1000 and result.ranked
    times = [c.estimate.iteration_time_s for c in result.ranked]
    assert times == sorted(times)
    assert all(c.memory.fits and c.layout.gpus == 64 for c in result.ranked)
    assert len(result.ranked) + result.too_big == result.considered
    # the best is at least as fast as a hand-picked layout that fits
    hand = Layout(tp=2, pp=1, dp=32, micro_batch=1, global_batch=256, attention="flash",
                  recompute="selective", sequence_parallel=True)
    assert memory(model, hand, hw).fits
    assert times[0] <= estimate(model, hw, hand).iteration_time_s
    assert main(["scale-model", "--search", "--layers", "32", "--hidden", "4096", "--heads",
                 "32", "--seq-len", "4096", "--vocab", "32000", "--gpus", "64",
                 "--global-batch", "256", "--gpu", "A100", "--system", "Megatron-LM",
                 "--attention", "flash", "--top", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["top"]) == 3 and report["layouts_considered"] > 100
    assert {r["layout"]["attention"] for r in report["top"]} == {"flash"}
    assert report["top"][0]["iteration_time_s"] <= report["top"][2]["iteration_time_s"]


def test_a_search_where_nothing_fits_says_how_far_the_leanest_layout_is():
    """GPT-3 175B on 8 GPUs: every layout is too big, and the search names the one needing the
    least memory, and how much, instead of an empty table."""
    hw = replace(A100_80GB, gemm_efficiency=0.6)
    result = search(GPT175, 8, 8, hw, SYSTEMS["Megatron-LM"])
    assert not result.ranked and result.too_big == result.considered > 0
    needs = {lay: memory(GPT175, lay, hw).total
             for lay in layouts(GPT175, 8, 8, hw, SYSTEMS["Megatron-LM"])}
    assert result.leanest == min(needs, key=needs.get)
    # sharded 8 ways at best: 16 bytes a parameter under FSDP, 175e9 x 16 / 8 = 350 GB and more
    assert needs[result.leanest] > GPT175.n_params * 16 / 8
    report = search_report(GPT175, hw, result, "Megatron-LM", "given", top=3)
    assert report["top"] == [] and not report["leanest_too_big"]["fits"]
    text = search_as_text(report)
    assert "0 ranked\nnone fits: the layout needing the least memory, TP " in text
    assert f"needs {needs[result.leanest] / GiB:.1f} GiB of the" in text
    fitting = search_report(GPT175, hw, search(GPT175, 1024, 1536, hw, SYSTEMS["Megatron-LM"]),
                            "Megatron-LM", "given", top=1)
    assert fitting["leanest_too_big"] is None and "the fastest:" in search_as_text(fitting)


def test_the_search_tries_lighter_end_stages():
    """The end stages hold the embedding and the output layer, so the search also tries splits
    that give them fewer layers; with BLOOM's 250k vocabulary one wins: its last stage, 4 layers
    and the output GEMM, is no longer the slowest."""
    assert end_stage_splits(70, 12) == [(None, None), (6, 4), (5, 5), (4, 6)]
    assert end_stage_splits(80, 8) == [(None, None)]  # no lighter ends leave an even middle
    assert end_stage_splits(7, 2) == [(None, None), (3, 4)]  # (4, 3) is the uniform split
    assert end_stage_splits(70, 1) == [(None, None)]
    hw = replace(A100_80GB, gemm_efficiency=0.7)
    bloom = ModelConfig(layers=70, hidden=14336, heads=112, seq_len=2048, vocab=250880,
                        position_embeddings=False, dropout=False)
    result = search(bloom, 384, 2048, hw, SYSTEMS["Megatron-LM"], attention=("fused_softmax",),
                    dp_modes=("zero1",))
    best = result.ranked[0]
    ends = (best.layout.first_stage_layers, best.layout.last_stage_layers)
    assert ends != (None, None)
    uniform = replace(best.layout, first_stage_layers=None, last_stage_layers=None)
    assert estimate(bloom, hw, uniform).iteration_time_s > best.estimate.iteration_time_s
    report = search_report(bloom, hw, result, "Megatron-LM", "given", top=1)
    assert f"ends {ends[0]}/{ends[1]})" in search_as_text(report)


# --- the peer -------------------------------------------------------------------------------

def test_the_peer_is_flops_over_an_efficiency(runs):
    """llm-analysis's step time: FLOPs per micro-batch / (tp pp peak efficiency) x the
    micro-batches per replica, whatever the communication; the fitted efficiency is the
    closed-form least squares."""
    run = next(r for r in runs if r.id == "175B b768 512 GPUs" and r.system == "Megatron-LM")
    base = peer.step_time(run, 1.0)
    assert peer.step_time(run, 0.5) == pytest.approx(2 * base)
    other = replace(run, layout=replace(run.layout, tp_overlap=0.0, dp_overlap=1.0))
    assert peer.step_time(other, 1.0) == pytest.approx(base)
    a = [peer.step_time(r, 1.0) / r.iteration_time_s for r in runs[:2]]
    assert peer.fitted_efficiency([(r, r.iteration_time_s) for r in runs[:2]]) == \
        pytest.approx(min(1.0, sum(x * x for x in a) / sum(a)))


def test_the_peers_layer_time_is_its_step_formula_for_one_layer(runs):
    """For a layer row the peer gets its own step formula for one layer: on the 22B model
    (TP 8, no pipeline, one micro-batch, full recompute) its step time less 48 of its layer
    times is what its step adds outside the layers, the output layer's 2 b s h V FLOPs four
    times (forward, backward twice, recomputed forward) over the TP group."""
    it = next(r for r in runs if r.id == "22B 8 GPUs, full recompute")
    layer = next(r for r in runs if r.id == "22B layer, full recompute")
    hw = it.hardware
    outside = 4 * 2 * 4 * 2048 * 6144 * 51200 / (8 * hw.peak_flops)
    assert peer.step_time(it) - 48 * peer.peer_time(layer) == pytest.approx(outside)
    assert peer.peer_time(it) == peer.step_time(it)


# --- against the published runs -------------------------------------------------------------

def test_published_runs_as_model_inputs(runs, paper):
    by = {(r.dataset, r.id, r.system): r for r in runs}
    counts = pd.Series([r.dataset for r in runs]).value_counts().to_dict()
    assert counts == {"megascale_table2": 16, "megascale_fig9": 6, "narayanan2021": 10,
                      "megatron_h100": 11, "korthikanti2022": 10,
                      "korthikanti2022_layers": 5, "llmfoundry_mpt": 209,
                      "torchtitan_llama": 8, "bloom176b": 4, "bloom176b_search": 20}
    first = by[("narayanan2021", "1.7B 32 GPUs", "Megatron-LM 2021 (Selene)")]
    assert first.iteration_time_s == pytest.approx(
        96 * 512 * 2048 * 24 * 2304 ** 2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
        / 4.4e15)
    h100 = by[("megatron_h100", "177B 2304 GPUs", "Megatron-Core r0.8 (H100)")].layout
    assert (h100.tp, h100.pp, h100.dp, h100.virtual_stages) == (8, 6, 48, 16)
    assert h100.sequence_parallel and h100.dp_mode == "zero1" and h100.attention == "flash"
    full, present = (by[("korthikanti2022", f"175B 64 GPUs, {m}", "Megatron-LM 2022 (Selene)")]
                     for m in ("full recompute", "present work"))
    assert (full.layout.recompute, present.layout.recompute) == ("full", "selective")
    assert full.layout.tp_overlap == pytest.approx(1 / 3) and present.layout.tp_overlap == 0.4
    t4 = paper["korthikanti"].query("experiment == 'table4'")
    assert (t4.forward_ms + t4.backward_ms).round(1).tolist() == t4.layer_time_ms.tolist()
    layer = by[("korthikanti2022_layers", "22B layer, full recompute",
                "Megatron-LM 2022 (Selene)")]
    assert (layer.layer_time_s, layer.iteration_time_s, layer.layout.micro_batches,
            layer.layout.tp, layer.layout.recompute) == (pytest.approx(0.0272), None, 1, 8,
                                                         "full")
    mpt = by[("llmfoundry_mpt", "MPT-70b s2048 512 GPUs mb8 b4096", "llm-foundry (H100)")]
    assert (mpt.layout.dp_mode, mpt.layout.attention, mpt.layout.loss) == \
        ("fsdp", "flash2", "fused")  # attn_impl flash: flash-attn 2
    assert mpt.iteration_time_s == pytest.approx(4096 * 2048 / 515636)
    mpt3 = by[("llmfoundry_mpt", "MPT-3b s2048 512 GPUs mb8 b4096", "llm-foundry (H100)")]
    assert mpt3.layout.dp_mode == "fsdp_grad_op"  # SHARD_GRAD_OP
    triton = by[("llmfoundry_mpt", "MPT-7b s65536 8 GPUs mb1 b16", "llm-foundry (H100)")]
    assert triton.layout.attention == "flash1"  # attn_impl triton: FlashAttention-1's generation
    # Composer's two train metrics on every micro-batch's logits; torch 2.1's non-reentrant
    # checkpoint (early stop) from the 2023-10 sweep on, torch 1.13.1's before
    old = by[("llmfoundry_mpt", "MPT-70b s2048 64 GPUs mb8 b2048", "llm-foundry (A100-80GB)")]
    assert [(r.layout.logit_metrics, r.layout.recompute_early_stop) for r in (mpt, triton, old)] \
        == [(2, True), (2, True), (2, False)]
    assert {r.layout.recompute_early_stop for r in runs if r.system == "llm-foundry (A100-40GB)"} \
        == {False}  # every A100-40GB row is of the torch 1.13.1 era
    bloom = by[("bloom176b", "176B b2048 iteration 12695", "Megatron-DeepSpeed (BLOOM, Jean Zay)")]
    assert (bloom.layout.tp, bloom.layout.pp, bloom.layout.dp, bloom.layout.micro_batches) == \
        (4, 12, 8, 128)
    assert bloom.hardware.network_bw == pytest.approx(6.25e9)
    assert bloom.hardware.network_busbw == pytest.approx(40.55e9 / 8)
    # fp32 gradients all-reduced in full, cast to bf16 for the wire (DeepSpeed's
    # communication_data_type for bf16 without ZeRO until 2023-03)
    assert (bloom.layout.dp_mode, bloom.layout.grad_bytes) == ("zero1_allreduce", 2)
    # the topology search: its partition gives the embedding and the output layer a slot each
    # of the first and last stage (72 slots over 12 stages: 5, 6 x 10, 5); same system, held out
    search = by[("bloom176b_search", "70x14336 h64 tp8 pp12 mb2",
                 "Megatron-DeepSpeed (BLOOM, Jean Zay)")]
    assert search.layout.stage_layers(70) == [5] + [6] * 10 + [5]
    assert (search.layout.tp, search.layout.dp, search.layout.micro_batches) == (8, 4, 256)
    assert search.model.heads == 64 and search.hardware == bloom.hardware
    oom = [r for r in runs if r.dataset == "bloom176b_search" and r.outcome == "oom"]
    assert len(oom) == 3 and all(r.measured_s is None for r in oom)  # checked, never timed
    assert search.memory_gib == 40.0  # nvidia-smi's reading on the first node
    assert not any(r.dataset == "bloom176b_search" for r in runs
                   if (r.dataset, r.id) in CALIBRATION[r.system])
    table = paper["korthikanti"].copy()
    table.loc[0, "method"] = "partial"
    with pytest.raises(ValueError, match="method 'partial' is not one of"):
        korthikanti_rows(table)


# Where llm-analysis (fitted on the same rows) is as close or closer than this model: the
# Megatron README's H100 runs, whose 32B row the model puts 30% too slow (its DP traffic exposed
# at micro-batch 1). BLOOM's topology search was here from the eighth round (5.05% against
# 5.02%) until the ninth priced DeepSpeed's bf16 wire and fp32 accumulation (4.7%).
PEER_CLOSER = {("megatron_h100", "Megatron-Core r0.8 (H100)")}


def _errors(predictions):
    ours = summarize(predictions).set_index(["dataset", "system"])
    theirs = summarize(predictions, "peer_fitted_time_s").set_index(["dataset", "system"])
    return ours, theirs, ours.time_mean_abs_pct.dropna().index


def test_prediction_errors(predictions):
    """Held-out errors as of this round (the closing note of issue 27 has the table); bounds
    with a margin guard against regressions, and the model beats llm-analysis (fitted on the
    same rows) on every dataset with iteration times but those of ``PEER_CLOSER``."""
    ours, theirs, timed = _errors(predictions)
    beaten = [k for k in timed if k not in PEER_CLOSER]
    assert (ours.loc[beaten, "time_mean_abs_pct"]
            < theirs.loc[beaten, "time_mean_abs_pct"]).all()
    t2 = ours.loc["megascale_table2"]
    assert (t2.time_mean_abs_pct < 4).all() and (t2.time_max_abs_pct < 8).all()
    assert (ours.loc["megascale_fig9"].mfu_mean_abs_points < 5).all()
    parts = predictions[list(BREAKDOWN)].sum(axis=1)
    pd.testing.assert_series_equal(parts, predictions.predicted_iteration_time_s,
                                   check_names=False)


@pytest.mark.xfail(strict=True, reason="llm-analysis is as close or closer there (issue 27's "
                                        "goal, not met yet)")
@pytest.mark.parametrize("key", sorted(PEER_CLOSER))
def test_the_model_beats_the_peer_where_it_does_not_yet(predictions, key):
    ours, theirs, _ = _errors(predictions)
    assert ours.loc[key, "time_mean_abs_pct"] < theirs.loc[key, "time_mean_abs_pct"]


def test_the_peer_reports_why_it_cannot_run(monkeypatch, runs):
    monkeypatch.setattr(peer, "available", lambda: peer.PeerUnavailable("no module"))
    table = peer.predict(runs[:3], CALIBRATION)
    assert table.peer_fitted_time_s.isna().all() and set(table.peer_unavailable) == {
        "no module"}


def test_the_gemm_probe_spreads_its_shapes_and_scores_the_term(runs):
    from suite.scale.probe import probe_shapes
    from suite.scale.probe import summarize as probe_summary

    h100 = [r for r in runs if r.hardware.name == "H100"]
    every = probe_shapes(h100, A100_80GB, 10_000)
    some = probe_shapes(h100, A100_80GB, 12)
    assert len({(g.m, g.n, g.k) for g in every}) == len(every) > 12 == len(some)
    q = [shape_efficiency(g, A100_80GB) for g in every]
    picked = [shape_efficiency(g, A100_80GB) for g in some]
    assert picked == sorted(picked) and (picked[0], picked[-1]) == (min(q), max(q))
    # a term that explains the shapes exactly leaves one ceiling: spread 0
    rows = [{"correct": True, "predicted_shape_efficiency": p, "fraction_of_peak": 0.7 * p}
            for p in (0.5, 0.8, 0.9, 1.0)]
    score = probe_summary(rows)
    assert score["ceiling_cv"] == pytest.approx(0) and score["ceiling_median"] == \
        pytest.approx(0.7)
    assert score["spearman_predicted_vs_measured"] == pytest.approx(1)
    assert score["measured_cv"] > 0.1
    assert probe_summary(rows[:2]) == {"shapes_timed": 2}


def test_the_attention_probe_counts_flops_as_flashattention_does_and_compares():
    from suite.scale.probe import attention_flops, attention_summary

    # FlashAttention's benchmark count at b=2, h=16, s=4096, d=128: 4 b h s^2 d = 2.749e12,
    # halved when causal; the backward 2.5 times it
    assert attention_flops(2, 16, 4096, 128, causal=False) == (4 * 2 * 16 * 4096**2 * 128,
                                                               2.5 * 4 * 2 * 16 * 4096**2 * 128)
    assert attention_flops(2, 16, 4096, 128)[0] == 2 * 16 * 4096**2 * 128 * 2
    rows = [{"kernel": "flash", "correct": True, "seq": s, "forward_fraction_of_peak": f,
             "backward_fraction_of_peak": f / 2} for s, f in ((2048, 0.2), (8192, 0.6),
                                                             (32768, 0.4))]
    rows.append({"kernel": "cudnn", "correct": False, "seq": 2048})
    summary = attention_summary(rows, H100_SXM)
    assert summary["flash"] == {"forward": 0.4, "backward": 0.2}  # medians
    assert "cudnn" not in summary  # nothing correct was timed
    assert summary["assumed"]["flash2"] == {"forward": 0.34, "backward": 0.33}  # long sequences
    at = summary["assumed_at"]["flash2"]
    assert list(at) == ["2048", "8192", "32768"]
    assert at["2048"]["forward"] == pytest.approx(0.34 * 1024 / (1024 + 110))
    assert at["2048"]["backward"] < at["8192"]["backward"] < at["32768"]["backward"] < 0.33


def test_the_attention_kernels_length_term_is_the_lent_h200s():
    """f_inf and K0 of f(s) = f_inf (s/2) / (s/2 + K0), for FlashAttention-2 (SDPA's flash
    backend: the flash2 kind) and cuDNN's fused attention (Hopper's flash kind), are the least
    squares fit of the H200's published attention_kernels step (2k, 8k, 32k tokens), and the
    presets' rounded values reproduce every measured fraction within 0.01."""
    import numpy as np
    from scipy.optimize import curve_fit

    published = json.loads((REPO_ROOT / "results/published/1x-nvidia-h200/gpu-check/"
                            "attention_kernels.json").read_text())
    for kernel, kind in (("flash", "flash2"), ("cudnn", "flash")):
        rows = [r for r in published["measurements"] if r["kernel"] == kernel and r["correct"]]
        seqs = np.array([r["seq"] for r in rows], dtype=float)
        assert len(rows) == 3
        for i, part in enumerate(("forward", "backward")):
            measured = np.array([r[f"{part}_fraction_of_peak"] for r in rows])
            (f_inf, k0), _ = curve_fit(lambda s, f, k: f * (s / 2) / (s / 2 + k), seqs,
                                       measured, p0=(measured.max(), 100.0))
            preset = (getattr(H100_SXM, f"{kind}_fwd"), getattr(H100_SXM, f"{kind}_bwd"))[i]
            assert preset == pytest.approx(f_inf, abs=0.01)
            assert getattr(H100_SXM, f"{kind}_k0")[i] == pytest.approx(k0, rel=0.06)
            for s, m in zip(seqs, measured):
                assert H100_SXM.flash_fractions(kind, int(s))[i] == pytest.approx(m, abs=0.01)


def test_no_published_system_is_fitted_on_a_row_validate_warns_against(predictions):
    """The rule the eighth round made (suite.scale.datasets): a calibration row must spend at
    least WEAK_CALIBRATION_SHARE of its predicted time in GEMMs, or the ceiling fitted on it
    measures the other terms' errors."""
    assert weak_calibration(predictions) == []


def test_the_report_marks_a_weak_calibration_row(runs):
    from suite.report.columns import SCALE_COLUMNS

    (cell,) = [f for header, f in SCALE_COLUMNS if header == "fitted run"]
    # BLOOM's batch-16 run, its calibration until the eighth round: one micro-batch per pipeline
    predictions = predict(runs, {**CALIBRATION,
                                 BLOOM_SYSTEM: (("bloom176b", "176B b16 iteration 3707"),)})
    fitted = predictions[predictions.calibration]
    cells = {r["label"]: cell(r) for r in fitted.to_dict("records")}
    weak = re.fullmatch(r"yes, weak: (\d+)% GEMMs", cells["176B b16 iteration 3707"])
    assert weak and int(weak[1]) < 50  # BLOOM's: one micro-batch, mostly bubble
    assert sum(c == "yes" for c in cells.values()) == len(cells) - 1
    assert cell({**fitted.iloc[0].to_dict(), "calibration": "False"}) == ""  # as a CSV reads it
    (layout,) = [f for header, f in SCALE_COLUMNS if header == "layout"]
    bloom = predictions[predictions.dataset == "bloom176b"].iloc[0].to_dict()
    assert layout(bloom).endswith(", fused_softmax, zero1_allreduce")  # the kernel and DP mode
