"""Starting jobs: every child process the suite launches is started here.

- ``run_isolated`` runs a job in a child process so that a crash, a hang or running out of memory
  in one baseline or engine becomes a ``failed`` record instead of taking the workflow (or other
  jobs) down;
- ``command`` builds the launcher line (torchrun, DeepSpeed's launcher, or one process) that
  starts the ranks of the LLM training run, ``suite.experiments.llm_train``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from suite.launch import warm as warm_start
from suite.launch.ports import free_port
from suite.records import Record, Status, clip, read_record, write_record
from suite.trainers import registry as trainers
from suite.trainers.config import LAUNCHERS

if TYPE_CHECKING:
    from suite.trainers.base import Trainer

MODULE = "suite.experiments.llm_train"  # what every rank runs
TAIL_LINES = 15
TAIL_LINE_CHARS = 500  # each kept line at most (a process may print one enormous line)


def run_isolated(cmd: list[str], out: Path, failed: Callable[[str], Record] | None,
                 timeout_s: float, record_wait_s: float = 0.0,
                 env: dict[str, str] | None = None, warm: bool = False) -> int:
    """Run ``cmd``, which must write the record ``out``; if it dies or hangs without writing it,
    write ``failed(reason)`` there instead. The child's stderr is passed through.

    A failed record the job wrote itself before a non-zero exit is kept: it names the cause
    (an LLM run's rank 0 exits 1 after recording a failure, so that torchrun takes its failure
    path instead of waiting at its exit barrier for a node that died).

    ``failed=None``: this supervisor does not own the record (a node other than node 0 of a
    multi-node run): nothing is written, the exit code is returned. ``record_wait_s``: how long
    to wait after a clean exit for a record that another node's rank 0 writes (multi-node: the
    rendezvous, not the node rank, decides where global rank 0 runs). ``env``: the child's
    environment (default: this process's). ``warm``: a ``python -m``/``-c`` child of this
    interpreter is forked by a server that has done the imports (``suite.launch.warm``) when
    one can be had; any other command (a launcher) starts cold."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    if failed is not None:  # so that a record on disk afterwards is this run's
        out.unlink(missing_ok=True)
    # Its own process group: a launcher's workers (torchrun) are killed with it on a timeout.
    proc = (warm_start.popen(cmd, env) if warm else None) or subprocess.Popen(
        cmd, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True, env=env)
    reader = threading.Thread(target=_pump, args=(proc.stderr, tail), daemon=True)
    reader.start()
    try:
        with _terminate_raises():
            code = proc.wait(timeout=timeout_s)
        reason = f"process exited with code {code}"
        if code < 0:
            reason = f"process killed by signal {-code} (out of memory, or a crash)"
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        code, reason = 124, f"timed out after {timeout_s:g} s"
    except BaseException:
        # Ctrl-C, or Snakemake / SLURM stopping this job: the child is in a session of its own
        # and would go on timing beside the next run and write its record into it.
        _kill_group(proc)
        raise
    reader.join(timeout=5)
    deadline = time.monotonic() + record_wait_s
    while code == 0 and not out.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if failed is None or (out.exists() and (code == 0 or _recorded_failure(out))):
        return code
    detail = "\n".join(tail)
    write_record(failed(f"{reason}; last output:\n{detail}" if detail else reason), out)
    return code


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """SIGTERM raises SystemExit while the body runs (Python's default ends the process without
    unwinding, so nothing would stop the child); outside the main thread signals cannot be
    handled and this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _recorded_failure(out: Path) -> bool:
    """Whether ``out`` is a whole record of a failure (what a job writes before exiting 1)."""
    try:
        return read_record(out).status is Status.FAILED
    except (OSError, ValueError, KeyError, TypeError):  # half-written or not a record
        return False


def _pump(stream, tail: collections.deque) -> None:
    for line in stream:
        sys.stderr.write(line)
        tail.append(clip(line.rstrip("\n"), TAIL_LINE_CHARS))


def _script(name: str, python: str) -> str | None:
    """A console script next to the interpreter (the venv's), else on PATH."""
    sibling = Path(python).with_name(name)
    return str(sibling) if sibling.exists() else shutil.which(name)


def command(trainer: str | Trainer, nprocs: int, args: Sequence[str], *, nnodes: int = 1,
            node_rank: int | None = None, rdzv_endpoint: str | None = None,
            rdzv_id: str = "seedbench", hostfile: str | None = None,
            launcher: str | None = None, python: str = sys.executable,
            local_addr: str | None = None, join_timeout_s: float | None = None,
            warm: bool = False) -> list[str]:
    """The command line that starts ``nprocs`` ranks per node of the training run (``MODULE``)
    with ``args``. ``warm``: each rank a child forked by the warm server (``suite.launch.warm``:
    the launcher starts ``python -m suite.launch.warm exec -m MODULE ARGS``, which runs the
    module itself when no warm start can be had).

    With ``warm`` the launcher itself is ``python -m torch.distributed.run`` (or
    ``deepspeed.launcher.runner``) so that ``run_isolated(warm=True)`` forks it warm too: a cold
    launcher spends its first seconds importing torch (2-3 s of a 5 s DDP point on a 2-core
    EPYC); the console scripts ``torchrun`` and ``deepspeed`` are those same modules' ``main``.

    ``launcher`` defaults to the engine's own (``Trainer.launcher``: torchrun for every
    multi-process engine), or DeepSpeed's where a ``hostfile`` is given (the launcher that
    reads one):

    - ``single``: ``python -m suite.experiments.llm_train ARGS`` (nprocs 1, one node).
    - ``torchrun``: ``torchrun --standalone --nproc-per-node N -m ...`` on one node. Multi-node:
      ``--nnodes M --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id ID
      [--node-rank R]``, the same command on every node; ``rdzv_endpoint`` is a host:port every
      node reaches (usually node 0), ``node_rank`` may be left to the rendezvous (c10d ignores
      it: ranks follow the sorted node addresses). ``local_addr``: this node's address as the
      others reach it (torchrun's ``--local-addr``; default: its hostname, which must resolve
      on every node). ``join_timeout_s``: how long the rendezvous waits for every node
      (``--rdzv-conf join_timeout=``, torchrun's default 600 s).
    - ``deepspeed``: ``deepspeed --num_gpus N --num_nodes M --no_local_rank --module ...``;
      one node adds ``--master_port`` a free port (as torchrun's ``--standalone`` picks one);
      multi-node adds ``--hostfile H --master_addr HOST
      --master_port PORT`` (from ``rdzv_endpoint``), and DeepSpeed's runner starts the other
      nodes itself over ssh, so this command runs on node 0 only. ``--no_local_rank``: the
      rank comes from the environment, not a ``--local_rank`` argument. Tested on CPU too
      (gloo; ``--num_gpus`` then just counts processes). Every multi-process engine runs
      under either launcher: they only need the process group, which the run builds from
      either launcher's environment.
    """
    engine = trainers.create(trainer) if isinstance(trainer, str) else trainer
    for label, value in (("nprocs", nprocs), ("nnodes", nnodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label}={value!r} must be a positive int")
    if launcher is None:
        launcher = "deepspeed" if hostfile and engine.launcher != "single" else engine.launcher
    args = [str(a) for a in args]
    module = [warm_start.SELF, "exec", "-m", MODULE] if warm else [MODULE]
    if (launcher == "single") != (engine.launcher == "single"):
        raise ValueError(f"trainer {engine.name!r} (launcher {engine.launcher!r}) cannot run "
                         f"under launcher={launcher!r}")
    if launcher == "single":
        if nprocs != 1 or nnodes != 1:
            raise ValueError(f"trainer {engine.name!r} runs one process; nprocs={nprocs}, "
                             f"nnodes={nnodes} (use ddp, fsdp2 or zero* for several)")
        return [python, "-m", MODULE, *args]  # run_isolated(warm=) forks it
    if nnodes > 1 and not rdzv_endpoint:
        raise ValueError(f"nnodes={nnodes} needs rdzv_endpoint='HOST:PORT' (a host every node "
                         f"reaches, e.g. node 0)")
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher={launcher!r} is not one of {list(LAUNCHERS)}")
    if launcher == "deepspeed":
        cmd = _deepspeed(python, nprocs, nnodes, hostfile, rdzv_endpoint, warm)
        return [*cmd, "--no_local_rank", "--module", *module, *args]
    cmd = _torchrun(python, nprocs, nnodes, node_rank, rdzv_endpoint, rdzv_id, local_addr,
                    join_timeout_s, warm)
    return [*cmd, "-m", *module, *args]


def _launcher(script: str, module: str, python: str, warm: bool) -> list[str] | None:
    """How to start a launcher: ``python -m module`` when it is to be forked warm, else its
    console script (the venv's, else on PATH); None when that script is not installed."""
    found = _script(script, python)
    if found is None:
        return None
    return [python, "-m", module] if warm else [found]


def _deepspeed(python: str, nprocs: int, nnodes: int, hostfile: str | None,
               rdzv_endpoint: str | None, warm: bool) -> list[str]:
    ds = _launcher("deepspeed", "deepspeed.launcher.runner", python, warm)
    if ds is None:
        raise FileNotFoundError("the deepspeed launcher is not installed (pip install "
                                "deepspeed)")
    cmd = [*ds, "--num_gpus", str(nprocs), "--num_nodes", str(nnodes)]
    if nnodes == 1:  # its default 29500 would collide with any other run on this host
        return [*cmd, "--master_port", str(free_port())]
    if not hostfile:
        raise ValueError(f"deepspeed with nnodes={nnodes} needs a hostfile "
                         f"('host slots=N' per line)")
    host, _, port = rdzv_endpoint.rpartition(":")
    return [*cmd, "--hostfile", hostfile, "--master_addr", host, "--master_port", port]


def _torchrun(python: str, nprocs: int, nnodes: int, node_rank: int | None,
              rdzv_endpoint: str | None, rdzv_id: str, local_addr: str | None,
              join_timeout_s: float | None, warm: bool) -> list[str]:
    cmd = _launcher("torchrun", "torch.distributed.run", python, warm) \
        or [python, "-m", "torch.distributed.run"]
    if nnodes == 1 and not rdzv_endpoint:
        return [*cmd, "--standalone", "--nproc-per-node", str(nprocs)]
    cmd += ["--nnodes", str(nnodes), "--nproc-per-node", str(nprocs),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint, "--rdzv-id", rdzv_id]
    if node_rank is not None:
        cmd += ["--node-rank", str(node_rank)]
    if local_addr:
        cmd += ["--local-addr", local_addr]
    if join_timeout_s is not None:
        cmd += ["--rdzv-conf", f"join_timeout={max(1, int(join_timeout_s))}"]
    return cmd
