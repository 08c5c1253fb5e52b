"""Tidy table + figures -> a self-contained HTML page (figures inlined, so one file publishes).

The report reads what the runs wrote; it never runs a model.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from suite.correctness import REFERENCE, TOLERANCE
from suite.records import read_record

TEMPLATES = Path(__file__).parent / "templates"


def render_report(table_path: Path, figure_svg: Path, out: Path, *,
                  peak_path: Path | None = None, config_path: Path | None = None) -> Path:
    df = pd.read_csv(table_path)
    ok = df[df.status == "ok"]
    problems = df[df.status != "ok"]
    first = _first_record(df)
    env = first.env if first else {}
    timing = first.timing if first and first.timing else {}
    context = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "env": env,
        "machines": sorted(df.machine.dropna().unique()),
        "commits": sorted({f"{c[:12]}" for c in df.git_commit.dropna().unique()}),
        "dirty": bool(env.get("git", {}).get("dirty")),
        "config_text": Path(config_path).read_text() if config_path else None,
        "config_hashes": sorted(df.config_hash.dropna().unique()),
        "timing": timing,
        "peak": json.loads(Path(peak_path).read_text()) if peak_path else None,
        "reference": REFERENCE,
        "tolerance": TOLERANCE,
        "figure_svg": _strip_xml_header(Path(figure_svg).read_text()),
        "rows": [_clean(r) for r in ok.to_dict("records")],
        "problems": [_clean(r) for r in problems.to_dict("records")],
        "counts": df.status.value_counts().to_dict(),
    }
    env_j = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                               autoescape=jinja2.select_autoescape(["html", "j2"]),
                               undefined=jinja2.StrictUndefined)
    env_j.filters["fmt"] = _fmt
    html = env_j.get_template("index.html.j2").render(**context)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html)
    return out


def _first_record(df: pd.DataFrame):
    for path in df.sort_values("status", key=lambda s: s != "ok").record.dropna():
        if Path(path).exists():
            return read_record(path)
    return None


def _strip_xml_header(svg: str) -> str:
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def _fmt(value: Any, spec: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return format(value, spec)
