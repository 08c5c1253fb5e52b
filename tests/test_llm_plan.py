"""The llm config section -> training jobs: sizes, the cumulative ablation ladder, the loss pair
at equal tokens, and that every job's train config is one the training run accepts."""

import pytest

from suite.config import ConfigError
from suite.experiments.llm_plan import ABLATION, ablation_overrides, jobs, section, trainers
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
    "loss": {"size": "a", "steps": 30, "lamb_batch_multiplier": 3},
}}


def test_jobs_cover_every_experiment_and_trainer():
    found = jobs(CONFIG)
    assert {k: len(v) for k, v in found.items()} == {
        "llm_mfu": 4, "llm_engines": 2, "llm_ablation": len(ABLATION), "llm_loss": 2}
    mfu = {(j.label, j.trainer): j for j in found["llm_mfu"]}
    assert mfu[("a", "single")].nprocs == 1 and mfu[("a", "ddp")].nprocs == 2
    b = mfu[("b", "ddp")].train  # per-size overrides of the base train settings
    assert (b["seq_len"], b["global_batch"], b["model"]["block_size"]) == (128, 8, 128)
    assert mfu[("a", "ddp")].train["seq_len"] == 64
    assert trainers(CONFIG) == ["ddp", "single", "zero3"]
    for js in found.values():
        for job in js:
            TrainConfig.from_dict(job.train)  # every job is a valid run
            assert job.path("R") == f"R/{job.experiment}/{job.label}/{job.trainer}.json"


def test_ablation_switches_accumulate_in_order():
    llm = section(CONFIG)
    steps = [ablation_overrides(llm, i) for i in range(len(ABLATION))]
    assert steps[0] == {"fused": False, "ddp_overlap": False, "optimizer": "adamw"}
    assert steps[1]["parallel_block"] and "sliding_window" not in steps[1]
    assert steps[2]["sliding_window"] == 16 and steps[2]["parallel_block"]
    assert steps[3]["fused"] and not steps[3].get("compile")
    assert steps[4]["compile"] and not steps[4]["ddp_overlap"]
    assert steps[5]["ddp_overlap"] and steps[5]["optimizer"] == "adamw"
    assert steps[6]["optimizer"] == "lamb" and steps[6]["global_batch"] == 8 * 3
    ladder = jobs(CONFIG)["llm_ablation"]
    assert [j.label for j in ladder] == [f"{i}-{name}" for i, (name, _, _) in enumerate(ABLATION)]
    assert ladder[0].train["model"]["fused"] is False
    assert ladder[-1].train["model"]["sliding_window"] == 16


def test_loss_runs_see_the_same_tokens():
    adamw, lamb = jobs(CONFIG)["llm_loss"]
    tokens = [j.train["global_batch"] * j.train["seq_len"] * j.train["steps"]
              for j in (adamw, lamb)]
    assert tokens[0] == tokens[1]
    assert (adamw.train["optimizer"], lamb.train["optimizer"]) == ("adamw", "lamb")
    assert lamb.train["global_batch"] == 3 * adamw.train["global_batch"]
    assert adamw.train["data"] == "text" and adamw.train["eval_batches"] > 0
    assert adamw.check_steps == 0  # nothing timed, no gate


def test_unknown_size_names_the_defined_ones():
    bad = {"llm": {**CONFIG["llm"], "engines": {"size": "huge"}}}
    with pytest.raises(ConfigError, match=r"llm.engines.size: model size 'huge'.*\['a', 'b'\]"):
        jobs(bad)


def test_disabled_section_has_no_jobs():
    assert jobs({"llm": {"enabled": False}}) == {}
