"""Training records -> one tidy table (a row per run), and the ablation beside MegaScale Table 3.

MFU and HFU come from the records, which name their FLOP formula and peak. For the ablation the
table adds ``mfu_fixed_percent``: tokens/s times the baseline step's model FLOPs per token, so that
steps which change the FLOP count (a sliding window does fewer attention FLOPs) are compared on
throughput alone, as the paper's ladder is.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from suite.experiments import train_interface as ti
from suite.analysis.resilience_analysis import resilience_rows
from suite.experiments.llm_plan import ABLATION, RESILIENCE_EXPERIMENT, WINDOW_EXPERIMENT, mechanism
from suite.measure.load import noise_columns
from suite.measure.stats import mean_ci
from suite.analysis.tables import read_checked


def llm_row(path: Path) -> dict:
    rec = read_checked(path)
    stats = rec.timing.get("stats", {})
    d, c = rec.derived, rec.correctness
    mfu, hfu = d.get(ti.MFU) or {}, d.get(ti.HFU) or {}
    return {
        # schema-1 records predate point.label: their label is the folder the workflow put them in
        "experiment": rec.experiment, "label": rec.point.get("label", Path(path).parent.name),
        "system": rec.system,
        "status": rec.status.value, "reason": rec.reason,
        "model": rec.point.get("model"), "n_params": rec.point.get("n_params"),
        "world_size": rec.point.get("world_size"), "global_batch": rec.point.get("global_batch"),
        "seq_len": rec.point.get("seq_len"), "dtype": rec.point.get("dtype"),
        "device": rec.timing.get("device"),
        # which code ran (GPT.paths), None for runs from before records named it
        "attention_path": (d.get(ti.MODEL_PATHS) or {}).get("attention"),
        "block_path": (d.get(ti.MODEL_PATHS) or {}).get("block"),
        "optimizer": rec.config.get("optimizer"), "lr": rec.config.get("lr"),
        "seed": rec.config.get("seed"),
        "median_step_ms": stats["median"] * 1e3 if "median" in stats else None,
        "ci_low_ms": stats["ci_low"] * 1e3 if "ci_low" in stats else None,
        "ci_high_ms": stats["ci_high"] * 1e3 if "ci_high" in stats else None,
        "iqr_ms": stats["iqr"] * 1e3 if "iqr" in stats else None,
        "p90_step_ms": stats["p90"] * 1e3 if "p90" in stats else None,
        "p99_step_ms": stats["p99"] * 1e3 if "p99" in stats else None,
        "cv": stats.get("cv"), "n_samples": stats.get("n"),
        **noise_columns(rec.timing),
        "tokens_per_s": d.get(ti.TOKENS_PER_S), "flops_per_token": d.get(ti.FLOPS_PER_TOKEN),
        "mfu_percent": mfu.get("percent"), "hfu_percent": hfu.get("percent"),
        "flop_formula": mfu.get("formula"), "peak_flops": mfu.get("peak_flops"),
        "peak_source": mfu.get("peak_source") or d.get(ti.PEAK_NOTE),
        "peak_mem_mb": d[ti.PEAK_MEM_BYTES] / 2**20 if d.get(ti.PEAK_MEM_BYTES) else None,
        "first_loss": d.get(ti.FIRST_LOSS), "final_loss": d.get(ti.FINAL_LOSS),
        "eval_loss": d.get(ti.EVAL_LOSS), "tokens_seen": d.get(ti.TOKENS_SEEN),
        "tail_loss": _tail_loss(_steplog(Path(path), d.get(ti.STEPLOG))),
        "gate_passed": c.get("passed"), "gate_max_rel_diff": c.get("max_rel_diff"),
        **_bubble(d.get(ti.TRAINER) or {}),
        "steplog": _steplog(Path(path), d.get(ti.STEPLOG)),
        "machine": rec.env.get("machine"), "config_hash": rec.config_hash,
        "git_commit": rec.env.get("git", {}).get("commit"), "created_at": rec.created_at,
        "record": str(path),
    }


def _bubble(engine: dict) -> dict:
    """The pipeline engine's measured bubble (mean over the measured steps, with its t-interval)
    and 1F1B's formula; None for other engines."""
    steps = engine.get("bubble_fraction_steps") or []
    s = mean_ci(steps) if steps else {}
    return {"micro_batches": engine.get("micro_batches"),
            "bubble_fraction": s.get("mean"), "bubble_ci_low": s.get("ci_low"),
            "bubble_ci_high": s.get("ci_high"), "bubble_steps": s.get("n"),
            "bubble_formula": engine.get("bubble_fraction_formula"),
            "bubble_of_stage_costs": engine.get("bubble_fraction_of_stage_costs")}


