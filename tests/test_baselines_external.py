"""The external baseline (seedbench-external/1) with a real external program, its failure modes,
and the cmake build of a source checkout; plus ONNX Runtime, the other non-torch runtime."""

import json
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL

from suite.baselines.registry import baselines
from suite.baselines.external import External, ExternalSpec, build
from suite.baselines.external_build import STAMP
from suite.config import BertDims, BertVarlenConfig, ConfigError
from suite.experiments.bert_varlen import run_point
from suite.measure.mutations import ACCEPTED, MUTATIONS
from suite.models import canonical_model, hf_inputs
from suite.records import Status
from suite.workloads import bert_batch

REPO = Path(__file__).resolve().parents[1]
ADAPTER = REPO / "examples" / "external-hf" / "seedbench_external_hf.py"
CMAKE_PROJECT = REPO / "tests" / "data" / "external_cmake"


OK_REPLY = ("print('{{\"protocol\": \"seedbench-external/1\", \"status\": \"ok\", "
            "\"samples_s\": {samples}, \"details\": {details}}}')")
PICKLED_OUTPUT = ("import json, sys, numpy as np; req = json.load(open(sys.argv[1])); "
                  "np.save(req['output_path'], np.array([{'a': 1}], dtype=object), "
                  "allow_pickle=True); print(json.dumps({'protocol': 'seedbench-external/1', "
                  "'status': 'ok', 'samples_s': [0.01]}))")


def cfg_with(tiny_cfg: BertVarlenConfig, **programs) -> BertVarlenConfig:
    d = tiny_cfg.to_dict()
    d["external"] = programs
    d["baselines"] = [*d["baselines"], *(f"external-{n}" for n in programs)]
    return BertVarlenConfig.from_dict(d)


def script(*extra: str) -> dict:
    return {"command": [sys.executable, str(ADAPTER), *extra]}


