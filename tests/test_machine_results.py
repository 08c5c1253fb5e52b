"""Machine folders found on disk, publishing one, the headline numbers and the README block."""

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from suite.analysis.analyze import AnalysisInputs
from suite.analysis.headlines import bert_reference, first_claim, llm_best_mfu, llm_scale_error
from suite.machine_results import (discover, experiments_on_disk, publish, record_config,
                                   records_on_disk)
from suite.records import Record, Status, read_record, write_record
from suite.report.readme import BEGIN, END, README_FIGURES, readme_block, update_readme

ROOT = Path(__file__).resolve().parent.parent


def _record(path: Path, experiment: str, system: str, point: dict) -> Path:
    rec = Record(experiment, system, point, {"padded_baseline": "torch-sdpa"}, Status.OK, "",
                 env={"machine": "m", "git": {"commit": "abc123def4567", "dirty": False}})
    return write_record(rec, path)


@pytest.fixture
def results(tmp_path):
    """results/ with this machine's folder, a published one, the paper CSVs and stray files."""
    r = tmp_path / "results"
    box = r / "box-2c"
    _record(box / "bert_varlen/bert/reference/b1_l64.json", "bert_varlen", "reference",
            {"batch_size": 1, "max_seq_len": 64})
    _record(box / "llm_mfu/gpt-tiny/ddp.json", "llm_mfu", "ddp", {"label": "gpt-tiny"})
    (box / "llm_mfu/gpt-tiny/ddp.steps.jsonl").write_text("{}\n")
    _record(box / "vwn_scaling/m2-n4/seed0.json", "vwn_scaling", "vwn", {"seed": 0})
    (box / "vwn_scaling/m2-n4/seed0.checkpoints").mkdir()
    (box / "bert_varlen/table.csv").write_text("x\n")
    (box / "bert_varlen/analysis.json").write_text("{}")
    (box / "logs").mkdir()
    (box / "logs/peak.log").write_text("")
    (box / "peak.json").write_text("{}")
    (r / "paper").mkdir()
    (r / "paper" / "SOURCES.md").write_text("")
    (r / "published" / "gpu-1x").mkdir(parents=True)
    (r / "published" / "gpu-1x" / "peak.json").write_text("{}")
    (r / "no-peak").mkdir()
    return r


def test_machine_folders_are_those_with_a_peak(results):
    found = discover(results)
    assert [(Path(m.path).relative_to(results).as_posix(), m.published) for m in found] == [
        ("box-2c", False), ("published/gpu-1x", True)]
    assert found[1].label() == "gpu-1x (published)"
    assert found[0].label(current=found[0].path) == "box-2c (this machine)"


def test_records_are_found_by_each_familys_layout(results):
    box = results / "box-2c"
    assert [Path(p).name for p in records_on_disk(box, "bert_varlen")] == ["b1_l64.json"]
    assert [Path(p).name for p in records_on_disk(box, "llm_mfu")] == ["ddp.json"]
    assert [Path(p).name for p in records_on_disk(box, "vwn_scaling")] == ["seed0.json"]
    assert records_on_disk(box, "llm_scale") == []
    # the analytical scale model goes with the MegaScale runs; registry order
    assert experiments_on_disk(box) == ["bert_varlen", "llm_mfu", "llm_scale", "vwn_scaling"]
    assert record_config(records_on_disk(box, "bert_varlen"))["padded_baseline"] == "torch-sdpa"


def test_publish_copies_records_step_logs_and_peak_only(results):
    dest, files = publish(results / "box-2c", "box", results=results)
    copied = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert copied == ["bert_varlen/bert/reference/b1_l64.json", "llm_mfu/gpt-tiny/ddp.json",
                      "llm_mfu/gpt-tiny/ddp.steps.jsonl", "peak.json",
                      "vwn_scaling/m2-n4/seed0.json"]
    assert len(files) == 5
    with pytest.raises(ValueError, match="exists: pass --replace"):
        publish(results / "box-2c", "box", results=results)
    with pytest.raises(ValueError, match="'Box 2'.*lower-case"):
        publish(results / "box-2c", "Box 2", results=results)
    with pytest.raises(ValueError, match="no-peak: not a machine folder"):
        publish(results / "no-peak", results=results)


