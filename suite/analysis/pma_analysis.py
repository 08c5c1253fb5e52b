"""PMA records (one per seed) -> the merge grid summarized over seeds, the curves behind the
figure, and the claims table beside the paper.

Every comparison is within a seed (merged vs latest checkpoint of the same run, merged vs the
annealed fork of the same run, the spike branches of the same run); the claims take the mean
over seeds with a t-interval. Lower loss is better throughout: a gain is ``latest - merged``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from suite.analysis.verdicts import (CLAIM_COLUMNS, claim, equivalence_claim, not_tested,
                                     withheld)
from suite.analysis.tables import read_checked
from suite.records import Record
from suite.measure.stats import mean_ci

PAPER = "PMA"


def read_runs(paths: Iterable[str | Path]) -> list[tuple[Path, Record]]:
    return [(Path(p), read_checked(p)) for p in paths]


def curves(runs: list[tuple[Path, Record]]) -> pd.DataFrame:
    """Long table: ``kind`` latest | merged | decay | merged_in_decay | spike-<branch>."""
    rows: list[dict[str, Any]] = []
    for _, rec in runs:
        if rec.status.value != "ok":
            continue
        d, seed = rec.derived, rec.point["seed"]
        base = {"seed": seed, "method": None, "n": None, "interval_steps": None,
                "decay_steps": None}
        rows += [{**base, "kind": "latest", "step": c["step"], "tokens": c["tokens"],
                  "loss": c["latest"]} for c in d["curve"]]
        rows += [{**base, "kind": "merged", "method": g["method"], "n": g["n"],
                  "interval_steps": g["interval_steps"], "step": g["step"],
                  "tokens": g["tokens"], "loss": g["merged"]} for g in d["merges"]]
        for dec in d["decays"]:
            rows += [{**base, "kind": "decay", "decay_steps": dec["decay_steps"],
                      "step": c["step"], "tokens": c["tokens"], "loss": c["loss"]}
                     for c in dec["curve"]]
            last = dec["curve"][-1]
            rows.append({**base, "kind": "merged_in_decay", "decay_steps": dec["decay_steps"],
                         "n": dec["merged_in_decay_n"], "step": last["step"],
                         "tokens": last["tokens"], "loss": dec["merged_in_decay"]})
        spike = d.get("spike")
        if spike:
            for branch, points in spike["curves"].items():
                rows += [{**base, "kind": f"spike-{branch}", "step": c["step"], "tokens": None,
                          "loss": c["loss"]} for c in points]
    return pd.DataFrame(rows)


def grid(runs: list[tuple[Path, Record]]) -> pd.DataFrame:
    """The merge grid at the last merge point, mean over seeds: one row per (method, N, V),
    plus one row per run that did not succeed."""
    frames, meta = [], {}
    for path, rec in runs:
        if rec.status.value != "ok":
            continue
        g = pd.DataFrame(rec.derived["merges"]).assign(seed=rec.point["seed"])
        frames.append(g[g.step == g.step.max()])
        meta.setdefault("record", str(path))
        meta.update(machine=rec.env.get("machine"), config_hash=rec.config_hash,
                    git_commit=rec.env.get("git", {}).get("commit"))
    rows = []
    if frames:
        merges = pd.concat(frames, ignore_index=True)
        merges["gain"] = merges.latest - merges.merged
        for (method, n, v), g in merges.groupby(["method", "n", "interval_steps"], sort=False):
            gain = mean_ci(g.gain.tolist())
            rows.append({"experiment": "pma_merging", "label": method, "method": method,
                         "n": n, "interval_steps": v, "step": g.step.iloc[0],
                         "tokens": g.tokens.iloc[0], "seeds": gain["n"],
                         "merged": g.merged.mean(), "latest": g.latest.mean(),
                         "gain": gain["mean"], "gain_ci_low": gain["ci_low"],
                         "gain_ci_high": gain["ci_high"], "status": "ok", **meta})
    bad = [{"experiment": rec.experiment, "label": "gpt", "seed": rec.point.get("seed"),
            "system": f"gpt seed {rec.point.get('seed')}",
            "status": rec.status.value, "reason": rec.reason, "record": str(path),
            "machine": rec.env.get("machine"), "config_hash": rec.config_hash}
           for path, rec in runs if rec.status.value != "ok"]
    return pd.DataFrame(rows + bad)


def _merged_at(rec: Record, step: int, method: str, n: int, interval: int) -> float | None:
    for g in rec.derived["merges"]:
        if (g["step"], g["method"], g["n"], g["interval_steps"]) == (step, method, n, interval):
            return g["merged"]
    return None


def claims(runs: list[tuple[Path, Record]], headline: pd.DataFrame) -> pd.DataFrame:
    """The paper's claims, each of its kind (``suite.analysis.verdicts``). The claims about
    merging in the stable phase are withheld (not tested) where a run did not reach it
    (``pma_merging.stable_phase``); their measured values stay in the table."""
    ok = [rec for _, rec in runs if rec.status.value == "ok"]
    if not ok:
        return pd.DataFrame(columns=CLAIM_COLUMNS)
    paper = dict(zip(headline.claim, headline.value))
    h = ok[0].derived["headline"]
    setting = f"{h['method'].upper()} of N = {h['n']} checkpoints, V = {h['interval']} x V0"
    stable = _stable_gate(ok)
    rows = [stable(claim(PAPER, f"merging in the stable (constant-LR) phase beats the latest "
                         f"checkpoint ({setting}, set before the run)",
                         f"HumanEval {paper.get('HumanEval 1.3B/13B latest -> merged', '?')}",
                         [r.derived["headline"]["latest"] - r.derived["headline"]["merged"]
                          for r in ok], sign=1, unit="nats (latest - merged)",
                         note="the paper measures downstream accuracy; held-out loss here"))]
    rows += _annealing_claims(ok, stable)
    rows += _ranking_claims(ok, paper)
    rows += _count_claims(ok, stable)
    rows += _spike_claims(ok, paper)
    rows.append(not_tested(PAPER, "the best interval V grows with model size",
                           f"{paper.get('best interval V (1.3B/13B MoE)', '?')} at 1.3B/13B", "",
                           "needs several model sizes; one size is run here"))
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _stable_gate(ok: list[Record]):
    """A function that withholds a row's verdict unless every run reached the stable phase."""
    checks = [r.derived.get("stable") for r in ok]
    if any(c is None for c in checks):
        why = "the records predate the stable-phase check"
    else:
        short = [c for c in checks if not c["met"]]
        why = None if not short else (
            f"{len(short)} of {len(checks)} runs had not reached the stable phase (held-out "
            f"slope over the last {short[0]['window']} steps "
            + ", ".join(f"{c['slope_per_100_steps']:+.3f}" for c in short)
            + f" nats per 100 steps; stable means no steeper than -{short[0]['max_slope']:g})")
    return (lambda row: row) if why is None else (lambda row: withheld(row, why))


