"""Layers point down: planning the workflow (config, job plans, registries) needs no torch.

Each check runs in a fresh interpreter whose path starts with a fake ``torch`` package that
refuses to import, so any module on the planning path that imports torch (directly or through
another module) fails the check.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, copy_workflow
PLANNING = ("suite.config", "suite.experiments.plan", "suite.experiments.llm_plan",
            "suite.experiments.pretrain_plan")


@pytest.fixture
def no_torch_env(tmp_path):
    """The environment of a process where ``import torch`` raises ImportError."""
    blocker = tmp_path / "blocker" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("torch blocked")\n')
    path = os.pathsep.join([str(blocker.parent), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path.rstrip(os.pathsep)}


def _run(cmd, env, cwd):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_blocker_blocks(no_torch_env):
    proc = _run([sys.executable, "-c", "import torch"], no_torch_env, ROOT)
    assert proc.returncode != 0 and "torch blocked" in proc.stderr


def test_planning_modules_import_without_torch(no_torch_env):
    code = (f"import sys, {', '.join(PLANNING)}, suite.trainers, suite.baselines.registry\n"
            "from suite.baselines.registry import baselines\n"
            "from suite.trainers import registry\n"
            "assert 'torch-eager' in baselines.names() and 'single' in registry.names()\n"
            "from suite.cli import build_parser; build_parser()  # every subcommand's parser\n"
            "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n")
    proc = _run([sys.executable, "-c", code], no_torch_env, ROOT)
    assert proc.returncode == 0, proc.stderr


def test_workflow_plans_without_torch(no_torch_env, tmp_path):
    """``snakemake -n`` on the full CPU sweep: the whole plan, from a copy of the workflow."""
    work = copy_workflow(tmp_path / "work")
    snakemake = Path(sys.executable).with_name("snakemake")
    cmd = [str(snakemake) if snakemake.exists() else "snakemake", "-n", "--cores", "1",
           "--configfile", "workflows/config/cpu-sweep.yaml"]
    proc = _run(cmd, no_torch_env, work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