def test_a_damaged_record_stops_publishing_and_is_named(results):
    bad = results / "box-2c" / "llm_mfu" / "gpt-tiny" / "ddp.json"
    bad.write_text(bad.read_text()[:100])
    with pytest.raises(ValueError, match=r"ddp\.json: not a readable record \(JSONDecodeError"):
        publish(results / "box-2c", "box", results=results)
    assert not (results / "published" / "box").exists()


def test_read_record_names_a_file_that_is_not_a_record(tmp_path):
    stray = tmp_path / "notes.json"
    stray.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match=r"notes\.json: not a readable record"):
        read_record(stray)


def _bert_table(rows):
    cols = ["system", "status", "batch_size", "max_seq_len", "subject", "speedup_vs_padded",
            "speedup_ci_low", "speedup_ci_high", "speedup_over"]
    return pd.DataFrame(rows, columns=cols)


def test_bert_headline_is_read_at_the_largest_point_and_names_it():
    table = _bert_table([
        ("reference", "ok", 16, 64, "bert", 1.5, 1.4, 1.6, "torch-eager"),
        ("reference", "ok", 16, 256, "bert", 2.0, 1.9, 2.1, "torch-eager"),
        ("reference", "failed", 16, 512, "bert", None, None, None, "torch-eager"),
        ("torch-eager", "ok", 16, 256, "bert", 1.0, None, None, "torch-eager")])
    h = bert_reference(AnalysisInputs(table))
    assert (h.value, h.at, h.ci) == (2.0, "b16 x 256, bert", (1.9, 2.1))
    assert h.metric == "padding-free reference over torch-eager" and h.text() == "2.00x"
    assert bert_reference(AnalysisInputs(table[table.system != "reference"])) is None


def test_train_scale_and_claim_headlines():
    train = pd.DataFrame({"status": ["ok", "ok", "failed"], "tokens_per_s": [10.0, 20.0, None],
                          "mfu_percent": [30.0, 41.25, None], "label": ["a", "b", "c"],
                          "system": ["ddp", "single", "fsdp2"],
                          "peak_source": ["measured fp32 GEMM peak: onednn"] * 2 + [None]})
    h = llm_best_mfu(AnalysisInputs(train))
    assert (h.text(), h.at) == ("41.2%", "b, single")
    assert h.metric == "best training MFU (of the measured peak)"
    gpu = train.assign(peak_source="H200 bf16 datasheet dense")
    assert llm_best_mfu(AnalysisInputs(gpu)).metric == \
        "best training MFU (of the H200 bf16 datasheet dense peak)"
    scale = pd.DataFrame({"calibration": [True, False, False, False],
                          "dataset": ["bloom176b", "bloom176b", "narayanan2021", "new_sweep"],
                          "iteration_time_rel_error": [0.0, 0.05, -0.15, 0.3]})
    h = llm_scale_error(AnalysisInputs(scale))  # a dataset the model was not shaped on: apart
    assert h.value == pytest.approx(10.0) and h.machine_independent
    assert "shaped on" in h.metric and h.at == "2 rows; unseen datasets: 30.0% on 1 rows"
    h = llm_scale_error(AnalysisInputs(scale.iloc[:3]))
    assert h.at == "2 rows; unseen datasets: none in the repository yet"
    claims = pd.DataFrame({"claim": ["slope (needs r >= 4)", "stable only", "wider is better"],
                           "kind": ["direction", "direction", "size"],
                           "measured": [None, 0.1, 0.25], "ci_low": [None, 0.0, -0.1],
                           "ci_high": [None, 0.2, 0.6], "n": [0, 3, 3],
                           "unit": ["nats"] * 3,
                           "verdict": ["not tested", "not tested", "inconclusive"],
                           "size_tested": [False, False, False],
                           "size_verdict": [None, None, "not expected"]})
    h = first_claim(AnalysisInputs(train, claims=claims))  # the first claim the run tested
    assert h.metric == "wider is better" and h.ci == (-0.1, 0.6)
    assert h.text() == "0.25 nats (inconclusive; size not tested)"
    assert first_claim(AnalysisInputs(train, claims=claims.iloc[:2])) is None


