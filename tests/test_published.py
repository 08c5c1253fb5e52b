"""The published machines: their records alone rebuild the report (make report, nothing runs),
and the README's published block and committed figures are what that rebuild gives."""

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

from suite.machine_results import PUBLISHED_FILES, discover
from suite.report.readme import README_FIGURES, headlines_markdown, readme_block

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = sorted(m.path for m in discover(ROOT / "results") if m.published)


def test_the_readme_names_every_published_machine():
    block = readme_block(ROOT / "README.md")
    assert PUBLISHED, "results/published/ holds no machine; the README shows published results"
    for path in PUBLISHED:
        assert f"Machine `{Path(path).name}`" in block


@pytest.mark.slow
def test_published_records_rebuild_the_report_and_the_readme(tmp_path, monkeypatch):
    for item in ("Snakefile", "workflows"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    shutil.copytree(ROOT / "results" / "paper", tmp_path / "results" / "paper")
    for path in PUBLISHED:  # what is committed: records, step logs, peak.json, README figures
        src = Path(path)
        dest = tmp_path / src.relative_to(ROOT)
        for pattern in PUBLISHED_FILES:
            for f in src.glob(pattern):
                (dest / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, dest / f.relative_to(src))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    config = tmp_path / "report.yaml"
    config.write_text(json.dumps({"machine": "no-such-machine-here", "report_only": True}))
    start = time.perf_counter()
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        api.workflow(resource_settings=ResourceSettings(cores=2),
                     config_settings=ConfigSettings(configfiles=[config]),
                     snakefile=tmp_path / "Snakefile", workdir=tmp_path
                     ).dag().execute_workflow()
    elapsed = time.perf_counter() - start
    html = (tmp_path / "reports" / "index.html").read_text()
    blocks = []
    for path in PUBLISHED:
        rel = Path(path).relative_to(ROOT)
        assert f"{rel.name} (published)" in html
        blocks.append(headlines_markdown(rel))
        for name in README_FIGURES:  # committed figures are the rebuilt ones, byte for byte
            rebuilt = (tmp_path / rel / "figures" / f"{name}.svg").read_bytes()
            assert (Path(path) / "figures" / f"{name}.svg").read_bytes() == rebuilt, name
    assert readme_block(ROOT / "README.md") == "\n\n".join(blocks), (
        "README's published block is stale: make report, then "
        "seedbench headlines --update-readme README.md results/published/*/")
    print(json.dumps({"report_only_rebuild_s": round(elapsed, 1)}))
