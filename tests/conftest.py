import os
import shutil
import sys
import time
from pathlib import Path

import torch

# Triton kernels run on CPU tensors through the interpreter; it must be on before any kernel
# module is imported (the decorator picks interpreted or compiled at import).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from suite.config import BertVarlenConfig

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv's snakemake, torchrun, deepspeed

# Longest first, so that pytest-xdist (make test) does not start the end-to-end workflow last
# while the other worker idles: the markers of pyproject.toml, in this order, then the rest.
FIRST = ("slow", "cluster", "faults")


def pytest_collection_modifyitems(config, items):
    """Order the tests for pytest-xdist and keep its workers out of each other's way:

    - ``cluster`` tests share one local SLURM and the network namespaces they create: one
      worker runs them all (``--dist loadgroup``);
    - ``serial`` tests judge the machine's load while they time; beside another worker they
      would see its processes. Under xdist they are skipped with that reason (make test
      deselects them there and runs them alone afterwards)."""
    def rank(item):
        return next((i for i, m in enumerate(FIRST) if item.get_closest_marker(m)), len(FIRST))

    items.sort(key=rank)  # stable: file order within each rank
    parallel = hasattr(config, "workerinput")  # this process is an xdist worker
    for item in items:
        if item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.xdist_group("cluster"))
        if parallel and item.get_closest_marker("serial"):
            item.add_marker(pytest.mark.skip(
                reason="times against the machine's load: run it without -n (make test runs "
                       "the serial tests alone after the parallel ones)"))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny GEMMs gain nothing from threads; on a loaded 2-core machine they only slow down.
    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY_MODEL = {"layers": 2, "hidden": 32, "heads": 4, "intermediate": 64, "vocab_size": 100}


@pytest.fixture
def tiny_cfg() -> BertVarlenConfig:
    """A BERT small enough that a whole point runs in about a second."""
    return BertVarlenConfig.from_dict({
        "model": TINY_MODEL, "batch_sizes": [3], "max_seq_lens": [16],
        "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 0.0}, "device": "cpu",
        "threads": 1,
    })


def assert_token_types_default_to_zero(model, batch) -> None:
    """No token types means all zeros, and the batch's sentence-pair types reach the
    embeddings (the output changes)."""
    with torch.inference_mode():
        a = model(batch.input_ids, batch.attention_mask)
        b = model(batch.input_ids, batch.attention_mask, torch.zeros_like(batch.input_ids))
        c = model(batch.input_ids, batch.attention_mask, batch.token_type_ids)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def count_onednn_calls(monkeypatch, module) -> dict[str, int]:
    """Spy on ``module.dense``: counts the linear layers that took the oneDNN path (those
    given a packed-weight cache)."""
    calls = {"onednn": 0}
    real = module.dense

    def spy(layer, x, cache, name, **kw):
        calls["onednn"] += cache is not None
        return real(layer, x, cache, name, **kw)

    monkeypatch.setattr(module, "dense", spy)
    return calls


def report_section(tmp_path, name, table, *, records=(), curves=None, claims=None, peak=None,
                   tables=None, machine="results/test-machine"):
    """One experiment through the stages after its table, as the workflow runs them: the
    figure and the analysis its spec names (with the paper CSVs it declares), written to
    files; returns the report ``Section``."""
    import json
    from pathlib import Path

    import pandas as pd

    from suite.analysis.analyze import AnalysisInputs, analyze
    from suite.analysis.figure_io import FigureData
    from suite.analysis.tidy import read_table
    from suite.experiments import registry
    from suite.report.render import Section

    root = Path(__file__).resolve().parent.parent
    spec = registry.get(name)
    csv = tmp_path / f"{name}.table.csv"
    table.to_csv(csv, index=False)
    table = read_table(csv)  # as the next stage sees it
    paper = {role: pd.read_csv(root / path) for role, path in spec.paper_paths().items()}
    (svg,) = registry.load(spec.figure)(FigureData(table, paper, curves, peak), tmp_path / name)
    analysis = analyze(spec, AnalysisInputs(table, paper, tables or {}, claims, list(records)))
    out = tmp_path / f"{name}.analysis.json"
    out.write_text(json.dumps(analysis))
    return Section(machine, name, csv, svg, out)


def copy_workflow(dest: Path, config: dict | None = None, name: str = "config.yaml") -> Path:
    """A runnable copy of the workflow in ``dest`` (the Snakefile, workflows/ and the paper
    CSVs the analyses read), with ``config`` written to ``dest / name``; returns ``dest``."""
    import yaml

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "Snakefile", dest / "Snakefile")
    shutil.copytree(ROOT / "workflows", dest / "workflows")
    shutil.copytree(ROOT / "results" / "paper", dest / "results" / "paper")
    if config is not None:
        (dest / name).write_text(yaml.safe_dump(config))
    return dest


def job_env(**extra: str) -> dict[str, str]:
    """This process's environment for the jobs a test starts: the venv's tools first on PATH,
    this checkout importable, and no SLURM allocation inherited (a test may run inside one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env['PATH']}", "PYTHONPATH": str(ROOT), **extra}


def wait_for_a_quiet_machine(limit_s: float = 30.0) -> None:
    """For the serial tests that compare their own work with a machine otherwise idle: wait
    until the work earlier tests left behind (a warm server still importing, a job's last
    seconds) is over. (The parallel tests end just before them: on CI a python process left
    from those used 0.78 CPUs during the fault test's quiet run.)"""
    from suite.measure.load import watched

    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        with watched() as w:
            time.sleep(0.5)
        if w["other_cpus"] < 0.1:
            return
    pytest.fail(f"the machine never went quiet in {limit_s:g} s: {w}")


class Clock:
    """A clock a test moves by hand (``clock.t = ...``)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def warm_servers(key: str) -> list[int]:
    """The servers of ``key`` (their forked children carry the same command line)."""
    pids = {}
    for entry in os.listdir("/proc"):
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"suite.launch.warm" in cmdline and key.encode() in cmdline:
            pids[int(entry)] = ppid
    return [pid for pid, ppid in pids.items() if ppid not in pids]
