"""Warm starts: a fork server that imports torch, transformers and scipy once, so that a point
job's supervised child starts in a fraction of a second instead of after ~5 s of imports.

Each point is still a process of its own, forked from the server: a crash, a hang or running out
of memory still ends only that point and becomes its ``failed`` record (``jobs.run_isolated``).
The imports are the only thing shared; nothing runs before the fork (the server refuses to serve
if importing started a Python thread; the BLAS pools numpy and scipy start at import are
fork-aware, and torch starts its pools at the first operation, in the child), so the child is
what a cold ``python -m suite.cli`` would be after its imports.

One server per (interpreter, working directory, environment, source of ``suite`` and
``reference_impl``, preloaded modules): another checkout, an edited source file or another
environment gets a server of its own. It listens on a Linux abstract socket (nothing on disk to
clean up) and exits after ``IDLE_S`` with no child. A client that cannot reach a server within
``START_TIMEOUT_S`` starts its child cold. Off with ``SEEDBENCH_WARM=0``, off outside Linux, and
off inside a SLURM job (its processes end with the job, so no later job could use the server).

Protocol (one connection per child): the client sends an 8-byte length with three file
descriptors (the child's stdin, stdout and stderr), then that many bytes of JSON (``mode`` -m or
-c, its ``target``, ``args``, ``env``, ``cwd``, resource ``limits``, ``umask``); the server
answers one JSON line ``{"pid": N}`` once forked, and one ``{"status": S}`` (a ``waitpid``
status) when the child has ended. A client that closes its connection early gets its child
killed. The child takes the caller's soft limits; the hard ones are part of the server's key
(a server started by the caller has them, and no process may raise its own).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import resource
import runpy
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from suite.workflow import source_digest

SELF = "suite.launch.warm"  # as -m runs it (as __main__, __name__ would not name it)
ENV_SWITCH = "SEEDBENCH_WARM"
# set in a forked child's environment to its own pid (its record says so): a process that
# inherited it (a warm launcher's ranks) is not itself warm, and may fork warm children
CHILD_MARK = "SEEDBENCH_WARM_CHILD"
IDLE_S = 300.0  # a run's derived jobs (one server) can be minutes apart
START_TIMEOUT_S = 90.0
FORK_TIMEOUT_S = 30.0
# what a BERT point's child imports before it measures anything (suite.experiments.bert_varlen
# pulls in torch, scipy.stats and the suite; the HF families are imported lazily by transformers)
# and what the derived rules' commands import (pandas, matplotlib, jinja2)
PRELOAD = ("torch", "scipy.stats", "pandas", "matplotlib.pyplot", "jinja2", "transformers",
           "transformers.models.bert.modeling_bert",
           "transformers.models.albert.modeling_albert",
           "transformers.models.distilbert.modeling_distilbert",
           "transformers.models.deberta_v2.modeling_deberta_v2", "suite.experiments.bert_varlen")
# variables that change from one call to the next without changing what an import does: a
# test's name, a shell's last command and terminal size, and what launchers give each rank
# (read when the rank joins its process group, after the fork)
VOLATILE_ENV = (CHILD_MARK, "PYTEST_CURRENT_TEST", "_", "OLDPWD", "COLUMNS", "LINES", "RANK",
                "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE",
                "TORCHELASTIC_ENABLE_FILE_TIMER", "TORCHELASTIC_TIMER_FILE",
                "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "PYTHONUNBUFFERED")
_SOURCES = [Path(__file__).resolve().parents[2] / p for p in ("suite", "reference_impl")]
_HEADER = struct.Struct("!Q")


def enabled() -> tuple[bool, str]:
    """Whether children may start warm here, and if not why."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return False, f"{ENV_SWITCH}=0"
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return False, "needs Linux (abstract sockets and pidfds)"
    if "SLURM_JOB_ID" in os.environ:
        return False, "inside a SLURM job, whose processes end with it"
    return True, ""


def is_warm_child() -> bool:
    """Whether this very process was forked by a warm server (not merely started by one)."""
    return os.environ.get(CHILD_MARK) == str(os.getpid())


def process_start() -> str:
    """How this process started, as records say it: ``warm fork`` or ``cold``."""
    return "warm fork" if is_warm_child() else "cold"


def server_key(env: dict[str, str]) -> str:
    """What a server's imports depend on; equal keys may share one server."""
    h = hashlib.sha256()
    stable = sorted((k, v) for k, v in env.items() if k not in VOLATILE_ENV)
    hard = sorted((name, limits[1]) for name, limits in _limits().items())
    sources = [source_digest.digest(root) for root in _SOURCES]
    for part in (sys.executable, os.getcwd(), json.dumps(stable), PRELOAD, hard, sources):
        h.update(repr(part).encode() + b"\0")
    return h.hexdigest()[:24]


def _address(key: str) -> str:
    return f"\0seedbench-warm-{os.getuid()}-{key}"


