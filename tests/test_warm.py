"""Warm starts (suite.launch.warm): a child forked by the server is what a cold interpreter would
be (argv, environment, working directory, standard streams, exit status), and none outlives its
supervisor, its server or its usefulness. The failure paths shared with cold starts (a crash, a
timeout, a stopped supervisor) are in tests/test_experiment.py."""

import os
import signal
import subprocess
import sys
import time

import pytest

from suite.launch import warm

from conftest import BIN, warm_servers


def _wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_warm_child_gets_the_callers_argv_environment_directory_and_streams(tmp_path, capfd):
    code = ("import os, sys; print(sys.argv[1:], os.getcwd(), os.environ['SEEDBENCH_PROBE'], "
            "os.environ.get('SEEDBENCH_WARM_CHILD') == str(os.getpid())); "
            "print('to stderr', file=sys.stderr); sys.exit(7)")
    env = {**os.environ, "SEEDBENCH_PROBE": "probe value"}
    os.chdir(tmp_path)
    try:
        proc = warm.popen([sys.executable, "-c", code, "a", "b c"], env)
        assert proc is not None
        assert proc.stderr.read() == "to stderr\n"
        assert proc.wait(timeout=60) == 7
    finally:
        os.chdir(os.path.dirname(os.path.dirname(__file__)))
    assert capfd.readouterr().out == f"['a', 'b c'] {tmp_path} probe value True\n"


def test_a_warm_child_runs_in_place_and_its_children_may_start_warm(capfd):
    """A warm child never hands itself on again (``forward`` runs it in place), yet it may ask
    the same server for children of its own: a supervisor forked warm starts its launcher warm.
    A warm launcher's ranks, new processes that inherit the mark, may too."""
    probe = ("from suite.launch import warm; import os, sys; "
             "print(warm.is_warm_child(), warm.enabled()[0], "
             "warm.forward([sys.executable, '-c', 'pass']), "
             "warm.server_key(dict(os.environ)), flush=True)")
    code = ("import subprocess, sys; from suite.launch import warm; exec(sys.argv[1]); "
            "kid = warm.popen([sys.executable, '-c', sys.argv[1]]); "
            "print('forked' if kid is not None and kid.wait() == 0 else 'cold', flush=True); "
            "subprocess.run([sys.executable, '-c', sys.argv[1]], check=True)")
    proc = warm.popen([sys.executable, "-c", code, probe])
    assert proc is not None and proc.wait(timeout=60) == 0
    child, forked, how, started = [line.split() for line in capfd.readouterr().out.splitlines()]
    key = warm.server_key(dict(os.environ))
    assert child == ["True", "True", "None", key]  # a fork: in place, yet may ask for more
    assert forked == ["True", "True", "None", key] and how == ["forked"]  # its warm child
    assert started == ["False", "True", "0", key]  # not a fork: forward hands it on


def test_a_launchers_ranks_ask_the_server_their_launcher_was_forked_by(tmp_path):
    """What torchrun adds to its ranks' environment must not key a server of its own: a second
    server costs every run its imports again (~6 s on a 2-core EPYC), and once more after each
    minute without a training job."""
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom suite.launch import warm\n"
                     "print('KEY', warm.server_key(dict(os.environ)), flush=True)\n")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "1", str(probe)], capture_output=True, text=True,
                          timeout=120)
    keys = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("KEY ")]
    assert keys == [warm.server_key(dict(os.environ))], done.stderr[-2000:]


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
    (server,) = warm_servers(warm.server_key(env))
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
    assert warm_servers(key)
    assert _wait_until(lambda: not warm_servers(key), 30)


def test_a_starting_server_holds_its_address_while_it_imports(tmp_path):
    """A client that comes while a new server imports waits for that server: it does not
    start a second one that pays the imports too."""
    flag = tmp_path / "go"
    (tmp_path / "blocker.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.01)\n")
    key = "test-" + os.urandom(8).hex()
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); from suite.launch import warm; "
            f"warm.PRELOAD = ('blocker',); sys.exit(warm.serve({key!r}, 5.0))")
    server = subprocess.Popen([sys.executable, "-c", code])
    try:
        def reachable() -> bool:
            conn = warm._connect(key)
            if conn is not None:
                conn.close()
            return conn is not None

        assert _wait_until(reachable, 60)
        assert server.poll() is None and not flag.exists()  # bound, still importing
    finally:
        flag.touch()
    assert server.wait(timeout=60) == 0  # imported, then idle for 5 s


