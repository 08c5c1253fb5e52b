"""The GPU pack (``seedbench gpu-check``, issue 17): its CPU rehearsal runs every step at tiny
sizes with Triton interpreted, so the pack cannot rot between accelerator leases; and the
autotune's choice and the tuning file in isolation."""

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from reference_impl.kernels.triton_attention import Tuning, load_tuning
from suite.gpu.steps import STEPS
from suite.gpu.steps.setup import _choose
from suite.records import Status, read_record, record_files

ROOT = Path(__file__).resolve().parent.parent


def test_the_rehearsal_runs_every_step_and_leaves_records_the_report_reads(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "suite.cli", "gpu-check", "--dry", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1200)
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert [s["step"] for s in steps] == [name for name, _ in STEPS]
    assert all(s["status"] == "ok" for s in steps), (steps, done.stderr[-3000:])
    assert done.returncode == 0

    tuning = json.loads((out / "tuning.json").read_text())
    Tuning(**tuning["tuning"])  # a valid launch
    timed = [m for m in tuning["measurements"] if "ms" in m]
    assert timed and all(m["correct"] for m in timed)  # interpreted, every candidate agrees
    assert (out / "kernel_tests.xml").stat().st_size > 0
    shapes = json.loads((out / "gemm_shapes.json").read_text())
    assert shapes["summary"]["shapes_timed"] == len(shapes["shapes"]) == 6
    assert all(r["correct"] and r["ms"] > 0 and 0 < r["predicted_shape_efficiency"] <= 1
               for r in shapes["shapes"])

    attention = json.loads((out / "attention_kernels.json").read_text())
    flash = [r for r in attention["measurements"] if r["kernel"] == "flash"]
    assert len(flash) == 2 and all(r["correct"] and r["forward_ms"] > 0 < r["backward_ms"]
                                   for r in flash)
    # kernels without a CPU implementation are listed with torch's reason, not dropped
    assert set(attention["unavailable"]) == {"cudnn", "efficient"}
    assert attention["summary"]["assumed"]["flash"] == {"forward": 0.66, "backward": 0.55}
    assert set(attention["summary"]["assumed_at"]["flash2"]) == {str(r["seq"]) for r in flash}

    hbm = json.loads((out / "hbm_bandwidth.json").read_text())
    assert [k["kernel"] for k in hbm["kernels"]] == ["copy", "add", "cast_fp32", "layer_norm"]
    assert all(k["correct"] and k["gb_per_s"] > 0 for k in hbm["kernels"])
    assert hbm["assumed_hbm_efficiency"] == 0.88 and hbm["measured_hbm_efficiency"] > 0

    overlap = json.loads((out / "overlap_interference.json").read_text())
    assert overlap["copy_kernel_correct"] is True and overlap["shapes"] == []
    assert overlap["unavailable"].startswith("concurrent streams need CUDA")

    layer = json.loads((out / "layer_intercept.json").read_text())
    assert layer["correct"] and len(layer["points"]) == 3  # fused blocks agree with unfused
    assert all(p["ms_per_layer"] > 0 < p["model_ms_per_layer"] for p in layer["points"])
    assert layer["model"]["r"] > 0.99 and "intercept_ms" in layer["measured"]
    # the same timings as layer rows of the scale model's runs CSV, the model's time at ceiling
    # 1 for each what the step compared against
    from suite.scale.runs import read_runs
    from suite.scale.step import timed_layer_seconds
    rows = read_runs(out / "layer_runs.csv")
    assert [r.layer_time_s * 1e3 for r in rows] == pytest.approx(
        [p[k] for k in ("ms_per_layer", "recompute_ms_per_layer") for p in layer["points"]])
    assert [1e3 * timed_layer_seconds(r.model, r.layout, r.hardware) for r in rows] == \
        pytest.approx([p[k] for k in ("model_ms_per_layer", "model_recompute_ms_per_layer")
                       for p in layer["points"]])
    assert [(r.layout.recompute, r.layout.recompute_early_stop) for r in rows] == \
        [("none", False)] * 3 + [("full", True)] * 3
    # full recompute re-runs most of a forward: the model charges 20-40% more at these shapes;
    # the measured ratio is recorded, not asserted (a timing on a shared CPU)
    assert all(r["measured"] > 0 and 1.2 < r["model"] < 1.4
               for r in layer["recompute_over_none"])
    assert {(r.hardware.name, r.hardware.sms, r.model.dropout) for r in rows} == {
        ("H100", 4, False)}

    memory = json.loads((out / "activation_memory.json").read_text())
    assert [(p["recompute"], p["batch"]) for p in memory["points"]] == [
        ("none", 1), ("none", 2), ("full", 1), ("full", 2)]
    assert memory["saved_over_model_median"] == pytest.approx(1.0, abs=0.01)
    assert memory["unavailable"] == "the caching allocator's statistics need CUDA"

    with tarfile.open(out / "results.tar.gz") as tar:
        tar.extractall(tmp_path / "results", filter="data")
    (machine,) = (tmp_path / "results").iterdir()  # this machine's name, as the workflow's
    records = record_files(machine)
    by_experiment = {}
    for path in records:
        rec = read_record(path)
        if rec.system == "checkpoint-nvrx-async":  # CUDA only: unavailable here, with why
            assert rec.status is Status.UNAVAILABLE and "nvidia-resiliency-ext" in rec.reason
            continue
        assert rec.status is Status.OK, (path, rec.reason)
        by_experiment.setdefault(rec.experiment, []).append(rec)
    assert {e: len(r) for e, r in by_experiment.items()} == {
        "bert_mha": 6, "bert_varlen": 8, "bert_ablation": 2, "llm_mfu": 1, "bert_serving": 2,
        "llm_window": 4, "llm_resilience": 3}
    # the user's path: Snakemake itself ran the GPU config (here at tiny sizes), its records in
    # their own machine folder
    with tarfile.open(out / "workflow.tar.gz") as tar:
        tar.extractall(tmp_path / "workflow", filter="data")
    (folder,) = (tmp_path / "workflow").iterdir()
    assert folder.name.endswith("-workflow")
    assert sorted(p.parent.name for p in folder.glob("bert_varlen/bert/*/b2_l16.json")) == [
        "reference", "torch-eager"]
    assert (folder / "bert_varlen" / "analysis.json").exists()
    assert (folder / "figures" / "bert_varlen.svg").exists()
    # the README grid: one process per system, its points measured one after another there
    grid = by_experiment["bert_varlen"]
    assert sorted((r.system, r.point["batch_size"], r.timing["process_points_before"])
                  for r in grid) == sorted((system, b, i) for system in (
                      "reference", "reference-eager", "torch-eager", "torch-nested")
                      for i, b in enumerate((1, 2)))
    assert {r.derived["system"]["execution"] for r in grid if r.system.startswith("reference")} \
        == {"eager"}  # graphs are CUDA's
    # on CPU the varlen MHA runs torch's kernel and says so (on a GPU: Triton, with the tuning
    # the pack chose, recorded as triton_tuning)
    varlen = [r for r in by_experiment["bert_mha"] if r.system == "varlen"]
    assert all(r.derived["attention_backend"] == "torch" for r in varlen)
    table = subprocess.run([sys.executable, "-m", "suite.cli", "table",
                            *map(str, records[:-1]), "--out", str(tmp_path / "t.csv")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stderr


def test_the_autotune_keeps_each_variant_s_fastest_correct_launch_and_the_crossover():
    """The short kernel's launch is chosen on the lengths it would serve (its warps apart for a
    narrow and a wide key tile), never copied from the long winner nor chosen where only the
    long kernel runs; a wrong launch is never kept. Mutations tried: the short launch taken
    from the long winner (the old rule), the short winner summed with the 1024 rows."""
    def row(n, variant, block_m, block_n, warps, ms, correct=True):
        return {"length": n, "variant": variant, "block_m": block_m, "block_n": block_n,
                "num_warps": warps, "ms": ms, "correct": correct}

    rows = [
        # short, 64 keys (narrow tile): block_m 32 with 8 warps is best there
        row(64, "short", 32, 64, 8, 0.2), row(64, "short", 32, 64, 4, 0.3),
        row(64, "short", 64, 64, 4, 0.4), row(64, "short", 64, 64, 8, 0.5),
        # short, 128 and 256 keys (wide tile): block_m 32 with 4 warps
        row(128, "short", 32, 128, 4, 0.5), row(128, "short", 32, 128, 8, 0.9),
        row(128, "short", 64, 128, 4, 0.8), row(128, "short", 64, 128, 8, 0.7),
        row(256, "short", 32, 256, 4, 1.2), row(256, "short", 32, 256, 8, 1.6),
        row(256, "short", 64, 256, 4, 1.5), row(256, "short", 64, 256, 8, 1.4),
        # long: block_m 128 with 64-key steps and 4 warps, timed at every length
        *(row(n, "long", 128, 64, 4, t) for n, t in ((64, 0.6), (128, 0.7), (256, 1.0),
                                                     (1024, 5.0))),
        *(row(n, "long", 64, 64, 8, t) for n, t in ((64, 0.7), (128, 0.8), (256, 1.1),
                                                    (1024, 6.0))),
        row(128, "long", 16, 16, 1, 0.01, correct=False),  # fastest, but wrong: never
    ]
    chosen = _choose(rows, Tuning())
    assert chosen == Tuning(block_m=128, long_block_n=64, num_warps=4, short_block_m=32,
                            short_num_warps=8, short_num_warps_wide=4, short_seq_max=128)
    # short beat long at 64 and 128 keys (0.2 < 0.6, 0.5 < 0.7), lost at 256 (1.2 > 1.0)


def test_a_tuning_file_is_checked(tmp_path):
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"tuning": {"block_m": 128, "short_seq_max": 512}}))
    assert load_tuning(str(good)) == Tuning(block_m=128, short_seq_max=512)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"block_size": 64}))
    with pytest.raises(ValueError, match=r"unknown tuning key\(s\) \['block_size'\]"):
        load_tuning(str(bad))
    with pytest.raises(ValueError, match="block_m=48 must be a power of two"):
        Tuning(block_m=48)


