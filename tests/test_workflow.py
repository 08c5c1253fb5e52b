"""The whole workflow through Snakemake's Python API, in a temp dir, on a tiny config.

Besides the two real baselines, a plugin distribution made here (a dist-info folder on the path,
exactly what an installed package looks like to importlib.metadata) registers three broken
baselines: one that raises, one that kills its own process, one that is unavailable. The workflow
must keep going and the report must list all three with their reasons.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

from reference_impl import LADDER
from suite.env import cpu_model
from suite.experiments import registry
from suite.machine_results import PUBLISHED_FILES, discover
from suite.records import read_record
from suite.resilience import store
from suite.report.readme import README_FIGURES, readme_block

from conftest import ROOT, copy_workflow

MACHINE = "test-machine"

PLUGIN = textwrap.dedent('''
    import os, signal
    from suite.baselines.torch_hf import TorchEager

    class Raising(TorchEager):
        name = "raising"
        description = "raises inside run()"
        def run(self, batch):
            raise RuntimeError("deliberately broken kernel")

    class Segfaulting(TorchEager):
        name = "segfaulting"
        description = "kills its own process"
        def run(self, batch):
            os.kill(os.getpid(), signal.SIGSEGV)

    class Absent(TorchEager):
        name = "absent"
        description = "needs a package this machine lacks"
        def available(self):
            return False, "package 'nonexistent-framework' is not installed"
''')


def tiny_config(baselines, studies=True):
    one_point = {"enabled": studies, "batch_sizes": [3], "max_seq_lens": [16]}
    return {
        "machine": MACHINE,
        # two of the libraries (each is its own process; tests/test_peak.py runs them all)
        "peak": {"dtypes": ["fp32"], "sizes": [64, 128], "repeats": 1,
                 "libraries": ["torch.matmul", "numpy"]},
        "bert_varlen": {
            "baselines": baselines,
            "model": {"layers": 2, "hidden": 32, "heads": 4, "intermediate": 64,
                      "vocab_size": 100},
            "batch_sizes": [3], "max_seq_lens": [16], "device": "cpu", "threads": 1,
            "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 0.0},
            "ablation": one_point, "mha": one_point, "fused_ops": one_point,
            "fixed_length": {**one_point, "baselines": [b for b in ("torch-eager", "reference")
                                                        if b in baselines]},
            "variants": {**one_point, "models": ["albert", "distilbert", "deberta"]},
        },
        "bert_serving": {
            "enabled": studies, "systems": ["padded-torch-eager", "packed-reference"],
            "model": {"layers": 2, "hidden": 32, "heads": 4, "intermediate": 64,
                      "vocab_size": 100},
            "max_len": 16, "library_size": 48, "repeats": 2, "buckets": [8, 16],
            "device": "cpu", "threads": 1, "gate_requests": 8, "min_duration_s": 0.3,
            "batching": {"Server": {"max_batch": 4, "window_ms": 2}},
            "search": {"max_trials": 3, "rel_tol": 0.5},
        },
        "llm": {
            "enabled": studies, "nprocs": 2,
            "train": {"seq_len": 16, "global_batch": 4, "steps": 4, "warmup_steps": 1,
                      "threads": 1},
            "sizes": {"t": {"n_layer": 2, "n_embd": 32, "n_head": 2}},
            "mfu": {"sizes": ["t"], "trainers": ["single", "ddp"]},
            "engines": {"size": "t", "trainers": ["fsdp2", "zero1"]},
            "window": {"points": [[64, 16]], "repeats": 2},
            "pipeline": {"size": "t", "micro_batches": [2, 4], "micro_batch_size": 2},
            "ablation": {"size": "t", "sliding_window": 8, "micro_batches": 2},
            "loss": {"size": "t", "steps": 8, "eval_batches": 2, "seeds": [0, 1],
                     "lrs": {"adamw": [0.002], "lamb": [0.006]}},
            # each fault kind under torchrun's agent; the hang waits out its 3 s timeout and
            # the agent's 2 s grace for the stopped rank
            "resilience": {"trainers": ["ddp", "zero1"], "size": "t",
                           "checkpoint": {"size": "t", "steps": 14, "every": 2},
                           "faults": {"steps": 8, "step": 5, "every": 2, "timeout_s": 3,
                                      "shutdown_timeout_s": 2},
                           "straggler": {"steps_per_phase": 4}},
        },
        "vwn": {
            "enabled": studies, "device": "cpu", "seeds": [0, 1], "expansions": [1, 2],
            "m_ablation": {"r": 2, "m": [1]}, "baseline_length": 2,
            "train": {**PRETRAIN, "steps": 8, "eval_every": 4},
        },
        "pma": {
            "enabled": studies, "device": "cpu", "seeds": [0, 1],
            "train": {**PRETRAIN, "steps": 12, "eval_every": 4},
            "checkpoint_every": 2, "intervals": [1, 2], "counts": [3, 4], "merge_every": 6,
            "headline": {"method": "sma", "n": 3, "interval": 1}, "decay": {"steps": [4]},
            "spike": {"steps": 2, "resume_steps": 4}, "stable": {"window": 6},
        },
    }


PRETRAIN = {"model": {"n_layer": 1, "n_embd": 16, "n_head": 2}, "seq_len": 16, "batch": 2,
            "warmup_steps": 2, "eval_batches": 2, "threads": 1}


def prepare(workdir: Path, mp: pytest.MonkeyPatch) -> Path:
    """A copy of the workflow, the plugin on the path of this process and of every job."""
    copy_workflow(workdir)
    plugins = workdir / "plugins"
    plugins.mkdir()
    (plugins / "broken_baselines.py").write_text(PLUGIN)
    info = plugins / "broken_baselines-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-baselines\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[seedbench.baselines]\n" + "".join(f"{n} = broken_baselines:{c}\n" for n, c in
                                            [("raising", "Raising"),
                                             ("segfaulting", "Segfaulting"),
                                             ("absent", "Absent")]))
    mp.syspath_prepend(str(plugins))
    mp.setenv("PYTHONPATH", os.pathsep.join([str(plugins), str(ROOT)]))
    mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    mp.chdir(workdir)
    return workdir


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    return prepare(tmp_path, monkeypatch)


def run_workflow(workdir: Path, config: dict, executor: str = "local") -> None:
    cfg_path = workdir / "test.yaml"
    cfg_path.write_text(json.dumps(config))
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=2),
                          config_settings=ConfigSettings(configfiles=[cfg_path]),
                          snakefile=workdir / "Snakefile", workdir=workdir)
        wf.dag().execute_workflow(executor=executor)


def job_stats(log: str) -> dict[str, int]:
    """Rule -> jobs, from the last "Job stats" table in Snakemake's log."""
    table = log.rsplit("Job stats:", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = table[next(i for i, line in enumerate(table) if line.startswith("---")) + 1:]
    return {rule: int(n) for rule, n in map(str.split, rows) if rule != "total"}


def test_bad_config_stops_before_any_job(workdir):
    config = tiny_config(["torch-eager", "reference"])
    config["bert_varlen"]["batch_sizes"] = ["sixteen"]
    with pytest.raises(Exception) as e:
        run_workflow(workdir, config)
    text = str(e.value) + "".join(str(a) for a in getattr(e.value, "args", ()))
    assert "bert_varlen.batch_sizes.0" in text and "'sixteen'" in text
    assert not (workdir / "results" / MACHINE).exists()

    config = tiny_config(["torch-eager", "refrence"], studies=False)
    with pytest.raises(Exception) as e:
        run_workflow(workdir, config)
    assert "unknown baseline(s) ['refrence']" in str(e.value)
    assert not (workdir / "results" / MACHINE).exists()


# ---- the whole workflow, run once; each test below reads one side of it -----------------------

BASELINES = ["torch-eager", "reference", "raising", "segfaulting", "absent",
             "example-per-sequence", "external-launcher"]
# every study ran every one of its systems at the one point
STUDIES = {
    "bert_ablation": {f"bert/ladder-{i}" for i in range(len(LADDER))},
    "bert_variants": {f"{m}/{s}" for m in ("albert", "distilbert", "deberta")
                      for s in ("torch-eager", "reference")},
    "bert_mha": {"attention/varlen", "attention/padded-unfused", "attention/padded-sdpa"},
    "bert_fused_ops": {f"{op}/{s}" for op in ("layernorm", "gemm_gelu")
                       for s in ("fused", "unfused")},
    "bert_fixed": {f"bert/{b}" for b in ("torch-eager", "reference")},
}


@dataclass(frozen=True)
class FullRun:
    workdir: Path
    config: dict
    results: Path

    def html(self) -> str:
        return (self.workdir / "reports" / "index.html").read_text()


def full_run_test(test):
    """A test of the one full run: slow, and on the worker that holds the run (the tests share
    it in file order: the ones that change the folder come last)."""
    return pytest.mark.slow(pytest.mark.xdist_group("full_run")(test))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """Every study and baseline at one point, with the broken plugins and an external program
    from a source checkout (the workflow cmake-builds it before its runs)."""
    config = tiny_config(BASELINES)
    config["bert_varlen"]["external"] = {"launcher": {
        "command": ["{build_dir}/launcher"], "source": str(ROOT / "tests/data/external_cmake"),
        "cmake_args": [f"-DPYTHON={sys.executable}",
                       f"-DADAPTER={ROOT / 'examples/external-hf/seedbench_external_hf.py'}"]}}
    with pytest.MonkeyPatch.context() as mp:
        workdir = prepare(tmp_path_factory.mktemp("full_run"), mp)
        run_workflow(workdir, config)
        yield FullRun(workdir, config, workdir / "results" / MACHINE)


def _bert_records(run: FullRun) -> dict:
    folder = run.results / "bert_varlen" / "bert"
    return {p.relative_to(folder).as_posix(): read_record(p) for p in folder.glob("*/*.json")}


@full_run_test
def test_snakemakes_own_report_packs_the_figures(full_run):
    """The report() outputs of the rules: Snakemake's report of the same run."""
    smk = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--configfile",
                          "test.yaml", "--cores", "1", "--report", "smk-report.html"],
                         cwd=full_run.workdir, capture_output=True, text=True, timeout=600)
    assert smk.returncode == 0, smk.stderr[-3000:]
    assert (full_run.workdir / "smk-report.html").stat().st_size > 100_000


