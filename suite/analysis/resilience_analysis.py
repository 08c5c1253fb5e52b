"""llm_resilience records -> table rows, the costs carried to the paper's 175B run, ETTR against
cluster size, the claims, the summary, the headline and the figure.

Carrying the costs to 175B on 12,288 GPUs (``at_paper_scale``): the checkpoint holds fp32
weights and AdamW's two moments (12 bytes a parameter), sharded over every GPU, 8 GPUs a node.
The stall and persist time of each scheme scale with a node's bytes at this run's measured
seconds per byte (this machine's disk and memory copy standing in for a node's storage and its
GPU-to-host copy); the recovery is the measured time from a killed rank's detection to training
again, its restore part scaled by bytes the same way. The failure rate is Llama 3's (419
unexpected interruptions in 54 days on 16,384 GPUs); the step time is the scale model's for
MegaScale's 175B run at 12,288 GPUs (Table 2's when the model's table is absent), used to
round the checkpoint interval up to whole steps.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from suite.analysis.tables import read_checked
from suite.analysis.verdicts import CLAIM_COLUMNS, Size, interval_claim, not_tested
from suite.measure.stats import ratio_of_medians_ci
from suite.resilience.ettr import Costs, at_scale

PAPER = "MegaScale"
GIB = 2**30
BYTES_PER_PARAM = 12  # fp32 weights + AdamW's two fp32 moments
PAPER_PARAMS, PAPER_GPUS, GPUS_PER_NODE = 175e9, 12288, 8
PAPER_STEP_S = 6.34  # Table 2, 175B on 12,288 GPUs
GPU_COUNTS = (256, 512, 1024, 2048, 4096, 8192, 12288, 16384)
SIZE_SETTING_BYTES = GIB  # two-stage's gain is judged at a state of at least this
STALL_GAIN = 5.0  # the goal: two-stage's stall at most 20% of synchronous
ETTR_PAPER = 0.90  # MegaScale Sec. 6 and Llama 3 Sec. 3.3.4: "over 90%"
MEGASCALE_RECOVERY_S = (10 + 15) * 60  # detection+diagnosis < 10 min, catch-up <= 15 min
SCHEMES = ("sync", "two-stage")


# ----------------------------------------------------------------------------- table


def resilience_rows(path: Path) -> list[dict]:
    """A record's rows: one per checkpoint mode or fault run, one per straggler phase."""
    rec = read_checked(path)
    d = rec.derived
    base = {
        "experiment": rec.experiment, "trainer": rec.point.get("trainer"),
        "group": rec.point.get("group"), "system": rec.system, "status": rec.status.value,
        "reason": rec.reason, "world_size": rec.point.get("world_size"),
        "leftovers": len(d.get("leftovers") or []),
        "machine": rec.env.get("machine"), "git_commit": rec.env.get("git", {}).get("commit"),
        "created_at": rec.created_at, "record": str(path)}
    if rec.point.get("group") == "straggler" and d.get("phases"):
        return [{**base, "label": f"phase {p['index']}", "slowed": p["slowed"],
                 "named": ", ".join(f"rank {r}" for r in p["named"]) or "none",
                 "correct": p["correct"],
                 "slowdown": max(p["ratios"].values(), default=None) if p["slowed"] is not None
                 else None, "step_s": p["step_s"], "throughput_lost": p["throughput_lost"]}
                for p in d["phases"]]
    keys = ("stall_s", "first_stall_s", "persist_s", "state_bytes", "persist_bytes_per_s",
            "restore_s", "healthy_step_s", "detect_s", "detected_by", "shutdown_s", "startup_s",
            "first_step_s", "recovery_s", "downtime_s", "steps_redone", "lost_work_s",
            "bit_exact", "timeout_s", "max_restarts")
    row = {**base, "label": rec.system, **{k: d.get(k) for k in keys}}
    if d.get("stalls_s"):
        row["stall_samples"] = ";".join(f"{x:.6g}" for x in d["stalls_s"])
    if d.get("disk"):
        row["disk_bytes_per_s"] = d["disk"]["bytes_per_s"]
    return [row]


