"""The ``bert_serving`` config section, checked: the schema's types and ranges, then the rules
across keys (each system's name, buckets that hold the longest request). Torch-free: the
workflow's planning reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suite.config import BertDims, ConfigError, validate

SECTION = "bert_serving"
BATCHING = ("padded", "bucketed", "packed")
PADDING_FREE = "packed-reference"
# what computes without padding, each served packed (the reference replays CUDA graphs on a GPU,
# captured before the first request; reference-eager launches each kernel as the frameworks do)
PACKED = {"reference": "padding-free packing", "reference-eager": "eager padding-free packing"}


def parse_system(name: str) -> tuple[str, str]:
    """``padded-torch-eager`` -> ``("padded", "torch-eager")``. Only the reference can be
    served packed; served padded or bucketed it runs with its padding-free switches off (the
    control: the same kernels and GEMM library, only the padding differs)."""
    batching, _, baseline = name.partition("-")
    if batching not in BATCHING or not baseline:
        raise ValueError(f"serving system {name!r} is not '<batching>-<baseline>' with batching "
                         f"one of {BATCHING} (e.g. padded-torch-eager, packed-reference)")
    if batching == "packed" and baseline not in PACKED:
        raise ValueError(f"serving system {name!r}: only the reference computes without "
                         f"padding ({', '.join('packed-' + b for b in PACKED)}); serve "
                         f"{baseline} padded or bucketed")
    if batching != "packed" and baseline == "reference-eager":
        raise ValueError(f"serving system {name!r}: the reference served {batching} runs eagerly "
                         f"already (its padded path has no graphs): name it {batching}-reference")
    return batching, baseline


def is_packed(system: str) -> bool:
    return system.startswith("packed-")


@dataclass(frozen=True)
class ServingConfig:
    section: dict[str, Any]  # validated, defaults filled: what records carry

    @classmethod
    def from_dict(cls, section: dict[str, Any]) -> "ServingConfig":
        d = validate(section, SECTION)
        for name in d["systems"]:
            try:
                parse_system(name)
            except ValueError as e:
                raise ConfigError(f"{SECTION}.systems: {e}") from None
        if d["buckets"] != sorted(d["buckets"]) or d["buckets"][-1] < d["max_len"]:
            raise ConfigError(f"{SECTION}.buckets: {d['buckets']} must increase and end at or "
                              f"above max_len={d['max_len']} (every request needs a bucket)")
        if "Server" in d["scenarios"] and "Offline" not in d["scenarios"]:
            raise ConfigError(f"{SECTION}.scenarios: {d['scenarios']}: Server needs Offline "
                              "too (its throughput is where the search starts)")
        BertDims(**d["model"])
        if d["lengths"].endswith(".csv"):  # a bad histogram stops the run before any job
            from suite.serving.requests import HistogramError, read_histogram

            try:
                read_histogram(d["lengths"], d["max_len"])
            except HistogramError as e:
                raise ConfigError(f"{SECTION}.lengths: {e}") from None
        return cls(d)

    def __getattr__(self, key: str) -> Any:
        try:
            return self.section[key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def dims(self) -> BertDims:
        return BertDims(**self.section["model"])

    def baselines(self) -> list[str]:
        """The registered baselines the systems serve."""
        return sorted({parse_system(s)[1] for s in self.section["systems"]})

    def to_dict(self) -> dict[str, Any]:
        return self.section
