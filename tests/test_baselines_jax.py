"""The JAX/XLA encoder (``jax-xla``): HF's function on edge lengths and a second shape, gated
point runs in fp32 and bf16, and a mapping bug caught by the gate, not timed."""

import dataclasses

import pytest
import torch
from conftest import TINY_MODEL

from suite.baselines.registry import baselines
from suite.config import BertDims
from suite.experiments.bert_varlen import run_point
from suite.models import canonical_model, hf_inputs
from suite.records import Status
from suite.workloads import bert_batch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _jax():
    ok, why = baselines.create("jax-xla").available()
    if not ok:
        pytest.skip(why)


def test_matches_hf_on_edge_lengths_and_compiles_once_per_shape():
    model = canonical_model("bert", BertDims(**TINY_MODEL), 32)
    system = baselines.create("jax-xla")
    system.prepare(model, torch.device("cpu"), torch.float32)
    for lengths, s in (([5, 0, 16, 1], 16), ([32, 7], 32), ([3, 3, 3, 3], 16)):
        batch = bert_batch(lengths, s, TINY_MODEL["vocab_size"], seed=1)
        with torch.inference_mode():
            ref = model(**hf_inputs(model, batch.input_ids, batch.attention_mask,
                                    batch.token_type_ids)).last_hidden_state
        out = system.run(batch)
        assert isinstance(out, torch.Tensor) and out.shape == ref.shape
        valid = batch.attention_mask.bool()
        assert (out - ref)[valid].abs().max() < 1e-4
    assert set(system.details()["first_call_s"]) == {"4x16", "2x32"}  # the third reused 4x16


@pytest.mark.parametrize("dtype, bound", [("fp32", 1e-5), ("bf16", 0.1)])
def test_a_gated_point_runs_in_each_dtype(tiny_cfg, dtype, bound):
    rec = run_point(dataclasses.replace(tiny_cfg, dtype=dtype), "jax-xla", 3, 16,
                    show_progress=False)
    assert rec.status is Status.OK, rec.reason
    assert rec.correctness["max_abs_err"] < bound and len(rec.timing["samples"]) >= 3
    assert rec.derived["padding_free"] is False
    assert rec.derived["system"]["execution"].startswith("jax.jit")


def test_a_mis_mapped_norm_is_incorrect_and_not_timed(tiny_cfg, monkeypatch):
    import suite.baselines.jax_bert as jax_bert

    real = jax_bert.bert_weights

    def swapped(model):
        w = real(model)
        layer = w["layers"][0]
        layer["attn_norm"], layer["ffn_norm"] = layer["ffn_norm"], layer["attn_norm"]
        return w

    monkeypatch.setattr(jax_bert, "bert_weights", swapped)
    rec = run_point(tiny_cfg, "jax-xla", 3, 16, show_progress=False)
    assert rec.status is Status.INCORRECT and rec.timing == {}