def test_steps_runs_only_the_named_steps_and_a_wrong_name_lists_the_pack(tmp_path):
    """What a second call on a warm machine runs after a cut-off first one."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "suite.cli", "gpu-check", "--dry", "--out",
                           str(out), "--steps", "env", "peak"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert [(s["step"], s["status"]) for s in steps] == [("env", "ok"), ("peak", "ok")], \
        done.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-m", "suite.cli", "gpu-check", "--dry", "--out",
                          str(tmp_path / "bad"), "--steps", "serve"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "['serve']" in bad.stderr and "'serving'" in bad.stderr


def test_the_side_copy_copies_on_any_block_count():
    """The stand-in for a collective (``suite.gpu.interference``) copies every element, on a
    length no block divides, with fewer and with more blocks than the data has, repeated."""
    import torch

    from suite.gpu.interference import COPY_BLOCK, side_copy

    src = torch.arange(2 * COPY_BLOCK + 7, dtype=torch.float32)
    for ctas, rounds in ((1, 1), (2, 3), (5, 1)):
        dst = torch.zeros_like(src)
        side_copy(src, dst, ctas, rounds)
        assert torch.equal(src, dst)
    with pytest.raises(ValueError, match="ctas >= 1 \\(got 0\\)"):
        side_copy(src, src.clone(), 0, 1)


def test_overlap_interference_plans_and_scores_by_hand():
    from suite.gpu.interference import beside, plan, summarize

    assert plan(once_ms=2.0, window_ms=50.0, round_ms=0.5) == (25, 150)
    assert plan(once_ms=40.0, window_ms=50.0, round_ms=1.0) == (3, 180)  # at least 3 GEMMs
    entry = beside(alone_ms=10.0, together_ms=12.0, reps=5, copy_ms=70.0, round_ms=1.0,
                   copy_bytes=1 << 20)
    assert entry == {"ms": 12.0, "slowdown": pytest.approx(0.2),
                     "copy_gbps_alone": pytest.approx(2 * (1 << 20) / 1e6), "covered": True}
    short = beside(alone_ms=10.0, together_ms=11.0, reps=5, copy_ms=50.0, round_ms=1.0,
                   copy_bytes=1 << 20)
    assert short["covered"] is False  # the copy ended before the 55 ms of GEMMs
    rows = [{"beside": {"8": entry, "16": {**entry, "slowdown": 0.5}}},
            {"beside": {"8": {**entry, "slowdown": 0.1}, "16": short}}, {"correct": False}]
    summary = summarize(rows, sms=132)
    assert summary["slowdown_by_ctas"]["8"] == {"median": pytest.approx(0.15),
                                                "min": pytest.approx(0.1),
                                                "max": pytest.approx(0.2), "shapes": 2}
    assert summary["slowdown_by_ctas"]["16"]["shapes"] == 1  # the uncovered entry is left out
    assert summary["lee_2025_mean"] == 0.189
    # the model: c of 132 SMs held through the GEMM, which runs on the other 132 - c
    assert summary["model_assumes"] == {"8": pytest.approx(8 / 124), "16": pytest.approx(16 / 116)}


def test_the_streaming_kernels_are_checked_before_they_are_timed():
    import torch

    from suite.gpu.steps.scale_probes import _streaming_kernels

    kernels = _streaming_kernels(1 << 12, 64, torch.device("cpu"), torch.bfloat16,
                                 torch.Generator().manual_seed(0))
    for name, _, kernel, check in kernels:
        kernel()
        assert check(), name
    # bytes: bf16 copy read + write, add two reads + a write, cast bf16 in fp32 out, norm
    assert [moved for _, moved, _, _ in kernels] == [2 * 8192, 3 * 8192, 8192 + 4 * 4096,
                                                     2 * 8192]
    (_, _, copy, _), (_, _, add, add_correct) = kernels[:2]
    add()
    copy()  # the copy writes the add's output buffer: it now holds a, not a + b
    assert not add_correct()


def test_a_point_that_fails_or_times_out_ends_itself_not_its_step(tmp_path):
    """The points before and after a failed one keep their statuses, the budget is checked
    before each point, and the results are packed after each (a lease cut off mid-step
    returns what finished). Mutations tried: no per-point catch (the step's statuses lost),
    the budget checked per step only, the pack saved per step only."""
    import subprocess
    import tarfile

    from suite.gpu.pack import REHEARSAL, Pack
    from suite.gpu.steps.common import outcome

    pack = Pack(tmp_path / "out", tmp_path / "work", REHEARSAL, budget_s=60)
    pack.out.mkdir()
    now = [0.0]
    pack.elapsed = lambda: now[0]
    packed = []

    def write(name, takes_s=1.0):
        def call():
            (pack.results / name).parent.mkdir(parents=True, exist_ok=True)
            (pack.results / name).write_text("{}")
            now[0] += takes_s
            return "ok"
        return call

    def timeout():
        raise subprocess.TimeoutExpired(["seedbench"], 240)

    def crash():
        raise RuntimeError("no record (exit 1): CUDA error")

    real_save = pack.save
    pack.save = lambda: (real_save(), packed.append(
        sorted(m.name for m in tarfile.open(pack.out / "results.tar.gz").getmembers()
               if m.isfile())))
    statuses = pack.points([("a", write("a.json")), ("b", timeout), ("c", crash),
                            ("d", write("d.json", takes_s=90)), ("e", write("e.json"))])
    assert statuses == {"a": "ok", "b": "failed: timed out after 240 s",
                        "c": "failed: RuntimeError: no record (exit 1): CUDA error",
                        "d": "ok", "e": "skipped: budget of 60 s spent"}
    assert packed[0] == [f"{pack.machine}/a.json"] and len(packed) == 4
    assert outcome(statuses)["status"] == "failed"
    assert "status" not in outcome({"a": "ok", "e": "skipped: budget of 60 s spent"})


def test_the_gpu_serving_section_is_valid_and_runs_the_goals_systems_first():
    """Checked here, not first on the lent machine: the section the GPU pack serves with passes
    the schema, and its rounds put the graphed reference and the padded bar first."""
    from suite.gpu.pack import GPU
    from suite.gpu.steps.bert import serving_section
    from suite.serving.config import ServingConfig

    cfg = ServingConfig.from_dict(serving_section(GPU))
    assert cfg.systems[:2] == ["packed-reference", "padded-torch-sdpa"]
    assert cfg.repeats == 3 and cfg.device == "cuda" and cfg.dtype == "fp16"
    assert GPU.extra["serving_first"] == 2


def test_serving_runs_the_goals_pair_every_repeat_before_the_others():
    from suite.gpu.steps.bert import serving_order

    assert serving_order(["a", "b", "c", "d"], 3, 2) == [
        ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2),
        ("c", 0), ("d", 0), ("c", 1), ("d", 1), ("c", 2), ("d", 2)]
    assert serving_order(["a", "b"], 2, 2) == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


def test_the_grid_runs_every_system_once_the_goals_first():
    """bert_grid then bert_grid_more: together every system, none twice, the reference and its
    bar in the first step; the points' section lists them all."""
    from suite.gpu.pack import GPU, REHEARSAL, Pack

    for sizes in (GPU, REHEARSAL):
        both = [*sizes.bert_systems, *sizes.bert_systems_more]
        assert len(set(both)) == len(both) and sizes.bert_systems[0] == "reference"
        assert sizes.bert_systems_more
    assert GPU.bert_systems[:2] == ("reference", "torch-compile-cudagraphs")
    assert "external-bytetransformer" in GPU.bert_systems
    assert GPU.bert_systems_more[-1] == "deepspeed-inference"  # it compiles its ops first
    section = json.loads(Pack.section(type("P", (), {"sizes": REHEARSAL})()))
    assert section["baselines"] == [*REHEARSAL.bert_systems, *REHEARSAL.bert_systems_more]


def test_a_second_call_on_the_same_work_runs_only_what_the_first_cut_off_or_failed(tmp_path,
                                                                                   monkeypatch):
    """``--work`` of an earlier call: its grid, serving and point records are kept unless
    failed (a grid process is kept only whole), its tuning and peak too; without resuming,
    nothing is kept. Mutations tried: a failed record kept; a partial grid kept."""
    import subprocess

    from reference_impl.kernels.triton_attention import TUNING_ENV
    from suite.gpu.pack import REHEARSAL, Pack, run
    from suite.gpu.steps import bert, setup

    work = tmp_path / "work"
    first = Pack(tmp_path / "out1", work, REHEARSAL, budget_s=60)
    grid_dir = first.results / "bert_varlen" / "bert"

    def write(path, status):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"status": status, "reason": "x" if status != "ok" else ""}))

    for b in REHEARSAL.grid["batch_sizes"]:  # one system whole, one with a failed point
        write(grid_dir / "reference" / f"b{b}_l16.json", "ok")
        write(grid_dir / "reference-eager" / f"b{b}_l16.json", "ok" if b == 1 else "failed")
    write(first.results / "bert_serving" / "packed-reference" / "run0.json", "ok")
    write(first.results / "bert_serving" / "padded-torch-eager" / "run0.json", "failed")
    first.results.joinpath("peak.json").write_text(json.dumps(
        {"peaks": {"fp32": {"measured": {"flops_per_s": 1e11}, "datasheet": None}}}))
    first.tuning_file.write_text(json.dumps({"tuning": {"block_m": 32}}))

    ran = []

    def seedbench(self, *args, timeout=300):
        ran.append(args[args.index("--system") + 1] if "--system" in args else args[0])
        return subprocess.CompletedProcess(args, 1, "", "not run in this test")

    monkeypatch.setattr(Pack, "seedbench", seedbench)
    again = Pack(tmp_path / "out2", work, REHEARSAL, budget_s=60, resume=True)
    again.out.mkdir()
    assert again.env[TUNING_ENV] == str(work / "tuning.json")  # every step runs with it
    assert again.grid("reference") == "ok" and ran == []
    assert again.grid("reference-eager").startswith("failed") and ran == ["reference-eager"]
    statuses = bert.serving(again)["records"]
    assert ran == ["reference-eager", "padded-torch-eager"]  # the failed run, not the kept one
    assert statuses["packed-reference run0"] == "ok"
    assert statuses["padded-torch-eager run0"].startswith("failed")  # its old record stays
    assert set(again.kept_records) == {
        f"{again.machine}/bert_varlen/bert/reference/b{b}_l16.json"
        for b in REHEARSAL.grid["batch_sizes"]} | {
        f"{again.machine}/bert_serving/packed-reference/run0.json"}
    tuned = setup.tune(again)
    assert tuned["kept"] and json.loads((again.out / "tuning.json").read_text())["tuning"] == {
        "block_m": 32}
    assert setup.peak(again)["fp32"]["measured"] == 1e11 and ran[-1] != "peak"
    # not resuming, the same folder's records are run again
    fresh = Pack(tmp_path / "out3", work, REHEARSAL, budget_s=60)
    assert fresh.kept(grid_dir / "reference" / "b1_l16.json") is None
    assert fresh.env.get(TUNING_ENV) != str(work / "tuning.json")
    # run(): an existing --work folder is resumed, and steps.json says so
    steps = run(tmp_path / "out4", dry=True, only=["env"], work=work)
    assert steps["resumed"] and steps["work"] == str(work.resolve())
    assert not run(tmp_path / "out5", dry=True, only=["env"], work=tmp_path / "new")["resumed"]