# ---- client -------------------------------------------------------------------------------------

class WarmProcess:
    """A child forked by the server, with the parts of ``subprocess.Popen`` that
    ``run_isolated`` uses: ``pid``, ``stderr`` (text), ``returncode`` and ``wait``."""

    def __init__(self, cmd: list[str], conn: socket.socket, pid: int, stderr_fd: int,
                 buffer: bytes) -> None:
        self.args, self.pid, self.returncode = cmd, pid, None
        self.stderr = os.fdopen(stderr_fd, "r", errors="replace") if stderr_fd >= 0 else None
        self._conn, self._buffer = conn, buffer

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._conn.settimeout(left)
            try:
                chunk = self._conn.recv(4096)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            if not chunk:  # the server died: the child died with it (PDEATHSIG)
                self._buffer += json.dumps({"status": signal.SIGKILL}).encode() + b"\n"
            self._buffer += chunk
        self.returncode = os.waitstatus_to_exitcode(json.loads(self._buffer)["status"])
        self._conn.close()
        return self.returncode

    def kill(self) -> None:
        """The server kills a child whose client has closed its connection."""
        self._conn.close()


def popen(cmd: list[str], env: dict[str, str] | None = None,
          stderr: int | None = None, stdout: int = 1) -> WarmProcess | None:
    """``cmd`` (``python -m module ...`` or ``python -c code ...`` of this interpreter) forked by
    a warm server, started here when none is running; None when warm starts are off, ``cmd`` is
    another program, or no server answered (the caller then starts the child cold). The child's
    stderr: a pipe read as ``.stderr`` (default), or the descriptor ``stderr``; its stdout: the
    descriptor ``stdout`` (default: this process's)."""
    if len(cmd) < 3 or cmd[0] != sys.executable or cmd[1] not in ("-m", "-c") \
            or not enabled()[0]:
        return None
    env = dict(os.environ if env is None else env)
    key = server_key(env)
    conn = _connect(key)
    fresh = conn is None  # a server started here answers once it has done its imports
    if fresh:
        conn = _start_and_connect(key, env)
    if conn is None:
        return None
    read_fd, write_fd = os.pipe() if stderr is None else (-1, os.dup(stderr))
    # a stuck server: closing kills whatever it forked
    conn.settimeout(START_TIMEOUT_S if fresh else FORK_TIMEOUT_S)
    try:
        payload = json.dumps({"mode": cmd[1], "target": cmd[2], "args": cmd[3:], "env": env,
                              "cwd": os.getcwd(), "limits": _limits(),
                              "umask": _umask()}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, stdout, write_fd])
        conn.sendall(payload)
        os.close(write_fd)
        write_fd = -1
        reply = b""
        while b"\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                raise ConnectionError("the server closed before forking")
            reply += chunk
        line, rest = reply.split(b"\n", 1)
        pid = json.loads(line)["pid"]
    except (OSError, ValueError, KeyError):
        conn.close()
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
        return None
    return WarmProcess(cmd, conn, pid, read_fd, rest)


def _limits() -> dict[str, tuple[int, int]]:
    """This process's resource limits (``ulimit``): a warm child gets them, as a child of this
    process would (the server's may differ)."""
    return {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource)
            if name.startswith("RLIMIT_") and name != "RLIMIT_NLIMITS"}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def forward(cmd: list[str]) -> int | None:
    """Run ``cmd`` as a warm child in place of this process: its streams are this process's,
    SIGTERM or Ctrl-C here kills it, and its end is this process's (the exit code, or death by
    the same signal). None when no warm start could be had, or this process is itself a warm
    child (forwarded here: it runs the command in place, never hands it on again); the caller
    then runs the command itself. A warm child may still ask for children of its own
    (``popen``): a supervisor forked warm starts its launcher warm."""
    if is_warm_child():
        return None
    # The handler is in place before the fork: a SIGTERM that landed before the child's pid is
    # known would otherwise kill this process and leave the child running.
    proc: WarmProcess | None = None
    pending: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if proc is None:
            pending.append(signum)
            return
        _kill(proc.pid)
        proc.wait()
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        proc = popen(cmd, stderr=2)
        if proc is not None:
            if pending:
                stop(pending[0], None)
            code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if proc is None:
        for signum in pending[:1]:  # stopped before any child: as the old handler would be
            os.kill(os.getpid(), signum)
        return None
    if code < 0:  # die as the child died (a shell then reports the same signal)
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _connect(key: str) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_address(key))
        return conn
    except OSError:
        conn.close()
        return None