@full_run_test
def test_each_baseline_earns_its_status(full_run):
    """One record per (baseline, point): the working ones ok and checked, the broken ones
    failed or unavailable with their reason, the external program built and run."""
    recs = _bert_records(full_run)
    assert len(recs) == len(BASELINES)
    status = {k: (r.status.value, r.reason) for k, r in recs.items()}
    assert (full_run.workdir / "build/external/launcher/seedbench-build.json").exists()
    assert recs["external-launcher/b3_l16.json"].timing["timer"] == "reported by external-launcher"
    for b in ("torch-eager", "reference", "example-per-sequence", "external-launcher"):
        rec = recs[f"{b}/b3_l16.json"]
        assert rec.status.value == "ok" and rec.correctness["passed"]
        assert len(rec.timing["samples"]) >= 3
        assert rec.derived["pct_of_measured_peak"] > 0
        assert rec.env["process_start"] == "warm fork"  # suite.launch.warm served the job
    # the GEMM library torch reached, seen in the reference's warm-up call
    assert recs["reference/b3_l16.json"].derived["gemm_library"]["summary"]
    assert status["raising/b3_l16.json"] == ("failed", "RuntimeError: deliberately broken kernel")
    assert status["segfaulting/b3_l16.json"][0] == "failed"
    assert "killed by signal 11" in status["segfaulting/b3_l16.json"][1]
    assert status["absent/b3_l16.json"] == (
        "unavailable", "package 'nonexistent-framework' is not installed")


