"""What every figure module shares: the inputs a figure function receives and how a figure is
written. Figure modules import this; nothing here imports them (the registry dispatches)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

# The same table gives the same SVG bytes (no date, fixed element ids): the published figures
# are committed and a rebuild must not churn them.
matplotlib.rcParams["svg.hashsalt"] = "seedbench"


@dataclass
class FigureData:
    """An experiment's tidy table and the declared files its figure may draw: the papers'
    CSVs by role (``ExperimentSpec.paper``), the loss curves, ``peak.json``."""

    table: pd.DataFrame
    paper: dict[str, pd.DataFrame] = field(default_factory=dict)
    curves: pd.DataFrame | None = None
    peak: dict | None = None

    def paper_table(self, role: str) -> pd.DataFrame:
        if role not in self.paper:
            raise ValueError(f"this figure needs the paper CSV {role!r} (--paper {role}=PATH); "
                             f"given: {sorted(self.paper)}")
        return self.paper[role]


def save_figure(fig, out: Path) -> list[Path]:
    """``out.svg``, the one format: the report inlines it and the README links it (a PNG beside
    it was a second render of every figure, half of a figure job); closes the figure."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.with_suffix(".svg")
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    return [path]
