"""Which serving runs the ``bert_serving`` config section asks for: one workflow job per
(system, repeat), ``results/<machine>/bert_serving/<system>/run<repeat>.json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suite.serving.config import SECTION, ServingConfig


@dataclass(frozen=True)
class ServingJob:
    system: str
    repeat: int
    experiment: str = SECTION

    def path(self, results: str) -> str:
        return f"{results}/{self.experiment}/{self.system}/run{self.repeat}.json"


def jobs(config: dict[str, Any]) -> tuple[ServingConfig, list[ServingJob]]:
    """The checked section and its runs (none when disabled); raises ConfigError."""
    cfg = ServingConfig.from_dict(config.get(SECTION, {}))
    if not cfg.enabled:
        return cfg, []
    return cfg, [ServingJob(system, k) for k in range(cfg.repeats) for system in cfg.systems]