@full_run_test
def test_every_study_ran_every_system_and_passed_its_gate(full_run):
    results = full_run.results
    for experiment, systems in STUDIES.items():
        found = {p.parent.relative_to(results / experiment).as_posix(): read_record(p)
                 for p in (results / experiment).glob("*/*/b3_l16.json")}
        assert set(found) == systems, experiment
        if experiment == "bert_fixed":
            assert all(r.point["distribution"] == "fixed" and r.workload["lengths"] == [16] * 3
                       for r in found.values())
        assert all(r.status.value == "ok" and r.correctness["passed"] for r in found.values())
        if registry.shares_oracle(experiment):  # one oracle per (subject, point): computed once
            by_subject = {s.split("/")[0] for s in systems}
            sources = sorted(r.correctness["reference_source"] for r in found.values())
            computed = [s for s in sources if s.startswith("computed by this job")]
            assert len(computed) == len(by_subject), sources
            assert len(sources) - len(computed) == sources.count(
                "shared file b3_l16.pt (an earlier job's)"), sources
        study = pd.read_csv(results / experiment / "table.csv")
        study = study[study.status == "ok"]
        assert len(study) == len(systems) and study.speedup_vs_padded.notna().all()


    assert not (results / "oracles").exists()  # a cache of the run, gone once it succeeded