def _margin(rec: Record) -> float:
    return float(rec.config.get("equivalence_margin", 0.02))


def _annealing_claims(ok: list[Record], stable) -> list[dict]:
    """The merged constant-LR model against annealed forks: at the end of the run (and how much
    of the annealing gain merging recovers), early in training, and merging early in the
    decay against its end."""
    longest = [max(r.derived["decays"], key=lambda d: d["decay_steps"])
               for r in ok if r.derived["decays"]]
    if not longest:
        return []
    d, margin = longest[0]["decay_steps"], _margin(ok[0])
    diff = [r.derived["headline"]["merged"] - dec["annealed"] for r, dec in zip(ok, longest)]
    frac = [100 * (r.derived["headline"]["latest"] - r.derived["headline"]["merged"])
            / (r.derived["headline"]["latest"] - dec["annealed"])
            for r, dec in zip(ok, longest)
            if r.derived["headline"]["latest"] != dec["annealed"]]
    rows = [stable(equivalence_claim(
                PAPER, f"the merged constant-LR model is comparable to the annealed one at "
                f"equal tokens (a fork that decays the LR to 0 over the last {d} steps)",
                "comparable (Fig. 3)", diff, margin=margin, unit="nats (merged - annealed)")),
            stable(claim(PAPER, "merging recovers part of the annealing gain ((latest - merged) "
                         "/ (latest - annealed))", "comparable: about 100%", frac, sign=1,
                         unit="%", note="100% = as good as annealing; the paper gives no number"))]
    early = [r.derived.get("early_fork") for r in ok]
    if all(early):
        rows.append(equivalence_claim(
            PAPER, f"early in training too: the merge at step {early[0]['end_step']} is "
            f"comparable to a {early[0]['decay_steps']}-step annealed fork ending there",
            "comparable (Fig. 3)", [e["merged"] - e["annealed"] for e in early], margin=margin,
            unit="nats (merged - annealed)"))
    else:
        rows.append(not_tested(PAPER, "early in training too: the merge is comparable to an "
                               "annealed fork ending at the same step", "comparable (Fig. 3)",
                               "nats", "no early fork was run (pma.decay.early_end: 0)",
                               kind="equivalence"))
    inside = [dec for dec in longest if dec.get("merged_early_in_decay") is not None]
    if inside:
        rows.append(equivalence_claim(
            PAPER, f"merging early in annealing (SMA of the {d}-step decay's first-half "
            f"checkpoints) is comparable to the fully annealed model", "comparable (Fig. 2)",
            [dec["merged_early_in_decay"] - dec["annealed"] for dec in inside], margin=margin,
            unit="nats (merged early - annealed)",
            note="the merge has seen half the decay's tokens"))
    rows.append(claim(PAPER, "merging inside the decay improves on the annealed model "
                      f"(SMA of the last decay checkpoints, {d}-step fork)",
                      "not stated; measured for completeness",
                      [dec["annealed"] - dec["merged_in_decay"] for dec in longest],
                      sign=1, unit="nats (annealed - merged in decay)",
                      note="while the LR falls the checkpoints lag the annealed model: "
                           "a negative value means merging them costs"))
    return rows


