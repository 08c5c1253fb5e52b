"""Warm starts (suite.launch.warm): a child forked by the server is what a cold interpreter would
be (argv, environment, working directory, standard streams, exit status), and none outlives its
supervisor, its server or its usefulness. The failure paths shared with cold starts (a crash, a
timeout, a stopped supervisor) are in tests/test_experiment.py."""

import os
import signal
import sys
import time

import pytest

from suite.launch import warm


def _server_pids(key: str) -> list[int]:
    """The servers of ``key`` (their forked children carry the same command line)."""
    pids = {}
    for entry in os.listdir("/proc"):
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"suite.launch.warm" in cmdline and key.encode() in cmdline:
            pids[int(entry)] = ppid
    return [pid for pid, ppid in pids.items() if ppid not in pids]


def _wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_warm_child_gets_the_callers_argv_environment_directory_and_streams(tmp_path, capfd):
    code = ("import os, sys; print(sys.argv[1:], os.getcwd(), os.environ['SEEDBENCH_PROBE'], "
            "os.environ.get('SEEDBENCH_WARM_CHILD')); print('to stderr', file=sys.stderr); "
            "sys.exit(7)")
    env = {**os.environ, "SEEDBENCH_PROBE": "probe value"}
    os.chdir(tmp_path)
    try:
        proc = warm.popen([sys.executable, "-c", code, "a", "b c"], env)
        assert proc is not None
        assert proc.stderr.read() == "to stderr\n"
        assert proc.wait(timeout=60) == 7
    finally:
        os.chdir(os.path.dirname(os.path.dirname(__file__)))
    assert capfd.readouterr().out == f"['a', 'b c'] {tmp_path} probe value 1\n"


@pytest.mark.parametrize("env, cmd, why", [
    ({"SEEDBENCH_WARM": "0"}, None, "switched off"),
    ({"SLURM_JOB_ID": "7"}, None, "a SLURM job's processes end with it"),
    ({}, ["/bin/true"], "another program"),
])
def test_cold_where_a_warm_start_cannot_help(monkeypatch, env, cmd, why):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert warm.popen(cmd or [sys.executable, "-c", "pass"]) is None, why


def test_a_dead_server_takes_its_children_with_it():
    """Nobody could report the child's end: it is killed (PDEATHSIG), the supervisor sees a
    SIGKILL."""
    env = {**os.environ, "SEEDBENCH_PROBE": "dead server"}
    proc = warm.popen([sys.executable, "-c", "import time; time.sleep(120)"], env)
    assert proc is not None
    (server,) = _server_pids(warm.server_key(env))
    os.kill(server, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert _wait_until(lambda: not os.path.exists(f"/proc/{proc.pid}"), 10)


def test_an_idle_server_exits(monkeypatch):
    """An environment of its own (so a server of its own) that exits once idle."""
    monkeypatch.setattr(warm, "IDLE_S", 1.0)
    env = {**os.environ, "SEEDBENCH_PROBE": "idle test"}
    proc = warm.popen([sys.executable, "-c", "pass"], env)
    assert proc is not None and proc.wait(timeout=60) == 0
    key = warm.server_key(env)
    assert _server_pids(key)
    assert _wait_until(lambda: not _server_pids(key), 30)
