"""suite.resilience: the atomic checkpoint store, a bit-exact resume, Young's and Daly's interval
and ETTR, the straggler finder, and the figures drawn from event logs; the failure paths of a
resilience job (a fault past the run's end, no restart allowed, an engine DCP cannot read). The
faults under torchrun's agent run in the workflow test (tests/test_workflow.py)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as tdist

from suite.experiments.llm_plan import ResilienceJob
from suite.experiments.llm_resilience import (checkpoint_stalls, recovery, run_job,
                                              straggler_phases)
from suite.records import read_record
from suite.resilience import ettr, store
from suite.resilience.monitor import ComputeTimer, find_stragglers, rank_table
from suite.resilience.supervise import Launch
from suite.trainers.config import TrainConfig
from suite.trainers.single import SingleTrainer
from suite.trainers.base import DistInfo

TRAIN = {"model": {"n_layer": 1, "n_embd": 32, "n_head": 2}, "seq_len": 16, "global_batch": 4,
         "steps": 4, "warmup_steps": 1, "threads": 1}


@pytest.fixture
def group():
    """A one-rank gloo group, as DCP's collectives need one."""
    from suite.launch.ports import free_port

    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                             world_size=1)
    yield tdist.new_group(backend="gloo")
    tdist.destroy_process_group()


def _engine(seed=0):
    from suite.experiments.llm_train import build_model

    cfg = TrainConfig.from_dict({**TRAIN, "seed": seed})
    engine = SingleTrainer()
    engine.setup(build_model(cfg, torch.device("cpu")), cfg, DistInfo.single(torch.device("cpu")))
    return cfg, engine


def _state(engine):
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(*engine.checkpoint_state())
    return {"model": model_sd, "optim": optim_sd}


def _steps(cfg, engine, batches):
    return [engine.train_step(x, y).loss for x, y in batches]


