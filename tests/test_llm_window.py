"""The attention benchmark (suite.experiments.llm_window): every system checked against the
float64 masked reference before it is timed, a wrong one flagged and not timed, ratios from
the same rounds, and its table, claims and figure from the records."""

from __future__ import annotations

import pytest

from suite.experiments import llm_window
from suite.records import Status, write_record

POINT = {"seq_len": 64, "window": 16, "heads": 2, "head_dim": 8, "batch": 1}


def test_every_system_checked_then_timed_side_by_side():
    records = {r.system: r for r in llm_window.run_point(POINT, repeats=2, warmup=0)}
    assert set(records) == set(llm_window.SYSTEMS)
    for r in records.values():
        assert r.status == Status.OK, r.reason
        assert r.correctness["passed"] and r.correctness["max_rel_err"] < 1e-5
        assert len(r.timing["samples"]) == 2
    assert records["causal"].derived["time_vs_causal"] == 1.0
    fused = records["window-fused"].derived
    low, high = fused["time_vs_causal_ci"]
    assert low <= fused["time_vs_causal"] <= high
    assert fused["band_fraction"] == pytest.approx((16 * 17 / 2 + 48 * 16) / (64 * 65 / 2))


def test_a_wrong_system_is_flagged_not_timed(monkeypatch):
    real = llm_window.attention_fn

    def wrong(system, window):  # the banded kernel with a window one short
        return real(system, window - 1 if system == "window-banded" else window)

    monkeypatch.setattr(llm_window, "attention_fn", wrong)
    records = {r.system: r for r in llm_window.run_point(POINT, repeats=1, warmup=0)}
    bad = records["window-banded"]
    assert bad.status == Status.INCORRECT and "not timed" in bad.reason
    assert not bad.timing and bad.correctness["max_rel_err"] > 1e-2
    assert records["window-fused"].status == Status.OK


def test_table_claims_and_figure(tmp_path):
    from suite.analysis.figure_io import FigureData
    from suite.analysis.llm_plots import window_figure
    from suite.analysis.llm_tables import llm_table
    from suite.analysis.megascale_claims import window_claims

    paths = []
    for r in llm_window.run_point(POINT, repeats=3, warmup=0):
        paths.append(write_record(r, tmp_path / "s64-w16" / f"{r.system}.json"))
    table = llm_table(paths)
    assert list(table.system) == list(llm_window.SYSTEMS)
    assert table.gate_passed.all() and (table.label == "s64-w16").all()

    class Inputs:
        pass

    inputs = Inputs()
    inputs.table = table
    claims = window_claims(inputs)
    assert len(claims) == 1 and claims.kind.iloc[0] == "direction"
    assert claims.measured.iloc[0] == pytest.approx(
        table.set_index("system").time_vs_causal["window-fused"])
    out = window_figure(FigureData(table=table), tmp_path / "fig")
    assert all(p.exists() for p in out)
