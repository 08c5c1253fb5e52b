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
    with pytest.raises(ValueError, match="schema_version=99; this suite reads 1"):
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
