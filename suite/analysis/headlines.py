"""One number per experiment and machine, the one the report puts side by side across machines
and the README quotes: ``(AnalysisInputs) -> Headline | None``, named by
``ExperimentSpec.headline`` and run by the analysis step (stored in ``analysis.json``).

Machines may have run different configs, so each headline names the point it was read at (the
largest point that machine measured) instead of assuming one both have.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from suite.analysis.analyze import AnalysisInputs
from suite.analysis.llm_tables import mfu_denominator
from suite.experiments.bert_names import ladder_name
from reference_impl.switches import LADDER

REFERENCE = "reference"


@dataclass(frozen=True)
class Headline:
    """``value`` in ``unit``; ``at``: where it was read (point, system); ``ci``: a 95% interval
    where the table has one; ``machine_independent``: the same on every machine (analytical)."""

    metric: str
    value: float
    unit: str
    at: str = ""
    ci: tuple[float, float] | None = None
    verdict: str = ""
    machine_independent: bool = False

    def text(self) -> str:
        if self.unit == "x":
            number = f"{self.value:.2f}x"
        elif self.unit == "%":
            number = f"{self.value:.1f}%"
        else:
            value = f"{self.value:,.0f}" if abs(self.value) >= 1000 else f"{self.value:.3g}"
            number = f"{value} {self.unit}"
        return number + (f" ({self.verdict})" if self.verdict else "")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "text": self.text()}


def _largest_point(ok: pd.DataFrame) -> pd.DataFrame:
    """The rows of the largest measured point (most padded tokens: batch x max length)."""
    size = ok.batch_size * ok.max_seq_len
    return ok[size == size.max()]


def _speedup(inputs: AnalysisInputs, system: str, what: str) -> Headline | None:
    """``system``'s speedup over the experiment's padded/unfused baseline at the largest point
    (geometric mean over the subjects measured there)."""
    t = inputs.table
    ok = t[(t.status == "ok") & (t.system == system) & t.speedup_vs_padded.notna()]
    if ok.empty:
        return None
    at = _largest_point(ok)
    value = math.exp(sum(math.log(s) for s in at.speedup_vs_padded) / len(at))
    row = at.iloc[0]
    ci = ((float(row.speedup_ci_low), float(row.speedup_ci_high))
          if len(at) == 1 and pd.notna(row.get("speedup_ci_low")) else None)
    subjects = ", ".join(sorted({str(x) for x in at.get("subject", pd.Series()).dropna()}))
    # tables written before speedup_over was a column name no baseline
    against = row.get("speedup_over") if isinstance(row.get("speedup_over"), str) else \
        "the padded baseline"
    return Headline(f"{what} over {against}", value, "x",
                    f"b{int(row.batch_size)} x {int(row.max_seq_len)}"
                    + (f", {subjects}" if subjects else ""), ci)


def bert_reference(inputs: AnalysisInputs) -> Headline | None:
    return _speedup(inputs, REFERENCE, "padding-free reference")


def bert_full_ladder(inputs: AnalysisInputs) -> Headline | None:
    return _speedup(inputs, ladder_name(len(LADDER) - 1), "all optimizations")


def bert_varlen_attention(inputs: AnalysisInputs) -> Headline | None:
    return _speedup(inputs, "varlen", "varlen attention")


def bert_fused(inputs: AnalysisInputs) -> Headline | None:
    return _speedup(inputs, "fused", "fused epilogues")


def _ok_train(inputs: AnalysisInputs) -> pd.DataFrame:
    t = inputs.table
    return t[(t.status == "ok") & t.tokens_per_s.notna()]


def llm_best_mfu(inputs: AnalysisInputs) -> Headline | None:
    ok = _ok_train(inputs)
    if ok.empty or ok.mfu_percent.isna().all():
        return None
    best = ok.loc[ok.mfu_percent.idxmax()]
    return Headline(f"best training MFU (of {mfu_denominator(ok.peak_source)})",
                    float(best.mfu_percent), "%",
                    f"{best.label}, {best.system}")


def llm_fastest_engine(inputs: AnalysisInputs) -> Headline | None:
    ok = _ok_train(inputs)
    if ok.empty:
        return None
    best = ok.loc[ok.tokens_per_s.idxmax()]
    return Headline("fastest engine's training throughput", float(best.tokens_per_s),
                    "tokens/s", f"{best.system}, {best.label}")


def llm_window_time(inputs: AnalysisInputs) -> Headline | None:
    """The windowed kernel's time over causal attention's at the longest sequence."""
    from suite.analysis.megascale_claims import window_fused

    ok = window_fused(inputs.table)
    if ok.empty:
        return None
    r = ok.sort_values(["seq_len", "window"]).iloc[-1]
    return Headline("windowed attention's time over causal attention's (forward + backward)",
                    float(r.time_vs_causal), "x", f"s={r.seq_len}, w={r.window}",
                    ci=(float(r.time_vs_causal_ci_low), float(r.time_vs_causal_ci_high)))


def llm_ablation_gain(inputs: AnalysisInputs) -> Headline | None:
    ok = _ok_train(inputs).sort_values("step")
    if len(ok) < 2:
        return None
    first, last = ok.iloc[0], ok.iloc[-1]
    return Headline("throughput of the last ablation step over the first",
                    float(last.tokens_per_s / first.tokens_per_s), "x",
                    f"{first.label} -> {last.label}")


def llm_loss_gap(inputs: AnalysisInputs) -> Headline | None:
    """LAMB minus AdamW held-out loss at their best learning rates, mean over the seeds."""
    from suite.analysis.megascale_claims import chosen_runs, loss_runs

    chosen = chosen_runs(loss_runs(inputs.table))
    if not chosen:
        return None
    return Headline("held-out loss, LAMB (larger batch) minus AdamW, equal tokens, best LRs",
                    float(chosen["lamb"].eval_loss.mean() - chosen["adamw"].eval_loss.mean()),
                    "nats", f"{int(chosen['adamw'].tokens_seen.iloc[0])} tokens")


def llm_scale_error(inputs: AnalysisInputs) -> Headline | None:
    """The error on rows not fitted, said for what it is: held out from the fit, on datasets
    whose shape the model's terms were developed against (``datasets.SHAPED_ON``); rows of
    datasets never looked at while modelling, where the repository has any, beside it."""
    from suite.scale.datasets import SHAPED_ON
    from suite.scale.validate import iteration_rows

    t = inputs.table
    held = iteration_rows(t[~t.calibration.astype(bool) & t.iteration_time_rel_error.notna()])
    if held.empty:
        return None
    shaped = held[held.dataset.isin(SHAPED_ON)]
    unseen = held[~held.dataset.isin(SHAPED_ON)]
    at = (f"{len(shaped)} rows; unseen datasets: "
          + (f"{100 * unseen.iteration_time_rel_error.abs().mean():.1f}% on {len(unseen)} rows"
             if not unseen.empty else "none in the repository yet"))
    value = shaped if not shaped.empty else unseen
    return Headline("mean |iteration time error| on rows held out from the fit (datasets the "
                    "model was shaped on)",
                    float(100 * value.iteration_time_rel_error.abs().mean()), "%", at,
                    machine_independent=True)


def first_claim(inputs: AnalysisInputs) -> Headline | None:
    """The first claim its table step tested (the paper's headline claim where the run tested
    it), with its interval and verdict: the direction's, and the size's where the row has one."""
    claims = inputs.claims
    tested = claims[claims.measured.notna() & (claims.verdict != "not tested")] \
        if claims is not None and not claims.empty else None
    if tested is None or tested.empty:
        return None
    c = tested.iloc[0]
    ci = ((float(c.ci_low), float(c.ci_high)) if pd.notna(c.get("ci_low"))
          and pd.notna(c.get("ci_high")) else None)
    verdict = str(c.verdict)
    if c.get("kind") == "size":
        verdict += "; size " + (str(c.size_verdict) if c.get("size_tested") else "not tested")
    elif c.get("kind") == "equivalence":
        verdict = f"equivalence {verdict}"
    return Headline(str(c.claim), float(c.measured), str(c.get("unit") or ""),
                    f"{int(c.n)} seeds" if pd.notna(c.get("n")) else "", ci, verdict=verdict)


def llm_resilience_stall(inputs: AnalysisInputs) -> Headline | None:
    """A two-stage checkpoint's stall over a synchronous one's (the largest state measured)."""
    from suite.analysis.resilience_analysis import GIB, checkpoint_pair

    pair = checkpoint_pair(inputs.table)
    if pair is None:
        return None
    sync, two = pair
    return Headline("two-stage checkpoint stall over synchronous", float(two.stall_s /
                                                                        sync.stall_s),
                    "x", f"{sync.trainer}, {sync.state_bytes / GIB:.2f} GiB state, fsynced")
