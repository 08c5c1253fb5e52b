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


NOTES = {
    "bert_varlen": "Left: latency here. Middle: speedup of the padding-free reference over the "
                   "padded baseline, with its 95% CI, the FLOP bounds, and the paper's "
                   "ByteTransformer-over-PyTorch speedup from the ByteTransformer README (A100, "
                   "fp16: another machine and precision, shown for shape, not for equality). "
                   "Right: the paper's latencies.",
    "bert_fixed": "Every sequence of the batch at the full length: there is no padding, so a "
                  "padding-free system has nothing to skip. Its speedup here is what its kernels "
                  "and fusion give alone; the difference from the variable-length figure at the "
                  "same point is what removing padding gives.",
    "bert_ablation": "The reference with the paper's optimizations switched on one after "
                     "another; speedups are over step 0 (padded, unfused). On CPU the fused "
                     "epilogues run as PyTorch ops (the Triton kernels need CUDA), so those two "
                     "steps are expected to change little here.",
    "bert_variants": "Each family at BERT-base size, padded HF eager against the padding-free "
                     "reference; speedups over the padded HF model.",
    "bert_mha": "Attention alone on BERT-base-shaped Q/K/V (12 heads x 64): varlen attention on "
                "the packed tokens and padded SDPA, against the padded matmul + mask + softmax + "
                "matmul the paper calls PyTorch. The paper's 6.13x is A100 fp16 with a fused "
                "CUDA kernel.",
    "bert_fused_ops": "The two element-wise epilogues ByteTransformer fuses, on the packed "
                      "tokens. LayerNorm is memory-bound: its figure is GB/s of least traffic.",
}


def render_report(sections: list[tuple[str, Path, Path]], out: Path, *,
                  peak_path: Path | None = None, config_path: Path | None = None,
                  claims_path: Path | None = None) -> Path:
    """One section per (experiment, tidy table, figure SVG), the paper's claims beside what was
    measured, and every run that failed, was incorrect or unavailable."""
    from suite.analysis.claims import claims_table
    from suite.experiments import EXPERIMENTS

    frames = {exp: pd.read_csv(table) for exp, table, _ in sections}
    claims = (claims_table(pd.read_csv(claims_path), frames.get("bert_varlen"),
                           frames.get("bert_mha")) if claims_path else None)
    df = pd.concat(frames.values(), ignore_index=True)
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
        "sections": [{"id": exp, "title": EXPERIMENTS.get(exp, exp), "note": NOTES.get(exp, ""),
                      "figure_svg": _strip_xml_header(Path(svg).read_text()),
                      "rows": [_clean(r) for r in
                               frames[exp][frames[exp].status == "ok"].to_dict("records")]}
                     for exp, _, svg in sections],
        "problems": [_clean(r) for r in df[df.status != "ok"].to_dict("records")],
        "claims": [] if claims is None else [_clean(r) for r in claims.to_dict("records")],
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
