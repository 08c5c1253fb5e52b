"""The correctness gate sees every parameter: each mis-mapping of the canonical weights that a
system could make (``suite.measure.mutations``) is recorded ``incorrect`` in a real point run,
on every model family, and the canonical models' attention is far from uniform. The external
protocol's example program is checked with the same catalogue in test_baselines_external.py.

Mutation tried on all of them: ``canonical_model`` without ``draw_weights`` (HF's own
initialization) makes bias-dropped, kv-bias-swapped and norms-swapped pass the gate at 1e-7 and
the attention uniform (entropy 1.00), so these tests fail."""

import pytest
import torch

from suite.baselines.registry import baselines
from suite.baselines.torch_hf import TorchEager
from suite.experiments import bert_oracle
from suite.experiments.bert_varlen import run_point
from suite.measure.mutations import ACCEPTED, MUTATIONS, attention_entropy, mutate
from suite.models import KINDS, WEIGHTS, WeightScheme, _cache_name, canonical_model
from suite.records import Status

pytestmark = pytest.mark.usefixtures("one_thread")


class MisMapped(TorchEager):
    """HF eager (``torch-eager``) prepared from a mis-mapped copy of the canonical model: what
    a system with that weight-mapping bug computes."""

    def __init__(self, mutation: str | None):
        super().__init__()
        self.mutation = mutation

    def prepare(self, model, device, dtype):
        super().prepare(mutate(model, self.mutation) if self.mutation else model, device, dtype)


@pytest.fixture
def mismapped(monkeypatch):
    """``mismapped-<mutation>`` (or ``mismapped-none``) as a baseline name, as a plugin's
    would be found: through ``baselines.create``, which the point run calls."""
    real = baselines.create

    def create(name):
        if name.startswith("mismapped-"):
            mutation = name.removeprefix("mismapped-")
            return MisMapped(None if mutation == "none" else mutation)
        return real(name)

    monkeypatch.setattr(baselines, "create", create)


def _experiment(kind: str) -> str:
    return "bert_varlen" if kind == "bert" else "bert_variants"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mutation", ["none", *MUTATIONS, *ACCEPTED])
def test_every_mismapping_is_incorrect_in_a_point_run(tiny_cfg, mismapped, kind, mutation):
    """Caught by a margin (over 5x the fp32 tolerance; the smallest, gelu-sigmoid on
    DistilBERT, is 7.5x), never timed; the wrapper without a mutation and the accepted tanh GELU
    pass."""
    rec = run_point(tiny_cfg, f"mismapped-{mutation}", 3, 16, show_progress=False,
                    experiment=_experiment(kind), model_kind=kind)
    assert rec.correctness["weights"] == WEIGHTS.as_dict()  # what the gate could see
    if mutation == "none" or mutation in ACCEPTED:
        assert rec.status is Status.OK and rec.correctness["passed"], rec.reason
        assert rec.correctness["max_abs_err"] < rec.correctness["tolerance_abs"] / 2
        return
    assert rec.status is Status.INCORRECT, (kind, mutation, rec.correctness)
    assert rec.correctness["max_abs_err"] > 5 * rec.correctness["tolerance_abs"]
    assert rec.timing == {} and rec.reason.startswith("max abs error")


@pytest.mark.parametrize("kind", KINDS)
def test_the_canonical_attention_is_far_from_uniform(tiny_cfg, kind):
    """Every layer's mean normalized row entropy is under 0.7 (1.0 is uniform, where Q and K
    are interchangeable); at the size the tests use it is 0.3-0.6. Mutation tried: Q and K at
    HF's std 0.02 give 1.00."""
    _, batch = bert_oracle.point_inputs(tiny_cfg, "bytetransformer", 3, 16)
    model = canonical_model(kind, tiny_cfg.model, tiny_cfg.max_len, seed=tiny_cfg.seed)
    entropy = attention_entropy(model, batch)
    assert len(entropy) == model.config.to_dict().get("num_hidden_layers",
                                                      model.config.to_dict().get("n_layers"))
    assert all(0.0 < e < 0.7 for e in entropy), entropy


@pytest.mark.parametrize("kind", KINDS)
def test_every_parameter_is_drawn_off_the_trivial_init(tiny_cfg, kind):
    """No bias near 0, no LayerNorm weight near 1, no embedding row at 0 (HF's padding row
    was): a parameter left at a constant is one whose mis-mapping the gate cannot see."""
    model = canonical_model(kind, tiny_cfg.model, tiny_cfg.max_len, seed=tiny_cfg.seed)
    seen = 0
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm)):
            assert module.bias.abs().mean() > 0.03, f"{name}.bias"
            seen += 1
        if isinstance(module, torch.nn.LayerNorm):
            assert (module.weight - 1).abs().mean() > 0.02, f"{name}.weight"
        if isinstance(module, torch.nn.Embedding):
            assert (module.weight.abs().sum(dim=1) > 0).all(), f"{name} has a zero row"
    assert seen >= 8


def test_a_mutation_leaves_the_model_it_was_given_alone(tiny_cfg):
    model = canonical_model("bert", tiny_cfg.model, tiny_cfg.max_len)
    before = {n: p.clone() for n, p in model.state_dict().items()}
    mutated = mutate(model, "qk-swapped")
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())
    layer = mutated.encoder.layer[0].attention.self
    assert torch.equal(layer.query.weight, model.encoder.layer[0].attention.self.key.weight)
    with pytest.raises(ValueError, match="mutation 'q-dropped' is not one of"):
        mutate(model, "q-dropped")


def test_the_weights_scheme_is_part_of_every_fingerprint_of_a_model(tiny_cfg, monkeypatch):
    """A cached model folder or an oracle file made under another scheme is never read for
    this one's (a scheme change must not reuse a stale oracle)."""
    from suite import models
    from suite.experiments import bert_oracle

    lengths, batch = bert_oracle.point_inputs(tiny_cfg, "bytetransformer", 3, 16)
    model = canonical_model("bert", tiny_cfg.model, tiny_cfg.max_len)
    before = (_cache_name("bert", tiny_cfg.model, 16, 0),
              bert_oracle.fingerprint(tiny_cfg, "bytetransformer", "bert", lengths, batch, model))
    other = WeightScheme(logit_std=1.0)
    monkeypatch.setattr(models, "WEIGHTS", other)
    monkeypatch.setattr(bert_oracle, "WEIGHTS", other)
    after = (_cache_name("bert", tiny_cfg.model, 16, 0),
             bert_oracle.fingerprint(tiny_cfg, "bytetransformer", "bert", lengths, batch, model))
    assert before[0] != after[0]
    assert before[1]["weights"] == WEIGHTS.as_dict() and after[1]["weights"] == other.as_dict()