@full_run_test
def test_the_tidy_table_and_the_report(full_run):
    """A row per record, speedups that are the ratio of the two medians; a figure and a report
    section per experiment, the failures with their reasons."""
    results, html = full_run.results, full_run.html()
    table = pd.read_csv(results / "bert_varlen" / "table.csv")
    assert len(table) == len(BASELINES)
    ref = table[table.system == "reference"].iloc[0]
    eager = table[table.system == "torch-eager"].iloc[0]
    assert ref.speedup_vs_padded == pytest.approx(eager.median_ms / ref.median_ms)
    assert ref.speedup_ci_low <= ref.speedup_vs_padded <= ref.speedup_ci_high
    assert eager.speedup_vs_padded == 1.0 and pd.isna(eager.speedup_ci_low)
    assert ref.total_tokens == sum(
        _bert_records(full_run)["reference/b3_l16.json"].workload["lengths"])

    for experiment in ("bert_varlen", *STUDIES):
        assert (results / "figures" / f"{experiment}.svg").stat().st_size > 10_000
        assert not (results / "figures" / f"{experiment}.png").exists()
        assert f'<h2 id="{experiment}">' in html
    assert "+ fused MHA" in html and "padded-sdpa" in html and "deberta" in html
    assert '<h2 id="claims">' in html and "TensorFlow XLA" in html
    # the varlen point and the fixed-length one
    assert html.count('<td class="l">reference</td><td class="l">bert</td>') == 2
    assert html.count('<td class="l">torch-eager</td><td class="l">bert</td>') == 2
    assert "deliberately broken kernel" in html
    assert "killed by signal 11" in html
    assert "nonexistent-framework" in html
    assert f"{ref.median_ms:.2f}" in html
    assert "<svg" in html and cpu_model() in html


@full_run_test
def test_every_training_run_passed_its_gate_with_mfu_on_the_measured_peak(full_run):
    """MegaScale: each run against the single-process run; the report's sections and the
    scale model's held-out error."""
    results, html = full_run.results, full_run.html()
    llm = {p.relative_to(results).as_posix(): read_record(p)
           for p in results.glob("llm_*/*/*.json")
           if p.parts[-3] not in ("llm_window", "llm_resilience")}
    # mfu, engines, the ladder on the pipeline (no overlap step there), its bubbles, the loss
    # sweep (one LR each, two seeds)
    assert len(llm) == 2 + 2 + 6 + 2 + 4
    for path, rec in llm.items():
        assert rec.status.value == "ok", (path, rec.reason)
        assert rec.derived["mfu"]["peak_source"].startswith("measured fp32")
        steps = (results / path).with_suffix(".steps.jsonl").read_text().splitlines()
        assert len(steps) == rec.config["steps"]
        if not path.startswith("llm_loss"):
            assert rec.correctness["passed"] is True
    assert llm["llm_engines/t/zero1.json"].point["world_size"] == 2
    # the per-rank monitor in every run; stragglers named only among ranks of the same work
    ranks = llm["llm_engines/t/zero1.json"].derived
    assert [r["rank"] for r in ranks["rank_table"]] == [0, 1] and ranks["stragglers"]["ratios"]
    assert llm["llm_pipeline/m2/pipeline.json"].derived["stragglers"]["named"] is None
    assert llm["llm_loss/lamb-b16-lr0.006-s1/single.json"].derived["eval_loss"] > 0
    assert llm["llm_ablation/6-lamb/pipeline.json"].derived["trainer"]["micro_batches"] == 6
    # forked warm (suite.launch.warm): a one-process run, and a launcher's ranks
    assert {r.env["process_start"] for r in llm.values()} == {"warm fork"}
    ablation = pd.read_csv(results / "llm_ablation" / "table.csv")
    assert list(ablation.step) == [0, 1, 2, 3, 4, 6] and ablation.mfu_fixed_percent.notna().all()
    assert ablation.mechanism.str.len().gt(0).all() and ablation.bubble_fraction.notna().all()
    for experiment in ("llm_window", "llm_mfu", "llm_engines", "llm_pipeline", "llm_ablation",
                       "llm_loss", "llm_scale"):
        assert f'<h2 id="{experiment}">' in html
    window = {p.stem: read_record(p) for p in results.glob("llm_window/s64-w16/*.json")}
    assert sorted(window) == sorted(["causal", "window-fused", "window-banded", "window-masked"])
    assert all(r.status.value == "ok" and r.correctness["passed"] for r in window.values())
    assert "The windowed kernel, forward + backward: s=64, w=16" in html
    assert "these datasets): megascale_table2 / Megatron-LM" in html
    assert "Gain of each step in MFU points" in html
    # MegaScale's claims: the ladder's steps and LAMB's loss, each of its kind
    for experiment in ("llm_ablation", "llm_loss"):
        assert f'id="{experiment}-on-results-{MACHINE}-claims"' in html
    claims = json.loads((results / "llm_ablation" / "analysis.json").read_text())["claims"]
    assert len(claims) == 6 and {c["kind"] for c in claims} == {"size", "direction"}
    assert "no overlap step on pipeline" in claims[-1]["note"]
    assert not any("not the paper's mechanism" in c["reading"] for c in claims)
    bubbles = json.loads((results / "llm_pipeline" / "analysis.json").read_text())["claims"]
    assert len(bubbles) == 3 and all(c["size_tested"] for c in bubbles)
    lamb = json.loads((results / "llm_loss" / "analysis.json").read_text())["claims"]
    assert lamb[0]["kind"] == "equivalence" and lamb[0]["n"] == 2