def test_external_program_passes_the_gate_and_reports_its_own_timing(tiny_cfg):
    cfg = cfg_with(tiny_cfg, hf=script())
    rec = run_point(cfg, "external-hf", 3, 16, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    assert rec.correctness["passed"] and rec.correctness["max_abs_err"] < 1e-4
    assert rec.timing["timer"] == "reported by external-hf"
    assert len(rec.timing["samples"]) >= cfg.timing.min_repeats
    assert all(s > 0 for s in rec.timing["samples"])
    assert rec.derived["padding_free"] is False  # what the program said of itself
    assert rec.derived["system"]["program"] == "hf"


@pytest.mark.parametrize("mutation", [*MUTATIONS, *ACCEPTED])
def test_a_program_that_maps_one_weight_wrongly_is_incorrect_and_not_timed(tiny_cfg, mutation):
    """Each mis-mapping of the gate's catalogue, made by the example adapter itself after it
    loaded ``model_dir`` (``--mutate``), is caught with a margin; the accepted tanh GELU
    passes. Mutation tried: HF's own initialization in place of ``suite.models.WEIGHTS``
    lets bias-dropped, kv-bias-swapped and norms-swapped through (error 1e-7)."""
    rec = run_point(cfg_with(tiny_cfg, bad=script("--mutate", mutation)), "external-bad", 3, 16,
                    show_progress=False)
    if mutation in ACCEPTED:
        assert rec.status is Status.OK and rec.correctness["passed"], rec.reason
        return
    assert rec.status is Status.INCORRECT, (mutation, rec.correctness)
    assert rec.correctness["max_abs_err"] > 5 * rec.correctness["tolerance_abs"]
    assert rec.reason.startswith("max abs error") and rec.timing == {}


@pytest.mark.parametrize("code, expect", [
    ("import sys; sys.exit(3)", "exited with 3"),
    ("print('hello')", "did not print a JSON object"),
    ("print('{\"protocol\": \"other/9\", \"status\": \"ok\"}')", "speaks protocol 'other/9'"),
    ("print('{\"protocol\": \"seedbench-external/1\", \"status\": \"ok\", \"samples_s\": []}')",
     "samples_s must be a non-empty list"),
    # malformed replies (issue 16): an infinite sample, details that are not an object, and an
    # output file that is a pickle (never unpickled: np.load refuses object arrays)
    (OK_REPLY.format(samples="[Infinity]", details="{}"), "finite positive seconds"),
    (OK_REPLY.format(samples="[0.01]", details="[1, 2]"), "details must be a JSON object"),
    (PICKLED_OUTPUT, "allow_pickle=False"),
    # a flood on stderr before dying: the reason keeps a clipped tail
    ("import sys; print('<b>' * 3_000_000, file=sys.stderr); sys.exit(5)", "exited with 5"),
])
def test_broken_programs_become_failed_records_with_the_reason(tiny_cfg, code, expect):
    cfg = cfg_with(tiny_cfg, broken={"command": [sys.executable, "-c", code]})
    rec = run_point(cfg, "external-broken", 3, 16, show_progress=False)
    assert rec.status is Status.FAILED
    assert expect in rec.reason
    assert len(rec.reason) < 10_000


def test_a_huge_reply_is_read_and_its_reason_clipped(tiny_cfg):
    """50 MB of output before the reply, and a 5 MB reason in it: the record keeps a clipped
    reason, not the flood."""
    code = ("import json; print('x' * 50_000_000); print(json.dumps({'protocol': "
            "'seedbench-external/1', 'status': 'unavailable', 'reason': 'r' * 5_000_000}))")
    rec = run_point(cfg_with(tiny_cfg, huge={"command": [sys.executable, "-c", code]}),
                    "external-huge", 3, 16, show_progress=False)
    assert rec.status is Status.UNAVAILABLE
    assert rec.reason.startswith("huge: rrr") and "characters cut" in rec.reason
    assert len(rec.reason) < 10_000


def test_program_that_says_unavailable_is_unavailable(tiny_cfg):
    code = ("import json; print(json.dumps({'protocol': 'seedbench-external/1', "
            "'status': 'unavailable', 'reason': 'needs an sm_80 GPU'}))")
    rec = run_point(cfg_with(tiny_cfg, gpu={"command": [sys.executable, "-c", code]}),
                    "external-gpu", 3, 16, show_progress=False)
    assert rec.status is Status.UNAVAILABLE
    assert "needs an sm_80 GPU" in rec.reason


def test_missing_command_or_unbuilt_source_is_unavailable_with_the_reason(tiny_cfg, tmp_path):
    rec = run_point(cfg_with(tiny_cfg, ft={"command": ["/nonexistent/ft_bert"]}), "external-ft",
                    3, 16, show_progress=False)
    assert rec.status is Status.UNAVAILABLE and "not an executable" in rec.reason
    assert "source" in rec.reason  # says how to get it built
    spec = ExternalSpec("never_built_xyz", ("{build_dir}/bin/x",), source=str(tmp_path))
    ok, why = External(spec).available()
    assert not ok and "not built yet" in why and "external_build" in why
    ok, why = baselines.create("external").available()  # the bare entry point: nothing configured
    assert not ok and "bert_varlen.external.<name>" in why


def test_config_refuses_unconfigured_external_names(tiny_cfg):
    d = tiny_cfg.to_dict()
    d["baselines"] = [*d["baselines"], "external-ft"]
    with pytest.raises(ConfigError, match=r"external-ft.*not configured"):
        BertVarlenConfig.from_dict(d)
    d["external"] = {"ft": {"command": []}}
    with pytest.raises(ConfigError, match="command"):
        BertVarlenConfig.from_dict(d)


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None,
                    reason="needs cmake and a C compiler")
