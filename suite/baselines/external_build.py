"""Where external programs (``suite.baselines.external``) are built: one folder per program
under ``BUILD_ROOT``, finished when its ``STAMP`` file is written. Torch-free: the workflow
plans the build jobs from it."""

from __future__ import annotations

from pathlib import Path

BUILD_ROOT = Path("build") / "external"
STAMP = "seedbench-build.json"