@pytest.mark.parametrize("mode", store.MODES)
def test_a_resumed_run_equals_the_uninterrupted_one_to_the_bit(tmp_path, group, mode):
    from torch.distributed.checkpoint.state_dict import set_state_dict

    from suite.experiments.llm_train import global_batches

    cfg, engine = _engine()
    batches = [b for _, b in zip(range(6), global_batches(cfg))]
    _steps(cfg, engine, batches[:3])
    ck = store.CheckpointStore(tmp_path, rank=0, group=group)
    ck.save(2, _state(engine), {"step": 2}, mode)
    ck.close()
    after = _steps(cfg, engine, batches[3:])

    _, fresh = _engine(seed=1)  # other weights: everything must come from the checkpoint
    path, manifest = store.latest(tmp_path)
    state = _state(fresh)
    ck.load(path, state)
    set_state_dict(*fresh.checkpoint_state(), model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    assert manifest["extra"] == {"step": 2} and manifest["step"] == 2
    assert _steps(cfg, fresh, batches[3:]) == after


def test_a_write_that_never_finished_is_never_loaded(tmp_path, group):
    _, engine = _engine()
    ck = store.CheckpointStore(tmp_path, rank=0, group=group)
    ck.save(1, _state(engine), {"step": 1}, "sync")
    half = tmp_path / "step-00000003.tmp"  # a crash mid-write: data, no .metadata, no commit
    half.mkdir()
    (half / "__0_0.distcp").write_bytes(b"\0" * 100)
    assert store.latest(tmp_path)[0].name == "step-00000001"
    assert store.clean(tmp_path) == ["step-00000003.tmp"] and not half.exists()
    with pytest.raises(store.CheckpointError, match="no .metadata: the write did not finish"):
        store.commit(_unfinished(tmp_path), 4, {})


def _unfinished(root):
    path = root / "step-00000004.tmp"
    path.mkdir()
    (path / "__0_0.distcp").write_bytes(b"x")
    return path


def test_a_truncated_checkpoint_is_named_and_the_previous_one_loaded(tmp_path, group):
    _, engine = _engine()
    ck = store.CheckpointStore(tmp_path, rank=0, group=group)
    for step in (1, 2):
        ck.save(step, _state(engine), {"step": step}, "sync")
    data = tmp_path / "step-00000002" / "__0_0.distcp"
    size = data.stat().st_size
    os.truncate(data, size // 2)
    lines = []
    path, manifest = store.latest(tmp_path, log=lines.append)
    assert path.name == "step-00000001" and manifest["step"] == 1
    assert lines == [f"checkpoint skipped: {data}: {size // 2} bytes, the manifest says {size}: "
                     f"truncated or damaged"]


def test_an_unwritable_checkpoint_folder_is_one_clear_error(tmp_path, group):
    _, engine = _engine()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    ck = store.CheckpointStore(blocker / "ckpt", rank=0, group=group)
    with pytest.raises(store.CheckpointError, match=r"cannot write checkpoint .*a-file/ckpt"):
        ck.save(1, _state(engine), {"step": 1}, "sync")


# ----------------------------------------------------------------------------- ETTR


@pytest.mark.parametrize("mtbf_min, daly_min, young_min", [
    (24 * 60, 117, 120), (6 * 60, 57, 60), (15, 9.1, 12.2)])
def test_daly_and_young_reproduce_dalys_own_predictions(mtbf_min, daly_min, young_min):
    """Daly (2006), Figs. 3-5: delta = 5 min (results/paper/resilience_published.csv)."""
    assert ettr.daly_interval(5, mtbf_min) == pytest.approx(daly_min, abs=0.6)
    assert ettr.young_interval(5, mtbf_min) == pytest.approx(young_min, abs=0.1)


def test_ettr_is_daly_expected_time():
    # without failures only the checkpoint stall is lost
    assert ettr.ettr(100, 10, 50, 1e12) == pytest.approx(100 / 110, rel=1e-6)
    # Daly's eq. 12 at a point, by hand
    tau, delta, r, m = 600.0, 30.0, 120.0, 3600.0
    assert ettr.ettr(tau, delta, r, m) == pytest.approx(
        tau / (m * math.exp(r / m) * (math.exp((tau + delta) / m) - 1)))
    cheap, dear = ettr.Costs(1, 1, 60), ettr.Costs(30, 30, 60)
    points = [ettr.at_scale(cheap, n, 2e-5) for n in (1024, 12288)]
    assert points[0].ettr > points[1].ettr  # more GPUs, more failures
    assert ettr.at_scale(cheap, 12288, 2e-5).ettr > ettr.at_scale(dear, 12288, 2e-5).ettr
    # a two-stage checkpoint durable only 40 s later: no interval shorter than that
    assert ettr.at_scale(ettr.Costs(1, 41, 60), 12288, 1e-3).interval_s >= 40
    with pytest.raises(ValueError, match="gpus=0 must be >= 1"):
        ettr.at_scale(cheap, 0, 2e-5)


# ----------------------------------------------------------------------------- stragglers


def test_the_finder_names_the_slow_rank_and_no_other():
    compute = {0: [1.0, 1.1, 0.9], 1: [1.0, 1.05, 0.95], 2: [1.6, 1.5, 1.7], 3: [1.0] * 3}
    named, ratios = find_stragglers(compute)
    assert named == [2] and ratios[2] == pytest.approx(1.6)
    assert find_stragglers({0: [1.0], 1: [1.1]})[0] == []  # 10%: noise, not a straggler
    assert rank_table({0: [1.0, 3.0]}, [4.0, 4.0]) == [
        {"rank": 0, "compute_s": 2.0, "step_s": 4.0, "other_s": 2.0}]


def test_the_cpu_timer_counts_a_shared_core_and_not_a_wait():
    """Run-queue time counts (the rank wanted its core), a sleep (a wait for a peer) not."""
    timer = ComputeTimer([], cuda=False)
    time.sleep(0.3)
    assert timer.take() < 0.05
    core = sorted(os.sched_getaffinity(0))[0]
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})"
                            "\nwhile True:\n    pass\n"])
    try:
        time.sleep(0.3)  # the hog is running
        t0 = time.perf_counter()
        timer.take()
        x = 0
        while time.perf_counter() - t0 < 0.6:
            x += 1
        counted = timer.take()
    finally:
        hog.kill()
        os.sched_setaffinity(0, before)
    assert counted == pytest.approx(0.6, rel=0.2)  # on CPU or in the run queue, all counted


# ----------------------------------------------------------------------------- figures


def _ev(t, event, rank=0, attempt=0, **kw):
    return {"t": t, "event": event, "rank": rank, "attempt": attempt, **kw}