def test_cmake_build_then_run_the_built_binary(tiny_cfg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # builds land in ./build/external/<name>
    program = {"command": ["{build_dir}/launcher"], "source": str(CMAKE_PROJECT),
               "cmake_args": [f"-DPYTHON={sys.executable}", f"-DADAPTER={ADAPTER}"]}
    cfg = cfg_with(tiny_cfg, launcher=program)
    before = run_point(cfg, "external-launcher", 3, 16, show_progress=False)
    assert before.status is Status.UNAVAILABLE and "not built yet" in before.reason

    from suite.baselines.external import spec_from_config

    stamp = build(spec_from_config("launcher", cfg.external["launcher"]), jobs=2)
    assert stamp == (tmp_path / "build" / "external" / "launcher" / STAMP).resolve()
    meta = json.loads(stamp.read_text())
    assert meta["source"] == str(CMAKE_PROJECT) and meta["cmake"].startswith("cmake version")
    rec = run_point(cfg, "external-launcher", 3, 16, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    assert rec.derived["system"]["command"] == [str(tmp_path / "build/external/launcher/launcher")]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_a_failed_build_is_recorded_and_its_points_are_unavailable_with_cmake_s_error(
        tiny_cfg, tmp_path, monkeypatch):
    """The workflow's rule records a failure (exit 0, the stamp says why) so that the program's
    points are unavailable with cmake's error and the rest of the run goes on; by hand the
    failure raises."""
    from suite.baselines.external import BuildFailed, spec_from_config

    monkeypatch.chdir(tmp_path)
    source = tmp_path / "broken"
    source.mkdir()
    (source / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.10)\nproject(broken NONE)\n'
        'message(FATAL_ERROR "needs nvcc 13 and a ByteTransformer checkout")\n')
    cfg = cfg_with(tiny_cfg, broken={"command": ["{build_dir}/x"], "source": str(source)})
    spec = spec_from_config("broken", cfg.external["broken"])
    with pytest.raises(BuildFailed, match="needs nvcc 13"):
        build(spec)
    stamp = build(spec, record_failure=True)
    meta = json.loads(stamp.read_text())
    assert meta["status"] == "failed" and "needs nvcc 13" in meta["reason"]
    rec = run_point(cfg, "external-broken", 3, 16, show_progress=False)
    assert rec.status is Status.UNAVAILABLE
    assert "did not build here" in rec.reason and "needs nvcc 13" in rec.reason


def test_build_refuses_a_source_without_cmakelists(tmp_path):
    spec = ExternalSpec("x", ("{build_dir}/x",), source=str(tmp_path))
    with pytest.raises(ValueError, match="no CMakeLists.txt"):
        build(spec)
    with pytest.raises(ValueError, match="no source"):
        build(replace(spec, source=None))


# --- ONNX Runtime -------------------------------------------------------------------------------

onnx_ok, onnx_why = baselines.create("onnxruntime").available()


@pytest.mark.skipif(not onnx_ok, reason=onnx_why)
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("name, graph", [("onnxruntime", "ORT_ENABLE_ALL"),
                                         ("onnxruntime-fused", "transformer-optimizer fused")])
def test_onnxruntime_matches_hf_on_other_shapes_than_the_export(tiny_cfg, tmp_path,
                                                                monkeypatch, name, graph):
    model = canonical_model("bert", BertDims(**TINY_MODEL), 32)
    system = baselines.create(name)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    system.prepare(model, torch.device("cpu"), torch.float32)
    assert not list(tmp_path.iterdir())  # the exported graph is gone once the session has it
    for lengths, s in (([5, 0, 16, 1], 16), ([32, 7], 32)):  # exported at [2, 16]
        batch = bert_batch(lengths, s, 100, seed=1)
        with torch.inference_mode():
            ref = model(**hf_inputs(model, batch.input_ids, batch.attention_mask,
                                    batch.token_type_ids)).last_hidden_state
        out = torch.from_numpy(system.run(batch))
        valid = batch.attention_mask.bool()
        assert (out - ref)[valid].abs().max() < 1e-4
    assert system.details()["graph"] == graph
    if name == "onnxruntime-fused":  # fused with the weights in a file of their own
        assert system.details()["fused_ops"]["Attention"] == TINY_MODEL["layers"]
    rec = run_point(tiny_cfg, name, 3, 16, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    assert rec.derived["system"]["export_s"] > 0


@pytest.mark.skipif(not onnx_ok, reason=onnx_why)
def test_onnxruntime_refuses_half_precision():
    ok, why = baselines.create("onnxruntime").can_run("bert-encoder", "cpu", "fp16")
    assert not ok and "fp16" in why


def test_a_failed_build_s_reason_leads_with_the_compiler_s_errors_not_make_s_echo():
    from suite.baselines.external import _failure_lines

    out = "\n".join(["[ 10%] Building CXX object a.o",
                     "x.cc:21:10: fatal error: nvToolsExt.h: No such file or directory",
                     *[f"gmake[{i}]: Leaving directory 'b'" for i in range(20)],
                     "gmake[1]: *** [Makefile:91: all] Error 2", "gmake: done"])
    got = _failure_lines(out).splitlines()
    assert got[0] == "x.cc:21:10: fatal error: nvToolsExt.h: No such file or directory"
    assert got[1] == "..." and got[-1] == "gmake: done"
    assert not any("***" in line for line in got[:1])