@full_run_test
def test_resilience_runs_survive_each_fault_under_torchrun(full_run):
    """MegaScale Sec. 4 under the real supervisor: each fault detected, the job restarted from
    its last checkpoint with every loss equal to the uninterrupted run's, nothing left behind;
    the slowed rank named; ZeRO recorded unavailable with its reason; the section and claims."""
    results, html = full_run.results, full_run.html()
    recs = {p.stem: read_record(p) for p in (results / "llm_resilience" / "ddp").glob("*.json")}
    timeout = full_run.config["llm"]["resilience"]["faults"]["timeout_s"]
    for kind in ("kill", "hang", "nan"):
        rec = recs[f"fault-{kind}"]
        d = rec.derived
        assert rec.status.value == "ok", (kind, rec.reason)
        assert d["bit_exact"] and d["losses"] == recs["fault-none"].derived["losses"]
        assert d["leftovers"] == [] and d["attempts"] == 2
        assert d["resumed_from_step"] == 3 and d["steps_redone"] == 1  # checkpoints every 2
        assert d["downtime_s"] == pytest.approx(d["detect_s"] + d["recovery_s"])
    assert recs["fault-kill"].derived["downtime_s"] <= 30
    hang = recs["fault-hang"].derived
    assert "collective timeout" in hang["detected_by"]
    assert timeout - 0.5 <= hang["detect_s"] <= timeout + 10
    # the restart honours the configured grace (torch's own restart path waits a fixed 30 s)
    assert hang["shutdown_timeout_s"] == 2 and hang["shutdown_s"] < 20
    assert "nonfinite" in recs["fault-nan"].derived["detected_by"]
    for mode in store.MODES:
        rec = recs[f"checkpoint-{mode}"]
        assert rec.status.value == "ok" and rec.derived["state_bytes"] > 0
        assert len(rec.derived["stalls_s"]) == 1 and rec.derived["restore_s"] > 0
        assert rec.derived["first_stall_s"] > 0  # the first of each mode (its set-up) apart
    assert recs["checkpoint-nvrx-async"].status.value == "unavailable"
    # which rank is named is the measurement's (published); here other tests share the cores,
    # so the phases' structure only (tests/test_resilience.py checks the timer and the finder)
    phases = recs["straggler"].derived["phases"]
    assert [p["slowed"] for p in phases] == [None, 0, 1]
    assert all(set(p["ratios"]) == {"0", "1"} and set(p["named"]) <= {0, 1} for p in phases)
    zero = read_record(results / "llm_resilience" / "zero1" / "fault-kill.json")
    assert zero.status.value == "unavailable" and "DeepSpeed keeps ZeRO" in zero.reason
    table = pd.read_csv(results / "llm_resilience" / "table.csv")
    assert set(table.trainer) == {"ddp", "zero1"} and len(table[table.group == "straggler"]) >= 3
    assert '<h2 id="llm_resilience">' in html and "losses equal to the bit" in html
    assert "rank 1 / " in html  # the straggler phase: slowed / named
    claims = json.loads((results / "llm_resilience" / "analysis.json").read_text())["claims"]
    assert [c["claim"].split(" (")[0] for c in claims[:3]] == [
        "two-stage checkpointing barely pauses training",
        "ETTR of the 175B run at 12,288 GPUs, sync checkpoints",
        "ETTR of the 175B run at 12,288 GPUs, two-stage checkpoints"]
    assert not claims[0]["size_tested"]  # a tiny state: the 1 GiB setting is not met


