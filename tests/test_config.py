from pathlib import Path

import pytest

from suite.config import BertVarlenConfig, ConfigError, load, validate

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_configs_validate():
    smoke = load(ROOT / "workflows/config/smoke.yaml")
    cfg = BertVarlenConfig.from_dict(smoke["bert_varlen"])
    assert cfg.points() == [(1, 64), (1, 128), (1, 256), (16, 64), (16, 128), (16, 256)]
    assert (cfg.model.layers, cfg.model.hidden, cfg.model.heads) == (12, 768, 12)
    paper = BertVarlenConfig.from_dict(load(ROOT / "workflows/config/paper.yaml")["bert_varlen"])
    assert paper.batch_sizes == (1, 2, 4, 8, 16)
    assert paper.max_seq_lens == tuple(range(64, 1025, 64))
    assert paper.dtype == "fp16"


def test_defaults_are_filled():
    cfg = validate({})
    assert cfg["machine"] == "auto"
    assert cfg["bert_varlen"]["distribution"] == "bytetransformer"
    assert cfg["bert_varlen"]["timing"]["min_repeats"] == 5
    assert cfg["peak"]["dtypes"] == ["fp32"]


def test_bad_value_names_key_value_and_allowed():
    with pytest.raises(ConfigError) as e:
        validate({"bert_varlen": {"batch_sizes": ["sixteen"]}})
    msg = str(e.value)
    assert "bert_varlen.batch_sizes.0" in msg
    assert "'sixteen'" in msg
    assert "integer" in msg


def test_unknown_key_lists_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"bert_varlen: unknown key\(s\) \['batch_size'\]; "
                                          r"allowed keys: \[.*'batch_sizes'"):
        validate({"bert_varlen": {"batch_size": [1]}})
    with pytest.raises(ConfigError, match=r"<top level>: unknown key\(s\) \['bert'\]"):
        validate({"bert": {}})


@pytest.mark.parametrize("section, fragment", [
    ({"distribution": "zipf"}, "bert_varlen.distribution: 'zipf'"),
    ({"batch_sizes": [0]}, "bert_varlen.batch_sizes.0: 0"),
    ({"dtype": "fp8"}, "allowed: fp32, fp16 or bf16"),
])
def test_section_validation(section, fragment):
    with pytest.raises(ConfigError, match=None) as e:
        BertVarlenConfig.from_dict(section)
    assert fragment in str(e.value)


def test_model_shape_is_checked():
    with pytest.raises(ConfigError, match="hidden=100 must be divisible by heads=12"):
        BertVarlenConfig.from_dict({"model": {"hidden": 100}})


def test_missing_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load(ROOT / "nope.yaml")
