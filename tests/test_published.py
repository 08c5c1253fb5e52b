"""The published machines: the README names every one. That their records alone rebuild the
report, the README's block and its figures is checked on the full workflow run
(tests/test_workflow.py: test_published_records_alone_rebuild_the_report_and_the_readme)."""

from pathlib import Path

from suite.machine_results import discover
from suite.report.readme import readme_block

from conftest import ROOT

PUBLISHED = sorted(m.path for m in discover(ROOT / "results") if m.published)


def test_the_readme_names_every_published_machine():
    block = readme_block(ROOT / "README.md")
    assert PUBLISHED, "results/published/ holds no machine; the README shows published results"
    for path in PUBLISHED:
        assert f"Machine `{Path(path).name}`" in block