def test_a_checkpoints_stall_counts_the_steps_beside_its_background_write():
    step = lambda s, t, d: _ev(t, "step", step=s, loss=1.0, step_s=d, compute_s=d)  # noqa: E731
    events = [step(0, 1, 1.0), step(1, 2, 1.0), step(2, 3, 1.0),
              _ev(3.1, "checkpoint", step=2, mode="sync", blocked_s=2.0),
              _ev(3.1, "committed", step=2, mode="sync", persisted_s=2.0, nbytes=100),
              step(3, 6, 1.0), step(4, 7, 1.0),
              _ev(7.1, "checkpoint", step=4, mode="two-stage", blocked_s=0.1),
              step(5, 8.5, 1.5), step(6, 10, 1.3),
              _ev(10.1, "committed", step=4, mode="two-stage", persisted_s=2.5, nbytes=100),
              step(7, 11, 1.0),
              _ev(11.1, "checkpoint", step=7, mode="sync", blocked_s=1.0),
              _ev(11.1, "committed", step=7, mode="sync", persisted_s=1.0, nbytes=100),
              step(8, 13, 1.0), step(9, 14, 1.0)]
    out = checkpoint_stalls(events, warmup=1)
    # sync's first checkpoint (its set-up) is apart; the stall is the median of the others
    assert out["sync"]["first_stall_s"] == 2.0 and out["sync"]["stalls_s"] == [1.0]
    assert out["sync"]["stall_s"] == 1.0 and out["sync"]["persist_bytes_per_s"] == 100 / 1.5
    assert out["two-stage"]["stall_s"] == pytest.approx(0.1 + 0.5 + 0.3)  # one: itself
    assert out["two-stage"]["checkpoints"][0]["steps_beside"] == 2


def test_one_stall_sample_reads_back_from_the_table(tmp_path):
    """A single sample ("0.05") comes back from the CSV as a number, not text."""
    import pandas as pd

    from suite.analysis.resilience_analysis import _samples

    pd.DataFrame({"stall_samples": ["0.05", "0.1;0.2", None]}).to_csv(tmp_path / "t.csv")
    rows = list(pd.read_csv(tmp_path / "t.csv").itertuples())
    assert [_samples(r) for r in rows] == [[0.05], [0.1, 0.2], []]


def test_recovery_splits_the_time_from_fault_to_training():
    events = [_ev(10, "fault", rank=1, kind="kill", step=5),
              _ev(10.2, "error", kind="peer lost", error="x"),
              _ev(11, "start", attempt=1), _ev(11, "start", rank=1, attempt=1),
              _ev(13, "rendezvous", attempt=1), _ev(13.5, "rendezvous", rank=1, attempt=1),
              _ev(14, "restored", attempt=1, step=3, seconds=0.3),
              _ev(14, "restored", rank=1, attempt=1, step=3, seconds=0.3)]
    events += [_ev(1 + s, "step", step=s, loss=float(s), step_s=0.1, compute_s=0.1)
               for s in range(5)]
    events += [_ev(10.5 + s, "step", attempt=1, step=s, loss=float(s), step_s=0.1,
                   compute_s=0.1) for s in range(4, 8)]
    run = Launch(code=0, started=0, ended=20, lines=[(10.1, "failed (exitcode: -9) local_rank")])
    out = recovery(sorted(events, key=lambda e: e["t"]), run, {s: float(s) for s in range(8)})
    assert out["detected_by"] == "torchrun's agent: a worker exited with code -9"
    assert out["detect_s"] == pytest.approx(0.1)
    assert (out["shutdown_s"], out["startup_s"], out["restore_s"]) == pytest.approx((0.9, 2.5, 0.5))
    assert out["first_step_s"] == pytest.approx(0.5) and out["steps_redone"] == 1
    assert out["downtime_s"] == pytest.approx(4.5)
    assert out["bit_exact"] and out["resumed_from_step"] == 3