def mfu_denominator(peak_sources: Iterable[str | None]) -> str:
    """What the MFU of these runs divides by, for a label: "the measured peak" when every run
    used a measured one (CPUs), the datasheet peak by name when they share it (GPUs)."""
    sources = {str(s) for s in peak_sources if s and not pd.isna(s)}
    if not sources or all(s.startswith("measured") for s in sources):
        return "the measured peak"
    return f"the {sources.pop()} peak" if len(sources) == 1 else "each run's peak (table)"


TAIL = 0.1  # the last tenth of a run's steps: its training loss for choosing a learning rate


def _tail_loss(steplog: str | None) -> float | None:
    """Mean training loss over the last ``TAIL`` of the logged steps (at least one): what an LR
    sweep chooses by, so that the held-out loss it reports was not used to choose."""
    from suite.steplog import LOSS, read_steplog

    if not steplog or not Path(steplog).exists():
        return None
    losses = [line[LOSS] for line in read_steplog(steplog)]
    tail = losses[-max(1, round(TAIL * len(losses))):]
    return sum(tail) / len(tail) if tail else None


def _steplog(record: Path, recorded: str | None) -> str | None:
    """The step log beside the record (where the workflow writes it, and where it stays when
    a machine's folder is copied or published), else the path the record names."""
    beside = record.with_name(record.stem + ".steps.jsonl")
    return str(beside) if beside.exists() else recorded


def window_row(path: Path) -> dict:
    """A row of the attention benchmark (``suite.experiments.llm_window``): one system at one
    point, its time and its time over causal attention's from the same rounds."""
    rec = read_checked(path)
    stats, d, p = rec.timing.get("stats", {}), rec.derived, rec.point
    ratio_ci = d.get("time_vs_causal_ci") or [None, None]
    return {"experiment": rec.experiment, "label": Path(path).parent.name, "system": rec.system,
            "status": rec.status.value, "reason": rec.reason,
            **{k: p.get(k) for k in ("seq_len", "window", "heads", "head_dim", "batch",
                                     "dtype")},
            "median_ms": stats["median"] * 1e3 if "median" in stats else None,
            "ci_low_ms": stats["ci_low"] * 1e3 if "ci_low" in stats else None,
            "ci_high_ms": stats["ci_high"] * 1e3 if "ci_high" in stats else None,
            "cv": stats.get("cv"), "n_samples": stats.get("n"), **noise_columns(rec.timing),
            "time_vs_causal": d.get("time_vs_causal"), "time_vs_causal_ci_low": ratio_ci[0],
            "time_vs_causal_ci_high": ratio_ci[1], "band_fraction": d.get("band_fraction"),
            "gate_passed": rec.correctness.get("passed"),
            "gate_max_rel_err": rec.correctness.get("max_rel_err"),
            "machine": rec.env.get("machine"), "git_commit": rec.env.get("git", {}).get("commit"),
            "created_at": rec.created_at, "record": str(path)}


