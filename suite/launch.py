"""Starting jobs: every child process the suite launches is started here.

- ``run_isolated`` runs a job in a child process so that a crash, a hang or running out of memory
  in one baseline or engine becomes a ``failed`` record instead of taking the workflow (or other
  jobs) down;
- ``command`` builds the launcher line (torchrun, DeepSpeed's launcher, or one process) that
  starts the ranks of the LLM training run, ``suite.experiments.llm_train``.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from suite.records import Record, write_record
from suite.trainers import registry as trainers

if TYPE_CHECKING:
    from suite.trainers.base import Trainer

MODULE = "suite.experiments.llm_train"  # what every rank runs
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


def _script(name: str, python: str) -> str | None:
    """A console script next to the interpreter (the venv's), else on PATH."""
    sibling = Path(python).with_name(name)
    return str(sibling) if sibling.exists() else shutil.which(name)


def command(trainer: str | Trainer, nprocs: int, args: Sequence[str], *, nnodes: int = 1,
            node_rank: int | None = None, rdzv_endpoint: str | None = None,
            rdzv_id: str = "seedbench", hostfile: str | None = None,
            launcher: str | None = None, python: str = sys.executable) -> list[str]:
    """The command line that starts ``nprocs`` ranks per node of the training run (``MODULE``)
    with ``args``.

    ``launcher`` defaults to the engine's own (``Trainer.launcher``):

    - ``single``: ``python -m suite.experiments.llm_train ARGS`` (nprocs 1, one node).
    - ``torchrun``: ``torchrun --standalone --nproc-per-node N -m ...`` on one node. Multi-node:
      ``--nnodes M --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id ID
      [--node-rank R]``, the same command on every node; ``rdzv_endpoint`` is a host:port every
      node reaches (usually node 0), ``node_rank`` may be left to the rendezvous.
    - ``deepspeed`` (the ZeRO engines): ``deepspeed --num_gpus N --num_nodes M --no_local_rank
      --module ...``; multi-node adds ``--hostfile H --master_addr HOST --master_port PORT``
      (from ``rdzv_endpoint``), and DeepSpeed's runner starts the other nodes itself over ssh,
      so this command runs on node 0 only. ``--no_local_rank``: the rank comes from the
      environment, not a ``--local_rank`` argument. Tested on CPU too (gloo; ``--num_gpus``
      then just counts processes). ``launcher="torchrun"`` also works for the ZeRO engines:
      they only need the process group, which the run builds from either launcher's
      environment.
    """
    engine = trainers.create(trainer) if isinstance(trainer, str) else trainer
    for label, value in (("nprocs", nprocs), ("nnodes", nnodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label}={value!r} must be a positive int")
    launcher = launcher or engine.launcher
    args = [str(a) for a in args]
    if (launcher == "single") != (engine.launcher == "single"):
        raise ValueError(f"trainer {engine.name!r} (launcher {engine.launcher!r}) cannot run "
                         f"under launcher={launcher!r}")
    if launcher == "single":
        if nprocs != 1 or nnodes != 1:
            raise ValueError(f"trainer {engine.name!r} runs one process; nprocs={nprocs}, "
                             f"nnodes={nnodes} (use ddp, fsdp2 or zero* for several)")
        return [python, "-m", MODULE, *args]
    if nnodes > 1 and not rdzv_endpoint:
        raise ValueError(f"nnodes={nnodes} needs rdzv_endpoint='HOST:PORT' (a host every node "
                         f"reaches, e.g. node 0)")
    if launcher == "deepspeed":
        ds = _script("deepspeed", python)
        if ds is None:
            raise FileNotFoundError("the deepspeed launcher is not installed (pip install "
                                    "deepspeed)")
        cmd = [ds, "--num_gpus", str(nprocs), "--num_nodes", str(nnodes)]
        if nnodes > 1:
            if not hostfile:
                raise ValueError(f"deepspeed with nnodes={nnodes} needs a hostfile "
                                 f"('host slots=N' per line)")
            host, _, port = rdzv_endpoint.rpartition(":")
            cmd += ["--hostfile", hostfile, "--master_addr", host, "--master_port", port]
        return [*cmd, "--no_local_rank", "--module", MODULE, *args]
    if launcher != "torchrun":
        raise ValueError(f"launcher={launcher!r} is not one of ['torchrun', 'deepspeed', "
                         f"'single']")
    runner = _script("torchrun", python)
    cmd = [runner] if runner else [python, "-m", "torch.distributed.run"]
    if nnodes == 1 and not rdzv_endpoint:
        cmd += ["--standalone", "--nproc-per-node", str(nprocs)]
    else:
        cmd += ["--nnodes", str(nnodes), "--nproc-per-node", str(nprocs),
                "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", rdzv_id]
        if node_rank is not None:
            cmd += ["--node-rank", str(node_rank)]
    return [*cmd, "-m", MODULE, *args]
