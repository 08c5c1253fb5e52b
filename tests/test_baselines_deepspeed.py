"""DeepSpeed-Inference baseline. The point runs in a child process: deepspeed picks a global
accelerator, sets launcher variables and may start a process group, none of which should leak
into the pytest process (which never imports deepspeed here)."""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.baselines.registry import baselines
from suite.baselines.deepspeed_inference import DeepSpeedInference, single_rank_env
from suite.records import Status, read_record

from conftest import TINY_MODEL

ROOT = Path(__file__).resolve().parents[1]
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="deepspeed is not installed")
def test_cpu_point_passes_the_gate_and_is_timed(tmp_path):
    out = tmp_path / "ds.json"
    section = {"model": TINY_MODEL, "device": "cpu", "threads": 1,
               "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 0.0}}
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}  # as a plain job sees it
    proc = subprocess.run(
        [sys.executable, "-m", "suite.cli", "run", "bert_varlen", "--system",
         "deepspeed-inference", "--batch-size", "3", "--max-seq-len", "16", "--section-json",
         json.dumps(section), "--out", str(out), "--in-process"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = read_record(out)
    assert rec.status is Status.OK, (rec.reason, rec.derived.get("traceback"))
    assert rec.correctness["passed"] and rec.correctness["max_abs_err"] < 1e-4
    assert len(rec.timing["samples"]) >= 3 and rec.timing["stats"]["n"] >= 3
    system = rec.derived["system"]
    assert system["kernel_inject"] is False  # fused kernels are GPU-only
    assert system["accelerator"] == "cpu"
    assert system["deepspeed_version"] == importlib.metadata.version("deepspeed")
    assert set(system["dist_env_set"]) == set(DIST_VARS)
    assert rec.derived["padding_free"] is False


def test_missing_deepspeed_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # makes `import deepspeed` fail
    system = baselines.create("deepspeed-inference")
    assert isinstance(system, DeepSpeedInference)
    ok, why = system.available()
    assert not ok and "deepspeed cannot be imported" in why
    ok, why = system.can_run("bert-encoder", "cpu", "fp32")
    assert not ok and "deepspeed" in why


def test_single_rank_env_fills_only_what_is_unset(monkeypatch):
    for name in DIST_VARS:  # recorded by monkeypatch, so all five are restored afterwards
        monkeypatch.setenv(name, "sentinel")
        monkeypatch.delenv(name)
    monkeypatch.setenv("MASTER_PORT", "29512")
    set_here = single_rank_env()
    assert set_here == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                        "MASTER_ADDR": "127.0.0.1"}
    assert os.environ["MASTER_PORT"] == "29512"
    monkeypatch.delenv("MASTER_PORT")
    monkeypatch.setenv("RANK", "0")
    set_here = single_rank_env()
    assert set_here == {"MASTER_PORT": os.environ["MASTER_PORT"]}
    assert 0 < int(os.environ["MASTER_PORT"]) < 65536