@full_run_test
def test_vwn_and_merging_runs_tables_curves_and_claims(full_run):
    results, html = full_run.results, full_run.html()
    runs = {p.relative_to(results).as_posix(): read_record(p)
            for p in results.glob("*_*/*/seed*.json") if p.parts[-3] in ("vwn_scaling",
                                                                         "pma_merging")}
    assert sorted(runs) == sorted(
        [f"vwn_scaling/{v}/seed{s}.json" for v in ("m2-n2", "m2-n4", "m1-n2") for s in (0, 1)]
        + [f"pma_merging/gpt/seed{s}.json" for s in (0, 1)])
    assert all(r.status.value == "ok" for r in runs.values()), {
        k: r.reason for k, r in runs.items() if r.status.value != "ok"}
    assert runs["vwn_scaling/m2-n2/seed0.json"].derived["tokens_seen"] == 2 * 8 * 2 * 16
    assert not list(results.glob("pma_merging/gpt/*.checkpoints"))  # removed after the job
    for experiment in ("vwn_scaling", "pma_merging"):
        claims = pd.read_csv(results / experiment / "claims.csv")
        assert len(claims) >= 5 and claims.verdict.notna().all()
        assert {"kind", "reading", "size_tested"} <= set(claims.columns)
        assert claims.kind.isin(["direction", "size", "equivalence"]).all()
        assert (results / experiment / "curves.csv").stat().st_size > 0
        assert f'<h2 id="{experiment}">' in html
        assert f'id="{experiment}-on-results-{MACHINE}-claims"' in html
        assert (results / "figures" / f"{experiment}.svg").stat().st_size > 10_000
    vwn = pd.read_csv(results / "vwn_scaling" / "table.csv")
    assert set(vwn.label) == {"m2-n2", "m2-n4", "m1-n2"} and (vwn.seeds == 2).all()
    assert "loss falls in log2 r" in html and "pre-spike checkpoints" in html


@full_run_test
def test_serving_runs_under_loadgen_into_a_table_claims_and_a_report_section(full_run):
    results, html = full_run.results, full_run.html()
    runs = {p.relative_to(results).as_posix(): read_record(p)
            for p in results.glob("bert_serving/*/run*.json")}
    assert sorted(runs) == sorted(f"bert_serving/{s}/run{k}.json" for k in (0, 1)
                                  for s in ("padded-torch-eager", "packed-reference"))
    assert all(r.status.value == "ok" and r.env["process_start"] == "warm fork"
               for r in runs.values()), {k: r.reason for k, r in runs.items()}
    assert all((results / p.replace(".json", ".loadgen") / "Server").is_dir() for p in runs)
    table = pd.read_csv(results / "bert_serving" / "table.csv")
    assert len(table) == 8 and table.p99_ms.notna().all()
    claims = pd.read_csv(results / "bert_serving" / "claims.csv")
    assert list(claims.n) == [2, 2] and claims.verdict.notna().all()
    assert (results / "figures" / "bert_serving.svg").stat().st_size > 10_000
    assert '<h2 id="bert_serving">' in html and "max VALID QPS" in html
    assert f'id="bert_serving-on-results-{MACHINE}-claims"' in html


@full_run_test
def test_a_second_run_with_nothing_changed_does_no_work(full_run):
    results = full_run.results
    mtimes = {p: p.stat().st_mtime_ns for p in results.rglob("*.json")}
    html_mtime = (full_run.workdir / "reports" / "index.html").stat().st_mtime_ns
    run_workflow(full_run.workdir, full_run.config)
    assert {p: p.stat().st_mtime_ns for p in results.rglob("*.json")} == mtimes
    assert (full_run.workdir / "reports" / "index.html").stat().st_mtime_ns == html_mtime


