"""One workload point end to end, in process: gate, timing, record, and every failure status."""

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from suite.baselines import Baseline
from suite.baselines.registry import baselines
from suite.baselines.torch_hf import TorchEager
from suite.experiments import bert_oracle
from suite.experiments.bert_varlen import run_point
from suite.models import canonical_model
from suite.launch.jobs import run_isolated
from suite.records import Record, Status, read_record

PEAK = {"schema_version": 1, "device": "cpu-test", "device_type": "cpu", "threads": 1,
        "peaks": {"fp32": {"measured": {"flops_per_s": 1e10}, "datasheet": None}}}


@pytest.mark.parametrize("baseline", ["torch-eager", "reference"])
def test_a_point_is_checked_then_timed(tiny_cfg, baseline):
    rec = run_point(tiny_cfg, baseline, 3, 16, PEAK, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    assert rec.correctness["passed"] and rec.correctness["max_abs_err"] < 1e-5
    lengths = rec.workload["lengths"]
    assert len(lengths) == 3 and all(4 <= n <= 16 for n in lengths)  # bytetransformer rule
    stats, samples = rec.timing["stats"], rec.timing["samples"]
    assert len(samples) >= 3 and stats["n"] == len(samples)
    assert rec.timing["threads"] == 1 and rec.timing["timer"] == "time.perf_counter"
    d = rec.derived
    assert d["tokens_per_s"] == pytest.approx(sum(lengths) / stats["median"])
    assert d["pct_of_measured_peak"] == pytest.approx(100 * d["useful_flops_per_s"] / 1e10)
    assert d["padding_free"] is (baseline == "reference")
    assert d["executed_flops"] >= d["useful_flops"]
    assert rec.env["packages"]["torch"].startswith(torch.__version__.split("+")[0])


def test_back_to_back_time_and_what_ran_are_in_the_record_and_the_table(tiny_cfg):
    """A CPU point asked for back-to-back timing too (on a GPU, the default): rounds of queued
    calls beside the per-call samples, the launch share derived from both, the table's columns;
    the reference says it ran eagerly and why (graphs are CUDA's). By default a CPU point
    times no back-to-back rounds."""
    from dataclasses import replace

    from suite.analysis.tables import record_row

    cfg = replace(tiny_cfg, timing=replace(tiny_cfg.timing, back_to_back="always"))
    rec = run_point(cfg, "reference", 3, 16, PEAK, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    queued = rec.timing["back_to_back"]
    assert queued["rounds"] == len(queued["samples"]) == queued["stats"]["n"] == 5
    assert 3 <= queued["calls_per_round"] <= 1000
    d = rec.derived
    assert d["back_to_back_ms"] == pytest.approx(queued["stats"]["median"] * 1e3)
    assert 0 <= d["launch_share"] < 1
    assert d["system"]["execution"] == "eager"
    assert "CUDA graphs need a GPU" in d["system"]["eager_because"]
    row = record_row(rec)
    assert (row["back_to_back_ms"], row["execution"]) == (d["back_to_back_ms"], "eager")
    plain = run_point(tiny_cfg, "reference-eager", 3, 16, PEAK, show_progress=False)
    assert "back_to_back" not in plain.timing and "back_to_back_ms" not in plain.derived
    assert plain.derived["system"]["eager_because"] == "cuda_graphs=False"


@pytest.mark.parametrize("warmup", [0, 1, 3])
def test_the_gates_call_is_the_first_warm_up_call_and_the_observed_one(tiny_cfg, monkeypatch,
                                                                      warmup):
    """Calls in order: build (once per shape), the gate's call (observed for its GEMM library:
    the first call, with no call of its own), the rest of the warm-up, the timed calls."""
    from suite.experiments import bert_varlen

    calls, observed = [], []

    class Counted(TorchEager):
        def build(self, batch):
            calls.append("build")

        def run(self, batch):
            calls.append("run")
            return super().run(batch)

    def observe(call):
        observed.append(len(calls))
        call()
        return {"mkl_gemm_calls": 0, "onednn_gemm_calls": 0, "summary": "seen"}

    monkeypatch.setattr(bert_varlen, "make_system", lambda *a: Counted())
    monkeypatch.setattr(bert_varlen, "observe_gemm_library", observe)
    cfg = dataclasses.replace(tiny_cfg, timing=dataclasses.replace(tiny_cfg.timing,
                                                                   warmup=warmup))
    rec = run_point(cfg, "torch-eager", 3, 16, show_progress=False)
    assert rec.status is Status.OK, rec.reason
    timed = len(rec.timing["samples"])
    assert calls == ["build"] + ["run"] * (1 + max(0, warmup - 1) + timed)
    assert observed == [1]  # the gate's call, right after the build
    assert rec.derived["gemm_library"]["summary"] == "seen"
    assert rec.timing["untimed_calls"] == {"correctness_gate": 1, "warmup": max(0, warmup - 1)}


def test_the_first_job_of_a_point_shares_its_oracle_and_the_others_read_it(tiny_cfg,
                                                                         tmp_path):
    """With an oracle folder, the float64 output is computed by the first job of a point and
    read by the next; a system checked against it gets the very errors it gets against the
    oracle it computes itself."""
    path = tmp_path / "bert_varlen" / "bert" / "b3_l16.pt"
    first = run_point(tiny_cfg, "torch-eager", 3, 16, show_progress=False, oracle_dir=tmp_path)
    assert first.correctness["reference_source"] == "computed by this job, shared as b3_l16.pt"
    assert path.exists() and not list(path.parent.glob(".*.part"))  # written whole
    for system in ("torch-eager", "reference"):
        own = run_point(tiny_cfg, system, 3, 16, show_progress=False)
        shared = run_point(tiny_cfg, system, 3, 16, show_progress=False, oracle_dir=tmp_path)
        assert shared.status is Status.OK, shared.reason
        assert shared.correctness["max_abs_err"] == own.correctness["max_abs_err"]
        assert own.correctness["reference_source"] == "computed by this job"
        assert shared.correctness["reference_source"] == "shared file b3_l16.pt (an earlier job's)"


@pytest.mark.parametrize("made_for, field", [
    ({"batch_size": 4}, "lengths"),  # another point
    ({"model_kind": "distilbert"}, "model"),  # another family
    ({"distribution": "fixed"}, "distribution"),  # every sequence at full length
    ({"seed": 1}, "seed"),
])
def test_an_oracle_file_of_another_point_is_replaced_not_used(tiny_cfg, tmp_path, made_for,
                                                              field):
    """What an older run left in the folder (or a damaged file) is never taken for this
    point's oracle: the job computes its own, replaces the file and says why."""
    cfg = dataclasses.replace(tiny_cfg, seed=made_for.get("seed", tiny_cfg.seed))
    lengths, batch = bert_oracle.point_inputs(cfg, made_for.get("distribution", "bytetransformer"),
                                              made_for.get("batch_size", 3), 16)
    kind = made_for.get("model_kind", "bert")
    model = canonical_model(kind, cfg.model, cfg.max_len, seed=cfg.seed)
    path = tmp_path / "bert_varlen" / "bert" / "b3_l16.pt"
    wrong = bert_oracle.fingerprint(cfg, made_for.get("distribution", "bytetransformer"), kind,
                                    lengths, batch, model)
    bert_oracle.write({"fingerprint": wrong, "output": torch.zeros(1)}, path)
    rec = run_point(tiny_cfg, "torch-eager", 3, 16, show_progress=False, oracle_dir=tmp_path)
    assert rec.status is Status.OK and rec.correctness["passed"], rec.reason
    assert rec.correctness["reference_source"].startswith(
        f"computed by this job, shared as b3_l16.pt; the file there was not this point's "
        f"(ValueError: oracle {path} was made for another point: {field} is "), rec.correctness
    again = run_point(tiny_cfg, "torch-eager", 3, 16, show_progress=False, oracle_dir=tmp_path)
    assert again.correctness["reference_source"] == "shared file b3_l16.pt (an earlier job's)"


def test_a_damaged_oracle_file_is_replaced(tiny_cfg, tmp_path):
    path = tmp_path / "bert_varlen" / "bert" / "b3_l16.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"half a file")
    rec = run_point(tiny_cfg, "torch-eager", 3, 16, show_progress=False, oracle_dir=tmp_path)
    assert rec.status is Status.OK and rec.correctness["passed"]
    assert "the file there was not this point's" in rec.correctness["reference_source"]


def test_without_a_peak_the_record_says_so(tiny_cfg):
    rec = run_point(tiny_cfg, "reference", 3, 16, None, show_progress=False)
    assert rec.derived["pct_of_measured_peak"] is None
    assert "run seedbench peak" in rec.derived["peak_note"]


class WrongBert(TorchEager):
    """Adds a small error: must be caught by the gate and never timed."""
    name = "wrong"

    def run(self, batch):
        return super().run(batch) + 0.01


class CrashingBert(TorchEager):
    name = "crashing"

    def run(self, batch):
        raise RuntimeError("kernel exploded")


class NoGpuOnly(TorchEager):
    name = "gpu-only"

    def available(self):
        return False, "needs CUDA kernels"


@pytest.fixture
def fake_registry(monkeypatch):
    extra = {c.name: c for c in (WrongBert, CrashingBert, NoGpuOnly)}
    real = baselines.create
    monkeypatch.setattr(baselines, "create",
                        lambda name: extra[name]() if name in extra else real(name))


def test_incorrect_baseline_is_flagged_not_timed(tiny_cfg, fake_registry):
    rec = run_point(tiny_cfg, "wrong", 3, 16, show_progress=False)
    assert rec.status is Status.INCORRECT
    assert rec.correctness["max_abs_err"] == pytest.approx(0.01, rel=1e-3)
    assert "max abs error 0.01 > tolerance 0.001" in rec.reason
    assert rec.timing == {}


def test_raising_baseline_becomes_failed(tiny_cfg, fake_registry):
    rec = run_point(tiny_cfg, "crashing", 3, 16, show_progress=False)
    assert rec.status is Status.FAILED
    assert rec.reason == "RuntimeError: kernel exploded"
    assert "kernel exploded" in rec.derived["traceback"]


def test_unavailable_baseline_and_device(tiny_cfg, fake_registry):
    rec = run_point(tiny_cfg, "gpu-only", 3, 16, show_progress=False)
    assert (rec.status, rec.reason) == (Status.UNAVAILABLE, "needs CUDA kernels")
    if not torch.cuda.is_available():
        on_cuda = dataclasses.replace(tiny_cfg, device="cuda")
        rec = run_point(on_cuda, "reference", 3, 16, show_progress=False)
        assert rec.status is Status.UNAVAILABLE and "cuda" in rec.reason
    rec = run_point(tiny_cfg, "no-such-baseline", 3, 16, show_progress=False)
    assert rec.status is Status.FAILED and "unknown baseline 'no-such-baseline'" in rec.reason


def test_fp16_on_cpu_is_refused_where_unsupported(tiny_cfg):
    class Fp32Only(TorchEager):
        supports = dataclasses.replace(Baseline.supports, dtypes=("fp32",))

    ok, why = Fp32Only().can_run("bert-encoder", "cpu", "fp16")
    assert not ok and "does not support dtype 'fp16'" in why


def failed_factory(reason):
    return Record("bert_varlen", "x", {}, {}, Status.FAILED, reason)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("code, expected", [
    ("import os; os.kill(os.getpid(), 9)", "killed by signal 9"),
    ("import sys; print('boom', file=sys.stderr); sys.exit(3)", "exited with code 3"),
    ("import time; time.sleep(30)", "timed out after 2 s"),
])
def test_a_dying_job_leaves_a_failed_record(tmp_path, code, expected, warm):
    """Started cold or forked by a warm server (suite.launch.warm), the same failed records."""
    out = tmp_path / "r.json"
    run_isolated([sys.executable, "-c", code], out, failed_factory, timeout_s=2, warm=warm)
    rec = read_record(out)
    assert rec.status is Status.FAILED and expected in rec.reason
    if "boom" in code:
        assert "boom" in rec.reason  # the last lines of output come with the reason


@pytest.mark.parametrize("sig, warm", [(s, w) for s in (signal.SIGINT, signal.SIGTERM)
                                       for w in (False, True)] + [(signal.SIGKILL, True)])
def test_a_stopped_supervisor_takes_its_job_with_it(tmp_path, sig, warm):
    """Ctrl-C, or Snakemake / SLURM ending a point job: the job runs in a session of its own
    (so that a timeout kills a launcher's workers too), so the supervisor must stop it, or it
    goes on timing beside the next run and writes its record into that run (seen: CI failed on
    a record that appeared after the next run had started). A supervisor killed outright cannot
    stop a cold child (that one is left to the job's scheduler); a warm one's server sees the
    supervisor's end of the connection close and kills the child."""
    pid_file = tmp_path / "child.pid"
    child = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
             "time.sleep(120)")
    supervisor = ("import sys; from pathlib import Path; "
                  "from suite.launch.jobs import run_isolated; "
                  f"run_isolated([sys.executable, '-c', {child!r}], Path({str(tmp_path)!r}) / "
                  f"'r.json', None, timeout_s=300, warm={warm})")
    proc = subprocess.Popen([sys.executable, "-c", supervisor], stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    proc.send_signal(sig)
    assert proc.wait(timeout=30) != 0  # stopped, not finished
    # a warm child is killed and reaped by its server, which may finish just after the
    # supervisor has exited (seen once with SIGTERM in a fresh-clone run)
    deadline = time.monotonic() + (10 if warm else 0)
    while _alive(pid) and time.monotonic() < deadline:  # the warm server reaps it
        time.sleep(0.05)
    assert not _alive(pid)  # gone, and reaped by its parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_failed_record_the_job_wrote_before_exiting_1_is_kept(tmp_path):
    """What an LLM run's rank 0 does after a peer died: records the cause, exits 1 (so torchrun
    stops at once). The supervisor keeps that reason; an ok record followed by a non-zero
    exit, or half a record, is still replaced."""
    from suite.records import write_record

    out = tmp_path / "r.json"
    write = ("import sys; from pathlib import Path; from suite.records import Record, Status, "
             "write_record; write_record(Record('llm_mfu', 'ddp', {}, {}, Status[sys.argv[2]], "
             "sys.argv[3]), Path(sys.argv[1])); sys.exit(1)")
    for status, reason, kept in (("FAILED", "Connection reset by peer", True),
                                 ("OK", "", False)):
        run_isolated([sys.executable, "-c", write, str(out), status, reason], out,
                     failed_factory, timeout_s=60)
        rec = read_record(out)
        assert rec.status is Status.FAILED
        assert (rec.reason == reason) == kept, rec.reason
        assert ("exited with code 1" in rec.reason) != kept
    run_isolated([sys.executable, "-c", f"open({str(out)!r}, 'w').write('{{\"half'); "
                  "raise SystemExit(1)"], out, failed_factory, timeout_s=60)
    assert "exited with code 1" in read_record(out).reason
    # a failed record of an earlier run is not this run's: a crash without a record replaces it
    write_record(failed_factory("an earlier run's reason"), out)
    run_isolated([sys.executable, "-c", "raise SystemExit(3)"], out, failed_factory,
                 timeout_s=60)
    assert "exited with code 3" in read_record(out).reason
