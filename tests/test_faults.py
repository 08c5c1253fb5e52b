"""Faults injected for real, with what must follow asserted (marker ``faults``: ``pytest -m
faults`` runs only these; ``make test`` runs them too).

So far: the workflow killed outright mid-run, then started again the way ``make reproduce``
does (``workflows/unlock_stale.py``, then Snakemake).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from suite.records import Status, read_record

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
UNLOCK = ROOT / "workflows" / "unlock_stale.py"
pytestmark = pytest.mark.faults

CONFIG = {
    "machine": "faults",
    "peak": {"dtypes": ["fp32"], "sizes": [64], "repeats": 1},
    "bert_varlen": {
        "baselines": ["torch-eager", "reference", "torch-nested"],
        "model": {"layers": 1, "hidden": 32, "heads": 4, "intermediate": 64, "vocab_size": 100},
        "batch_sizes": [2], "max_seq_lens": [8, 16], "device": "cpu", "threads": 1,
        "timing": {"warmup": 1, "min_repeats": 3, "min_time_s": 0.0},
        **{k: {"enabled": False} for k in ("ablation", "mha", "fused_ops", "fixed_length",
                                            "variants")},
    },
    "llm": {"enabled": False}, "vwn": {"enabled": False}, "pma": {"enabled": False},
}


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT)}


def _snakemake() -> list[str]:
    """What `make reproduce` runs (Makefile: SNAKEMAKE)."""
    return [str(BIN / "snakemake"), "--profile", str(ROOT / "workflows/profiles/local"),
            "--configfile", "config.yaml"]


def _records(results: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in results.rglob("b*_l*.json")}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_workflow_killed_mid_run_resumes(sig, tmp_path):
    """SIGKILL (OOM killer, power loss) or SIGINT (Ctrl-C: the whole foreground group) to the
    workflow while it runs a point; then what `make reproduce` runs. A stale lock is dropped
    with a message, only the unfinished points run, every record parses and nothing finished is
    redone or lost."""
    for item in ("Snakefile", "workflows"):
        src = ROOT / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    shutil.copytree(ROOT / "results" / "paper", tmp_path / "results" / "paper")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    results = tmp_path / "results" / "faults"
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen([*_snakemake(), "--cores", "1"], cwd=tmp_path, env=_env(),
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(_records(results)) < 2 and first.poll() is None:
        time.sleep(0.2)
    assert first.poll() is None, "the workflow ended before it could be killed"
    assert len(_records(results)) >= 2, (tmp_path / "first.log").read_text()[-3000:]
    os.killpg(first.pid, sig)  # Snakemake and the job it is running
    first.wait(timeout=120)
    finished = _records(results)
    locked = (tmp_path / ".snakemake" / "locks").is_dir() and any(
        (tmp_path / ".snakemake" / "locks").iterdir())
    assert locked == (sig == signal.SIGKILL)  # Ctrl-C lets Snakemake clean up after itself

    if locked:  # what a user met before: Snakemake alone refuses the directory
        refused = subprocess.run([*_snakemake(), "--cores", "1"], cwd=tmp_path, env=_env(),
                                 capture_output=True, text=True, timeout=300)
        assert refused.returncode != 0 and "--unlock" in refused.stdout + refused.stderr

    # what `make reproduce` runs now
    unlock = subprocess.run([sys.executable, str(UNLOCK), *_snakemake()], cwd=tmp_path,
                            env=_env(), capture_output=True, text=True, timeout=300)
    assert unlock.returncode == 0, unlock.stderr
    assert ("stale lock" in unlock.stderr) == locked, unlock.stderr
    again = subprocess.run([*_snakemake(), "--cores", "1"], cwd=tmp_path, env=_env(),
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]

    after = _records(results)
    assert len(after) == 6  # 3 systems x 2 lengths: the unfinished ones ran
    # nothing finished was redone or lost: with one core one job runs at a time, and only the
    # job cut off may run again (its record can be on disk before Snakemake saw it end)
    redone = [p for p in finished if after[p] != finished[p]]
    assert len(redone) <= 1, redone
    for path in after:
        assert read_record(path).status == Status.OK, path
    assert (tmp_path / "reports" / "index.html").stat().st_size > 0


def test_a_lock_held_by_a_live_run_is_left_alone(tmp_path):
    (tmp_path / ".snakemake" / "locks").mkdir(parents=True)
    (tmp_path / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    fake = tmp_path / "snakemake"  # a process that looks like a Snakemake run working here
    fake.write_text("import time\ntime.sleep(60)\n")
    live = subprocess.Popen([sys.executable, str(fake)], cwd=tmp_path)
    try:
        time.sleep(0.5)
        held = subprocess.run([sys.executable, str(UNLOCK), "snakemake"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    finally:
        live.kill()
        live.wait()
    assert held.returncode == 1
    assert f"another Snakemake run (pid {live.pid})" in held.stderr
    assert (tmp_path / ".snakemake" / "locks" / "0.input.lock").exists()
