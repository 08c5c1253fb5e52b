import json

import pytest

from suite.records import SCHEMA_VERSION, Record, Status, read_record, write_record


def make(status=Status.OK, **kw):
    return Record("bert_varlen", "reference", {"batch_size": 1, "max_seq_len": 64},
                  {"seed": 0}, status, **kw)


def test_round_trip(tmp_path):
    rec = make(timing={"samples": [0.1, 0.2]}, reason="")
    path = write_record(rec, tmp_path / "a" / "r.json")
    back = read_record(path)
    assert back == rec
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == SCHEMA_VERSION
    assert raw["status"] == "ok"
    assert raw["config_hash"] == rec.config_hash and len(rec.config_hash) == 16


def test_config_hash_tracks_config():
    assert make().config_hash == make().config_hash
    other = Record("bert_varlen", "reference", {}, {"seed": 1}, Status.OK)
    assert other.config_hash != make().config_hash


def test_wrong_version_and_status_are_refused(tmp_path):
    d = make().to_dict()
    (tmp_path / "v.json").write_text(json.dumps({**d, "schema_version": 99}))
    with pytest.raises(ValueError, match=r"schema_version=99; this suite reads \(1, 2\)"):
        read_record(tmp_path / "v.json")
    (tmp_path / "s.json").write_text(json.dumps({**d, "status": "great"}))
    with pytest.raises(ValueError, match="status='great'; valid: .*'incorrect'"):
        read_record(tmp_path / "s.json")


def test_failed_write_keeps_the_old_record_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "r.json"
    write_record(make(reason="first"), path)
    with pytest.raises(TypeError):
        write_record(make(timing={"bad": object()}), path)  # not JSON-serializable
    assert read_record(path).reason == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


# ----------------------------------------------------------------------------- outcome


def _started():
    from suite.records import new_record

    return new_record("bert_varlen", "reference", {"batch_size": 1}, {"seed": 0})


def test_new_record_starts_failed_with_a_creation_time():
    rec = _started()
    assert rec.status == Status.FAILED and rec.reason == ""
    assert rec.created_at.endswith("+00:00")


def test_outcome_unavailable_is_not_a_failure():
    from suite.baselines import Unavailable as FromBaselines
    from suite.records import Unavailable, outcome

    assert FromBaselines is Unavailable  # plugins' import path still works
    rec = _started()
    with outcome(rec):
        raise Unavailable("no GPU here")
    assert rec.status == Status.UNAVAILABLE and rec.reason == "no GPU here"
    assert "traceback" not in rec.derived


def test_outcome_error_becomes_a_failed_record_with_its_traceback():
    from suite.records import outcome

    def deep():
        raise ValueError("bad shape")

    rec = _started()
    with outcome(rec):
        deep()
    assert rec.status == Status.FAILED and rec.reason == "ValueError: bad shape"
    tb = rec.derived["traceback"]
    assert "in deep" in tb and tb.rstrip().endswith("ValueError: bad shape")
    assert "in outcome" not in tb  # the helper's own frame is left out

    rec = _started()
    with outcome(rec):
        raise KeyError("missing")
    assert rec.reason == "KeyError: missing"  # no repr quotes


def test_outcome_traceback_limit():
    from suite.records import outcome

    def recurse(n):
        if n == 0:
            raise RuntimeError("bottom")
        recurse(n - 1)

    rec = _started()
    with outcome(rec, traceback_limit=3):
        recurse(20)
    assert rec.derived["traceback"].count("in recurse") == 2  # the test's frame + 2


def test_outcome_leaves_a_successful_run_alone():
    from suite.records import outcome

    rec = _started()
    with outcome(rec) as r:
        assert r is rec
        rec.status, rec.timing = Status.OK, {"samples": [1.0]}
    assert rec.status == Status.OK and rec.reason == "" and "traceback" not in rec.derived


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_outcome_does_not_swallow_base_exceptions(exc):
    from suite.records import outcome

    rec = _started()
    with pytest.raises(exc):
        with outcome(rec):
            raise exc()
    assert rec.status == Status.FAILED and rec.reason == ""


def test_failed_record_of_a_crashed_child():
    from suite.records import failed_record

    rec = failed_record("llm_mfu", "ddp", {"nprocs": 2}, {"steps": 3}, "exit code -9")
    assert rec.status == Status.FAILED and rec.reason == "exit code -9"
    assert rec.point == {"nprocs": 2} and rec.config == {"steps": 3}
    assert rec.created_at and rec.env["hostname"] and "torch_threads" not in rec.env
    assert Record.from_dict(rec.to_dict()) == rec


def test_records_stay_torch_free():
    import subprocess
    import sys

    code = ("import sys, suite.records; rec = suite.records.failed_record('e', 'b', {}, {}, 'x'); "
            "assert 'torch' not in sys.modules, 'records imported torch'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_schema_1_record_reads_with_its_baseline_as_the_system(tmp_path):
    d = make().to_dict()
    d["schema_version"] = 1
    d["baseline"] = d.pop("system")
    (tmp_path / "v1.json").write_text(json.dumps(d))
    rec = read_record(tmp_path / "v1.json")
    assert rec.system == make().system and rec.schema_version == SCHEMA_VERSION == 2
    assert rec.to_dict()["system"] == make().system and "baseline" not in rec.to_dict()
