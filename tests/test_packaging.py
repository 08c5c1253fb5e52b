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
