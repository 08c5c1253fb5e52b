"""Environment and provenance capture: which machine, which stack, which commit."""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from suite.launch.warm import process_start

# Distributions whose versions every record carries. Read from package metadata, never imported:
# importing tensorflow before triton crashes the process.
TRACKED_PACKAGES = ("seedbench", "torch", "triton", "numpy", "transformers", "tensorflow",
                    "deepspeed", "snakemake", "pandas", "scipy", "matplotlib")

REPO_ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def gpu_names() -> list[str]:
    """GPU names from nvidia-smi, without importing torch (the workflow calls this at parse)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine_slug() -> str:
    """A stable, readable name for the results folder: the GPU, else the CPU and core count."""
    gpus = gpu_names()
    name = f"{len(gpus)}x-{gpus[0]}" if gpus else f"{cpu_model()}-{usable_cores()}c"
    name = re.sub(r"\(r\)|\(tm\)|cpu|@.*?ghz", "", name.lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown"


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True,
                              text=True, timeout=20, check=True).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (subprocess.SubprocessError, OSError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def capture(torch_info: bool = True) -> dict[str, Any]:
    """Everything a reader needs to know where a number came from."""
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "machine": machine_slug(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model(),
        "cpu_cores": usable_cores(),
        "packages": package_versions(),
        "git": git_state(),
        # forked by suite.launch.warm after its imports, or a process started cold
        "process_start": process_start(),
    }
    if torch_info:
        import torch

        env["torch_threads"] = torch.get_num_threads()
        env["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = {"name": props.name, "count": torch.cuda.device_count(),
                          "capability": f"{props.major}.{props.minor}",
                          "memory_gib": round(props.total_memory / 2**30, 1),
                          "cuda": torch.version.cuda, "driver": _driver_version()}
    return env


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return out.splitlines()[0].strip()
    except (subprocess.SubprocessError, OSError, IndexError):
        return None
