"""Run a job in a child process so that a crash, a hang or running out of memory in one baseline
becomes a ``failed`` record instead of taking the workflow (or other baselines) down."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from suite.records import Record, write_record

TAIL_LINES = 15


def run_isolated(cmd: list[str], out: Path, failed: Callable[[str], Record],
                 timeout_s: float) -> None:
    """Run ``cmd``, which must write the record ``out``; if it dies or hangs without writing it,
    write ``failed(reason)`` there instead. The child's stderr is passed through."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    # Its own process group: a launcher's workers (torchrun) are killed with it on a timeout.
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True)
    reader = threading.Thread(target=_pump, args=(proc.stderr, tail), daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout_s)
        reason = f"process exited with code {code}"
        if code < 0:
            reason = f"process killed by signal {-code} (out of memory, or a crash)"
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        code, reason = 124, f"timed out after {timeout_s:g} s"
    reader.join(timeout=5)
    if out.exists() and code == 0:
        return
    detail = "\n".join(tail)
    write_record(failed(f"{reason}; last output:\n{detail}" if detail else reason), out)


def _pump(stream, tail: collections.deque) -> None:
    for line in stream:
        sys.stderr.write(line)
        tail.append(line.rstrip("\n"))
