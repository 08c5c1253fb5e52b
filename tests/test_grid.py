"""``run_points`` and ``seedbench grid``: a grid of points of one system in one process."""

import argparse
import json

from suite.baselines.reference import Reference
from suite.commands import grid as grid_cmd
from suite.experiments.bert_varlen import run_points
from suite.records import Status, read_record


def test_one_process_prepares_the_system_once_and_gates_and_times_every_point(tiny_cfg,
                                                                              monkeypatch):
    prepared = []
    real = Reference.prepare
    monkeypatch.setattr(Reference, "prepare",
                        lambda self, *a: prepared.append(a) or real(self, *a))
    points = [(1, 8), (1, 16), (3, 8), (3, 16)]
    records = list(run_points(tiny_cfg, "reference", points, show_progress=False))
    assert len(prepared) == 1
    assert [(r.point["batch_size"], r.point["max_seq_len"]) for r in records] == points
    for before, rec in enumerate(records):
        assert rec.status is Status.OK, rec.reason
        assert rec.correctness["passed"] and len(rec.workload["lengths"]) == rec.point[
            "batch_size"]
        assert rec.timing["process_points_before"] == before and rec.timing["samples"]


def test_a_system_that_cannot_be_made_fails_every_point_with_the_reason(tiny_cfg):
    records = list(run_points(tiny_cfg, "no-such-baseline", [(1, 8), (3, 8)],
                              show_progress=False))
    assert [r.status for r in records] == [Status.FAILED] * 2
    assert all("unknown baseline 'no-such-baseline'" in r.reason for r in records)


def _args(tiny_cfg, out_dir, **kw):
    return argparse.Namespace(
        experiment="bert_varlen", system="reference", subject=None, batch_sizes=[1, 3],
        max_seq_lens=[8], config=None, section_json=json.dumps(tiny_cfg.to_dict()), peak=None,
        oracle_dir=None, out_dir=out_dir, timeout_s=None, in_process=False, **kw)


def test_the_grid_command_writes_a_record_per_point_from_its_child(tiny_cfg, tmp_path):
    assert grid_cmd.run(_args(tiny_cfg, tmp_path)) == 0
    for b in (1, 3):
        rec = read_record(tmp_path / f"b{b}_l8.json")
        assert rec.status is Status.OK and rec.point["batch_size"] == b


def test_points_a_dead_grid_process_left_are_failed_records_naming_why(tiny_cfg, tmp_path,
                                                                       monkeypatch):
    """The child dies after its first point (simulated): that point's record stays, the other
    becomes a failed record that names the exit; a stale record of an earlier run is not
    taken for this run's."""
    import suite.launch.jobs as jobs

    (tmp_path / "b3_l8.json").write_text("{}")  # an earlier run's

    def child_dies(cmd, out, failed, timeout_s, **kw):
        assert failed is None and "--in-process" in cmd
        args = _args(tiny_cfg, tmp_path)
        args.batch_sizes, args.in_process = [1], True
        grid_cmd.run(args)
        return -9

    monkeypatch.setattr(jobs, "run_isolated", child_dies)
    assert grid_cmd.run(_args(tiny_cfg, tmp_path)) == 0
    assert read_record(tmp_path / "b1_l8.json").status is Status.OK
    dead = read_record(tmp_path / "b3_l8.json")
    assert dead.status is Status.FAILED
    assert "the grid's process ended (exit -9" in dead.reason and "before this point" in dead.reason