def _after_warmup(rec: Record, steps: list[int], n: int, v: int) -> list[int]:
    """The merge points whose oldest merged checkpoint is past warm-up."""
    warmup = rec.config["train"]["warmup_steps"]
    return [t for t in steps if t - (n - 1) * v > warmup]


def _ranking_claims(ok: list[Record], paper: dict) -> list[dict]:
    """Method ranking early vs late: WMA against SMA at the headline N and V, the early point
    the first whose checkpoints are all past warm-up."""
    h = ok[0].derived["headline"]
    n, v = h["n"], h["interval"] * ok[0].workload["checkpoint_every"]
    steps = _after_warmup(ok[0], sorted({g["step"] for g in ok[0].derived["merges"]
                                         if g["n"] == n and g["interval_steps"] == v}), n, v)
    if len(steps) < 2:
        why = (f"needs two merge points whose N = {n} checkpoints, V = {v} apart, are all past "
               f"warm-up; the run has {len(steps)}")
        return [not_tested(PAPER, "early in training WMA merges better than SMA",
                           paper.get("method ranking early in training"), "nats", why),
                not_tested(PAPER, "the methods' differences vanish later",
                           "differences vanish later", "nats", why)]
    early, late = steps[0], steps[-1]

    def gap(rec: Record, step: int) -> float | None:
        s, w = (_merged_at(rec, step, "sma", n, v), _merged_at(rec, step, "wma", n, v))
        return None if s is None or w is None else s - w

    return [claim(PAPER, f"early in training WMA merges better than SMA (step {early}, the "
                  f"first merge past warm-up; N = {n}, V = {v})",
                  paper.get("method ranking early in training"),
                  [gap(r, early) for r in ok], sign=1, unit="nats (SMA - WMA)",
                  note="Fig. 4; EMA(0.1), EMA(0.2) are in the grid"),
            claim(PAPER, f"the methods' differences vanish later (|SMA - WMA| at step "
                  f"{early} minus at step {late})", "differences vanish later",
                  [abs(gap(r, early)) - abs(gap(r, late)) for r in ok
                   if gap(r, early) is not None and gap(r, late) is not None],
                  sign=1, unit="nats", note="Fig. 4")]


