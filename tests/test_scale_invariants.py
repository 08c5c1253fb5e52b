"""What any honest step-time model must hold, checked over the layouts ``--search`` enumerates
for every system: a faster machine never slows a layout, nor does hiding more communication; a
better attention kernel is never slower nor bigger; recompute trades time for memory in order;
sequence parallelism never grows memory, nor do fewer KV heads or a smaller vocabulary cost
anything; a larger batch never lowers throughput; data parallelism over replicated state never
scales better than linearly; switching off a term that prices a cost never slows a layout. A
term that breaks one of these misranks layouts wherever it applies, whichever rows it was read
against."""

from dataclasses import fields, replace
from functools import cache

import pytest

from suite.scale.hardware import preset
from suite.scale.layout import ATTENTION
from suite.scale.memory import memory
from suite.scale.model import ModelConfig
from suite.scale.search import layouts
from suite.scale.step import ALL_TERMS, Terms, estimate
from suite.scale.systems import SYSTEMS

GPT = ModelConfig(24, 4096, 32, 2048, 51200)
LLAMA_GQA = ModelConfig(32, 5120, 40, 4096, 128256, kv_heads=8, ffn_hidden=13824,
                        gated_mlp=True, tied_embeddings=False, position_embeddings=False,
                        norm="rmsnorm", dropout=False)
GLOBAL_BATCH = 256
STRIDE = 97  # every 97th layout of each search space: about 260 per system
TIES = 1e-9  # relative: a comm-bound layout takes the same time whatever its kernels


