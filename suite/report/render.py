"""Tidy tables + figures + analyses of every machine folder -> a self-contained HTML page
(figures inlined, so one file publishes).

The report renders what the stages before it wrote: per machine, each section's tidy table, its
figure and its ``analysis.json`` (summary, claims, headline, provenance), and the machine's
``peak.json``; plus the config. It reads no record and computes no result.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from suite.measure.correctness import REFERENCE, TOLERANCE
from suite.models import WEIGHTS
from suite.measure.load import NOISY_CV, NOISY_OTHER_CPUS
from suite.analysis.analyze import ANALYSIS_VERSION
from suite.analysis.tidy import read_table
from suite.analysis.verdicts import METHOD_NOTE
from suite.experiments.registry import SPECS, ExperimentSpec
from suite.peak.cpu_theory import isa_summary
from suite.peak.schema import read_peak
from suite.report.columns import LAYOUTS, fmt, is_noisy

TEMPLATES = Path(__file__).parent / "templates"
# What the failures table shows of a row (tables of some families lack a few of them).
PROBLEM_COLUMNS = ("experiment", "system", "subject", "batch_size", "max_seq_len", "status",
                   "reason")
# What the noisy points' table shows of a row.
NOISY_COLUMNS = ("experiment", "system", "label", "subject", "batch_size", "max_seq_len", "cv",
                 "noise_reason", "record")


@dataclass(frozen=True)
class Machine:
    """One machine folder: ``path`` (results/<name> or results/published/<name>), the label
    the report gives it, and its ``peak.json``."""

    path: str
    label: str
    peak: Path | None = None


@dataclass(frozen=True)
class Section:
    """One experiment's declared files in one machine folder: tidy table, figure SVG,
    ``analysis.json``."""

    machine: str
    experiment: str
    table: Path
    figure_svg: Path
    analysis: Path


def render_report(sections: list[Section], out: Path, *, machines: list[Machine] | None = None,
                  config_path: Path | None = None) -> Path:
    """The machines side by side (their facts, each experiment's headline number), then one
    section per experiment with a block per machine: figure, table, the paper's claims beside
    what was measured, provenance; and every run that failed, was incorrect or unavailable.

    ``machines``: labels and peak.json files, in the order shown; by default each sections'
    folder, labelled by its name, with no peak."""
    if machines is None:
        folders = dict.fromkeys(s.machine for s in sections)
        machines = [Machine(f, Path(f).name) for f in folders]
    by_path = {m.path: m for m in machines}
    for s in sections:
        if s.machine not in by_path:
            raise ValueError(f"section {s.experiment} names machine {s.machine!r}; given "
                             f"machines: {sorted(by_path)}")
    peaks = {m.path: read_peak(m.peak) for m in machines}
    frames = {(s.machine, s.experiment): read_table(s.table) for s in sections}
    # runs: the measured sections' rows (the analytical scale model's are predictions)
    runs = {k: df for k, df in frames.items() if _spec(k[1]).measured}
    analyses = {(s.machine, s.experiment): _read_analysis(s.analysis) for s in sections}
    experiments = [name for name in SPECS if any(s.experiment == name for s in sections)]
    first = machines[0].path if machines else None
    env_j = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                               autoescape=jinja2.select_autoescape(["html", "j2"]),
                               undefined=jinja2.StrictUndefined)
    env_j.filters["fmt"] = fmt
    html = env_j.get_template("index.html.j2").render(
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        machines=[_machine_row(m, peaks[m.path],
                               [runs[k] for k in runs if k[0] == m.path],
                               [analyses[k] for k in analyses if k[0] == m.path])
                  for m in machines],
        headlines=[_headline_row(e, machines, analyses) for e in experiments],
        sections=[_section(e, [s for s in sections if s.experiment == e], by_path, frames,
                           analyses) for e in experiments],
        problems=[{**dict.fromkeys(PROBLEM_COLUMNS), **_clean(r),
                    "machine_label": by_path[path].label}
                  for (path, _), df in frames.items() if "status" in df
                  for r in df[df.status != "ok"].to_dict("records")],
        noisy=[{**dict.fromkeys(NOISY_COLUMNS), **_clean(r),
                 "machine_label": by_path[path].label}
               for (path, _), df in runs.items() if "noisy" in df
               for r in df.to_dict("records") if is_noisy(r)],
        claims=[{**row, "machine_label": by_path[path].label}
                for (path, _), a in analyses.items() for row in _claims(a, "frameworks")],
        counts=_counts(runs.values()),
        config_text=Path(config_path).read_text() if config_path else None,
        timing=next((a["provenance"]["timing"] for k, a in analyses.items()
                     if k[0] == first and a.get("provenance", {}).get("timing")), {}),
        claims_note=METHOD_NOTE, reference=REFERENCE, tolerance=TOLERANCE,
        weights=WEIGHTS.as_dict(),
        gated_before_weights=_gated_before_weights(frames, by_path),
        noise_thresholds={"cv": NOISY_CV, "other_cpus": NOISY_OTHER_CPUS},
        peaks=[(m.label, peaks[m.path]) for m in machines],
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    return out


def _read_analysis(path: Path) -> dict[str, Any]:
    try:
        analysis = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    version = analysis.get("analysis_version")
    if version != ANALYSIS_VERSION:
        raise ValueError(f"{path}: analysis_version {version!r}, this suite renders "
                         f"{ANALYSIS_VERSION}: build it again from its table (delete it and run "
                         f"make report, or seedbench analyze)")
    return analysis


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _anchor(experiment: str, machine: str) -> str:
    """The HTML id of an experiment's block of one machine folder."""
    return f"{experiment}-on-{_slug(machine)}"


def _counts(frames) -> dict[str, int]:
    counts: dict[str, int] = {}
    for df in frames:
        if "status" in df:
            for status, n in df.status.value_counts().items():
                counts[status] = counts.get(status, 0) + int(n)
    return counts


def _machine_row(machine: Machine, peak: dict[str, Any] | None, frames: list[pd.DataFrame],
                 analyses: list[dict[str, Any]]) -> dict[str, Any]:
    """A machine's facts from its peak.json and the provenance of its sections' records."""
    peak = peak or {}
    envs = [a["provenance"]["env"] for a in analyses if (a.get("provenance") or {}).get("env")]
    env = envs[0] if envs else peak.get("env") or {}
    commits = sorted({c[:12] for df in frames if "git_commit" in df
                      for c in df.git_commit.dropna().astype(str).unique()})
    gpu = env.get("gpu")
    device = (f"{gpu['count']} x {gpu['name']}" if gpu else
              (peak.get("cpu") or {}).get("model_name") or env.get("cpu_model") or "?")
    libraries = []
    for dtype, entry in (peak.get("peaks") or {}).items():
        best = (entry.get("measured") or {}).get("library")
        for lib, e in entry.get("libraries", {}).items():
            libraries.append({"dtype": dtype, "library": lib, "best": lib == best,
                              "gflops": e["flops_per_s"] / 1e9 if e["status"] == "ok" else None,
                              "status": e["status"], "reason": e.get("reason", "")})
    return {
        "id": "machine-" + _slug(machine.path), "label": machine.label, "path": machine.path,
        "device": device, "device_type": peak.get("device_type", "?"),
        "isa": "–" if gpu else isa_summary(peak.get("cpu")),
        "cores": env.get("cpu_cores"), "threads": peak.get("threads"),
        "libraries": libraries, "packages": env.get("packages") or {},
        "platform": env.get("platform"), "python": env.get("python"),
        "commits": commits, "dirty": any((e.get("git") or {}).get("dirty") for e in envs),
        "counts": _counts(frames),
    }


def _headline_row(experiment: str, machines: list[Machine],
                  analyses: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """One row of the machines' side-by-side table; a cell whose metric is not the row's (an
    MFU over a GPU's datasheet peak beside CPUs' measured peaks) says its own."""
    cells = [(analyses.get((m.path, experiment)) or {}).get("headline") for m in machines]
    shown = next((c for c in cells if c), None)
    metric = shown["metric"] if shown else ""
    return {"id": experiment, "title": SPECS[experiment].title, "metric": metric,
            "same_everywhere": bool(shown and shown.get("machine_independent")),
            "cells": [c and {**c, "own_metric": c["metric"] != metric} for c in cells]}


def _section(experiment: str, sections: list[Section], machines: dict[str, Machine],
             frames, analyses) -> dict[str, Any]:
    """An experiment's blocks, one per machine (one only when it is not a measurement)."""
    spec = _spec(experiment)
    if not spec.measured:
        sections = sections[:1]
    blocks = []
    for s in sections:
        key = (s.machine, experiment)
        analysis = analyses[key]
        blocks.append({"id": _anchor(experiment, s.machine), "label": machines[s.machine].label,
                       "figure_svg": _strip_xml_header(Path(s.figure_svg).read_text()),
                       "summary": analysis.get("summary", ""),
                       "claims": _claims(analysis, "verdicts"),
                       "provenance": _provenance_text(analysis),
                       **section_table(spec, frames[key])})
    return {"id": experiment, "title": spec.title, "note": spec.note, "blocks": blocks,
            "measured": spec.measured}


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


def _gated_before_weights(frames: dict[tuple[str, str], pd.DataFrame],
                           by_path: dict[str, Machine]) -> list[tuple[str, int]]:
    """Per machine, how many of its rows were gated against HF's own initialization (weights
    version 1, blind to biases and norms): their timings stand, their gate was weaker."""
    counts: dict[str, int] = {}
    for (path, _), df in frames.items():
        if "gate_weights" in df:
            n = int((pd.to_numeric(df.gate_weights, errors="coerce") == 1).sum())
            if n:
                counts[by_path[path].label] = counts.get(by_path[path].label, 0) + n
    return sorted(counts.items())


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