def llm_table(paths: Iterable[str | Path]) -> pd.DataFrame:
    paths = [Path(p) for p in paths]
    first = read_checked(paths[0]).experiment if paths else None
    if first == WINDOW_EXPERIMENT:
        return pd.DataFrame([window_row(p) for p in paths])
    if first == RESILIENCE_EXPERIMENT:
        return pd.DataFrame([row for p in paths for row in resilience_rows(p)])
    df = pd.DataFrame([llm_row(p) for p in paths])
    if df.empty or df.experiment.iloc[0] != "llm_ablation":
        return df
    return ablation_columns(df)


def llm_curves(table: pd.DataFrame) -> pd.DataFrame:
    """Training loss per logged step of every successful run (from the step logs the records
    name): the loss figure draws this table, not the logs."""
    from suite.steplog import LOSS, read_steplog

    rows = []
    runs = table[table.status == "ok"] if "steplog" in table else table.iloc[0:0]
    for r in runs.itertuples():
        if not isinstance(r.steplog, str) or not r.steplog:
            continue
        for i, line in enumerate(read_steplog(r.steplog)):
            rows.append({"record": r.record, "label": r.label, "system": r.system,
                         "step": i + 1, "tokens": (i + 1) * r.global_batch * r.seq_len,
                         "loss": line[LOSS]})
    return pd.DataFrame(rows, columns=["record", "label", "system", "step", "tokens", "loss"])


def ablation_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Step order and name, the paper's rows for the step, and MFU at the baseline's FLOP count.
    One run per step: where a folder holds two (a ladder run again on another engine, the older
    records still on disk), the latest."""
    df = df.copy()
    df["step"] = df.label.str.split("-", n=1).str[0].astype(int)
    df = df.sort_values("created_at").drop_duplicates("step", keep="last")
    df["technique"] = [ABLATION[i][1] for i in df.step]
    df["paper_steps"] = [",".join(map(str, ABLATION[i][2])) for i in df.step]
    base = df[df.step == 0]
    batch0 = base.global_batch.iloc[0] if not base.empty else None
    df["mechanism"] = [mechanism(ABLATION[r.step][0], r.system,
                                 {"attention": r.attention_path, "block": r.block_path}
                                 if isinstance(r.attention_path, str) else None,
                                 r.global_batch / batch0 if batch0 and pd.notna(r.global_batch)
                                 else float("nan"))
                       for r in df.itertuples()]
    base = df[(df.step == 0) & (df.status == "ok")]
    if base.empty:
        df["mfu_fixed_percent"] = None
    else:
        fpt = base.flops_per_token.iloc[0]
        df["mfu_fixed_percent"] = 100 * df.tokens_per_s * fpt / df.peak_flops
    return df.sort_values("step").reset_index(drop=True)


def paper_steps(value) -> list[int]:
    """A ladder row's Table 3 rows from the table's ``paper_steps`` ("3,4,5"; a CSV reader
    makes a single row a number, and no row NaN)."""
    return [int(float(s)) for s in str(value).split(",") if s not in ("", "nan", "None")]


def ablation_vs_paper(table: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """Each measured step's gain in MFU points over the previous step, beside the paper's gain
    for the same techniques (the sum of its Table 3 rows' gains); the compile step has none."""
    paper = paper.set_index("step")
    gains = paper.mfu_percent.diff().fillna(0.0)
    ok = table[table.status == "ok"].sort_values("step")
    rows, previous = [], None
    for _, r in ok.iterrows():
        steps = paper_steps(r.paper_steps)
        rows.append({"step": r.step, "technique": r.technique,
                     "mfu_fixed_percent": r.mfu_fixed_percent,
                     "gain_points": (None if previous is None
                                     else r.mfu_fixed_percent - previous),
                     "paper_rows": ", ".join(paper.technique[s] for s in steps if s in paper.index),
                     "paper_gain_points": (float(sum(gains[s] for s in steps))
                                           if steps and r.step > 0 else None),
                     "paper_mfu_percent": (float(paper.mfu_percent[max(steps)])
                                           if steps else None)})
        previous = r.mfu_fixed_percent
    return pd.DataFrame(rows)
