"""Which pre-training runs the ``vwn`` and ``pma`` config sections ask for.

One workflow job per (experiment, label, seed):
``results/<machine>/<experiment>/<label>/seed<seed>.json``. A job's ``spec`` is all it needs:
for VWN the complete train config of its variant, for PMA the whole (validated) section.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from suite.config import ConfigError, validate
from suite.experiments.pretrain_config import (PMA_EXPERIMENT, VWN_EXPERIMENT, check_section,
                                               train_config, variants)


@dataclass(frozen=True)
class PretrainJob:
    experiment: str
    label: str
    seed: int
    spec: dict[str, Any]
    series: str = "main"

    def path(self, results: str) -> str:
        return f"{results}/{self.experiment}/{self.label}/seed{self.seed}.json"


def jobs(config: dict[str, Any]) -> dict[str, list[PretrainJob]]:
    """Runs per experiment; disabled experiments are left out. Raises ConfigError on a section
    whose runs could not be built (a bad r * m, a grid longer than the run)."""
    cfg = validate({k: config.get(k, {}) for k in ("vwn", "pma")})
    out: dict[str, list[PretrainJob]] = {}
    vwn = cfg["vwn"]
    if vwn["enabled"]:
        with _section("vwn"):
            out[VWN_EXPERIMENT] = [
                PretrainJob(VWN_EXPERIMENT, v.label, seed, train_config(vwn, v), v.series)
                for v in variants(vwn) for seed in vwn["seeds"]]
    pma = cfg["pma"]
    if pma["enabled"]:
        with _section("pma"):
            check_section(pma)
        out[PMA_EXPERIMENT] = [PretrainJob(PMA_EXPERIMENT, "gpt", seed, pma)
                               for seed in pma["seeds"]]
    return out


@contextmanager
def _section(name: str) -> Iterator[None]:
    """A run's error names its key within the section; the config's key path starts here."""
    try:
        yield
    except ConfigError as e:
        message = str(e)
        raise ConfigError(message if message.startswith(f"{name}.") else
                          f"{name}.{message}") from None
