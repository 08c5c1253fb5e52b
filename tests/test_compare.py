"""seedbench compare: point-by-point ratios with CIs, noise, regressions, and refusals."""

import json

import numpy as np
import pytest

from suite.analysis.compare import CompareError, compare, markdown
from suite.cli import main
from suite.records import Record, Status, write_record
from suite.measure.stats import summarize


def _record(system, max_len, samples, config=None, status=Status.OK):
    rec = Record("bert_varlen", system, {"batch_size": 1, "max_seq_len": max_len, "seed": 0},
                 config or {"seed": 0}, status)
    if samples is not None:
        rec.timing = {"samples": list(samples), "stats": summarize(samples)}
    return rec


def _folder(root, name, records):
    for rec in records:
        write_record(rec, root / name / rec.system / f"l{rec.point['max_seq_len']}.json")
    (root / name / "peak.json").write_text("{}")  # beside the records, not one of them
    return root / name


def _samples(median, cv, n=30, seed=0):
    rng = np.random.default_rng(seed)
    return list(median * (1 + cv * rng.standard_normal(n)))


def test_same_slower_faster_and_noisy(tmp_path):
    base = _folder(tmp_path, "base", [
        _record("a", 64, _samples(0.010, 0.01, seed=1)),
        _record("b", 64, _samples(0.010, 0.01, seed=2)),
        _record("c", 64, _samples(0.010, 0.01, seed=3)),
        _record("d", 64, _samples(0.010, 0.30, seed=4)),
        _record("e", 64, None, status=Status.UNAVAILABLE)])
    new = _folder(tmp_path, "new", [
        _record("a", 64, _samples(0.010, 0.01, seed=5)),  # the same, other noise
        _record("b", 64, _samples(0.013, 0.01, seed=6)),  # 30% slower
        _record("c", 64, _samples(0.007, 0.01, seed=7)),  # 30% faster
        _record("d", 64, _samples(0.0105, 0.30, seed=8)),  # within a wide spread
        _record("e", 64, None, status=Status.UNAVAILABLE)])
    t = compare(base, new).set_index("system")
    assert t.verdict.to_dict() == {"a": "same", "b": "slower", "c": "faster", "d": "noisy",
                                   "e": "not timed on both sides"}
    assert t.ratio["b"] == pytest.approx(1.3, rel=0.02)
    assert t.ci_low["b"] > 1.05 and t.ci_high["c"] < 0.95
    assert t.ci_low["a"] < 1 < t.ci_high["a"]


def test_a_tail_that_regressed_under_a_steady_median_is_found_at_its_percentile(tmp_path,
                                                                                 capsys):
    """The same median, but one sample in ten now takes three times as long: the median sees no
    change (only the spread, "noisy"), p99 calls it slower (and the table says which
    statistic it compared)."""
    steady = _samples(0.010, 0.01, n=100, seed=1)
    tail = [x * 3 if i % 10 == 0 else x for i, x in enumerate(_samples(0.010, 0.01, n=100,
                                                                         seed=2))]
    base = _folder(tmp_path, "base", [_record("a", 64, steady)])
    new = _folder(tmp_path, "new", [_record("a", 64, tail)])
    assert compare(base, new).verdict[0] == "noisy"
    p99 = compare(base, new, percentile=99)
    assert p99.verdict[0] == "slower" and p99.ratio[0] == pytest.approx(
        np.percentile(tail, 99) / np.percentile(steady, 99))
    assert main(["compare", str(base), str(new), "--percentile", "99"]) == 1
    assert "| base p99 ms | new p99 ms |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="percentile=100 must be in"):
        compare(base, new, percentile=100)


def test_loadgen_logs_and_checkpoints_beside_records_are_not_records(tmp_path):
    base = _folder(tmp_path, "base", [_record("a", 64, _samples(0.01, 0.01))])
    for artifact in ("a/run0.loadgen/Offline/mlperf_log_accuracy.json",
                     "a/gpt.checkpoints/step10.json"):
        (base / artifact).parent.mkdir(parents=True)
        (base / artifact).write_text("[]")
    assert compare(base, base).verdict[0] == "same"


def test_cli_exit_codes_and_markdown(tmp_path, capsys):
    base = _folder(tmp_path, "base", [_record("a", 64, _samples(0.01, 0.01, seed=1))])
    same = _folder(tmp_path, "same", [_record("a", 64, _samples(0.01, 0.01, seed=2))])
    slow = _folder(tmp_path, "slow", [_record("a", 64, _samples(0.02, 0.01, seed=3))])
    assert main(["compare", str(base), str(same)]) == 0
    out = capsys.readouterr().out
    assert "| bert_varlen | a | batch_size=1 max_seq_len=64 seed=0 |" in out and "| same |" in out
    assert main(["compare", str(base), str(slow), "--out", str(tmp_path / "c.md")]) == 1
    assert "| slower |" in (tmp_path / "c.md").read_text()
    assert "1 point(s) slower beyond 5%" in capsys.readouterr().err
    # a threshold above the change: not a regression
    assert main(["compare", str(base), str(slow), "--threshold", "1.5"]) == 0


