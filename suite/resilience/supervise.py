"""One resilience run under the real supervisor: torchrun's elastic agent restarting the worker
group (``--max-restarts``) after a rank dies, hangs past the collective timeout or stops on a
non-finite loss.

``launch`` starts ``torchrun ... -m suite.resilience.worker`` (through ``suite.resilience.elastic``:
torchrun whose restarts honour its shutdown timeout) in a session of its own, reads
the launcher's output line by line as it comes (each line stamped with the wall clock when it
arrived: the agent's "failed (exitcode ...)" line is when the supervisor knew), waits for it
within a deadline, and afterwards looks for anything the run left behind: a process of the run
still alive (found by a tag in its environment, then killed) or an unfinished checkpoint write.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.resilience import elastic

TAG = "SEEDBENCH_RESILIENCE_RUN"  # in every process of a run's environment
WORKER = "suite.resilience.worker"
# torchrun's agent, when it sees a worker exit non-zero or die (torch.distributed.elastic's
# multiprocessing api): "failed (exitcode: -9) local_rank: 1 (pid: ...)"
AGENT_SAW_FAILURE = re.compile(r"failed \(exitcode: (-?\d+)\)")


@dataclass
class Launch:
    code: int
    started: float  # wall clock
    ended: float
    lines: list[tuple[float, str]] = field(default_factory=list)  # (arrived, text)
    leftovers: list[str] = field(default_factory=list)
    timed_out: bool = False

    def agent_failures(self) -> list[tuple[float, int]]:
        """(when the line arrived, exit code) of each worker failure the agent reported."""
        return [(t, int(m.group(1))) for t, line in self.lines
                if (m := AGENT_SAW_FAILURE.search(line))]

    def tail(self, n: int = 12) -> str:
        return "\n".join(line for _, line in self.lines[-n:])


def torchrun(spec: dict[str, Any], events: Path, nprocs: int, max_restarts: int,
             python: str = sys.executable) -> list[str]:
    return [python, "-m", "suite.resilience.elastic", "--standalone", "--nproc-per-node",
            str(nprocs), "--max-restarts", str(max_restarts), "--monitor-interval", "0.1",
            "-m", WORKER, "--spec", json.dumps(spec), "--events", str(events)]


def launch(spec: dict[str, Any], events: Path, nprocs: int, max_restarts: int,
           timeout_s: float, log=None, shutdown_timeout_s: int = 30) -> Launch:
    """Run one job to its end (or ``timeout_s``), its output stamped and passed to ``log``;
    ``shutdown_timeout_s``: the agent's grace between SIGTERM and SIGKILL for a failed group."""
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG: tag, "PYTHONUNBUFFERED": "1",
           elastic.ENV: str(shutdown_timeout_s)}
    started = time.time()
    proc = subprocess.Popen(torchrun(spec, events, nprocs, max_restarts), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    run = Launch(code=0, started=started, ended=started)

    def pump() -> None:
        for line in proc.stdout:
            run.lines.append((time.time(), line.rstrip("\n")))
            if log is not None:
                log(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        run.code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        run.timed_out, run.code = True, 124
    finally:
        if run.timed_out or proc.poll() is None:
            _kill_session(proc.pid)
            proc.wait()
        reader.join(timeout=5)
    run.ended = time.time()
    run.leftovers = kill_tagged(tag)
    ckpt = Path(spec.get("ckpt", {}).get("dir", events / "ckpt"))
    run.leftovers += [f"unfinished checkpoint write {p}" for p in sorted(ckpt.glob("*.tmp"))]
    return run


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_tagged(tag: str) -> list[str]:
    """Processes still alive with ``TAG=tag`` in their environment: described, then killed
    (a stopped one too: SIGKILL needs no cooperation)."""
    import psutil

    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.pid == os.getpid() or p.environ().get(TAG) != tag:
                continue
            found.append(f"pid {p.pid} ({p.info['status']}): "
                         f"{' '.join(p.info['cmdline'] or [])[:160]}")
            p.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def read_events(events: Path) -> list[dict[str, Any]]:
    """Every rank's events, in time order."""
    out = []
    for path in sorted(events.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return sorted(out, key=lambda e: e["t"])
