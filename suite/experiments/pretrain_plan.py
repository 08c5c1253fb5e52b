"""Which pre-training runs the ``vwn`` and ``pma`` config sections ask for.

One workflow job per (experiment, label, seed):
``results/<machine>/<experiment>/<label>/seed<seed>.json``. A job's ``spec`` is all it needs:
for VWN the complete train config of its variant, for PMA the whole (validated) section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from suite.config import validate
from suite.experiments import pma_merging, vwn_width

EXPERIMENTS = (vwn_width.EXPERIMENT, pma_merging.EXPERIMENT)


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
        out[vwn_width.EXPERIMENT] = [
            PretrainJob(vwn_width.EXPERIMENT, v.label, seed, vwn_width.train_config(vwn, v),
                        v.series)
            for v in vwn_width.variants(vwn) for seed in vwn["seeds"]]
    pma = cfg["pma"]
    if pma["enabled"]:
        pma_merging.check_section(pma)
        out[pma_merging.EXPERIMENT] = [PretrainJob(pma_merging.EXPERIMENT, "gpt", seed, pma)
                                       for seed in pma["seeds"]]
    return out