def test_refusals_exit_2_and_say_why(tmp_path, capsys):
    base = _folder(tmp_path, "base", [_record("a", 64, _samples(0.01, 0.01))])
    other_point = _folder(tmp_path, "other", [_record("a", 128, _samples(0.01, 0.01))])
    assert main(["compare", str(base), str(other_point)]) == 2
    assert "share no (experiment, system, point)" in capsys.readouterr().err
    other_cfg = _folder(tmp_path, "cfg", [_record("a", 64, _samples(0.01, 0.01),
                                                  config={"seed": 1})])
    assert main(["compare", str(base), str(other_cfg)]) == 2
    assert "measured under different settings: seed differ (bert_varlen/a)" in \
        capsys.readouterr().err
    old = tmp_path / "old" / "a" / "l64.json"
    old.parent.mkdir(parents=True)
    d = _record("a", 64, _samples(0.01, 0.01)).to_dict()
    d["schema_version"], d["baseline"] = 1, d.pop("system")
    old.write_text(json.dumps(d))
    assert main(["compare", str(base), str(tmp_path / "old")]) == 2
    assert "record schema versions differ: [2]" in capsys.readouterr().err
    bad = tmp_path / "bad" / "a" / "l64.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    assert main(["compare", str(base), str(tmp_path / "bad")]) == 2
    assert f"{bad}: not a readable record" in capsys.readouterr().err
    with pytest.raises(CompareError, match="is not a folder of results"):
        compare(base, tmp_path / "nowhere")
    assert main(["compare", str(base), "no-such-machine"]) == 2
    assert "neither a folder nor a machine" in capsys.readouterr().err


def test_a_quick_run_and_a_sweep_compare_on_the_points_they_share(tmp_path):
    """What a newcomer does first: their quick default against the published sweep. The
    sections differ in what they plan (systems, points, other studies, time limits), not in how
    a shared point is measured; another external program's settings do not matter either, the
    system's own do."""
    measured = {"model": {"layers": 2}, "seed": 0, "timing": {"warmup": 1, "min_repeats": 3}}
    quick = {**measured, "baselines": ["a"], "batch_sizes": [1], "max_seq_lens": [64],
             "timeout_s": 600, "ablation": {"enabled": True, "batch_sizes": [8]},
             "external": {"x": {"command": "x --fast"}}}
    sweep = {**measured, "baselines": ["a", "b", "external-x"], "batch_sizes": [1, 16],
             "max_seq_lens": [64, 128], "timeout_s": 1800,
             "ablation": {"enabled": False, "batch_sizes": [16]},
             "external": {"x": {"command": "x --slow"}}}
    base = _folder(tmp_path, "sweep", [
        _record("a", 64, _samples(0.01, 0.01, seed=1), config=sweep),
        _record("b", 64, _samples(0.01, 0.01, seed=2), config=sweep),
        _record("a", 128, _samples(0.01, 0.01, seed=3), config=sweep)])
    new = _folder(tmp_path, "quick", [_record("a", 64, _samples(0.01, 0.01, seed=4),
                                              config=quick)])
    t = compare(base, new)
    assert list(t.system) == ["a"] and list(t.verdict) == ["same"] and not t.attrs["apart"]
    # a shared point the quick run measures differently (fewer steps) is listed apart; the
    # others are still compared
    shorter = {**quick, "seed": 1}
    mixed = _folder(tmp_path, "mixed", [
        _record("a", 64, _samples(0.01, 0.01, seed=4), config=quick),
        _record("b", 64, _samples(0.01, 0.01, seed=5), config=shorter)])
    t = compare(base, mixed)
    assert list(t.system) == ["a"]
    assert t.attrs["apart"] == ("1 shared point(s) measured under different settings, not "
                                "compared: seed differ (bert_varlen/b)")
    assert markdown(t, "sweep", "mixed", 0.05).endswith(t.attrs["apart"] + "\n")
    # the provenance hash still tells the runs apart
    assert _record("a", 64, None, config=quick).config_hash != \
        _record("a", 64, None, config=sweep).config_hash
    # the external program's own settings are part of its measurement
    ext = [_record("external-x", 64, _samples(0.01, 0.01, seed=5), config=c)
           for c in (quick, sweep)]
    with pytest.raises(CompareError, match=r"external\.x\.command differ"):
        compare(_folder(tmp_path, "eq", [ext[0]]), _folder(tmp_path, "es", [ext[1]]))
    # a timing policy is how a point is measured: refused, and named
    slower_policy = {**quick, "timing": {"warmup": 5, "min_repeats": 3}}
    other = _folder(tmp_path, "policy", [_record("a", 64, _samples(0.01, 0.01, seed=6),
                                                 config=slower_policy)])
    with pytest.raises(CompareError, match=r"timing\.warmup differ"):
        compare(base, other)
