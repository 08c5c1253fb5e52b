"""A non-editable install works: what the suite reads at run time (the config schema, the
datasheet peaks, the report template) ships inside the wheel, and nothing reads the checkout."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_carries_its_run_time_files(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(ROOT)], check=True)
    wheel = next((tmp_path / "dist").glob("seedbench-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import suite.config, suite.peak, suite.report.render as r, pathlib, sys\n"
        "site = pathlib.Path(sys.argv[1]).resolve()\n"
        "for path in (suite.config.SCHEMA_PATH, suite.peak.DATASHEET_CSV, r.TEMPLATES):\n"
        "    assert site in pathlib.Path(path).resolve().parents and path.exists(), path\n"
        "cfg = suite.config.validate({})\n"
        "assert cfg['bert_varlen']['batch_sizes'], cfg\n"
        "assert suite.peak.datasheet_peak('NVIDIA A100-SXM4-80GB', 'bf16')\n")
    # run away from the checkout, the unpacked wheel first on the path
    proc = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_xdist_groups_hold_under_the_pinned_pytest(tmp_path):
    """make test relies on --dist loadgroup: the cluster tests share one local SLURM and the
    full workflow run is one module fixture. With pytest 9.2 and xdist 3.8 the groups are
    silently ignored (pytest-dev/pytest-xdist#1386); this fails if the pins let that back in."""
    (tmp_path / "test_grouped.py").write_text(
        "import os, pathlib, pytest\n"
        "def ran(name): pathlib.Path(name).write_text(os.environ['PYTEST_XDIST_WORKER'])\n"
        "grouped = pytest.mark.xdist_group('g')\n"
        "@grouped\ndef test_a(): ran('a')\n"
        "@grouped\ndef test_b(): ran('b')\n"
        "@grouped\ndef test_c(): ran('c')\n"
        "def test_d(): pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "-q", "test_grouped.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {(tmp_path / name).read_text() for name in "abc"}
    assert len(workers) == 1, f"the group ran on {sorted(workers)}"
