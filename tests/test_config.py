from pathlib import Path

import pytest

from suite.config import BertVarlenConfig, ConfigError, load, validate

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_configs_validate():
    sweep = load(ROOT / "workflows/config/cpu-sweep.yaml")
    cfg = BertVarlenConfig.from_dict(sweep["bert_varlen"])
    assert cfg.points() == [(1, 64), (1, 128), (1, 256), (16, 64), (16, 128), (16, 256)]
    assert (cfg.model.layers, cfg.model.hidden, cfg.model.heads) == (12, 768, 12)
    paper = BertVarlenConfig.from_dict(load(ROOT / "workflows/config/paper.yaml")["bert_varlen"])
    assert paper.batch_sizes == (1, 2, 4, 8, 16)
    assert paper.max_seq_lens == tuple(range(64, 1025, 64))
    assert paper.dtype == "fp16"
    for path in sorted((ROOT / "workflows/config").glob("*.yaml")):  # each complete on its own
        validate(load(path))


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


# ----------------------------------------------------------------------------- run sections


@pytest.mark.parametrize("section, match", [
    ({"steps": 0}, r"^llm_train\.steps=0 must be a positive int$"),
    ({"steps": 3.0}, r"steps=3\.0 must be a positive int"),  # an int, not a whole float
    ({"steps": True}, r"steps=True must be a positive int"),
    ({"lr": float("inf")}, r"lr=inf must be a positive number"),
    ({"lr": float("nan")}, r"lr=nan must be a positive number"),
    ({"warmup_steps": -1}, r"warmup_steps=-1 must be an int >= 0"),
    ({"seq_len": 1}, r"seq_len=1 must be an int >= 2"),  # the config file's rule (llm.train)
    ({"dtype": "fp16"}, r"dtype='fp16' is not one of \['fp32', 'bf16'\]"),
    ({"betas": (0.9, 1.0)}, r"betas=\(0\.9, 1\.0\) must be two numbers in \[0, 1\)"),
    ({"ddp_overlap": 1}, r"ddp_overlap=1 must be true or false"),
    ({"stepz": 3, "steps": 0}, r"unknown key\(s\) \['stepz'\]; valid: \[.*'steps'.*; "
                               r"llm_train\.steps=0"),  # every error, not the first
])
def test_validate_section_names_key_value_and_what_is_valid(section, match):
    from suite.config import validate_section

    with pytest.raises(ConfigError, match=match):
        validate_section(section, "llm_run", "llm_train")


def test_validate_section_accepts_and_leaves_alone():
    from suite.config import validate_section

    section = {"steps": 4, "betas": (0.9, 0.95), "lr": 1, "model": None}
    validate_section(section, "llm_run")
    assert section == {"steps": 4, "betas": (0.9, 0.95), "lr": 1, "model": None}  # no defaults
    with pytest.raises(ConfigError, match=r"^pretrain_run=\[\] must be a mapping$"):
        validate_section([], "pretrain_run")
    with pytest.raises(KeyError, match="no \\$defs entry 'nope'"):
        validate_section({}, "nope")


def test_run_sections_share_the_config_sections_rules():
    """A rule is written once: the run shapes take the config sections' fields (YAML merge)."""
    from suite.config import schema

    props, defs = schema()["properties"], schema()["$defs"]
    for config_fields, run in ((props["llm"]["properties"]["train"]["properties"], "llm_run"),
                               (props["vwn"]["properties"]["train"]["properties"],
                                "pretrain_run")):
        run_fields = defs[run]["properties"]
        for name, rule in config_fields.items():
            if name != "model":  # a run's model is checked by the model classes
                assert run_fields[name] == rule, name


