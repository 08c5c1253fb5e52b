"""Training engines (suite.trainers), the LLM training run, its step log and launcher.

The distributed runs are real: torchrun starts two gloo ranks of one thread each, on a tiny GPT,
and every record must pass the correctness gate against the single-process reference.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch

from suite import plugins
from suite import steplog as sl
from suite.config import ConfigError
from suite.launch import jobs as launch
from suite.experiments.llm_train import resolve_peak, run_training
from suite.launch.jobs import command
from suite.records import Status, read_record
from suite.trainers import Trainer, registry as trainers
from suite.trainers.config import TrainConfig
from suite.trainers.single import SingleTrainer

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTED = ["ddp", "fsdp2", "fsdp2-noprefetch", "zero1", "zero2", "zero3"]
STEPS, WARMUP = 5, 2
TINY = {"model": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256},
        "seq_len": 32, "global_batch": 4, "steps": STEPS, "warmup_steps": WARMUP,
        "threads": 1, "lr": 3e-3}
PEAK_FLOPS = 5e10


def fake_peak(threads: int = 2) -> dict:
    """What `seedbench peak` writes (suite.commands.peak), with a made-up fp32 number."""
    return {"schema_version": 1, "device": "Fake CPU", "device_type": "cpu", "threads": threads,
            "peaks": {"fp32": {"measured": {"dtype": "fp32", "flops_per_s": PEAK_FLOPS,
                                            "size": 1024, "per_size": []},
                               "datasheet": None}}}


# ----------------------------------------------------------------------------- plugins


def test_registry_lists_every_engine():
    assert set(trainers.names()) >= {"single", "ddp", "fsdp2", "fsdp2-noprefetch", "zero1",
                                    "zero2", "zero3", "zero3-nooverlap", "pipeline"}
    for name in trainers.names():
        t = plugins.Registry("seedbench.trainers", Trainer).create(name)
        assert t.name == name and t.launcher in ("torchrun", "deepspeed", "single")


def test_registry_is_a_drop_in_for_the_baselines_registry():
    from suite.baselines.base import Baseline
    from suite.baselines.registry import baselines as old

    new = plugins.Registry(old.group, Baseline, kind="baseline")
    assert new.names() == old.names()
    for call in (lambda r: r.check_names(["nope", "torch-eager"]), lambda r: r.create("nope")):
        with pytest.raises(KeyError) as a:
            call(old)
        with pytest.raises(KeyError) as b:
            call(new)
        assert str(a.value) == str(b.value)
    assert type(new.create("reference")) is type(old.create("reference"))


def test_registry_errors(monkeypatch):
    group = "seedbench.test-group"
    fake = [EntryPoint("good", "suite.trainers.single:SingleTrainer", group),
            EntryPoint("bad", "builtins:dict", group)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: fake)
    reg = plugins.Registry(group, Trainer, kind="trainer")
    assert reg.names() == ["bad", "good"]
    assert isinstance(reg.create("good"), SingleTrainer)
    reg.check_names(["good"])
    with pytest.raises(KeyError, match=r"unknown trainer\(s\) \['typo'\]; registered: "
                                       r"\['bad', 'good'\] \(entry-point group "
                                       r"'seedbench.test-group'\)"):
        reg.check_names(["good", "typo"])
    with pytest.raises(KeyError, match="unknown trainer 'typo'; registered"):
        reg.create("typo")
    with pytest.raises(TypeError, match=r"entry point 'bad' -> builtins:dict is not a Trainer "
                                        r"subclass"):
        reg.create("bad")


# ----------------------------------------------------------------------------- config


def test_train_config_defaults_and_round_trip():
    cfg = TrainConfig.from_dict(TINY)
    assert cfg.model.block_size == 32 and cfg.model.n_layer == 2 and cfg.betas == (0.9, 0.95)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert json.loads(json.dumps(cfg.to_dict())) == cfg.to_dict()
    assert TrainConfig.from_dict({}).model.n_embd == 256


@pytest.mark.parametrize("change, match", [
    ({"optimiser": "adamw"}, r"unknown key\(s\) \['optimiser'\]; valid: \[.*'optimizer'"),
    ({"optimizer": "sgd"}, r"optimizer='sgd' is not one of \['adamw', 'lamb'\]"),
    ({"dtype": "fp16"}, r"dtype='fp16' is not one of \['fp32', 'bf16'\]"),
    ({"data": "web"}, r"data='web' is not one of"),
    ({"warmup_steps": 5}, r"warmup_steps=5 must be < steps=5"),
    ({"global_batch": 0}, r"global_batch=0 must be a positive int"),
    ({"lr": -1.0}, r"lr=-1.0 must be a positive number"),
    ({"grad_clip": -1}, r"grad_clip=-1 must be a number >= 0"),
    ({"betas": [0.9]}, r"betas=\[0.9\] must be two numbers in \[0, 1\)"),
    ({"compile": "yes"}, r"compile='yes' must be true or false"),
    ({"seq_len": 64, "model": {"block_size": 32}}, r"seq_len=64 exceeds model.block_size=32"),
    ({"model": {"dropout": 0.1}}, r"model: unknown key\(s\) \['dropout'\]"),
    ({"model": {"n_head": 3}}, r"n_embd=64 must be a multiple of n_head=3"),
    ({"model": {"vocab_size": 100}, "data": "text"}, r"vocab_size=100 < 256"),
])
def test_train_config_errors_name_the_bad_value(change, match):
    section = {**TINY, **change, "model": {**TINY["model"], **change.get("model", {})}}
    with pytest.raises(ConfigError, match=match):
        TrainConfig.from_dict(section)


# ----------------------------------------------------------------------------- step log


def test_steplog_round_trip(tmp_path):
    path = tmp_path / "steps.jsonl"
    lines = [sl.step_line(**{k: 1.0 for k in sl.KEYS} | {sl.STEP: i, sl.PHASE: sl.MEASURE})
             for i in range(3)]
    lines[1][sl.LOSS] = float("nan")
    with sl.StepLogWriter(path) as w:
        for line in lines:
            w.write(line)
    got = sl.read_steplog(path)
    assert [g[sl.STEP] for g in got] == [0, 1, 2] and got[1][sl.LOSS] is None
    assert all(list(g) == list(sl.KEYS) for g in got)
    with open(path, "a") as f:
        f.write('{"step": 3, "pha')  # a writer killed mid-line
    assert len(sl.read_steplog(path)) == 3
    with pytest.raises(KeyError, match=r"missing \['phase'"):
        sl.step_line(step=0)
    with pytest.raises(ValueError, match=r"phase='timed' is not one of"):
        sl.step_line(**{k: 0 for k in sl.KEYS} | {sl.PHASE: "timed"})


# ----------------------------------------------------------------------------- launcher


def test_command_builder():
    py = sys.executable
    args = ["--trainer", "ddp"]
    assert command("single", 1, args, python=py) == [py, "-m", launch.MODULE, *args]
    with pytest.raises(ValueError, match="'single' runs one process; nprocs=2"):
        command("single", 2, args)
    cmd = command("ddp", 2, args, python=py)
    i = cmd.index("--standalone")
    assert cmd[i:i + 4] == ["--standalone", "--nproc-per-node", "2", "-m"]
    assert cmd[:i] in ([str(Path(py).with_name("torchrun"))],
                       [py, "-m", "torch.distributed.run"])
    assert cmd[-3:] == [launch.MODULE, *args]
    multi = command("fsdp2", 4, args, nnodes=2, rdzv_endpoint="node0:29400", node_rank=1,
                    python=py)
    assert "--standalone" not in multi
    for flag, value in (("--nnodes", "2"), ("--nproc-per-node", "4"),
                        ("--rdzv-endpoint", "node0:29400"), ("--rdzv-backend", "c10d"),
                        ("--node-rank", "1")):
        assert multi[multi.index(flag) + 1] == value
    with pytest.raises(ValueError, match="nnodes=2 needs rdzv_endpoint"):
        command("ddp", 2, args, nnodes=2)
    # torchrun for the ZeRO engines too (one launcher for every engine); DeepSpeed's on request
    assert "--standalone" in command("zero2", 2, args, python=py)
    ds = command("zero2", 8, args, launcher="deepspeed", python=py)
    assert Path(ds[0]).name == "deepspeed"
    assert ds[1:5] == ["--num_gpus", "8", "--num_nodes", "1"]
    assert ds[5:] == ["--master_port", ds[6], "--no_local_rank", "--module", launch.MODULE, *args]
    assert 0 < int(ds[6]) < 65536  # a free port: two runs on one host must not share 29500
    # warm ranks: the launcher starts the shim that forks each (suite.launch.warm)
    shim = ["suite.launch.warm", "exec", "-m", launch.MODULE, *args]
    assert command("ddp", 2, args, python=py, warm=True)[-len(shim):] == shim
    assert command("zero2", 2, args, launcher="deepspeed", python=py,
                   warm=True)[-len(shim) - 1:] == ["--module", *shim]
    # ... and the launcher itself a python -m module, which run_isolated(warm=True) forks warm
    assert command("ddp", 2, args, python=py, warm=True)[:3] == [py, "-m", "torch.distributed.run"]
    assert command("zero2", 2, args, launcher="deepspeed", python=py, warm=True)[:3] == [
        py, "-m", "deepspeed.launcher.runner"]
    with pytest.raises(ValueError, match="cannot run under launcher='single'"):
        command("zero2", 1, args, launcher="single")
    ds2 = command("zero3", 8, args, nnodes=2, rdzv_endpoint="node0:29500",
                  hostfile="hosts", python=py)  # a hostfile: DeepSpeed's runner, which reads it
    assert Path(ds2[0]).name == "deepspeed"
    assert ds2[ds2.index("--hostfile") + 1] == "hosts"
    assert ds2[ds2.index("--master_addr") + 1] == "node0"
    assert ds2[ds2.index("--master_port") + 1] == "29500"
    with pytest.raises(KeyError, match="unknown trainer 'nope'"):
        command("nope", 1, args)


def test_peak_resolution():
    cpu = torch.device("cpu")
    peak, note = resolve_peak(None, "fp32", cpu, 2, 2)
    assert peak is None and "no peak given" in note
    peak, note = resolve_peak(fake_peak(), "bf16", cpu, 2, 2)
    assert peak is None and "no bf16 entry" in note
    peak, note = resolve_peak(fake_peak(threads=4), "fp32", cpu, 2, 2)
    assert (peak.flops_per_device, peak.n_devices) == (PEAK_FLOPS, 1)
    assert "one device" in note and "WARNING" in note
    # CUDA: the datasheet peak per GPU (looked up when the file has none) x the world size
    gpu_peak = {"schema_version": 1, "device": "NVIDIA H100 80GB HBM3", "device_type": "cuda",
                "threads": 1,
                "peaks": {"bf16": {"measured": {"flops_per_s": 7e14}, "datasheet": None}}}
    peak, note = resolve_peak(gpu_peak, "bf16", torch.device("cuda", 0), 8, 1)
    assert (peak.flops_per_device, peak.n_devices) == (989e12, 8) and "datasheet" in note
    unknown_gpu = {**gpu_peak, "device": "Some Future GPU"}
    peak, note = resolve_peak(unknown_gpu, "bf16", torch.device("cuda", 0), 8, 1)
    assert (peak.flops_per_device, peak.n_devices) == (7e14, 8) and "measured" in note
    peak, note = resolve_peak(gpu_peak, "bf16", cpu, 2, 2)
    assert peak is None and "device_type='cuda'" in note


# ----------------------------------------------------------------------------- runs


def check_ok_record(record, steplog: Path, world_size: int, trainer: str) -> None:
    assert record.status == Status.OK, (record.reason, record.derived.get("traceback"),
                                        record.derived.get("other_ranks"))
    assert record.system == trainer and record.point["world_size"] == world_size
    c = record.correctness
    assert c["passed"] and c["check_steps"] == 3 and c["max_rel_diff"] <= c["tolerance_rel"]
    lines = sl.read_steplog(steplog)
    assert [l[sl.STEP] for l in lines] == list(range(STEPS))
    assert all(set(l) == set(sl.KEYS) for l in lines)
    assert [l[sl.PHASE] for l in lines] == [sl.WARMUP] * WARMUP + [sl.MEASURE] * (STEPS - WARMUP)
    # warm-up steps are not samples
    assert record.timing["samples"] == [l[sl.STEP_TIME_S] for l in lines[WARMUP:]]
    assert record.timing["stats"]["n"] == STEPS - WARMUP
    d = record.derived
    tokens = TINY["global_batch"] * TINY["seq_len"]
    assert d["tokens_per_s"] == pytest.approx(tokens / record.timing["stats"]["median"])
    assert d["mfu"]["value"] == pytest.approx(d["tokens_per_s"] * d["flops_per_token"]
                                              / PEAK_FLOPS, rel=1e-12)
    assert d["mfu"]["peak_flops"] == PEAK_FLOPS and d["peak_devices"] == 1
    assert d["hfu"]["value"] == pytest.approx(d["mfu"]["value"])  # no checkpointing
    # the same MFU against each denominator, named (a schema-1 peak: torch.matmul only)
    den = d["mfu_denominators"]
    assert den["measured_peak_library"] == "torch.matmul"
    assert den["pct_of_measured_peak"] == pytest.approx(100 * d["mfu"]["value"])
    assert den["pct_of_library_peak"] == {"torch.matmul": pytest.approx(100 * d["mfu"]["value"])}
    assert den["pct_of_theoretical_peak"] is None
    for l in lines:
        assert l[sl.MFU] == pytest.approx(l[sl.TOKENS_PER_S] * d["flops_per_token"] / PEAK_FLOPS)
        assert math.isfinite(l[sl.LOSS]) and l[sl.GRAD_NORM] > 0 and l[sl.PEAK_MEM_BYTES] > 0
    assert d["losses_finite"] and d["peak_mem_bytes"] > 0
    assert len(d["peak_mem_bytes_per_rank"]) == world_size
    assert isinstance(d["trainer"], dict) and d["trainer"]


def _launch(trainer: str, nprocs: int, section: dict, tmp_path: Path, peak_path: Path,
            timeout: float = 240, warm: bool = False, launcher: str | None = None):
    out, steps = tmp_path / f"{trainer}.json", tmp_path / f"{trainer}.jsonl"
    args = ["--train-json", json.dumps(section), "--trainer", trainer, "--out", str(out),
            "--steplog", str(steps), "--peak", str(peak_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(command(trainer, nprocs, args, warm=warm, launcher=launcher),
                          cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert out.exists(), f"no record; rc={proc.returncode}\n{proc.stderr[-4000:]}"
    return read_record(out), steps, proc


@pytest.fixture(scope="module")
def peak_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("peak") / "peak.json"
    path.write_text(json.dumps(fake_peak()))
    return path


# The launcher path end to end (command() -> torchrun / deepspeed -> main -> record): one
# engine per launcher. The other engines run in one torchrun launch (GROUPED), one after the
# other on the same process group, to keep the file fast: each launch costs seconds of imports.
@pytest.mark.parametrize("trainer, launcher", [("ddp", "torchrun"), ("zero2", "deepspeed")])
def test_two_rank_launch(trainer, launcher, tmp_path, peak_file):
    """Each launcher's ranks forked warm (suite.launch.warm), as the workflow starts them; the
    record names the launcher its ranks found themselves under."""
    record, steps, proc = _launch(trainer, 2, TINY, tmp_path, peak_file, warm=True,
                                  launcher=launcher)
    check_ok_record(record, steps, 2, trainer)
    assert record.env["process_start"] == "warm fork"
    assert record.workload["launcher"] == launcher
    if launcher == "deepspeed":  # its runner, then its per-node launch module
        assert "launch.py" in proc.stderr + proc.stdout


GROUPED = {"ddp-no-overlap": ("ddp", {"ddp_overlap": False, "bucket_cap_mb": 0.05}),
           "fsdp2": ("fsdp2", {}), "fsdp2-noprefetch": ("fsdp2-noprefetch", {}),
           "fsdp2-lamb": ("fsdp2", {"optimizer": "lamb"}),
           "zero1": ("zero1", {}), "zero3": ("zero3", {}),
           "zero3-nooverlap": ("zero3-nooverlap", {}),
           # one GPT stage per rank, tied embeddings across them, held-out loss through it
           "pipeline": ("pipeline", {"eval_batches": 1}),
           "pipeline-untied-lamb": ("pipeline", {
               "optimizer": "lamb", "micro_batches": 4,
               "model": {**TINY["model"], "tied_embeddings": False}}),
           # ZeRO hands the optimizer flat partitions: LAMB's per-tensor trust ratio breaks
           "zero1-lamb": ("zero1", {"optimizer": "lamb"})}
EXPECTED_INCORRECT = {"zero1-lamb"}

DRIVER = """
import json, sys
import torch.distributed as dist
from suite.experiments.llm_train import run_training
from suite.records import write_record