@cache
def sampled(system_name: str) -> tuple:
    """(model, hardware, layout, system) over a stride of each model's layouts on 16 and 64
    GPUs of the system's preset (ceiling 0.75, no straggler: the fitted numbers scale time),
    the attention kernels taken in turn (enumerating them too would take 5x as long)."""
    system = SYSTEMS[system_name]
    hw = replace(preset(system.hardware), gemm_efficiency=0.75)
    space = ((model, layout) for model in (GPT, LLAMA_GQA) for gpus in (16, 64)
             for layout in layouts(model, gpus, GLOBAL_BATCH, hw, system, attention=("flash",)))
    return tuple((model, hw, replace(layout, attention=ATTENTION[i // STRIDE % len(ATTENTION)]),
                  system)
                 for i, (model, layout) in enumerate(space) if i % STRIDE == 0)


def ordered(values: list[float], descending: bool = False) -> bool:
    """Each value at most the next (at least, ``descending``), ties within ``TIES``."""
    pairs = zip(values, values[1:])
    if descending:
        return all(b <= a * (1 + TIES) for a, b in pairs)
    return all(a <= b * (1 + TIES) for a, b in pairs)


def time_of(model, hw, layout) -> float:
    return estimate(model, hw, layout).iteration_time_s


def bytes_of(model, hw, layout) -> float:
    return memory(model, layout, hw).total


def with_recompute(layout, system, recompute: str):
    """The layout under another recompute, with the overlaps the system derives from it."""
    defaults = system.layout_defaults(layout.virtual_stages, 1.0 if recompute == "full" else 0.0,
                                      layout.sequence_parallel)
    return replace(layout, recompute=recompute, tp_overlap=defaults["tp_overlap"])


SYSTEM_NAMES = sorted(SYSTEMS)
FASTER = {"peak_flops": 2.0, "nvlink_bw": 2.0, "network_bw": 2.0, "hbm_bw": 2.0,
          "nvlink_latency_s": 0.5, "network_latency_s": 0.5}


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_a_faster_machine_never_slows_a_layout(system_name):
    checked = 0
    for model, hw, layout, _ in sampled(system_name):
        before = time_of(model, hw, layout)
        for field, factor in FASTER.items():
            quicker = replace(hw, **{field: getattr(hw, field) * factor})
            assert time_of(model, quicker, layout) <= before * (1 + TIES), (field, layout)
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_a_better_attention_kernel_is_never_slower_nor_bigger(system_name):
    best_first = ("flash", "flash2", "flash1", "fused_softmax", "unfused")
    for model, hw, layout, _ in sampled(system_name):
        kinds = [replace(layout, attention=kind) for kind in best_first]
        times = [time_of(model, hw, k) for k in kinds]
        sizes = [bytes_of(model, hw, k) for k in kinds]
        assert ordered(times), (layout, times)
        assert ordered(sizes), (layout, sizes)


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_recompute_trades_time_for_memory_in_order(system_name):
    for model, hw, layout, system in sampled(system_name):
        kinds = [with_recompute(layout, system, r) for r in ("none", "selective", "full")]
        times = [time_of(model, hw, k) for k in kinds]
        sizes = [bytes_of(model, hw, k) for k in kinds]
        assert ordered(times), (layout, times)
        if min(layout.stage_layers(model.layers)) >= 2:  # one layer: its input is kept besides
            assert ordered(sizes, descending=True), (layout, sizes)


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_sequence_parallelism_never_grows_memory(system_name):
    checked = 0
    for model, hw, layout, system in sampled(system_name):
        if layout.tp == 1:
            continue
        tp_overlap = {sp: system.layout_defaults(layout.virtual_stages, layout.full_recompute,
                                                 sp)["tp_overlap"] for sp in (False, True)}
        on, off = (replace(layout, sequence_parallel=sp, tp_overlap=tp_overlap[sp])
                   for sp in (True, False))
        assert bytes_of(model, hw, on) <= bytes_of(model, hw, off) * (1 + TIES), layout
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_a_larger_batch_never_lowers_throughput(system_name):
    for model, hw, layout, _ in sampled(system_name):
        larger = replace(layout, global_batch=2 * layout.global_batch)
        assert estimate(model, hw, larger).tokens_per_s >= \
            estimate(model, hw, layout).tokens_per_s * (1 - TIES), layout


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_hiding_more_communication_never_slows_a_layout(system_name):
    for model, hw, layout, _ in sampled(system_name):
        before = time_of(model, hw, layout)
        for field in ("tp_overlap", "pp_overlap", "dp_overlap"):
            hidden = replace(layout, **{field: 1.0})
            assert time_of(model, hw, hidden) <= before * (1 + TIES), (field, layout)


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_fewer_kv_heads_or_a_smaller_vocabulary_never_cost_time_or_memory(system_name):
    for model, hw, layout, _ in sampled(system_name):
        smaller = [replace(model, vocab=model.vocab // 2)]
        if model.kv_heads // 2 >= layout.tp:  # TP splits the KV heads
            smaller.append(replace(model, kv_heads=model.kv_heads // 2))
        for other in smaller:
            assert time_of(other, hw, layout) <= time_of(model, hw, layout) * (1 + TIES)
            assert bytes_of(other, hw, layout) <= bytes_of(model, hw, layout) * (1 + TIES)


COST_TERMS = [f.name for f in fields(Terms) if f.name != "dp_nic_sharing"]  # that one is a gain:
# a DP group's ranks on one node use their own NICs


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_switching_a_cost_term_off_never_slows_a_layout(system_name):
    for model, hw, layout, _ in sampled(system_name):
        before = time_of(model, hw, layout)
        for term in COST_TERMS:
            without = estimate(model, hw, layout, replace(ALL_TERMS, **{term: False}))
            assert without.iteration_time_s <= before * (1 + TIES), (term, layout)


@pytest.mark.parametrize("system_name", SYSTEM_NAMES)
def test_data_parallelism_never_scales_better_than_linearly(system_name):
    """Doubling DP with the replicas' batch held (weak scaling) never speeds the iteration, and
    with the global batch held (strong scaling) never more than halves it: where DP replicates
    the optimizer state (allreduce), the replicas only add communication. (Sharded state gets
    faster with DP: each GPU's optimizer step shrinks.) One exception is NCCL's: a ring that
    leaves the node holds fewer SMs (16 channels) than one inside it (24), so the compute
    beside a DP ring that grows out of its node can lose less; checked with the two equal."""
    checked = 0
    for model, hw, layout, _ in sampled(system_name):
        if layout.dp_mode != "allreduce":
            continue
        hw = replace(hw, nccl_channels_network=hw.nccl_channels_node)
        before = time_of(model, hw, layout)
        weak = replace(layout, dp=2 * layout.dp, global_batch=2 * layout.global_batch)
        assert time_of(model, hw, weak) >= before * (1 - TIES), layout
        if (layout.global_batch // (2 * layout.dp)) % layout.micro_batch == 0:
            strong = replace(layout, dp=2 * layout.dp)
            assert 2 * time_of(model, hw, strong) >= before * (1 - TIES), layout
        checked += 1
    assert checked > 20
