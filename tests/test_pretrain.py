"""The pre-training loop, the VWN and PMA runs and their plans: configs, forks, schedules,
checkpoints, merges and the records the analyses read."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from reference_impl.merging import merge_checkpoints
from reference_impl.vwn import VWNGPT
from suite.config import ConfigError, validate
from suite.experiments import pma_merging, pretrain, pretrain_config, pretrain_plan, vwn_width

MODEL = {"n_layer": 1, "n_embd": 16, "n_head": 2}
TRAIN = {"model": MODEL, "seq_len": 16, "batch": 2, "lr": 3e-3, "warmup_steps": 2, "steps": 8,
         "eval_every": 4, "eval_batches": 2, "threads": 1}


pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(**kw) -> pretrain_config.PretrainConfig:
    return pretrain_config.PretrainConfig.from_dict({**TRAIN, **kw})


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("bad, match", [
    ({"kind": "mamba"}, "train.kind='mamba' is not one of"),
    ({"stepz": 3}, r"unknown key\(s\) \['stepz'\]"),
    ({"model": {**MODEL, "m": 2}}, r"unknown key\(s\) \['m'\] for kind='gpt'"),
    ({"kind": "vwn", "model": {**MODEL, "m": 3, "n": 3}}, "m=3 must divide n_embd=16"),
    ({"lr": 0}, "train.lr=0 must be a positive number"),
    ({"steps": 0}, "train.steps=0 must be a positive int"),
    ({"device": "tpu"}, "train.device='tpu'"),
])
def test_config_errors_name_the_value(bad, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(**bad)


def test_model_defaults_to_bytes_and_seq_len():
    mc = _cfg(kind="vwn", model={**MODEL, "m": 2, "n": 4}).model_config()
    assert (mc.vocab_size, mc.block_size, mc.expansion) == (256, 16, 2.0)


# ----------------------------------------------------------------------------- the loop


def test_fork_continues_exactly_like_the_original():
    """A fork copies weights, optimizer state and data position: training both on from there
    gives bit-identical weights (what the decay forks and the spike branches rely on)."""
    cfg = _cfg()
    run = pretrain.start(cfg, seed=3)
    schedule = pretrain.warmup_constant(cfg)
    pretrain.train(run, 3, schedule)
    fork = run.fork()
    assert fork.step == run.step == 3
    a = pretrain.train(run, 3, schedule)
    b = pretrain.train(fork, 3, schedule)
    assert a == b
    for (name, p), q in zip(run.model.named_parameters(), fork.model.parameters()):
        assert torch.equal(p, q), name
        assert p is not q


def test_train_applies_the_schedule_and_counts_steps():
    cfg = _cfg(warmup_steps=4)
    run = pretrain.start(cfg, seed=0)
    seen = []
    pretrain.train(run, 2, lambda s: 0.5 ** s,
                   on_step=lambda step, loss, dt: seen.append(
                       (step, run.optimizer.param_groups[0]["lr"])))
    assert seen == [(1, cfg.lr), (2, cfg.lr * 0.5)]
    assert run.step == 2


def test_same_seed_same_run_other_seed_other_run():
    cfg = _cfg()
    one = pretrain.train(pretrain.start(cfg, 0), 2, pretrain.warmup_constant(cfg))
    two = pretrain.train(pretrain.start(cfg, 0), 2, pretrain.warmup_constant(cfg))
    three = pretrain.train(pretrain.start(cfg, 1), 2, pretrain.warmup_constant(cfg))
    assert one == two and one != three


def test_evaluate_reports_next_2_token_only_with_mtp():
    cfg = _cfg(kind="vwn", model={**MODEL, "m": 2, "n": 4, "mtp": True})
    run = pretrain.start(cfg, 0)
    heldout = pretrain.heldout_set(cfg)
    assert len(heldout) == cfg.eval_batches
    losses = pretrain.evaluate(run.model, heldout, run.device)
    assert math.isclose(losses["next_token"], math.log(256), rel_tol=0.05)
    assert losses["next_2_token"] is not None
    plain = pretrain.start(_cfg(), 0)
    assert pretrain.evaluate(plain.model, heldout, plain.device)["next_2_token"] is None
    # the same held-out windows for every run of the same shape
    again = pretrain.heldout_set(cfg)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(heldout, again))


def test_vwn_optimizer_exempts_static_ghc_from_decay():
    cfg = _cfg(kind="vwn", model={**MODEL, "m": 2, "n": 4})
    run = pretrain.start(cfg, 0)
    decay, no_decay = run.optimizer.param_groups
    layer = run.model.layers[0]
    assert any(p is layer.ghc_attn.A for p in no_decay["params"])
    assert all(p is not layer.ghc_attn.A for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == cfg.weight_decay


# ----------------------------------------------------------------------------- VWN plan and run


def _vwn_section(**kw):
    section = {"train": {**TRAIN}, "seeds": [0, 1], "expansions": [1, 1.5, 2],
               "m_ablation": {"r": 2, "m": [1, 2]}, **kw}
    return validate({"vwn": section})["vwn"]


def test_variants_cover_r_and_the_m_ablation_once():
    vwn = _vwn_section()
    got = [(v.m, v.n, v.series) for v in pretrain_config.variants(vwn)]
    # (2, 4) is r = 2 at the main m: run once, as main
    assert got == [(2, 2, "main"), (2, 3, "main"), (2, 4, "main"), (1, 2, "m_ablation")]
    with pytest.raises(ConfigError, match=r"r=1.5 with m=1 gives n=1.5"):
        pretrain_config.variants(_vwn_section(m=1))
    # an integer written as a float (YAML 2.0) passes the schema and means the same runs
    floats = _vwn_section(m=2.0, m_ablation={"r": 2, "m": [1.0, 2.0]})
    assert [(v.m, v.n, v.label) for v in pretrain_config.variants(floats)] == \
        [(v.m, v.n, v.label) for v in pretrain_config.variants(vwn)]


def test_baseline_is_frozen_plain_and_longer():
    vwn = _vwn_section(baseline_length=3)
    base, wide = pretrain_config.variants(vwn)[:2]
    b, w = pretrain_config.train_config(vwn, base), pretrain_config.train_config(vwn, wide)
    assert b["model"]["ghc_trainable"] is False and b["model"]["dynamic"] is False
    assert w["model"]["ghc_trainable"] is True and w["model"]["dynamic"] is True
    assert b["steps"] == 3 * w["steps"]
    assert b["model"]["mtp"] and w["model"]["mtp"]
    bad = _vwn_section()
    bad["train"]["eval_every"] = 3
    with pytest.raises(ConfigError, match="must be a multiple of eval_every=3"):
        pretrain_config.train_config(bad, base)


def test_vwn_run_record():
    vwn = _vwn_section(baseline_length=2)
    v = pretrain_config.variants(vwn)[1]
    rec = vwn_width.run(pretrain_config.train_config(vwn, v), seed=0)
    assert rec.status.value == "ok", rec.reason
    d = rec.derived
    assert [c["step"] for c in d["curve"]] == [0, 4, 8]
    assert d["curve"][-1]["next_token"] < d["curve"][0]["next_token"]
    assert d["final_next_2_token"] is not None and d["tokens_seen"] == 8 * 2 * 16
    assert rec.point["r"] == 1.5 and d["cost"]["flops_overhead"] > 0
    assert len(rec.timing["samples"]) == 8 - vwn_width.TIMING_WARMUP


def test_vwn_run_failure_is_a_record():
    rec = vwn_width.run({**TRAIN, "kind": "vwn", "model": {**MODEL, "m": 3, "n": 3}}, seed=0)
    assert rec.status.value == "failed" and "m=3 must divide" in rec.reason
    assert "ConfigError" in rec.derived["traceback"]  # kept, as for every runner


# ----------------------------------------------------------------------------- PMA


def _pma_section(**kw):
    section = {"train": {**TRAIN, "steps": 12, "eval_every": 4}, "seeds": [0],
               "checkpoint_every": 2, "intervals": [1, 2], "counts": [3, 4],
               "methods": ["sma", "ema:0.5", "wma"], "merge_every": 6,
               "headline": {"method": "sma", "n": 3, "interval": 1},
               "decay": {"steps": [4], "early_end": 6}, "spike": {"steps": 2, "resume_steps": 4},
               "stable": {"window": 6}, "device": "cpu", **kw}
    return validate({"pma": section})["pma"]


@pytest.mark.parametrize("change, match", [
    ({"checkpoint_every": 5}, "steps=12 must be a multiple of pma.checkpoint_every=5"),
    ({"headline": {"method": "sma", "n": 7, "interval": 1}},
     r"interval=1 .* span 12 steps; they must span fewer than the run's 12"),
    ({"methods": ["ema"]}, r"pma.methods.0: 'ema' is not allowed .*sma, wma or ema:ALPHA"),
    ({"methods": ["ema:1.5"]}, r"alpha must be in \(0, 1\]"),
    ({"decay": {"steps": [3]}}, "pma.decay.steps: 3 must be a multiple of checkpoint_every=2"),
    ({"decay": {"steps": [12]}}, r"leave at least max\(warmup_steps, checkpoint_every\) = 2"),
    ({"decay": {"steps": [4], "early_end": 4}}, r"early_end=4 must be a merge point"),
    ({"stable": {"window": 2}}, r"pma.stable.window=2 must be shorter .* at least 3 evaluations"),
])
def test_pma_section_errors(change, match):
    with pytest.raises(ConfigError, match=match):
        pretrain_config.check_section(_pma_section(**change))


def test_the_stable_window_defaults_to_the_last_quarter_of_the_run():
    assert pretrain_config.stable_window({"stable": {"window": None}}, 400) == 100
    assert pretrain_config.stable_window({"stable": {"window": 60}}, 400) == 60


def test_parse_method():
    assert pretrain_config.parse_method("ema:0.1") == ("ema", 0.1)
    assert pretrain_config.parse_method("wma")[0] == "wma"
    for bad in ("ema", "sma:0.1", "avg"):
        with pytest.raises(ConfigError, match="is not 'sma', 'wma' or 'ema:ALPHA'"):
            pretrain_config.parse_method(bad)


def test_pma_run_merges_from_disk(tmp_path):
    pma = _pma_section(keep_checkpoints=True)
    rec = pma_merging.run(pma, seed=0, checkpoint_dir=tmp_path / "ck")
    assert rec.status.value == "ok", rec.reason
    d = rec.derived
    saved = sorted(p.name for p in (tmp_path / "ck" / "constant").iterdir())
    assert saved == [f"step{s:07d}.pt" for s in range(2, 13, 2)]
    # the grid: every feasible (t, method, N, V) and nothing else
    keys = {(g["step"], g["method"], g["n"], g["interval_steps"]) for g in d["merges"]}
    assert (6, "sma", 3, 2) in keys and (12, "wma", 4, 2) in keys
    assert (6, "sma", 4, 2) not in keys  # would need a checkpoint at step 0
    assert (6, "sma", 3, 4) not in keys  # 6 - 2*4 < 2
    # the headline merge is the SMA of the files at 8, 10, 12, evaluated on the held-out set
    h = d["headline"]
    assert h["steps"] == [8, 10, 12]
    cfg = pretrain_config.check_section(pma)
    states = [pretrain.load_weights(tmp_path / "ck" / "constant" / f"step{s:07d}.pt")
              for s in h["steps"]]
    model = pretrain.start(cfg, 0).model
    model.load_state_dict(merge_checkpoints(states, "sma"))
    loss = pretrain.evaluate(model, pretrain.heldout_set(cfg), torch.device("cpu"))
    assert loss["next_token"] == pytest.approx(h["merged"], abs=1e-6)
    assert h["latest"] == d["curve"][-1]["latest"]
    # decay: a fork leaves at step 12 - 4 = 8 and decays over the last 4 steps, so the annealed
    # model sees the same tokens as the merges at 12; its checkpoints at 10, 12 are merged
    (dec,) = d["decays"]
    assert dec["fork_step"] == 8 and dec["tokens"] == 12 * 2 * 16
    assert [c["step"] for c in dec["curve"]] == [10, 12]
    assert dec["merged_in_decay_n"] == 2
    assert dec["annealed"] == dec["curve"][-1]["loss"] != h["latest"]
    # spike: three branches, each evaluated from its start
    sp = d["spike"]
    assert set(sp["curves"]) == {"merged", "last", "spiked"}
    assert sp["pre_spike_steps"] == [8, 10, 12]
    assert [c["step"] for c in sp["curves"]["last"]] == [0, 2, 4]
    assert sp["curves"]["last"][0]["loss"] == pytest.approx(h["latest"], abs=1e-6)
    assert sp["curves"]["spiked"][0]["loss"] == pytest.approx(sp["after_spike"], abs=1e-6)
    assert len(sp["spike_train_losses"]) == 2
    # every branch resumes at the spike's LR (the paper's: too high to recover at), read back
    # from its optimizer
    assert sp["branch_lr"] == pytest.approx({b: cfg.lr * 10 for b in ("merged", "last",
                                                                       "spiked")})
    assert sp["resume_lr_factor"] == sp["lr_factor"] == 10
    # merging early in the decay: its checkpoints up to the decay's middle (8 + 2)
    assert dec["merged_early_in_decay_steps"] == [10]
    assert dec["merged_early_in_decay"] == pytest.approx(dec["curve"][0]["loss"], abs=1e-6)
    # the early fork: leaves at 6 - 4 = 2, anneals to step 6, beside the merge at 6
    early = d["early_fork"]
    assert (early["end_step"], early["decay_steps"]) == (6, 4)
    assert early["latest"] == next(c["latest"] for c in d["curve"] if c["step"] == 6)
    assert early["merged"] == pytest.approx(next(
        g["merged"] for g in d["merges"]
        if (g["step"], g["method"], g["n"], g["interval_steps"]) == (6, "sma", 3, 2)), abs=1e-6)
    # the stable-phase check: the held-out slope over the last 6 steps, per 100 steps
    st = d["stable"]
    tail = [(c["step"], c["latest"]) for c in d["curve"] if c["step"] >= 6]
    slope = np.polyfit(*np.array(tail).T, 1)[0] * 100
    assert st["points"] == 4 and st["slope_per_100_steps"] == pytest.approx(slope)
    assert st["met"] == (slope >= -st["max_slope"])


def test_pma_spike_branches_resume_at_the_configured_lr(tmp_path):
    rec = pma_merging.run(_pma_section(spike={"steps": 2, "resume_steps": 2,
                                              "resume_lr_factor": 0.5}), 0, tmp_path / "ck")
    assert rec.status.value == "ok", rec.reason
    lr = rec.config["train"]["lr"]
    assert rec.derived["spike"]["branch_lr"] == pytest.approx(
        {"merged": lr * 0.5, "last": lr * 0.5, "spiked": lr * 0.5})


def test_pma_run_removes_checkpoints_by_default(tmp_path):
    rec = pma_merging.run(_pma_section(spike={"enabled": False}, decay={"steps": []}), 0,
                          tmp_path / "ck")
    assert rec.status.value == "ok", rec.reason
    assert not (tmp_path / "ck").exists()
    assert rec.derived["spike"] is None and rec.derived["decays"] == []


def test_pma_run_failure_is_a_record_with_its_traceback(tmp_path):
    rec = pma_merging.run(_pma_section(checkpoint_every=5), 0, tmp_path / "ck")
    assert rec.status.value == "failed" and "multiple of pma.checkpoint_every=5" in rec.reason
    assert "check_section" in rec.derived["traceback"] and not (tmp_path / "ck").exists()


def test_plan_paths_and_specs():
    config = {"vwn": _vwn_section(), "pma": _pma_section()}
    plan = pretrain_plan.jobs(config)
    vwn, pma = plan["vwn_scaling"], plan["pma_merging"]
    assert len(vwn) == 4 * 2 and len(pma) == 1
    assert vwn[0].path("R") == "R/vwn_scaling/m2-n2/seed0.json"
    assert pma[0].path("R") == "R/pma_merging/gpt/seed0.json"
    off = pretrain_plan.jobs({"vwn": {"enabled": False}, "pma": {"enabled": False}})
    assert off == {}
    spec = copy.deepcopy(vwn[2].spec)
    assert pretrain_config.PretrainConfig.from_dict(spec).kind == "vwn"
    assert isinstance(pretrain.build_model(pretrain_config.PretrainConfig.from_dict(spec), 0,
                                           torch.device("cpu")), VWNGPT)


def test_bf16_autocast_trains_with_fp32_weights():
    fp32, bf16 = _cfg(), _cfg(dtype="bf16")
    a = pretrain.train(pretrain.start(fp32, 0), 3, pretrain.warmup_constant(fp32))
    run = pretrain.start(bf16, 0)
    b = pretrain.train(run, 3, pretrain.warmup_constant(bf16))
    assert all(p.dtype == torch.float32 for p in run.model.parameters())
    assert all(math.isfinite(v) for v in b) and a != b
    assert b == pytest.approx(a, rel=2e-2)  # bf16 rounding, the same run otherwise
    losses = pretrain.evaluate(run.model, pretrain.heldout_set(bf16), run.device, "bf16")
    assert math.isfinite(losses["next_token"])
    with pytest.raises(ConfigError, match="train.dtype='fp16' is not one of"):
        _cfg(dtype="fp16")


def test_decay_fork_follows_the_constant_run_until_it_leaves(tmp_path):
    """A decay fork is the constant run up to its fork step, then the WSD decay: replaying both
    by hand gives the loss the record holds at the fork's first checkpoint."""
    from reference_impl.schedules import make_schedule

    pma = _pma_section(spike={"enabled": False})
    rec = pma_merging.run(pma, 0, tmp_path / "ck")
    (dec,) = rec.derived["decays"]
    cfg = pretrain_config.check_section(pma)
    run = pretrain.start(cfg, 0)
    pretrain.train(run, dec["fork_step"], pretrain.warmup_constant(cfg))
    pretrain.train(run, 2, make_schedule("wsd", total_steps=12, warmup_steps=2,
                                         decay_fraction=4 / 12))
    loss = pretrain.evaluate(run.model, pretrain.heldout_set(cfg), run.device)["next_token"]
    assert loss == pytest.approx(dec["curve"][0]["loss"], abs=1e-6)