jobs = json.loads(open(sys.argv[1]).read())
peak = json.loads(open(jobs["peak"]).read())
dist.init_process_group("gloo")  # run_training adopts it and leaves it up between runs
for job in jobs["runs"]:
    record = run_training(job["section"], job["trainer"], job["steplog"], peak=peak,
                          out=job["out"])
    if record is not None:
        write_record(record, job["out"])
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def grouped_runs(tmp_path_factory, peak_file):
    """Every GROUPED run in one 2-rank torchrun launch: label -> (record, steplog path)."""
    tmp = tmp_path_factory.mktemp("grouped")
    runs = [{"label": label, "trainer": trainer, "section": {**TINY, **extra},
             "out": str(tmp / f"{label}.json"), "steplog": str(tmp / f"{label}.jsonl")}
            for label, (trainer, extra) in GROUPED.items()]
    (tmp / "jobs.json").write_text(json.dumps({"peak": str(peak_file), "runs": runs}))
    (tmp / "driver.py").write_text(DRIVER)
    torchrun = command("ddp", 2, [])
    torchrun = torchrun[:torchrun.index("-m")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([*torchrun, str(tmp / "driver.py"), str(tmp / "jobs.json")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = {}
    for run in runs:
        path = Path(run["out"])
        assert path.exists(), (f"{run['label']}: no record; rc={proc.returncode}\n"
                               f"{proc.stderr[-4000:]}")
        out[run["label"]] = (read_record(path), Path(run["steplog"]))
    return out


@pytest.mark.parametrize("label", sorted(set(GROUPED) - EXPECTED_INCORRECT))
def test_two_rank_run_matches_single_process(label, grouped_runs):
    record, steps = grouped_runs[label]
    check_ok_record(record, steps, 2, GROUPED[label][0])
    if label == "ddp-no-overlap":
        assert record.derived["trainer"]["overlap"] is False
        assert record.derived["trainer"]["n_buckets_no_overlap"] > 1


def test_pipeline_measures_its_bubble(grouped_runs):
    for label, m in (("pipeline", 2), ("pipeline-untied-lamb", 4)):
        engine = grouped_runs[label][0].derived["trainer"]
        assert engine["stages"] == 2 and engine["layers_per_stage"] == [1, 1]
        assert engine["micro_batches"] == m and engine["bubble_fraction_formula"] == 1 / (m + 1)
        steps = engine["bubble_fraction_steps"]
        assert len(steps) == STEPS - WARMUP and all(0 <= b < 1 for b in steps)
        assert engine["bubble_fraction"] == pytest.approx(sum(steps) / len(steps))
        costs = engine["compute_per_micro_batch_s"]
        assert len(costs) == 2 and all(c > 0 for c in costs)
        assert 0 < engine["bubble_fraction_of_stage_costs"] < 1
    assert "summed between the first and last stage" in grouped_runs["pipeline"][0].derived[
        "trainer"]["tied_embeddings"]
    record = grouped_runs["pipeline"][0]
    assert record.workload["rank_slice"] == "every rank sees the whole batch"
    assert record.derived["eval_loss"] > 0


def test_zero3_overlap_switch(grouped_runs):
    on, off = (grouped_runs[k][0].derived["trainer"]["zero"]["overlap_comm"]
               for k in ("zero3", "zero3-nooverlap"))
    assert (on, off) == (True, False)


def test_four_stage_pipeline_matches_single_process(tmp_path, peak_file):
    """Middle stages, and the tied embedding summed in a group of the two end stages only."""
    section = {**TINY, "model": {**TINY["model"], "n_layer": 4}, "micro_batches": 4}
    record, steps, _ = _launch("pipeline", 4, section, tmp_path, peak_file)
    check_ok_record(record, steps, 4, "pipeline")
    engine = record.derived["trainer"]
    assert engine["layers_per_stage"] == [1, 1, 1, 1]
    assert engine["bubble_fraction_formula"] == 3 / 7


def test_pipeline_stage_split():
    from suite.trainers.pipeline import bubble_formula, bubble_of_costs, stage_layers

    assert stage_layers(5, 2) == [range(0, 3), range(3, 5)]
    assert stage_layers(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="3 pipeline stages need at least as many layers"):
        stage_layers(2, 3)
    assert bubble_formula(2, 2) == pytest.approx(1 / 3) and bubble_formula(4, 8) == 3 / 11
    assert bubble_of_costs([1.0] * 4, 8) == pytest.approx(bubble_formula(4, 8))
    # a slow last stage: the step is 1 + 2 + (2 - 1) * 2 = 5, the stages compute 2 and 4
    assert bubble_of_costs([1.0, 2.0], 2) == pytest.approx(((1 - 2 / 5) + (1 - 4 / 5)) / 2)


def test_zero_with_lamb_is_flagged_incorrect(grouped_runs):
    record, steps = grouped_runs["zero1-lamb"]
    assert record.status == Status.INCORRECT, record.reason
    assert record.correctness["grad_norm_max_rel_diff"] > record.correctness[
        "grad_norm_tolerance_rel"]
    assert "per-partition" in record.derived["trainer"]["optimizer_partitioning"]
    assert record.timing == {} and not steps.exists()


FLAKY = """
import sys
from suite.experiments.llm_train import run_training
from suite.records import write_record
from suite.trainers.ddp import DdpTrainer

class Flaky(DdpTrainer):
    name = "flaky"

    def setup(self, model, train_cfg, dist):
        if dist.rank == 1:
            raise RuntimeError("rank 1 out of memory (simulated)")
        super().setup(model, train_cfg, dist)

section, out, steplog = sys.argv[1:4]
import json
record = run_training(json.loads(section), Flaky(), steplog, out=out)
if record is not None:
    write_record(record, out)
"""


def test_failure_of_another_rank_is_recorded_by_rank_0(tmp_path):
    """Rank 1 fails alone: rank 0's next collective fails on the closed connection, and its
    record carries rank 1's reason (from the error file rank 1 leaves)."""
    (tmp_path / "flaky.py").write_text(FLAKY)
    out = tmp_path / "flaky.json"
    torchrun = command("ddp", 2, [])
    torchrun = torchrun[:torchrun.index("-m")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([*torchrun, str(tmp_path / "flaky.py"),
                           json.dumps({**TINY, "timeout_s": 60}), str(out),
                           str(tmp_path / "flaky.jsonl")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.exists(), proc.stderr[-3000:]
    record = read_record(out)
    assert record.status == Status.FAILED and record.system == "flaky"
    assert "rank 1: RuntimeError: rank 1 out of memory (simulated)" in record.reason
    assert not list(tmp_path.glob("*.error"))  # rank 0 folded it into the record


def test_single_process_run(tmp_path, peak_file):
    record, steps, _ = _launch("single", 1, TINY, tmp_path, peak_file)
    check_ok_record(record, steps, 1, "single")


def test_no_peak_means_no_mfu(tmp_path):
    held = []  # what a rank's entry point keeps until os._exit instead of freeing it
    record = run_training(TINY, "single", tmp_path / "s.jsonl", check_steps=0, hold=held)
    assert [type(e).__name__ for e in held] == ["SingleTrainer"]
    assert record.status == Status.OK and record.derived["mfu"] is None
    assert "no peak given" in record.derived["peak_note"]
    assert record.correctness["passed"] is None
    assert all(l[sl.MFU] is None for l in sl.read_steplog(tmp_path / "s.jsonl"))


class NoZeroGrad(SingleTrainer):
    """Forgets zero_grad: every step applies the sum of all gradients so far."""
    name = "broken-accumulating"

    def train_step(self, inputs, targets):
        zero = self.optimizer.zero_grad
        self.optimizer.zero_grad = lambda set_to_none=True: None
        try:
            return super().train_step(inputs, targets)
        finally:
            self.optimizer.zero_grad = zero


class SummedGradients(SingleTrainer):
    """Sums where it should average (as a DDP without the 1/world): gradients x2. AdamW is
    invariant to the scale, so only the gradient norm gives it away."""
    name = "broken-summed"

    def setup(self, model, train_cfg, dist):
        super().setup(model, train_cfg, dist)
        for p in self.params:
            p.register_hook(lambda g: 2 * g)


@pytest.mark.parametrize("broken", [NoZeroGrad, SummedGradients])
def test_broken_trainer_is_flagged_incorrect(broken, tmp_path):
    record = run_training(TINY, broken(), tmp_path / "b.jsonl")
    assert record.status == Status.INCORRECT, record.reason
    assert record.system == broken.name and not record.correctness["passed"]
    assert record.timing == {} and not (tmp_path / "b.jsonl").exists()
    if broken is SummedGradients:  # the losses agree; the norm does not
        assert record.correctness["max_rel_diff"] <= record.correctness["tolerance_rel"]
        assert record.correctness["grad_norm_max_rel_diff"] > 0.5


def test_failures_become_records(tmp_path):
    record = run_training({**TINY, "global_batch": 3}, "ddp", tmp_path / "f.jsonl")
    assert record.status == Status.OK  # one rank: 3 rows split fine
    bad = run_training({**TINY, "dtype": "fp8"}, "ddp", tmp_path / "f.jsonl")
    assert bad.status == Status.FAILED and "dtype='fp8'" in bad.reason
    unknown = run_training(TINY, "nope", tmp_path / "f.jsonl")
    assert unknown.status == Status.FAILED and "unknown trainer 'nope'" in unknown.reason
