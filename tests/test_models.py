"""The canonical models (suite.models): a model loaded from a run's shared folder is the model
the first job built, bit for bit, and a folder is only ever read for the model it holds."""

import pytest
import torch

from suite.config import BertDims
from suite.models import KINDS, _cache_name, canonical_model

from conftest import TINY_MODEL


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = dict(a.named_parameters()), dict(b.named_parameters())
    buffers = zip(a.named_buffers(), b.named_buffers())
    return (sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
            and all(na == nb and torch.equal(x, y) for (na, x), (nb, y) in buffers))


@pytest.mark.parametrize("kind", KINDS)
def test_a_cached_model_is_the_one_built(tmp_path, kind):
    dims = BertDims(**TINY_MODEL)
    built = canonical_model(kind, dims, 32, seed=3, cache=tmp_path)
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith(f"{kind}-") and (folder / "config.json").is_file()
    loaded = canonical_model(kind, dims, 32, seed=3, cache=tmp_path)
    assert _same(built, loaded) and _same(built, canonical_model(kind, dims, 32, seed=3))
    assert not loaded.training and loaded.config._attn_implementation == "eager"
    assert getattr(loaded, "pooler", None) is None
    assert loaded(torch.ones(1, 8, dtype=torch.long)).last_hidden_state.dtype == torch.float32


def test_another_seed_is_another_folder_and_a_damaged_one_is_rebuilt(tmp_path):
    dims = BertDims(**TINY_MODEL)
    first = canonical_model("bert", dims, 32, seed=0, cache=tmp_path)
    other = canonical_model("bert", dims, 32, seed=1, cache=tmp_path)
    assert len(list(tmp_path.iterdir())) == 2 and not _same(first, other)
    (weights,) = (tmp_path / _cache_name("bert", dims, 32, 0)).glob("*.safetensors")
    weights.write_bytes(b"not a checkpoint")
    fresh = canonical_model("bert", dims, 32, seed=0)
    assert _same(canonical_model("bert", dims, 32, seed=0, cache=tmp_path), fresh)
    assert weights.read_bytes() != b"not a checkpoint"  # written again, whole
    assert _same(canonical_model("bert", dims, 32, seed=0, cache=tmp_path), fresh)
    assert len(list(tmp_path.iterdir())) == 2  # nothing left over