def _start_and_connect(key: str, env: dict[str, str]) -> socket.socket | None:
    env = {k: v for k, v in env.items() if k != CHILD_MARK}  # the server is nobody's fork
    server = subprocess.Popen([sys.executable, "-m", SELF, key, str(IDLE_S)], env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        conn = _connect(key)
        if conn is not None:
            return conn
        if server.poll() is not None and server.returncode != 0:
            # another client's server may have won the address: look once more, then cold
            return _connect(key)
        time.sleep(0.05)
    return None


# ---- server -------------------------------------------------------------------------------------

def serve(key: str, idle_s: float = IDLE_S) -> int:
    """Import ``PRELOAD``, then fork a child per request until idle for ``idle_s``.

    The address is taken before the imports: a client that comes meanwhile waits in the
    backlog for this server instead of starting a second one (two jobs starting at once each
    paid the imports, on a 2-core machine at the same time, and one server then exited)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(_address(key))
    except OSError:  # another server holds the address
        return 4
    listener.listen(64)
    for module in PRELOAD:
        importlib.import_module(module)
    if threading.active_count() > 1:  # a Python thread would not survive the fork
        return 3  # the clients waiting see the connection close and start cold
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, ("accept", 0))
    children: dict[int, tuple[socket.socket, int]] = {}  # pid -> (connection, pidfd)
    idle_since = time.monotonic()
    while children or time.monotonic() - idle_since < idle_s:
        events = sel.select(timeout=5.0)
        for sel_key, _ in events:
            kind, pid = sel_key.data
            if kind == "accept":
                _accept(listener, sel, children)
            elif kind == "exit":
                _reap(pid, sel, children)
            else:  # the client closed (or wrote): it no longer waits for its child
                sel.unregister(sel_key.fileobj)
                _kill(pid)
        if children or events:
            idle_since = time.monotonic()
    return 0


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _accept(listener: socket.socket, sel: selectors.BaseSelector,
            children: dict[int, tuple[socket.socket, int]]) -> None:
    conn, _ = listener.accept()
    try:
        msg, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        (size,) = _HEADER.unpack(msg)
        payload = b""
        while len(payload) < size:
            chunk = conn.recv(size - len(payload))
            if not chunk:
                raise ConnectionError("client left")
            payload += chunk
        request = json.loads(payload)
    except (OSError, ValueError, struct.error):
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        inherited = [listener.fileno(), conn.fileno(), sel.fileno()] + [
            fd for c, pidfd in children.values() for fd in (c.fileno(), pidfd)]
        _child(request, fds, inherited, server_pid)
    _await_session(pid)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pid] = (conn, pidfd)
    sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
    sel.register(conn, selectors.EVENT_READ, ("client", pid))
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        _kill(pid)


def _await_session(pid: int, timeout_s: float = 5.0) -> None:
    """Until the child leads its own session: its pid is sent only then, so that a kill of its
    group cannot miss (the load watch also counts only processes outside its session)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.getsid(pid) == pid:
                return
        except ProcessLookupError:  # ended (and reaped) already
            return
        time.sleep(0.0005)


def _reap(pid: int, sel: selectors.BaseSelector,
          children: dict[int, tuple[socket.socket, int]]) -> None:
    conn, pidfd = children.pop(pid)
    _, status = os.waitpid(pid, 0)
    sel.unregister(pidfd)
    os.close(pidfd)
    try:
        sel.unregister(conn)
    except KeyError:  # already gone: the client left first
        pass
    try:
        conn.sendall(json.dumps({"status": status}).encode() + b"\n")
    except OSError:
        pass
    conn.close()


def _child(request: dict, fds: list[int], inherited: list[int], server_pid: int) -> None:
    """In the forked child: become what ``python -m/-c target args`` would be, run, exit."""
    code = 1
    try:
        os.setsid()  # its own session and group, as a cold child has (start_new_session)
        _die_with(server_pid)
        for fd in inherited:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for name, (soft, hard) in request["limits"].items():  # the caller's, not the server's
            resource.setrlimit(getattr(resource, name), (soft, hard))
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"], **{CHILD_MARK: str(os.getpid())})
        if request["mode"] == "-m":
            sys.argv = [request["target"], *request["args"]]
            sys.modules.pop(request["target"], None)  # it runs as __main__, as with -m
            runpy.run_module(request["target"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *request["args"]]
            exec(compile(request["target"], "<string>", "exec"), {"__name__": "__main__"})
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # what the interpreter would print before exiting 1
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _die_with(server_pid: int) -> None:
    """SIGKILL this child when the server dies (then nobody could report its status)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server_pid:  # the server died before the line above
        os._exit(137)


def exec_module(argv: list[str]) -> int:
    """``-m MODULE ARGS...``: that module as a warm child in place of this process, or run here
    when no warm start can be had. What a launcher starts as each rank (``jobs.command`` with
    ``warm``): the launcher's own worker processes stay, only their imports are skipped."""
    if len(argv) < 2 or argv[0] != "-m":
        raise SystemExit(f"usage: python -m {SELF} exec -m MODULE [ARGS...]; got {argv}")
    code = forward([sys.executable, *argv])
    if code is not None:
        return code
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["exec"]:
        sys.exit(exec_module(sys.argv[2:]))
    sys.exit(serve(sys.argv[1], float(sys.argv[2])))