@full_run_test
def test_a_new_suite_version_rebuilds_what_is_derived_and_measures_nothing(full_run, monkeypatch,
                                                                          capsys):
    """Another source digest: Snakemake plans every table, figure, analysis and the report
    again (the tables for their changed parameters, the rest after them) from the same
    records. A dry run: the published check below builds a whole machine's derived files."""
    from suite.workflow import source_digest

    results = full_run.results
    monkeypatch.setattr(source_digest, "digest", lambda: "another-version")
    capsys.readouterr()
    run_workflow(full_run.workdir, full_run.config, executor="dryrun")
    log = capsys.readouterr().err
    planned = job_stats(log)
    tables = {"bert_table", "llm_table", "llm_scale", "table_step"}
    assert set(planned) == tables | {"figure", "analyze", "report_html", "all"}, planned
    assert sum(planned[r] for r in tables) == len(list(results.glob("*/table.csv")))
    assert planned["figure"] == len(list(results.glob("figures/*.svg")))
    assert planned["analyze"] == len(list(results.glob("*/analysis.json")))
    reasons = log[log.rindex("Reasons:"):]
    assert "params have changed since last execution:\n        " + ", ".join(sorted(tables)) \
        in reasons, reasons


@full_run_test
def test_a_changed_run_config_runs_those_points_again(full_run, capsys):
    """A record's config is a parameter Snakemake watches: a longer merging study, or
    another learning rate for the training runs, plans exactly those runs again (functions of
    the output are not watched: a changed config once reused the old records). A dry run."""
    import copy

    config = copy.deepcopy(full_run.config)
    config["pma"]["train"]["steps"] = 14
    config["llm"]["train"]["lr"] = 0.002
    capsys.readouterr()
    run_workflow(full_run.workdir, config, executor="dryrun")
    log = capsys.readouterr().err
    planned = job_stats(log)
    assert planned["pretrain_run"] == len(list(full_run.results.glob("pma_merging/*/*.json")))
    from suite.experiments import llm_plan

    def trains(cfg):
        return {job.path(""): job.train for js in llm_plan.jobs(cfg).values() for job in js}

    before, after = trains(full_run.config), trains(config)
    changed = [p for p in after if after[p] != before.get(p)]
    assert planned["llm_point"] == len(changed) > 0, log[log.rfind("Job stats"):][:3000]
    assert "bert_point" not in planned and "serving_run" not in planned


COMMITTED = sorted(m.path for m in discover(ROOT / "results") if m.published)


@full_run_test
def test_published_records_alone_rebuild_the_report_and_the_readme(full_run):
    """This run published as a second machine beside the committed published machines, then
    the report rebuilt from records alone (make report): every machine side by side, nothing
    run again, the committed README block and figures are what the rebuild gives; a damaged
    published record stops the rebuild and is named."""
    from suite.machine_results import publish
    from suite.report.readme import headlines_markdown

    workdir, config = full_run.workdir, full_run.config
    dest, files = publish(full_run.results, "other-box")
    assert dest == Path("results/published/other-box")
    assert {p.name for p in files} >= {"peak.json", "b3_l16.json", "zero1.json",
                                       "zero1.steps.jsonl", "seed0.json"}
    assert not [p for p in files if p.name in ("table.csv", "analysis.json") or
                "figures" in p.parts or "logs" in p.parts]
    for path in COMMITTED:  # what is committed: records, step logs, peak.json
        src = Path(path)
        for pattern in PUBLISHED_FILES:
            for f in src.glob(pattern):
                copy = workdir / src.relative_to(ROOT) / f.relative_to(src)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, copy)
    records = {p: p.stat().st_mtime_ns for p in Path("results").rglob("*.json")
               if p.parent.name not in ("llm_scale",) and p.name != "analysis.json"}
    start = time.perf_counter()
    run_workflow(workdir, {**config, "report_only": True})
    print(json.dumps({"report_only_rebuild_s": round(time.perf_counter() - start, 1)}))
    assert {p: p.stat().st_mtime_ns for p in records} == records  # nothing ran again
    html = full_run.html()
    assert f"{MACHINE} (local)" in html and "other-box (published)" in html
    assert 'id="machine-results-published-other-box"' in html
    published = workdir / dest
    for experiment in ("bert_varlen", "llm_mfu", "vwn_scaling"):
        assert (published / "figures" / f"{experiment}.svg").stat().st_size > 10_000
        assert f'id="{experiment}-on-results-published-other-box"' in html
        # the same records on both machines: the same headline, side by side
        text = json.loads((published / experiment / "analysis.json").read_text())["headline"]
        assert html.count(f"<strong>{text['text']}</strong>") >= 2
    assert "config file of this run" not in html  # a report-only build ran no config
    block = headlines_markdown(dest)  # relative: the README links from the checkout root
    assert "| bert_varlen | padding-free reference over torch-eager: **" in block
    assert "(results/published/other-box/figures/bert_varlen.svg)" in block

    assert COMMITTED, "results/published/ holds no machine; the README shows published results"
    blocks = []
    for path in COMMITTED:
        rel = Path(path).relative_to(ROOT)
        assert f"{rel.name} (published)" in html
        blocks.append(headlines_markdown(rel))
        # committed figures are the rebuilt ones, byte for byte (a machine has those of the
        # experiments it ran: a GPU's has no engines figure)
        figures = {name: (Path(path) / "figures" / f"{name}.svg", workdir / rel / "figures" /
                          f"{name}.svg") for name in README_FIGURES}
        assert {n for n, (c, _) in figures.items() if c.is_file()} == \
            {n for n, (_, r) in figures.items() if r.is_file()}, rel
        for name, (committed, rebuilt) in figures.items():
            if committed.is_file():
                assert committed.read_bytes() == rebuilt.read_bytes(), (rel, name)
    assert readme_block(ROOT / "README.md") == "\n\n".join(blocks), (
        "README's published block is stale: make report, then "
        "seedbench headlines --update-readme README.md results/published/*/")

    broken = published / "bert_varlen" / "bert" / "reference" / "b3_l16.json"
    broken.write_text(broken.read_text()[:200])
    with pytest.raises(Exception) as failed:  # Snakemake's: a job did not complete
        run_workflow(workdir, {**config, "report_only": True})
    assert "bert_table" in str(failed.value) or "complete" in str(failed.value)
    log = (published / "logs" / "bert_varlen" / "table.log").read_text()
    assert f"{broken.relative_to(workdir)}: not a readable record (JSONDecodeError" in log