def _ok(table: pd.DataFrame, system: str, trainer: str | None = None) -> pd.DataFrame:
    """The ok rows of ``system`` (of ``trainer`` alone, when given)."""
    rows = table[(table.system == system) & (table.status == "ok")]
    return rows if trainer is None else rows[rows.trainer == trainer]


def checkpoint_pair(table: pd.DataFrame, trainer: str | None = None):
    """(sync row, two-stage row) of ``trainer`` (default: the first by name of those with the
    largest state, within 1%: engines save the same state give or take a few bytes), or None
    when either is missing."""
    sync, two = _ok(table, "checkpoint-sync"), _ok(table, "checkpoint-two-stage")
    if trainer is None and len(sync):
        trainer = sorted(sync[sync.state_bytes >= 0.99 * sync.state_bytes.max()].trainer)[0]
    sync, two = sync[sync.trainer == trainer], two[two.trainer == trainer]
    return None if sync.empty or two.empty else (sync.iloc[0], two.iloc[0])


def _samples(row) -> list[float]:
    """A row's stall samples ("a;b;c"; one alone reads back from the CSV as a number)."""
    text = row.get("stall_samples") if isinstance(row, dict) else row.stall_samples
    if text is None or (isinstance(text, float) and math.isnan(text)) or text == "":
        return []
    return [float(x) for x in str(text).split(";")]


# ----------------------------------------------------------------------------- scale


def paper_step_s(tables: dict[str, pd.DataFrame]) -> tuple[float, str]:
    """The 175B step at 12,288 GPUs: the scale model's prediction, else Table 2's."""
    scale = tables.get("llm_scale")
    if scale is not None and "predicted_iteration_time_s" in scale:
        rows = scale[(scale.system == "MegaScale") & (scale.gpus == PAPER_GPUS)]
        if len(rows):
            return (float(rows.predicted_iteration_time_s.iloc[0]),
                    "the scale model's MegaScale 175B step at 12,288 GPUs")
    return PAPER_STEP_S, "MegaScale Table 2 (175B, 12,288 GPUs): the scale model's table absent"


def failure_rate(paper: pd.DataFrame) -> float:
    """Unexpected interruptions per GPU-hour, Llama 3's 54-day snapshot."""
    def value(quantity: str) -> float:
        rows = paper[paper.source.str.contains("Llama 3") & (paper.quantity == quantity)]
        return float(str(rows.value.iloc[0]).replace(",", ""))

    return (value("interruptions_unexpected")
            / (value("snapshot_length") * 24 * value("training_gpus_max")))


def at_paper_scale(table: pd.DataFrame, trainer: str) -> dict[str, Costs] | None:
    """Each scheme's costs for a node of the 175B run, from ``trainer``'s measurements."""
    kill = _ok(table, "fault-kill", trainer)
    out = {}
    node_bytes = PAPER_PARAMS * BYTES_PER_PARAM / PAPER_GPUS * GPUS_PER_NODE
    for scheme in SCHEMES:
        rows = _ok(table, f"checkpoint-{scheme}", trainer)
        if rows.empty or kill.empty:
            return None
        r, k = rows.iloc[0], kill.iloc[0]
        per_byte = node_bytes / float(r.state_bytes)
        restore = float(r.restore_s) * per_byte
        recovery = float(k.recovery_s) - float(k.restore_s) + restore
        out[scheme] = Costs(stall_s=float(r.stall_s) * per_byte,
                            persist_s=float(r.persist_s) * per_byte, recovery_s=recovery)
    return out


def ettr_curves(costs: dict[str, Costs], rate: float, step_s: float,
                gpus=GPU_COUNTS) -> pd.DataFrame:
    rows = []
    for scheme, c in costs.items():
        for n in gpus:
            p = at_scale(c, n, rate)
            rows.append({"scheme": scheme, "gpus": n, "mtbf_h": p.mtbf_s / 3600,
                         "interval_s": math.ceil(p.interval_s / step_s) * step_s,
                         "ettr": p.ettr})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- claims