def _forwarder(code: str) -> list[str]:
    """A process that hands ``python -c code`` to a warm child in its place."""
    return [sys.executable, "-c", "import sys; from suite.launch import warm; "
            f"sys.exit(warm.forward([sys.executable, '-c', {code!r}]))"]


@pytest.mark.parametrize("code, returncode, out", [
    ("print('from the child')", 0, "from the child\n"),
    ("raise SystemExit(5)", 5, ""),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", -signal.SIGSEGV, ""),
])
def test_a_forwarded_command_ends_as_its_child_ended(code, returncode, out):
    """Exit code, death by a signal (as a shell would see it) and output: the child's."""
    done = subprocess.run(_forwarder(code), capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (returncode, out), done.stderr


def test_a_stopped_forwarder_stops_its_child(tmp_path):
    pid_file = tmp_path / "child.pid"
    proc = subprocess.Popen(_forwarder(
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        "time.sleep(120)"))
    assert _wait_until(lambda: pid_file.exists() and pid_file.read_text(), 120)
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert _wait_until(lambda: not os.path.exists(f"/proc/{pid_file.read_text()}"), 10)


def test_a_forwarder_stopped_before_it_knows_its_child_still_stops_it(tmp_path):
    """The SIGTERM lands while popen is returning (a busy machine's CI did this): the forwarder
    must not die of it and leave the child running."""
    pid_file = tmp_path / "child.pid"
    code = ("import os, signal, sys\nfrom suite.launch import warm\nreal = warm.popen\n"
            "def late(*a, **k):\n    p = real(*a, **k)\n"
            f"    open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n    return p\n"
            "warm.popen = late\n"
            "sys.exit(warm.forward([sys.executable, '-c', 'import time; time.sleep(120)']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert _wait_until(lambda: not os.path.exists(f"/proc/{pid_file.read_text()}"), 10)


def test_the_console_script_forwards_the_derived_commands():
    """`seedbench analyze ...` (a rule's command) is run by a warm child: a server for this
    environment exists afterwards; what the user sees is the command's own error."""
    env = {**os.environ, "SEEDBENCH_PROBE": "console script"}
    done = subprocess.run([str(BIN / "seedbench"), "analyze", "--no-such-flag"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "seedbench analyze: error: the following arguments are " \
        "required: experiment, --table, --out" in done.stderr
    assert warm_servers(warm.server_key(env))


def test_a_warm_child_takes_the_callers_limits_and_umask(capfd):
    """ulimit and umask are the caller's, not those of whoever started the server."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    old_mask = os.umask(0o027)
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
    try:
        proc = warm.popen([sys.executable, "-c", "import os, resource; m = os.umask(0); "
                           "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], oct(m))"])
        assert proc is not None and proc.wait(timeout=60) == 0
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        os.umask(old_mask)
    assert capfd.readouterr().out == "200 0o27\n"


@pytest.mark.parametrize("command", ["train", "serve"])
def test_a_supervisor_that_imports_torch_is_handed_to_a_warm_server(monkeypatch, command):
    """``train`` (a trainer's launcher) and ``serve`` import torch before they hand their job to
    a child: the console script forwards them whole, so the server's torch serves both."""
    from suite import cli

    handed = []
    monkeypatch.setattr(warm, "forward", lambda cmd: handed.append(cmd) or 0)
    monkeypatch.setattr(sys, "argv", ["seedbench", command, "--help"])
    assert cli.main() == 0
    assert handed == [[sys.executable, "-m", "suite.cli", command, "--help"]]


def test_the_bert_points_supervisor_imports_no_torch(tmp_path):
    """``run`` is left cold: up to its child's start it imports no torch (were it to, it should
    be forked warm like ``train``)."""
    code = ("import sys\nfrom suite.launch import jobs\n"
            "jobs.run_isolated = lambda *a, **k: print('launched')\n"
            "from suite.cli import main\n"
            "main(['run', 'bert_varlen', '--system', 'torch-eager', '--batch-size', '2',"
            f" '--max-seq-len', '8', '--section-json', '{{}}', '--out', '{tmp_path}/r.json'])\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["launched", "False"], done.stderr[-2000:]