def test_dataclasses_check_through_the_schema():
    from suite.experiments.pretrain_config import PretrainConfig
    from suite.trainers.config import TrainConfig

    with pytest.raises(ConfigError, match=r"llm_train\.global_batch=0 must be a positive int"):
        TrainConfig(global_batch=0)
    with pytest.raises(ConfigError, match=r"llm_train\.bucket_cap_mb=0 must be a positive"):
        TrainConfig(bucket_cap_mb=0)
    with pytest.raises(ConfigError, match=r"warmup_steps=5 must be < steps=5"):  # cross-field
        TrainConfig(steps=5, warmup_steps=5)
    with pytest.raises(ConfigError, match=r"train\.eval_every=0 must be a positive int"):
        PretrainConfig(eval_every=0)
    with pytest.raises(ConfigError, match=r"train\.grad_clip=-0\.5 must be a number >= 0"):
        PretrainConfig.from_dict({"grad_clip": -0.5})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['m'\] for kind='gpt'"):
        PretrainConfig(model={"n_layer": 1, "n_embd": 16, "n_head": 2, "m": 2})


def test_the_fixed_length_control_may_run_a_subset_of_the_frameworks():
    from suite.experiments.plan import jobs

    base = {"baselines": ["torch-eager", "torch-jit", "reference"],
            "padded_baseline": "torch-eager"}
    every = BertVarlenConfig.from_dict(base)
    some = BertVarlenConfig.from_dict({**base, "fixed_length": {"baselines": ["torch-eager",
                                                                             "reference"]}})
    assert {j.system for j in jobs(every)["bert_fixed"]} == set(base["baselines"])
    assert {j.system for j in jobs(some)["bert_fixed"]} == {"torch-eager", "reference"}
    assert jobs(some)["bert_varlen"] == jobs(every)["bert_varlen"]
    # unset, the key stays out of the records' config: older records keep their config hash
    assert "baselines" not in every.to_dict()["fixed_length"]
    assert some.to_dict()["fixed_length"]["baselines"] == ["torch-eager", "reference"]
    with pytest.raises(ConfigError, match=r"fixed_length.baselines: \['onnxruntime'\] must be "
                                          r"among bert_varlen.baselines"):
        BertVarlenConfig.from_dict({**base, "fixed_length": {"baselines": ["onnxruntime"]}})
    with pytest.raises(ConfigError, match=r"include the padded_baseline 'torch-eager'"):
        BertVarlenConfig.from_dict({**base, "fixed_length": {"baselines": ["reference"]}})


def test_peak_libraries_are_the_ones_seedbench_peak_measures():
    from suite.config import schema
    from suite.peak.libraries import LIBRARIES

    enum = schema()["properties"]["peak"]["properties"]["libraries"]["items"]["enum"]
    assert enum == list(LIBRARIES)
    assert "libraries" not in validate({})["peak"]  # default: every library of the device
    assert validate({"peak": {"libraries": ["numpy"]}})["peak"]["libraries"] == ["numpy"]
    with pytest.raises(ConfigError, match="peak.libraries.0: 'mkl'"):
        validate({"peak": {"libraries": ["mkl"]}})


def _enums(node, key, found=None):
    """Every ``enum`` the schema gives a property named ``key``, at any depth."""
    found = [] if found is None else found
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and isinstance(v, dict) and "enum" in v:
                found.append(v["enum"])
            _enums(v, key, found)
    elif isinstance(node, list):
        for v in node:
            _enums(v, key, found)
    return found


def test_the_schema_speaks_the_code_s_vocabulary():
    """Each shared vocabulary is written once, in code; the schema's enums equal it."""
    from reference_impl.configs import CHECKPOINTING, MLPS, NORMS
    from suite.config import DEVICES, schema
    from suite.scale.layout import RECOMPUTE

    assert RECOMPUTE == CHECKPOINTING
    for key, words in (("mlp", MLPS), ("norm", NORMS), ("checkpointing", CHECKPOINTING),
                       ("device", DEVICES)):
        enums = _enums(schema(), key)
        assert enums and all(tuple(e) == words for e in enums), (key, enums)