def test_straggler_phases_name_the_slowed_rank():
    events = [_ev(0, "phase", index=0, slowed=None), _ev(4, "phase", index=1, slowed=1)]
    for s in range(8):
        for r in (0, 1):
            step = 2.0 if s >= 4 else 1.0  # the step is as slow on every rank
            compute = 2.0 if (s >= 4 and r == 1) else 1.0
            events.append(_ev(s, "step", rank=r, step=s, loss=0, step_s=step,
                              compute_s=compute))
    out = straggler_phases(events, per=4)
    assert [p["named"] for p in out["phases"]] == [[], [1]] and out["all_correct"]
    assert out["phases"][1]["throughput_lost"] == pytest.approx(0.5)


# ----------------------------------------------------------------------------- jobs


def _job(tmp_path, group, trainer="ddp", **spec):
    base = {"faults": {"kinds": ["kill"], "steps": 4, "step": 2, "rank": 1, "every": 1,
                       "mode": "sync", "max_restarts": 1, "timeout_s": 5,
                       "shutdown_timeout_s": 2},
            "straggler": {"phases": [None, 1], "steps_per_phase": 3}}[group]
    return ResilienceJob(trainer, group, 2, TRAIN | {"timeout_s": 5}, base | spec)


def test_a_failed_launch_names_the_first_error_a_rank_recorded(tmp_path):
    from suite.experiments.llm_resilience import _failed
    from suite.resilience.worker import Events

    Events(tmp_path, rank=1, attempt=0).emit(
        "error", kind="other", error="CheckpointError: cannot write checkpoint /x: No space left")
    run = Launch(code=1, started=0, ended=1, lines=[(0.5, "ChildFailedError")])
    assert _failed(run, "the checkpoint run", tmp_path) == (
        "the checkpoint run exited with code 1 (rank 1: CheckpointError: cannot write checkpoint "
        "/x: No space left); last output:\nChildFailedError")


def test_a_fault_past_the_runs_end_fails_the_job_by_name(tmp_path):
    paths = run_job(_job(tmp_path, "faults", step=9), tmp_path / "out", work_dir=tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("seedbench-")]  # cleaned
    recs = [read_record(p) for p in paths]
    assert [r.system for r in recs] == ["fault-none", "fault-kill"]
    assert {r.status.value for r in recs} == {"failed"}
    assert all("faults.step=9 is past the run's end: it must be < steps=4" in r.reason
               for r in recs)


def test_a_checkpoint_run_too_short_for_both_modes_fails_by_name(tmp_path):
    job = ResilienceJob("ddp", "checkpoint", 1, TRAIN | {"steps": 6},
                        {"every": 3, "global_batch": 2, "nprocs": 1})
    recs = [read_record(p) for p in run_job(job, tmp_path)]
    assert {r.status.value for r in recs} == {"failed"}
    assert "checkpoint.every=3 over steps=6 leaves 1 checkpoint(s)" in recs[0].reason


def test_an_engine_whose_state_dcp_cannot_read_is_unavailable(tmp_path):
    rec = read_record(run_job(_job(tmp_path, "straggler", trainer="zero2"), tmp_path)[0])
    assert rec.status.value == "unavailable" and "engine.save_checkpoint" in rec.reason


def test_a_fault_with_no_restart_allowed_is_a_failed_record_and_leaves_nothing(tmp_path):
    """The real agent with ``--max-restarts 0``: the killed rank ends the run, the record says
    so by name, nothing of the run is left (one launch: the judging needs no reference)."""
    from suite.experiments.llm_resilience import _judge, _spec
    from suite.records import new_record
    from suite.resilience.supervise import launch

    job = _job(tmp_path, "faults", max_restarts=0)
    f = job.spec
    spec = _spec(job, tmp_path, ckpt={"every": 1, "modes": ["sync"], "dir": str(tmp_path / "c")},
                 fault={"kind": "kill", "step": f["step"], "rank": f["rank"]})
    run = launch(spec, tmp_path / "kill", 2, 0, 120, log=lambda line: None)
    rec = new_record("llm_resilience", "fault-kill", {}, {})
    with pytest.raises(RuntimeError) as err:
        _judge(rec, "kill", run, tmp_path / "kill", {}, job, beside=[])
    assert "the kill fault ended the run: torchrun --max-restarts 0 allows no restart" in str(
        err.value)
    assert rec.derived["leftovers"] == [] and run.agent_failures()  # the agent saw it end
    events = (tmp_path / "kill" / "rank1.jsonl").read_text().splitlines()
    assert any(json.loads(line)["event"] == "fault" for line in events)
