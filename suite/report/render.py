"""Tidy tables + figures + analyses -> a self-contained HTML page (figures inlined, so one file
publishes).

The report renders what the stages before it wrote: each section's tidy table, its figure and
its ``analysis.json`` (summary, claims, provenance), plus ``peak.json`` and the config. It reads
no record and computes no result.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from suite.correctness import REFERENCE, TOLERANCE
from suite.analysis.tidy import read_table
from suite.experiments.registry import SPECS, ExperimentSpec
from suite.peak.schema import read_peak
from suite.report.columns import LAYOUTS, fmt

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Section:
    """One experiment's declared files: tidy table, figure SVG, ``analysis.json``."""

    experiment: str
    table: Path
    figure_svg: Path
    analysis: Path


def render_report(sections: list[Section], out: Path, *, peak_path: Path | None = None,
                  config_path: Path | None = None) -> Path:
    """One section per experiment, the paper's claims beside what was measured, and every run
    that failed, was incorrect or unavailable."""
    specs = {s.experiment: _spec(s.experiment) for s in sections}
    frames = {s.experiment: read_table(s.table) for s in sections}
    analyses = {s.experiment: json.loads(Path(s.analysis).read_text()) for s in sections}
    df = pd.concat(frames.values(), ignore_index=True) if frames else pd.DataFrame()
    for column in ("status", "machine", "git_commit", "config_hash", "reason", "subject",
                   "batch_size", "max_seq_len", "system"):  # absent from tables of no record
        if column not in df:
            df[column] = None
    provenance = next((a["provenance"] for a in analyses.values()
                       if a.get("provenance", {}).get("env")), {"env": {}, "timing": {}})
    env = provenance["env"]
    context = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "env": env,
        "machines": sorted(df.machine.dropna().unique()),
        "commits": sorted({f"{c[:12]}" for c in df.git_commit.dropna().unique()}),
        "dirty": bool(env.get("git", {}).get("dirty")),
        "config_text": Path(config_path).read_text() if config_path else None,
        "config_hashes": sorted(df.config_hash.dropna().unique()),
        "timing": provenance["timing"],
        "peak": read_peak(peak_path),
        "reference": REFERENCE,
        "tolerance": TOLERANCE,
        "sections": [{"id": s.experiment, "title": specs[s.experiment].title,
                      "note": specs[s.experiment].note,
                      "figure_svg": _strip_xml_header(Path(s.figure_svg).read_text()),
                      "summary": analyses[s.experiment].get("summary", ""),
                      "claims": _claims(analyses[s.experiment], "verdicts"),
                      "provenance": _provenance_text(analyses[s.experiment]),
                      **section_table(specs[s.experiment], frames[s.experiment])}
                     for s in sections],
        "problems": [_clean(r) for r in df[df.status != "ok"].to_dict("records")],
        "claims": [row for a in analyses.values() for row in _claims(a, "frameworks")],
        "counts": df.status.value_counts().to_dict(),
    }
    env_j = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                               autoescape=jinja2.select_autoescape(["html", "j2"]),
                               undefined=jinja2.StrictUndefined)
    env_j.filters["fmt"] = fmt
    html = env_j.get_template("index.html.j2").render(**context)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    return out


def section_table(spec: ExperimentSpec, table: pd.DataFrame) -> dict[str, Any]:
    """Header and formatted cells of the successful rows of one experiment's tidy table (the
    first column left-aligned as a label)."""
    if spec.columns not in LAYOUTS:
        raise ValueError(f"{spec.name}: columns={spec.columns!r} is not a report layout; "
                         f"valid: {sorted(LAYOUTS)}")
    columns = LAYOUTS[spec.columns]
    ok = table[table.status == "ok"] if "status" in table else table
    rows = [_clean(r) for r in ok.to_dict("records")]
    return {"header": [name for name, _ in columns],
            "cells": [[cell(r) for _, cell in columns] for r in rows]}


def _spec(name: str) -> ExperimentSpec:
    if name not in SPECS:
        raise ValueError(f"report section {name!r} is not a registered experiment; "
                         f"registered: {sorted(SPECS)}")
    return SPECS[name]


def _claims(analysis: dict[str, Any], layout: str) -> list[dict[str, Any]]:
    """The section's claims rows if they are laid out as ``layout``, else none."""
    if analysis.get("claims_layout") != layout:
        return []
    return analysis.get("claims") or []


def _provenance_text(analysis: dict[str, Any]) -> str:
    """Where a section's runs come from, from its analysis: machine, commit, timer, threads."""
    p = analysis.get("provenance") or {}
    env, timing = p.get("env") or {}, p.get("timing") or {}
    commit = (env.get("git") or {}).get("commit")
    parts = [f"machine {env['machine']}" if env.get("machine") else "",
             f"commit {commit[:12]}" + (" (uncommitted changes)"
                                        if (env.get("git") or {}).get("dirty") else "")
             if commit else "",
             f"timer {timing['timer']}" if timing.get("timer") else "",
             f"{timing['threads']} threads" if timing.get("threads") else ""]
    return ", ".join(x for x in parts if x)


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
