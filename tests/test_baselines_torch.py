"""The PyTorch baselines: SDPA, TorchScript, torch.compile (padded) and nested tensors
(padding-free), each gated end to end and checked directly against HF eager, edge lengths
included (an empty sequence, a full one, a single token)."""

import pytest
import torch
from conftest import TINY_MODEL

from suite.baselines.registry import baselines
from suite.baselines.torch_hf import TorchCompile
from suite.baselines.torch_nested import TorchNested
from suite.config import BertDims
from suite.experiments.bert_varlen import run_point
from suite.models import canonical_model, hf_inputs
from suite.records import Status
from suite.workloads import BertBatch, bert_batch

# torch's CPU path of jagged SDPA goes through the older strided nested tensors, which warn.
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")

TORCH_BASELINES = ["torch-sdpa", "torch-jit", "torch-compile", "torch-nested"]
S = 16
# torch.compile costs seconds per shape: its direct check keeps run_point's [3, 16] shape, so
# that the compiled code is compiled once in this module and then reused by dynamo.
EDGE_LENGTHS = {"torch-compile": [5, 0, 16]}
DEFAULT_EDGE_LENGTHS = [5, 0, 16, 1]


@pytest.fixture(scope="module")
def tiny_model():
    """The model run_point builds from tiny_cfg (same config, so compiled code is reused)."""
    return canonical_model("bert", BertDims(**TINY_MODEL), S)


def hf_eager(model, batch):
    with torch.inference_mode():
        return model(**hf_inputs(model, batch.input_ids, batch.attention_mask,
                                 batch.token_type_ids)).last_hidden_state


@pytest.fixture(scope="module")
def prepared(tiny_model):
    """Each baseline prepared once, with its output on its edge-case batch (the first call
    traces / compiles)."""
    cache = {}

    def get(name):
        if name not in cache:
            system = baselines.create(name)
            ok, why = system.can_run("bert-encoder", "cpu", "fp32")
            assert ok, why
            system.prepare(tiny_model, torch.device("cpu"), torch.float32)
            batch = bert_batch(EDGE_LENGTHS.get(name, DEFAULT_EDGE_LENGTHS), S, 100, seed=1)
            cache[name] = system, batch, system.run(batch)
        return cache[name]
    return get


@pytest.mark.parametrize("name", TORCH_BASELINES)
def test_matches_hf_eager_on_valid_positions(tiny_model, prepared, name):
    system, batch, out = prepared(name)
    ref = hf_eager(tiny_model, batch)
    assert out.shape == ref.shape == (len(batch.lengths), S, tiny_model.config.hidden_size)
    valid = batch.attention_mask.bool()
    assert (out - ref)[valid].abs().max().item() < 1e-5
    assert torch.equal(system.run(batch), out)  # a second (traced / compiled) call agrees
    assert system.padding_free is (name == "torch-nested")


def test_nested_is_zero_at_padding_and_handles_empty_sequences(tiny_model, prepared):
    _, batch, out = prepared("torch-nested")
    assert 0 in batch.lengths
    padding = ~batch.attention_mask.bool()
    assert torch.count_nonzero(out[padding]) == 0
    system = TorchNested()
    system.prepare(tiny_model, torch.device("cpu"), torch.float32)
    assert torch.count_nonzero(system.run(bert_batch([0, 0], S, 100))) == 0
    # a sequence's output does not depend on its neighbours
    row = list(batch.lengths).index(16)
    alone = system.run(BertBatch(batch.input_ids[row:row + 1], batch.attention_mask[row:row + 1],
                                 batch.token_type_ids[row:row + 1], (16,)))
    torch.testing.assert_close(out[row], alone[0], atol=1e-5, rtol=0)


def test_nested_refuses_other_model_kinds(tiny_cfg):
    model = canonical_model("distilbert", tiny_cfg.model, 16)
    with pytest.raises(TypeError, match="BertModel only"):
        TorchNested().prepare(model, torch.device("cpu"), torch.float32)


def test_jit_records_its_trace_and_retraces_a_new_shape(tiny_model, prepared):
    system, _, _ = prepared("torch-jit")
    first = dict(system.details())
    assert first["trace_s"] > 0 and first["freeze_s"] > 0
    assert list(first["traced_shapes"]) == [f"{len(DEFAULT_EDGE_LENGTHS)}x{S}"]
    other = bert_batch([3, 16], S, 100, seed=2)
    out = system.run(other)
    valid = other.attention_mask.bool()
    assert (out - hf_eager(tiny_model, other))[valid].abs().max().item() < 1e-5
    assert len(system.details()["traced_shapes"]) == 2


def test_compile_records_its_compile_time(prepared):
    system, _, _ = prepared("torch-compile")
    details = system.details()
    assert isinstance(system, TorchCompile) and details["backend"] == "inductor"
    assert details["compile_s"] > 0


@pytest.mark.parametrize("name", TORCH_BASELINES)
def test_a_point_is_checked_then_timed(tiny_cfg, prepared, name):
    if name == "torch-compile":
        prepared(name)  # compile the [3, 16] shape once, in the module fixture
    rec = run_point(tiny_cfg, name, 3, S, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    assert rec.correctness["passed"] and rec.correctness["max_abs_err"] < 1e-4
    assert len(rec.timing["samples"]) >= 3
    assert rec.derived["padding_free"] is (name == "torch-nested")
    system = rec.derived["system"]
    if name == "torch-jit":
        assert system["trace_s"] > 0 and system["traced_shapes"]
        assert max(rec.timing["samples"]) < system["trace_s"] + system["freeze_s"]  # untimed
    if name == "torch-compile":
        assert system["compile_s"] > 0
    if name == "torch-nested":
        assert rec.derived["executed_flops"] == rec.derived["useful_flops"]
        # the host's share, counted in the build's call: thousands of Python calls per layer
        # of the tiny model (the jagged subclass's dispatch; 20,815 here), HF eager 1,005 in all
        assert system["python_calls_per_forward"] > 2000 * tiny_cfg.model.layers


def test_unusable_inductor_is_unavailable(monkeypatch):
    import torch._inductor.cpp_builder as cpp_builder

    def no_compiler():
        raise RuntimeError("no working C++ compiler found")
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    ok, why = TorchCompile().available()
    assert not ok and "no working C++ compiler" in why



def test_compile_with_cuda_graphs_is_cuda_only_and_marks_each_call_a_new_step(
        tiny_cfg, tiny_model, monkeypatch):
    """torch-compile-cudagraphs: on a CPU an ``unavailable`` record naming the device (no graph
    to replay); its wiring checked with torch.compile stood in for: the mode is
    reduce-overhead and every call first marks a new CUDA-graph step, without which a replayed
    graph would overwrite an output still in use. Mutation tried: the mark removed."""
    from suite.baselines.torch_hf import TorchCompileGraphs

    rec = run_point(tiny_cfg, "torch-compile-cudagraphs", 3, S, show_progress=False)
    assert rec.status is Status.UNAVAILABLE and "device 'cpu'" in rec.reason, rec.reason
    seen = []
    monkeypatch.setattr(torch, "compile", lambda model, mode: seen.append(mode) or model)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin",
                        lambda: seen.append("step"))
    system = TorchCompileGraphs()
    system.prepare(tiny_model, torch.device("cpu"), torch.float32)
    batch = bert_batch([5, 0, 16], S, 100, seed=1)
    for _ in range(2):
        torch.testing.assert_close(system.run(batch), hf_eager(tiny_model, batch))
    assert seen == ["reduce-overhead", "step", "step"]
    assert system.details()["mode"] == "reduce-overhead"