def resilience_claims(inputs) -> pd.DataFrame:
    """Sec. 4.3: two-stage checkpointing stalls training far less than a synchronous write; and
    the share of a 12,288-GPU cluster's time that trains under each scheme (ETTR), against the
    paper's > 90%."""
    table, rows = inputs.table, []
    for trainer in sorted(set(table.trainer.dropna())):
        pair = checkpoint_pair(table, trainer)
        text = f"two-stage checkpointing barely pauses training ({trainer}): sync stall / two-stage"
        if pair is None:
            rows.append(not_tested(PAPER, text, "host copy in seconds, persisted in the "
                                   "background (Sec. 4.3)", "x", "no checkpoint run measured"))
            continue
        s, t = pair
        point, low, high = ratio_of_medians_ci(_samples(s), _samples(t))
        state = float(s.state_bytes)
        rows.append(interval_claim(
            PAPER, text, "host copy in seconds, persisted in the background (Sec. 4.3)",
            point, low, high, 2, sign=1, null=1.0, unit="x",
            interval="95% bootstrap of the medians",
            size=Size(STALL_GAIN, state >= SIZE_SETTING_BYTES,
                      "a training state of at least 1 GiB"),
            note=(f"state {state / GIB:.2f} GiB, fsynced; {len(_samples(s))} and "
                  f"{len(_samples(t))} checkpoints; persist "
                  f"{s.persist_bytes_per_s / 1e6:.0f} MB/s, this disk "
                  f"{s.disk_bytes_per_s / 1e6:.0f} MB/s")))
        rows += _ettr_rows(inputs, trainer)
    if not rows:
        rows.append(not_tested(PAPER, "two-stage checkpointing barely pauses training",
                               "(Sec. 4.3)", "x", "no resilience records"))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _ettr_rows(inputs, trainer: str) -> list[dict]:
    costs = at_paper_scale(inputs.table, trainer)
    rate_table = inputs.paper.get("published")
    rows = []
    for scheme in SCHEMES:
        text = f"ETTR of the 175B run at 12,288 GPUs, {scheme} checkpoints ({trainer})"
        if costs is None or rate_table is None:
            rows.append(not_tested(PAPER, text, "> 90% (Sec. 6)", "fraction",
                                   "no checkpoint and killed-rank runs of this trainer"))
            continue
        rate = failure_rate(rate_table)
        step, _ = paper_step_s(inputs.tables)
        c = costs[scheme]
        bounds = [at_scale(Costs(c.stall_s * f, c.persist_s * f, c.recovery_s), PAPER_GPUS,
                           rate).ettr for f in (0.5, 1.0, 2.0)]
        row = interval_claim(
            PAPER, text, "> 90% (Sec. 6)", bounds[1], min(bounds), max(bounds), 2, sign=1,
            null=ETTR_PAPER, unit="fraction",
            interval="the checkpoint costs halved and doubled",
            note=(f"Daly's optimum interval; Llama 3's {rate * 1e6:.1f} unexpected "
                  f"interruptions per million GPU-hours; this run's costs carried to a node's "
                  f"{PAPER_PARAMS * BYTES_PER_PARAM / PAPER_GPUS * GPUS_PER_NODE / GIB:.2f} GiB "
                  f"(stall {c.stall_s:.1f} s, recovery {c.recovery_s:.1f} s)"))
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- report


def resilience_summary(inputs) -> str:
    t = inputs.table
    parts = []
    for trainer in sorted(set(t.trainer.dropna())):
        pair = checkpoint_pair(t, trainer)
        if pair is not None:
            s, w = pair
            parts.append(f"{trainer}: a checkpoint of {s.state_bytes / GIB:.2f} GiB stalls "
                         f"training {s.stall_s:.2f} s written synchronously, {w.stall_s:.2f} s "
                         f"in two stages ({w.stall_s / s.stall_s:.0%})")
        for kind in ("kill", "hang", "nan"):
            f = _ok(t, f"fault-{kind}", trainer)
            if len(f):
                r = f.iloc[0]
                parts.append(f"{kind}: detected in {r.detect_s:.1f} s, training again "
                             f"{r.recovery_s:.1f} s later, {r.steps_redone:.0f} step(s) redone, "
                             f"losses {'equal to the bit' if r.bit_exact else 'DIFFERENT'}")
        st = t[(t.group == "straggler") & (t.trainer == trainer) & (t.status == "ok")]
        if len(st):
            right = int(st.correct.astype(str).str.lower().eq("true").sum())
            parts.append(f"straggler phases named right: {right} of {len(st)}")
    return ("; ".join(parts) + ".") if parts else "No resilience run finished."
