"""Typed config, validated once at the edge against ``suite/data/config.schema.yaml``.

The schema is the single definition of what a config may hold (Snakemake validates against the
same file); this module turns a validated dict into frozen dataclasses and gives errors that name
the key, the bad value and what is allowed.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from suite.measure.policy import TimingPolicy

SCHEMA_PATH = Path(__file__).parent / "data" / "config.schema.yaml"  # package data
DEVICES = ("auto", "cpu", "cuda")  # a config's device: auto is cuda where present


class ConfigError(ValueError):
    """A config value outside what the schema allows."""


@cache
def schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def _with_defaults(validator_class):
    """Fill schema defaults while validating (the same behaviour as Snakemake's ``validate``)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, sub):
        if isinstance(instance, dict):
            for name, prop in properties.items():
                if "default" in prop:
                    instance.setdefault(name, copy.deepcopy(prop["default"]))
        yield from validate_properties(validator, properties, instance, sub)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def validate(config: dict[str, Any], section: str | None = None) -> dict[str, Any]:
    """Return a validated copy with defaults filled; raise ConfigError naming what is wrong.

    ``section`` validates one experiment section alone (what a job receives).
    """
    sch = schema() if section is None else schema()["properties"][section]
    data = copy.deepcopy(config)
    errors = sorted(_Validator(sch).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError("invalid config:\n" + "\n".join(_explain(e, section) for e in errors))
    return data


def _explain(err: jsonschema.ValidationError, section: str | None) -> str:
    path = ([section] if section else []) + [str(p) for p in err.absolute_path]
    key = ".".join(path) or "<top level>"
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        return f"  {key}: unknown key(s) {extra}; allowed keys: {allowed}"
    allowed = err.schema.get("description") or _describe(err.schema)
    return f"  {key}: {err.instance!r} is not allowed ({err.message}); allowed: {allowed}"


def _describe(sub: dict[str, Any]) -> str:
    if "enum" in sub:
        return f"one of {sub['enum']}"
    return ", ".join(f"{k}={v}" for k, v in sub.items() if k not in ("default", "description"))


def _is_int(checker, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(checker, value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


# A run's section comes from Python as often as from JSON: integers are ints (3.0 is not a step
# count), numbers are finite (a YAML .inf learning rate is an error), and a tuple is an array.
_RunValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({
        "integer": _is_int, "number": _is_finite_number,
        "array": lambda checker, value: isinstance(value, (list, tuple))}))


@cache
def _run_validator(name: str) -> jsonschema.protocols.Validator:
    defs = schema().get("$defs", {})
    if name not in defs:
        raise KeyError(f"{SCHEMA_PATH} has no $defs entry {name!r}; it has {sorted(defs)}")
    return _RunValidator(defs[name])


def validate_section(section: Any, name: str, label: str | None = None) -> None:
    """Check one run's section (what a job receives, a dataclass is built from) against the
    schema's ``$defs[name]``: types, ranges, choices and unknown keys, written once in the schema
    that config files are held to. The dataclasses keep only their cross-field rules by hand.

    Defaults are not filled (missing keys take the dataclass's). Raises ``ConfigError`` naming,
    for each bad key, ``label.key=value`` and what is valid (``label`` defaults to ``name``).
    """
    validator = _run_validator(name)
    errors = sorted(validator.iter_errors(section),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        messages = [_explain_value(e, section, validator.schema, label or name) for e in errors]
        raise ConfigError("; ".join(dict.fromkeys(messages)))


def _explain_value(err: jsonschema.ValidationError, section: Any, sch: dict[str, Any],
                   label: str) -> str:
    # name the innermost mapping key: a list (betas) is one value with one rule
    keys: list[str] = []
    for p in err.absolute_path:
        if isinstance(p, int):
            break
        keys.append(p)
    value, sub = section, sch
    for k in keys:
        value, sub = value[k], sub.get("properties", {}).get(k, {})
    where = ".".join([label, *keys])
    whole = len(keys) == len(err.absolute_path)  # the error is about a mapping itself
    if err.validator == "additionalProperties" and whole:
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        return f"{where}: unknown key(s) {extra}; valid: {list(err.schema.get('properties', {}))}"
    if err.validator == "required" and whole:
        return f"{where}: missing key(s) {sorted(set(err.schema['required']) - set(value))}"
    return f"{where}={value!r} {_rule(sub, err)}"


def _rule(sub: dict[str, Any], err: jsonschema.ValidationError) -> str:
    """What a value of ``sub`` must be, in words."""
    kind = sub.get("type")
    if "enum" in sub:
        return f"is not one of {sub['enum']}"
    if kind == "boolean":
        return "must be true or false"
    if kind == "object":
        return "must be a mapping"
    if kind in ("integer", "number"):
        noun = "int" if kind == "integer" else "number"
        if sub.get("exclusiveMinimum") == 0 or (kind == "integer" and sub.get("minimum") == 1):
            return f"must be a positive {noun}" + _upper(sub)
        bounds = [f"{op} {sub[k]}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"))
                  if k in sub]
        article = "an" if noun == "int" else "a"
        return f"must be {article} {noun}" + (f" {bounds[0]}" if bounds else "") + _upper(sub)
    if "description" in sub:
        return f"must be {sub['description']}"
    return f"is not allowed ({err.message})"


def _upper(sub: dict[str, Any]) -> str:
    bounds = [f"{op} {sub[k]}" for k, op in (("maximum", "<="), ("exclusiveMaximum", "<"))
              if k in sub]
    return f" and {bounds[0]}" if bounds else ""


def load(path: str | Path) -> dict[str, Any]:
    """Read a YAML config and validate it."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    return validate(raw)


@dataclass(frozen=True)
class BertDims:
    layers: int = 12
    hidden: int = 768
    heads: int = 12
    intermediate: int = 3072
    vocab_size: int = 30522

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ConfigError(f"bert_varlen.model: hidden={self.hidden} must be divisible by "
                              f"heads={self.heads}")


@dataclass(frozen=True)
class Study:
    """A sub-experiment of the family: its own sweep, everything else shared with the family."""
    enabled: bool
    batch_sizes: tuple[int, ...]
    max_seq_lens: tuple[int, ...]
    models: tuple[str, ...] = ()
    baselines: tuple[str, ...] = ()  # fixed_length: a subset of the frameworks; () = all

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Study":
        return cls(d["enabled"], tuple(d["batch_sizes"]), tuple(d["max_seq_lens"]),
                   tuple(d.get("models", ())), tuple(d.get("baselines", ())))

    def points(self) -> list[tuple[int, int]]:
        return [(b, s) for b in self.batch_sizes for s in self.max_seq_lens] if self.enabled \
            else []


STUDIES = ("ablation", "variants", "mha", "fused_ops", "fixed_length")
EXTERNAL_PREFIX = "external-"  # baseline external-<name> runs bert_varlen.external.<name>


@dataclass(frozen=True)
class BertVarlenConfig:
    baselines: tuple[str, ...]
    padded_baseline: str
    model: BertDims
    batch_sizes: tuple[int, ...]
    max_seq_lens: tuple[int, ...]
    distribution: str
    seed: int
    dtype: str
    device: str
    threads: int
    timeout_s: float
    timing: TimingPolicy
    enabled: bool = True
    ablation: Study | None = None
    variants: Study | None = None
    mha: Study | None = None
    fused_ops: Study | None = None
    fixed_length: Study | None = None
    external: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, section: dict[str, Any]) -> "BertVarlenConfig":
        d = validate(section, "bert_varlen")
        try:
            timing = TimingPolicy(**d["timing"])
        except ValueError as e:
            raise ConfigError(f"bert_varlen.timing: {e}") from None
        missing = sorted(b for b in d["baselines"] if b.startswith(EXTERNAL_PREFIX)
                         and b.removeprefix(EXTERNAL_PREFIX) not in d["external"])
        if missing:
            raise ConfigError(f"bert_varlen.baselines: {missing} name external programs that are "
                              f"not configured; bert_varlen.external has "
                              f"{sorted(d['external'])}")
        if d["padded_baseline"] not in d["baselines"]:
            raise ConfigError(f"bert_varlen.padded_baseline: {d['padded_baseline']!r} is not "
                              f"among the baselines {d['baselines']}; speedups need it")
        control = d["fixed_length"]["baselines"]
        if control and (set(control) - set(d["baselines"])
                        or d["padded_baseline"] not in control):
            raise ConfigError(f"bert_varlen.fixed_length.baselines: {control} must be among "
                              f"bert_varlen.baselines {d['baselines']} and include the "
                              f"padded_baseline {d['padded_baseline']!r} (its speedups divide "
                              "by it)")
        return cls(baselines=tuple(d["baselines"]), padded_baseline=d["padded_baseline"],
                   model=BertDims(**d["model"]), batch_sizes=tuple(d["batch_sizes"]),
                   max_seq_lens=tuple(d["max_seq_lens"]), distribution=d["distribution"],
                   seed=d["seed"], dtype=d["dtype"], device=d["device"], threads=d["threads"],
                   timeout_s=d["timeout_s"], timing=timing, enabled=d["enabled"],
                   external=d["external"],
                   **{name: Study.from_dict(d[name]) for name in STUDIES})

    def to_dict(self) -> dict[str, Any]:
        d = _lists(asdict(self))
        for name in STUDIES:
            if name != "variants":
                d[name].pop("models")
            # written only where set, so that configs from before the key hash as they did
            if name != "fixed_length" or not d[name]["baselines"]:
                d[name].pop("baselines")
        return d

    def fixed_length_baselines(self) -> tuple[str, ...]:
        """The frameworks of the fixed-length control (all of them unless a subset is set)."""
        return self.fixed_length.baselines or self.baselines

    def points(self) -> list[tuple[int, int]]:
        return [(b, s) for b in self.batch_sizes for s in self.max_seq_lens]

    def registered_baselines(self) -> list[str]:
        """The baselines found through entry points (external-<name> ones are configured)."""
        return [b for b in self.baselines if not b.startswith(EXTERNAL_PREFIX)]

    @property
    def max_len(self) -> int:
        """The longest padded length of any study: the position table every model gets."""
        studies = [st for st in (getattr(self, name) for name in STUDIES) if st]
        return max([*self.max_seq_lens, *(s for st in studies for s in st.max_seq_lens)])


def _lists(value: Any) -> Any:
    """Tuples -> lists, so that a config survives a JSON round trip unchanged."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value
