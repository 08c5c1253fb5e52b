"""The analysis step of one experiment: its tidy table (and the declared files beside it) ->
``analysis.json``, everything the report shows besides the table and the figure: the summary
sentence, the paper's claims measured here, the headline number set side by side across
machines, and the provenance of the runs (environment and
timing policy of one record). The report renders this file; it computes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from suite.experiments.registry import ExperimentSpec, load
from suite.records import Status, read_record

ANALYSIS_VERSION = 3  # 2: headline; 3: claims rows name their kind and both verdicts


@dataclass
class AnalysisInputs:
    """``paper``: the papers' CSVs by role (``ExperimentSpec.paper``); ``tables``: the tidy
    tables of other experiments it reads (``reads_tables``, those in the run); ``claims``: a
    claims table the experiment's table step wrote; ``records``: the runs behind the table."""

    table: pd.DataFrame
    paper: dict[str, pd.DataFrame] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    claims: pd.DataFrame | None = None
    records: list[Path] = field(default_factory=list)


def analyze(spec: ExperimentSpec, inputs: AnalysisInputs) -> dict[str, Any]:
    summary = load(spec.summary)(inputs) if spec.summary else ""
    claims = load(spec.claims)(inputs) if spec.claims else inputs.claims
    headline = load(spec.headline)(inputs) if spec.headline else None
    return {
        "analysis_version": ANALYSIS_VERSION,
        "experiment": spec.name,
        "summary": summary,
        "claims_layout": spec.claims_layout,
        "claims": [] if claims is None else _json_rows(claims),
        "headline": headline.to_dict() if headline is not None else None,
        "provenance": provenance(inputs.records),
    }


def claims_of_table_step(inputs: AnalysisInputs) -> pd.DataFrame | None:
    """The claims table the experiment's own table step wrote (the loss experiments)."""
    return inputs.claims


def provenance(records: list[Path]) -> dict[str, Any]:
    """Environment and timing policy of the first successful record (else the first one)."""
    first = None
    for path in records:
        if Path(path).exists():
            record = read_record(path)
            first = first or record
            if record.status == Status.OK:
                first = record
                break
    if first is None:
        return {"env": {}, "timing": {}}
    timing = {k: v for k, v in (first.timing or {}).items() if k != "samples"}
    return {"env": first.env, "timing": timing, "record_schema": first.schema_version}


def _json_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows with NaN as None (JSON has no NaN)."""
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in frame.astype(object).to_dict("records")]