def workflow_rules() -> set[str]:
    """Every rule the workflow defines: ``rule NAME:`` in the Snakefile and the rule files."""
    import re

    files = [ROOT / "Snakefile", *sorted((ROOT / "workflows" / "rules").glob("*.smk"))]
    return {m.group(1) for f in files
            for m in re.finditer(r"^rule (\w+):", f.read_text(), re.MULTILINE)}


@pytest.mark.parametrize("profile", sorted(p.parent.name for p in
                                           (ROOT / "workflows" / "profiles").glob("*/config.yaml")))
def test_profiles_name_real_rules(profile):
    """A resource set for a rule that does not exist is silently ignored: paper-scale training
    under SLURM would get the default one GPU for eight ranks."""
    import yaml

    rules = workflow_rules()
    assert {"all", "llm_point", "bert_point"} <= rules  # the parse itself works
    settings = yaml.safe_load((ROOT / "workflows" / "profiles" / profile / "config.yaml")
                              .read_text()) or {}
    for key in ("set-resources", "set-threads"):
        value = settings.get(key) or {}
        # a mapping {rule: {...}} or the command line's list form ["rule:resource=value", ...]
        named = ({str(v).split(":", 1)[0] for v in value} if isinstance(value, list)
                 else set(value))
        assert named <= rules, (f"{profile}/config.yaml {key} names rule(s) "
                                f"{sorted(named - rules)} that the workflow lacks; rules: "
                                f"{sorted(rules)}")


def test_the_source_digest_follows_every_source_file(tmp_path, monkeypatch):
    """What the derived rules carry: it changes with any code, template or data file of the
    package, and with nothing else."""
    from suite.workflow import source_digest

    (tmp_path / "report" / "templates").mkdir(parents=True)
    files = {"a.py": "x = 1\n", "report/templates/t.j2": "{{ x }}", "data/s.yaml": "k: 1\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(source_digest, "PACKAGE", tmp_path)
    first = source_digest.digest()
    assert source_digest.digest() == first and len(first) == 16
    (tmp_path / "notes.txt").write_text("not source")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert source_digest.digest() == first
    for name in files:
        path = tmp_path / name
        text = path.read_text()
        path.write_text(text + " ")
        assert source_digest.digest() != first, name
        path.write_text(text)
    assert source_digest.digest() == first
    (tmp_path / "a.py").rename(tmp_path / "b.py")  # a moved file is a change too
    assert source_digest.digest() != first
