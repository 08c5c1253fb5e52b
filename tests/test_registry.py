"""The experiment registry: every spec resolves, a new experiment needs nothing but its own
code, and the packages' imports point one way (no cycles)."""

import ast
import json
import math
import re
import time
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pandas as pd
import pytest

from suite.analysis.figure_io import FigureData, plt, save_figure
from suite.cli import main
from suite.experiments import registry
from suite.experiments.registry import ExperimentSpec
from suite.records import Record, Status, new_record, outcome, read_record
from suite.report.columns import LAYOUTS
from suite.measure.stats import summarize

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", registry.names())
def test_every_spec_resolves(name):
    spec = registry.get(name)
    for ref in (spec.figure, spec.summary, spec.claims):
        if ref:
            assert callable(registry.load(ref)), ref
    assert spec.columns in LAYOUTS
    for path in spec.paper_paths().values():
        assert (ROOT / path).is_file(), path
    assert set(spec.reads_tables) <= set(registry.names())
    assert re.fullmatch(registry.pattern(), name)
    assert re.fullmatch(registry.pattern(spec.family), name)


def test_patterns_match_exactly_one_family():
    assert not re.fullmatch(registry.pattern("llm"), "bert_varlen")
    assert not re.fullmatch(registry.pattern(), "bert_varlen_x")
    assert registry.names("pretrain") == ["vwn_scaling", "pma_merging"]


@pytest.mark.parametrize("args, kwargs, match", [
    (("x_y", "t", "gpu"), {"figure": "m:f"}, "family='gpu' is not one of"),
    (("x_y", "t", "bert"), {"figure": "m.f", "runner": "m:f"}, "is not 'module:function'"),
    (("Bad", "t", "bert"), {"figure": "m:f", "runner": "m:f"}, "experiment name 'Bad'"),
    (("x_y", "t", "bert"), {"figure": "m:f"}, "x_y: the bert family needs a runner"),
    (("x_y", "t", "llm"), {"figure": "m:f", "runner": "m:f"}, "the llm family launches its runs"),
    (("x_y", "t", "pretrain"), {"figure": "m:f", "runner": "m:f"},
     "table builder is for the .*pretrain.*serving.* families only"),
])
def test_bad_specs_are_refused(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ExperimentSpec(*args, **kwargs)


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.get("bert_varlen"))
    with pytest.raises(KeyError, match="unknown experiment 'bert_nope'; registered"):
        registry.get("bert_nope")


# ---- a toy experiment, added the way the README says: its spec, figure and summary here

def toy_figure(data: FigureData, out: Path) -> list[Path]:
    fig, ax = plt.subplots()
    ax.bar(data.table.system, data.table.median_ms)
    ax.set_title(f"toy: {len(data.table)} rows, paper rows {len(data.paper['numbers'])}")
    return save_figure(fig, out)


def toy_runner(cfg, experiment, subject, system, batch_size, max_seq_len, peak) -> Record:
    """Times summing ``batch_size * max_seq_len`` numbers ("a" in Python, "b" with math.fsum)."""
    point = {"batch_size": batch_size, "max_seq_len": max_seq_len, "subject": subject,
             "distribution": cfg.distribution, "dtype": cfg.dtype}
    record = new_record(experiment, system, point, cfg.to_dict())
    with outcome(record):
        values = [float(i) for i in range(batch_size * max_seq_len)]
        total = {"a": sum, "b": math.fsum}[system]
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            total(values)
            samples.append(time.perf_counter() - start)
        record.timing = {"samples": samples, "stats": summarize(samples)}
        record.status = Status.OK
    return record


def toy_summary(inputs) -> str:
    fastest = inputs.table.sort_values("median_ms").iloc[0]
    return f"toy summary: {fastest.system} is fastest at {fastest.median_ms:.1f} ms"


TOY = ExperimentSpec("bert_toy", "a toy experiment added by a test", "bert",
                     runner="test_registry:toy_runner", figure="test_registry:toy_figure",
                     summary="test_registry:toy_summary",
                     paper={"numbers": "bytetransformer_abstract_claims.csv"},
                     note="toy note: nothing outside this test names it")


def test_a_new_experiment_reaches_every_stage(tmp_path, monkeypatch, capsys, tiny_cfg):
    """run -> table -> figure -> analysis -> report, through the CLI as the rules call it."""
    monkeypatch.setitem(registry.SPECS, TOY.name, TOY)
    monkeypatch.chdir(ROOT)  # paper paths are relative to the checkout, as in the workflow
    section = json.dumps(tiny_cfg.to_dict())
    records = [tmp_path / f"{system}.json" for system in ("a", "b")]
    for system, out in zip(("a", "b"), records):
        assert main(["run", "bert_toy", "--system", system, "--batch-size", "4",
                     "--max-seq-len", "2000", "--section-json", section, "--out", str(out),
                     "--in-process"]) == 0
        assert read_record(out).status is Status.OK
    table = tmp_path / "table.csv"
    assert main(["table", *map(str, records), "--padded-baseline", "a", "--out", str(table)]) == 0
    paper = ["--paper", f"numbers={TOY.paper_paths()['numbers']}"]

    assert re.fullmatch(registry.pattern(), "bert_toy") and "bert_toy" in registry.names("bert")
    assert main(["experiments"]) == 0
    assert "bert_toy" in capsys.readouterr().out
    assert main(["plot", "bert_toy", "--table", str(table), *paper,
                 "--out", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig.svg").stat().st_size > 1000
    assert main(["analyze", "bert_toy", "--table", str(table), *paper,
                 "--records", *map(str, records), "--out", str(tmp_path / "analysis.json")]) == 0
    analysis = json.loads((tmp_path / "analysis.json").read_text())
    fastest = pd.read_csv(table).sort_values("median_ms").iloc[0]
    assert analysis["summary"] == (f"toy summary: {fastest.system} is fastest at "
                                   f"{fastest.median_ms:.1f} ms")
    assert main(["report", "--section", "results/toy", "bert_toy", str(table),
                 str(tmp_path / "fig.svg"), str(tmp_path / "analysis.json"),
                 "--out", str(tmp_path / "index.html")]) == 0
    html = (tmp_path / "index.html").read_text()
    assert "a toy experiment added by a test" in html and "toy note" in html
    assert analysis["summary"] in html
    # a paper CSV under a role the spec does not declare is refused, naming what is declared
    assert main(["plot", "bert_toy", "--table", str(table), "--paper", "other=x.csv",
                 "--out", str(tmp_path / "fig2")]) == 2
    assert "paper role(s) ['other'] are not declared; its spec declares ['numbers']" in \
        capsys.readouterr().err


# ---- layers point one way

def _imports(package_dirs: list[Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (at any level, lazy and TYPE_CHECKING ones
    included: a cycle through a function-level import is still a cycle of the design)."""
    modules = {}
    for base in package_dirs:
        for path in base.rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(
                ".__init__")
            modules[name] = path
    graph = {}
    for name, path in modules.items():
        deps = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    deps.add(target)
        graph[name] = deps
    return graph


def test_no_import_cycles_in_suite_and_reference_impl():
    graph = _imports([ROOT / "suite", ROOT / "reference_impl"])
    assert "suite.analysis.plots" in graph and len(graph) > 40
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"import cycle: {' -> '.join(e.args[1])}")


def test_reference_impl_imports_nothing_from_suite():
    graph = _imports([ROOT / "suite", ROOT / "reference_impl"])
    leaks = {m: sorted(d for d in deps if d.startswith("suite"))
             for m, deps in graph.items() if m.startswith("reference_impl")}
    assert not {m: d for m, d in leaks.items() if d}