def _count_claims(ok: list[Record], stable) -> list[dict]:
    """More checkpoints N: worse early in training, better late (the paper's Fig. 5), at the
    headline method and V, the fewest against the most N run."""
    h = ok[0].derived["headline"]
    v = h["interval"] * ok[0].workload["checkpoint_every"]
    grid = [g for g in ok[0].derived["merges"] if g["interval_steps"] == v
            and g["method"] == h["method"]]
    counts = sorted({g["n"] for g in grid})
    few, many = counts[0], counts[-1]
    steps = _after_warmup(ok[0], sorted({g["step"] for g in grid if g["n"] == many}), many, v)
    if len(counts) < 2 or len(steps) < 2:
        why = (f"needs two counts N and two merge points whose N = {many} checkpoints are all "
               f"past warm-up; the run has {len(counts)} and {len(steps)}")
        return [not_tested(PAPER, "early in training more checkpoints hurt",
                           "N = 15 worse early (Fig. 5)", "nats", why),
                not_tested(PAPER, "late in training more checkpoints help",
                           "N = 15 best late (Fig. 5)", "nats", why)]
    early, late = steps[0], steps[-1]

    def edge(rec: Record, step: int) -> float | None:  # the many's gain over the few's
        a, b = (_merged_at(rec, step, h["method"], few, v),
                _merged_at(rec, step, h["method"], many, v))
        return None if a is None or b is None else a - b

    what = f"{h['method'].upper()}, V = {v}"
    return [claim(PAPER, f"early in training more checkpoints hurt (N = {many} vs {few} at "
                  f"step {early}, {what})", "N = 15 worse early (Fig. 5)",
                  [edge(r, early) for r in ok], sign=-1, unit=f"nats (N={few} - N={many})"),
            stable(claim(PAPER, f"late in training more checkpoints help (N = {many} vs {few} "
                         f"at step {late}, {what})", "N = 15 best late (Fig. 5)",
                         [edge(r, late) for r in ok], sign=1,
                         unit=f"nats (N={few} - N={many})"))]


def _spike_claims(ok: list[Record], paper: dict) -> list[dict]:
    """Recovery from a loss spike under an LR too high to recover at: the merged restart
    against the spiked and the last pre-spike weights, every branch at the resume LR."""
    spikes = [r.derived["spike"] for r in ok if r.derived.get("spike")]
    if not spikes:
        return []
    rise = mean_ci([s["after_spike"] - s["pre_spike_loss"] for s in spikes])
    s0 = spikes[0]
    note = (f"the raised LR (x{s0['lr_factor']:g} for the spike's steps) lifted the held-out "
            f"loss by {rise['mean']:.3f} nats on average; every branch resumed at "
            f"x{s0['resume_lr_factor']:g} the LR")
    if rise["mean"] <= 0:
        note = "no spike was caused (held-out loss did not rise): " + note
    return [claim(PAPER, f"resuming from the SMA of {len(s0['pre_spike_steps'])} pre-spike "
                  f"checkpoints recovers at the spike's LR (vs continuing from the spiked "
                  f"weights, after {s0['resume_steps']} steps)",
                  paper.get("loss spike recovery"),
                  [s["final"]["spiked"] - s["final"]["merged"] for s in spikes],
                  sign=1, unit="nats (spiked - merged)", note=note),
            claim(PAPER, "control the paper lacks: the merged restart beats restarting "
                  "from the last pre-spike checkpoint", "not in the paper",
                  [s["final"]["last"] - s["final"]["merged"] for s in spikes], sign=1,
                  unit="nats (last - merged)",
                  note="both rollbacks keep the pre-spike optimizer state")]


def table_step(paths: Iterable[str | Path], paper: dict[str, pd.DataFrame]
               ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The registry's table builder: the paper CSVs by role (headline)."""
    return analyze(paths, paper["headline"])


def analyze(paths: Iterable[str | Path], headline: pd.DataFrame
            ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(merge grid at the end, curves, claims)."""
    runs = read_runs(paths)
    return grid(runs), curves(runs), claims(runs, headline)
