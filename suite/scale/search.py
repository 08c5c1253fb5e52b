"""``seedbench scale-model --search``: every layout of a model on a GPU count that can exist and
fits in memory, ranked by predicted iteration time.

Enumerated: TP over the divisors of the node's GPUs the model's heads split over; PP over the
divisors of the rest, up to the layers, each split by DeepSpeed's uniform rule
(``suite.scale.layout``) and with end stages one or two layers lighter than the middle ones where
the rest splits evenly (``end_stage_splits``: room for the embedding and the output layer); DP
the rest, dividing the global batch; micro-batches of 1, 2, 4, ... 16 dividing the replica's
batch; virtual stages dividing every stage's layers (up to 8); recompute; sequence parallelism
where TP > 1; the attention kernels and DP modes asked for (by default every DP mode but
zero1_allreduce and fsdp2, which hold what zero1 and fsdp hold and move more bytes: never
faster; ask for them by name). Layouts that
do not fit (``suite.scale.memory``) are counted and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from suite.scale.hardware import Hardware
from suite.scale.layout import ATTENTION, DP_MODES, RECOMPUTE, Layout
from suite.scale.memory import Memory, memory
from suite.scale.model import ModelConfig
from suite.scale.step import Estimate, estimate
from suite.scale.systems import System

SEARCHED_DP_MODES = tuple(m for m in DP_MODES if m not in ("zero1_allreduce", "fsdp2"))

MICRO_BATCHES = (1, 2, 4, 8, 16)
MAX_VIRTUAL_STAGES = 8


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    estimate: Estimate
    memory: Memory


@dataclass(frozen=True)
class SearchResult:
    ranked: list[Candidate]  # fitting layouts, fastest first
    considered: int
    too_big: int
    leanest: Layout | None = None  # of those too big, the one needing the least memory


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def end_stage_splits(layers: int, pp: int) -> list[tuple[int | None, int | None]]:
    """(first, last) stage layers tried: the uniform rule (None, None), then every other split
    whose end stages hold d_first, d_last in {0, 1, 2} layers fewer than the middle ones, which
    share the rest evenly (Megatron's ``--decoder-first/last-pipeline-num-layers``; its
    ``--account-for-embedding-in-pipeline-split`` with ``--account-for-loss-in-pipeline-split``,
    and DeepSpeed's ``type:transformer|embedding``, are (1, 1))."""
    def split(first: int | None = None, last: int | None = None) -> list[int]:
        return Layout(tp=1, pp=pp, dp=1, micro_batch=1, global_batch=1,
                      first_stage_layers=first, last_stage_layers=last).stage_layers(layers)

    splits: list[tuple[int | None, int | None]] = [(None, None)]
    seen = [split()]
    for d_first, d_last in product(range(3), repeat=2):
        share, rest = divmod(layers + d_first + d_last, pp)
        if pp == 1 or rest or share - max(d_first, d_last) < 1:
            continue
        ends = (share - d_first, share - d_last)
        layers_of_stages = split(*ends)
        if layers_of_stages not in seen:
            seen.append(layers_of_stages)
            splits.append(ends)
    return splits


def layouts(model: ModelConfig, gpus: int, global_batch: int, hw: Hardware, system: System,
            attention: tuple[str, ...] = ATTENTION,
            dp_modes: tuple[str, ...] = SEARCHED_DP_MODES):
    """Every layout that can exist (not yet checked against memory)."""
    for tp in _divisors(hw.gpus_per_node):
        if gpus % tp:
            continue
        try:
            model.check_tp(tp)
        except ValueError:
            continue
        for pp in _divisors(gpus // tp):
            dp = gpus // (tp * pp)
            if pp > model.layers or global_batch % dp:
                continue
            for first, last in end_stage_splits(model.layers, pp):
                yield from _layouts_of_split(model, tp, pp, dp, first, last, global_batch,
                                             system, attention, dp_modes)


def _layouts_of_split(model: ModelConfig, tp: int, pp: int, dp: int, first: int | None,
                      last: int | None, global_batch: int, system: System,
                      attention: tuple[str, ...], dp_modes: tuple[str, ...]):
    ends = {"first_stage_layers": first, "last_stage_layers": last}
    base = Layout(tp=tp, pp=pp, dp=dp, micro_batch=1, global_batch=global_batch, **ends)
    split = base.stage_layers(model.layers)
    vs = [1] + [v for v in range(2, MAX_VIRTUAL_STAGES + 1)
                if pp > 1 and all(n % v == 0 for n in split)]
    for b, v, recompute, sp, kind, mode in product(
            MICRO_BATCHES, vs, RECOMPUTE, (False, True) if tp > 1 else (False,),
            attention, dp_modes):
        if (global_batch // dp) % b or (mode != "allreduce" and dp == 1):
            continue
        settings = {**system.layout_defaults(v, 1.0 if recompute == "full" else 0.0, sp),
                    "attention": kind, "dp_mode": mode}
        yield Layout(tp=tp, pp=pp, dp=dp, micro_batch=b, global_batch=global_batch,
                     virtual_stages=v, recompute=recompute, sequence_parallel=sp, **ends,
                     **settings)


def search(model: ModelConfig, gpus: int, global_batch: int, hw: Hardware, system: System,
           attention: tuple[str, ...] = ATTENTION,
           dp_modes: tuple[str, ...] = SEARCHED_DP_MODES) -> SearchResult:
    """Every fitting layout, fastest first."""
    ranked, considered, too_big = [], 0, 0
    leanest: tuple[float, Layout] | None = None
    for layout in layouts(model, gpus, global_batch, hw, system, attention, dp_modes):
        considered += 1
        mem = memory(model, layout, hw)
        if not mem.fits:
            too_big += 1
            if leanest is None or mem.total < leanest[0]:
                leanest = mem.total, layout
            continue
        ranked.append(Candidate(layout, estimate(model, hw, layout), mem))
    ranked.sort(key=lambda c: c.estimate.iteration_time_s)
    if considered == 0:
        raise ValueError(f"no layout of {gpus} GPUs exists for this model and "
                         f"global_batch={global_batch} (TP must split heads={model.heads} "
                         f"within gpus_per_node={hw.gpus_per_node}; DP must divide the batch)")
    return SearchResult(ranked, considered, too_big, None if leanest is None else leanest[1])
