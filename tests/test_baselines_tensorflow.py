"""The TensorFlow baselines (graph and XLA): correctness gate and timing through the CLI, and the
encoder's valid positions against HF directly, a zero-length sequence included.

TensorFlow never enters the pytest process (importing it before triton, which torch imports
lazily, crashes the process): every check that runs TensorFlow runs in a child process. The
three children start together, at the first test that needs one, since each spends most of its
time importing torch, transformers and tensorflow.
"""

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import TINY_MODEL
from suite.records import Status, read_record

ROOT = Path(__file__).resolve().parent.parent
HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_tf = pytest.mark.skipif(not HAS_TF, reason="tensorflow is not installed")
TIMEOUT_S = 300

SECTION = {"model": TINY_MODEL, "device": "cpu", "threads": 1,
           "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 0.0}}
VARIANTS = {"tensorflow": False, "tensorflow-xla": True}  # baseline -> jit_compile

# Both variants on one batch with a zero-length sequence, against HF float64 run on each
# sequence alone (no padding at all); prints one JSON line.
DIRECT = textwrap.dedent("""
    import json
    import numpy as np
    import torch
    from suite.config import BertDims
    from suite.models import canonical_bert
    from suite.workloads import bert_batch
    from suite.baselines.tensorflow_bert import TensorFlowEager, TensorFlowXla

    torch.set_num_threads(1)
    dims = BertDims(**%(model)r)
    lengths, max_len = [5, 0, 16, 1], 16
    model = canonical_bert(dims, max_len)
    batch = bert_batch(lengths, max_len, dims.vocab_size, seed=1)
    ref = model.double()
    expected = np.zeros((len(lengths), max_len, dims.hidden))
    with torch.inference_mode():
        for i, n in enumerate(lengths):
            if n:
                expected[i, :n] = ref(input_ids=batch.input_ids[i:i + 1, :n],
                                      token_type_ids=batch.token_type_ids[i:i + 1, :n],
                                      attention_mask=batch.attention_mask[i:i + 1, :n]
                                      ).last_hidden_state[0].numpy()
    model = canonical_bert(dims, max_len)  # fp32 again, as the suite hands it over
    valid = batch.attention_mask.bool().numpy()
    result = {}
    for cls in (TensorFlowEager, TensorFlowXla):
        system = cls()
        system.prepare(model, torch.device("cpu"), torch.float32)
        out = np.asarray(system.run(batch), dtype=np.float64)
        result[cls.name] = {
            "shape": list(out.shape),
            "max_abs_err": float(np.abs(out - expected)[valid].max()),
            "all_finite": bool(np.isfinite(out).all()),
            "fp16": system.can_run("bert-encoder", "cpu", "fp16"),
            "details": system.details(),
        }
    print(json.dumps(result))
""") % {"model": TINY_MODEL}


def _start_children(tmp: Path) -> dict[str, tuple[subprocess.Popen, Path | None]]:
    children = {}
    for baseline in VARIANTS:
        out = tmp / f"{baseline}.json"
        cmd = [sys.executable, "-m", "suite.cli", "run", "bert_varlen", "--system", baseline,
               "--batch-size", "3", "--max-seq-len", "16", "--section-json",
               json.dumps(SECTION), "--out", str(out), "--in-process"]
        children[baseline] = (subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True), out)
    children["direct"] = (subprocess.Popen([sys.executable, "-c", DIRECT], cwd=ROOT,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True), None)
    return children


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    started = _start_children(tmp_path_factory.mktemp("tensorflow"))
    yield started
    for proc, _ in started.values():
        if proc.poll() is None:  # a test failed before waiting for it
            proc.kill()
            proc.wait()


def _finish(proc: subprocess.Popen) -> str:
    stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{stderr[-3000:]}"
    return stdout


@needs_tf
@pytest.mark.parametrize("baseline", list(VARIANTS))
def test_cli_point_passes_gate_and_is_timed(children, baseline):
    proc, out = children[baseline]
    _finish(proc)
    record = read_record(out)
    assert record.status == Status.OK, (record.reason, record.derived.get("traceback"))
    assert record.correctness["passed"]
    assert record.correctness["max_abs_err"] < 1e-4
    assert len(record.timing["samples"]) >= 3
    assert record.timing["threads"] == 1
    system = record.derived["system"]
    assert system["jit_compile"] is VARIANTS[baseline]
    assert system["first_call_s"] > 0
    assert system["intra_op_threads"] == 1
    assert record.derived["padding_free"] is False


@needs_tf
def test_valid_positions_match_hf_with_zero_length_sequence(children):
    proc, _ = children["direct"]
    result = json.loads(_finish(proc).strip().splitlines()[-1])
    for name, jit in VARIANTS.items():
        got = result[name]
        assert got["shape"] == [4, 16, TINY_MODEL["hidden"]]
        assert got["max_abs_err"] < 1e-4, (name, got["max_abs_err"])
        assert got["all_finite"], f"{name}: non-finite values (padding included)"
        assert got["details"]["jit_compile"] is jit
        assert got["fp16"][0] is False and "fp16" in got["fp16"][1]


def test_unavailable_without_tensorflow(monkeypatch):
    """A missing package is a reason, not a crash (and nothing imports tensorflow here)."""
    from suite.baselines import tensorflow_bert

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorflow" else real(name, *a))
    for cls in (tensorflow_bert.TensorFlowEager, tensorflow_bert.TensorFlowXla):
        ok, why = cls().can_run("bert-encoder", "cpu", "fp32")
        assert not ok and "tensorflow is not installed" in why
    assert "tensorflow" not in sys.modules
