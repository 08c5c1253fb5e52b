"""The CPU engines users pick first: OpenVINO (padded) and CTranslate2 (each sequence at its
own length), each checked against HF on edge lengths and through a gated point run."""

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
ENGINES = ["openvino", "ctranslate2"]


def _skip_unless_available(name):
    ok, why = baselines.create(name).available()
    if not ok:
        pytest.skip(why)


@pytest.mark.parametrize("name", ENGINES)
def test_matches_hf_on_edge_lengths_then_passes_a_gated_point(tiny_cfg, name):
    """An empty sequence, a full one, one token; a second shape after the first (OpenVINO
    converts once with dynamic shapes; CTranslate2 takes each batch's lengths)."""
    _skip_unless_available(name)
    model = canonical_model("bert", BertDims(**TINY_MODEL), 32)
    system = baselines.create(name)
    system.prepare(model, torch.device("cpu"), torch.float32)
    for lengths, s in (([5, 0, 16, 1], 16), ([32, 7], 32)):
        batch = bert_batch(lengths, s, TINY_MODEL["vocab_size"], seed=1)
        system.build(batch)
        with torch.inference_mode():
            ref = model(**hf_inputs(model, batch.input_ids, batch.attention_mask,
                                    batch.token_type_ids)).last_hidden_state
        out = torch.as_tensor(system.run(batch))
        assert out.shape == ref.shape
        valid = batch.attention_mask.bool()
        assert (out - ref)[valid].abs().max() < 1e-4
    rec = run_point(tiny_cfg, name, 3, 16, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    assert rec.correctness["max_abs_err"] < 1e-4 and len(rec.timing["samples"]) >= 3
    assert rec.derived["padding_free"] is (name == "ctranslate2")
    details = rec.derived["system"]
    assert details["convert_s"] > 0 and details["threads"] == 1
    if name == "openvino":  # asked for, not left to the plugin (bf16 on AVX512_BF16 CPUs)
        assert details["inference_precision"] == "f32"
    else:
        assert details["compute_type"] == "float32"


def test_what_each_engine_cannot_run_is_unavailable_with_the_reason(tiny_cfg):
    _skip_unless_available("ctranslate2")
    rec = run_point(tiny_cfg, "ctranslate2", 3, 16, show_progress=False,
                    experiment="bert_variants", model_kind="albert")
    assert rec.status is Status.UNAVAILABLE
    assert rec.reason == "ctranslate2's converter has no AlbertModel loader here (BERT only)"
    ok, why = baselines.create("openvino").can_run("bert-encoder", "cuda", "fp16")
    assert not ok and "device 'cuda'" in why
