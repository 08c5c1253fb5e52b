"""The llm config section -> training jobs: sizes, the cumulative ablation ladder on each kind of
engine, the pipeline's micro-batch series, the loss sweep at equal tokens and equal budgets, and
that every job's train config is one the training run accepts."""

import pytest

from suite.config import ConfigError
from suite.experiments.llm_plan import (ABLATION, ablation_overrides, ablation_steps, jobs,
                                       section, trainers)
from suite.trainers.config import TrainConfig

CONFIG = {"llm": {
    "nprocs": 2,
    "train": {"seq_len": 64, "global_batch": 4, "steps": 5, "warmup_steps": 2},
    "sizes": {"a": {"n_layer": 1, "n_embd": 32, "n_head": 2},
              "b": {"n_layer": 2, "n_embd": 64, "n_head": 4, "seq_len": 128, "global_batch": 8}},
    "mfu": {"sizes": ["a", "b"], "trainers": ["single", "ddp"]},
    "engines": {"size": "b", "trainers": ["ddp", "zero3"]},
    "ablation": {"size": "b", "trainer": "ddp", "sliding_window": 16,
                 "lamb_batch_multiplier": 3},
    "pipeline": {"size": "b", "micro_batches": [2, 4], "micro_batch_size": 3},
    "loss": {"size": "a", "steps": 30, "lamb_batch_multiplier": 3, "seeds": [0, 1],
             "lrs": {"adamw": [0.001, 0.002], "lamb": [0.01, 0.02]}},
}}


def test_jobs_cover_every_experiment_and_trainer():
    found = jobs(CONFIG)
    assert {k: len(v) for k, v in found.items()} == {
        "llm_mfu": 4, "llm_engines": 2, "llm_ablation": len(ABLATION) - 1, "llm_pipeline": 2,
        "llm_loss": 2 * 2 * 2}
    mfu = {(j.label, j.trainer): j for j in found["llm_mfu"]}
    assert mfu[("a", "single")].nprocs == 1 and mfu[("a", "ddp")].nprocs == 2
    b = mfu[("b", "ddp")].train  # per-size overrides of the base train settings
    assert (b["seq_len"], b["global_batch"], b["model"]["block_size"]) == (128, 8, 128)
    assert mfu[("a", "ddp")].train["seq_len"] == 64
    assert trainers(CONFIG) == ["ddp", "pipeline", "single", "zero3"]
    for js in found.values():
        for job in js:
            TrainConfig.from_dict(job.train)  # every job is a valid run
            assert job.path("R") == f"R/{job.experiment}/{job.label}/{job.trainer}.json"


def test_ablation_switches_accumulate_in_order():
    llm = section(CONFIG)
    steps = [ablation_overrides(llm, i) for i in range(len(ABLATION))]
    assert steps[0] == {"fused": False, "optimizer": "adamw"}
    assert steps[1]["parallel_block"] and "sliding_window" not in steps[1]
    assert steps[2]["sliding_window"] == 16 and steps[2]["parallel_block"]
    assert steps[3]["fused"] and not steps[3].get("compile")
    assert steps[4]["compile"] and steps[5] == steps[4]  # the overlap step is an engine's
    assert steps[6]["optimizer"] == "lamb" and steps[6]["global_batch"] == 8 * 3
    ladder = jobs(CONFIG)["llm_ablation"]
    # DDP has no overlap step: its bucketing is the baseline's
    assert [j.label for j in ladder] == [f"{i}-{name}" for i, (name, _, _) in enumerate(ABLATION)
                                         if name != "overlap"]
    assert {j.trainer for j in ladder} == {"ddp"}
    assert ladder[0].train["model"]["fused"] is False
    assert ladder[-1].train["model"]["sliding_window"] == 16


@pytest.mark.parametrize("engine,off", [("fsdp2", "fsdp2-noprefetch"),
                                        ("zero3", "zero3-nooverlap")])
def test_the_overlap_step_turns_on_the_engines_prefetch(engine, off):
    steps = ablation_steps(engine)
    assert [s for s, _, _ in steps] == list(range(len(ABLATION)))
    assert {e for s, _, e in steps if s < 5} == {off} and {e for s, _, e in steps if s >= 5} \
        == {engine}


def test_on_the_pipeline_lamb_s_batch_is_more_micro_batches():
    config = {"llm": {**CONFIG["llm"], "ablation": {**CONFIG["llm"]["ablation"],
                                                    "trainer": "pipeline", "micro_batches": 2}}}
    ladder = {j.label: j for j in jobs(config)["llm_ablation"]}
    assert "5-overlap" not in ladder and {j.trainer for j in ladder.values()} == {"pipeline"}
    base, lamb = ladder["0-baseline"].train, ladder["6-lamb"].train
    assert (base["micro_batches"], base["global_batch"]) == (2, 8)
    assert (lamb["micro_batches"], lamb["global_batch"]) == (6, 24)  # the same micro-batch
    pipe = jobs(config)["llm_pipeline"]
    assert [(j.label, j.train["micro_batches"], j.train["global_batch"]) for j in pipe] == \
        [("m2", 2, 6), ("m4", 4, 12)]


@pytest.mark.parametrize("key,value,match", [
    ("pipeline", {"size": "a"}, "'a' has n_layer=1; it must have at least the 2 pipeline"),
    ("pipeline", {"size": "b", "micro_batches": [1, 4]}, "1 is fewer than the 2 stages"),
])
def test_a_pipeline_too_small_for_the_ranks_is_refused(key, value, match):
    with pytest.raises(ConfigError, match=match):
        jobs({"llm": {**CONFIG["llm"], key: value}})


def test_loss_sweep_same_tokens_same_budget():
    runs = jobs(CONFIG)["llm_loss"]
    tokens = {j.train["global_batch"] * j.train["seq_len"] * j.train["steps"] for j in runs}
    assert len(tokens) == 1  # equal tokens for every run
    by_opt = {o: [j for j in runs if j.train["optimizer"] == o] for o in ("adamw", "lamb")}
    assert {j.train["lr"] for j in by_opt["adamw"]} == {0.001, 0.002}
    assert {j.train["lr"] for j in by_opt["lamb"]} == {0.01, 0.02}
    assert {(j.train["lr"], j.train["seed"]) for j in by_opt["lamb"]} == {
        (lr, s) for lr in (0.01, 0.02) for s in (0, 1)}  # every LR at every seed
    assert {j.train["global_batch"] for j in by_opt["lamb"]} == {3 * 4}
    assert by_opt["adamw"][0].label == "adamw-b4-lr0.001-s0"
    assert all(j.train["data"] == "text" and j.check_steps == 0 for j in runs)
    unequal = {"llm": {**CONFIG["llm"], "loss": {**CONFIG["llm"]["loss"],
                                                "lrs": {"adamw": [0.001], "lamb": [0.01, 0.02]}}}}
    with pytest.raises(ConfigError, match=r"adamw \[0.001\] has 1 learning rates, lamb "
                                          r"\[0.01, 0.02\] 2: the two sweeps must be as long"):
        jobs(unequal)


def test_unknown_size_names_the_defined_ones():
    bad = {"llm": {**CONFIG["llm"], "engines": {"size": "huge"}}}
    with pytest.raises(ConfigError, match=r"llm.engines.size: model size 'huge'.*\['a', 'b'\]"):
        jobs(bad)


def test_disabled_section_has_no_jobs():
    assert jobs({"llm": {"enabled": False}}) == {}