def test_a_side_by_side_cell_with_another_metric_says_its_own():
    """The report's machines table: an MFU over a GPU's datasheet peak, in a row headed by the
    CPUs' measured peak, names its own denominator in its cell."""
    from suite.machine_results import MachineResults
    from suite.report.render import _headline_row

    cpu, gpu, none = (MachineResults(f"results/published/{n}", True)
                      for n in ("cpu", "gpu", "none"))
    mfu = {"text": "50%", "at": "gpt"}
    row = _headline_row("llm_mfu", [cpu, gpu, none], {
        (cpu.path, "llm_mfu"): {"headline": {**mfu, "metric": "MFU (of the measured peak)"}},
        (gpu.path, "llm_mfu"): {"headline": {**mfu, "metric": "MFU (of the datasheet peak)"}}})
    assert row["metric"] == "MFU (of the measured peak)"
    assert [c and c["own_metric"] for c in row["cells"]] == [False, True, None]


def test_readme_block_is_replaced_between_its_markers(tmp_path):
    folder = tmp_path / "results" / "published" / "box"
    (folder / "bert_varlen").mkdir(parents=True)
    (folder / "peak.json").write_text(json.dumps({
        "schema_version": 2, "threads": 2, "device_type": "cpu",
        "cpu": {"model_name": "Test CPU", "flags": ["avx2", "fma"]},
        "peaks": {"fp32": {"measured": {"library": "onednn", "flops_per_s": 2.5e11}}}}))
    (folder / "bert_varlen" / "analysis.json").write_text(json.dumps({
        "headline": {"metric": "a | b", "text": "2.00x", "ci": [1.9, 2.1], "at": "b16 x 256"},
        "provenance": {"env": {"cpu_cores": 2, "git": {"commit": "abcdef1234567890"},
                               "packages": {"torch": "2.13.0"}}}}))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold\n{END}\noutro\n")
    assert update_readme(readme, [folder]) is True
    block = readme_block(readme)
    assert block.startswith("Machine `box`: Test CPU, 2 cores, AVX2, FMA; 2 threads; "
                            "fp32 matmul peak 250 GFLOP/s (onednn, measured)")
    assert "commit abcdef123456." in block
    assert r"| bert_varlen | a \| b: **2.00x** [1.9, 2.1] | b16 x 256 |" in block
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("outro\n")
    assert update_readme(readme, [folder]) is False
    # machines in order of their names, not of a shell's glob ("box-quick/" sorts before "box/")
    quick = folder.with_name("box-quick")
    shutil.copytree(folder, quick)
    assert update_readme(readme, [quick, folder]) is True
    block = readme_block(readme)
    assert block.index("Machine `box`") < block.index("Machine `box-quick`")


def test_readme_figures_are_not_git_ignored():
    """The published figures the README shows are committed (results/published/.gitignore)."""
    paths = [f"results/published/any-box/figures/{name}.svg" for name in README_FIGURES]
    out = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths],
                         capture_output=True, text=True)
    assert out.stdout == "", out.stdout
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index",
                              "results/published/any-box/bert_varlen/table.csv",
                              "results/published/any-box/figures/bert_fixed.svg"],
                             capture_output=True, text=True)
    assert len(ignored.stdout.splitlines()) == 2
