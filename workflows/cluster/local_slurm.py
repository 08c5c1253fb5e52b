#!/usr/bin/env python3
"""A real SLURM on this one machine, for the cluster tests (``make test-cluster``).

Why: the SLURM profile, the executor plugin and multi-node training are only trustworthy once
jobs have really gone through ``sbatch``/``srun``. Debian's packages (``slurm-wlm`` 22.05,
``munge``; ``slurmdbd`` + ``mariadb-server`` for ``sacct``, which the Snakemake plugin reads job
states with) are installed when absent and the user is root, then:

- ``up DIR [--nodes N]``: munge, MariaDB + slurmdbd (accounting), slurmctld and N slurmd. With
  N > 1 every node is a network namespace (``sbn1``..) with its own address on a bridge
  (10.241.0.0/24, addresses of this sandbox only) and its own hostname (a UTS namespace), so
  that the nodes are as distinct as two machines on one network; their names resolve through
  ``/etc/netns/<node>/hosts``. The machine's cores and memory are given to every node. All
  state, logs and configs live in DIR; ``SLURM_CONF=DIR/slurm.conf`` points the client
  commands (sbatch, squeue, sacct, srun) at it.
- ``down DIR``: stops what ``up`` started and removes the namespaces; DIR (logs) stays.
- ``check``: whether a local SLURM can come up here (exit 0), else the reason (exit 1).
- ``install``: the packages, when absent (root and apt-get needed).

Standard library only: it runs before and outside the project's venv.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ["slurm-wlm", "slurmdbd", "munge", "mariadb-server", "mariadb-client"]
COMMANDS = ["slurmctld", "slurmd", "slurmdbd", "sbatch", "sacct", "munged", "mariadbd"]
CLUSTER = "seedbench"
SUBNET = "10.241.0"
BRIDGE = "sbbr0"
PORTS = {"slurmctld": 16817, "slurmd": 16818, "slurmdbd": 16819, "mariadb": 16820}
DB_USER, DB_PASS, DB_NAME = "slurm", "seedbench-local", "slurm_acct_db"
STATE_FILE = "local_slurm.json"
# Where SLURM's client commands look for the config when SLURM_CONF is unset and there is no
# /etc/slurm/slurm.conf (slurmd's configless cache). Jobs need it: the Snakemake plugin's job
# steps drop every SLURM_ variable but the job id, SLURM_CONF included.
CLIENT_CONF = Path("/run/slurm/conf/slurm.conf")
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


class Unavailable(RuntimeError):
    """A local SLURM cannot come up here; the message says why."""


def log(msg: str) -> None:
    print(f"[local_slurm] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if not shutil.which(c) and not Path("/usr/sbin", c).exists()]


def install() -> None:
    if not missing_commands():
        return
    if os.geteuid() != 0:
        raise Unavailable(f"SLURM is not installed ({', '.join(missing_commands())} missing) "
                          "and installing it needs root")
    if not shutil.which("apt-get"):
        raise Unavailable("SLURM is not installed and there is no apt-get to install it with")
    log(f"apt-get install {' '.join(PACKAGES)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env)
    # the packages' postinst scripts try to start services: there is no init here to do it
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], env=env)
    still = missing_commands()
    if still:
        raise Unavailable(f"apt-get installed {PACKAGES} but {still} are still missing")


def slurm_version(env: dict) -> str:
    return run(["sbatch", "--version"], env=env).stdout.strip()


# ---- the nodes: network + UTS namespaces on a bridge ---------------------------------------

def node_names(n: int) -> list[str]:
    return [socket.gethostname().split(".")[0]] if n == 1 else [f"sbn{i}" for i in range(1, n + 1)]


def node_addr(i: int, subnet: str = SUBNET) -> str:
    return f"{subnet}.{i + 2}"  # .1 is the controller's side of the bridge


def namespaces_allowed() -> str | None:
    """None when network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [c for c in ("ip", "unshare", "nsenter") if not shutil.which(c)]
    if missing:
        return f"{missing} missing (iproute2, util-linux)"
    probe = "sbprobe"
    made = run(["ip", "netns", "add", probe], check=False)
    if made.returncode:
        return f"ip netns add refused: {made.stderr.strip()}"
    run(["ip", "netns", "del", probe], check=False)
    return None


def make_network(names: list[str], bridge: str = BRIDGE, subnet: str = SUBNET) -> None:
    """A bridge with address subnet.1 here and one namespace per name (subnet.2, .3, ...),
    each with lo and an interface ``sb0``; ``/etc/netns/<name>/hosts`` names them all."""
    run(["ip", "link", "add", bridge, "type", "bridge"])
    run(["ip", "addr", "add", f"{subnet}.1/24", "dev", bridge])
    run(["ip", "link", "set", bridge, "up"])
    hosts = ["127.0.0.1 localhost", f"{subnet}.1 {socket.gethostname().split('.')[0]}"]
    hosts += [f"{node_addr(i, subnet)} {name}" for i, name in enumerate(names)]
    for i, name in enumerate(names):
        run(["ip", "netns", "add", name])
        run(["ip", "link", "add", f"{name}v", "type", "veth", "peer", "name", "sb0", "netns",
             name])
        run(["ip", "link", "set", f"{name}v", "master", bridge, "up"])
        for cmd in (["ip", "addr", "add", f"{node_addr(i, subnet)}/24", "dev", "sb0"],
                    ["ip", "link", "set", "sb0", "up"], ["ip", "link", "set", "lo", "up"]):
            run(["ip", "netns", "exec", name, *cmd])
        # on_node bind-mounts this over /etc/hosts inside the node
        etc = Path("/etc/netns") / name
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text("\n".join(hosts) + "\n")


def remove_network(names: list[str], bridge: str = BRIDGE) -> None:
    for name in names:
        run(["ip", "netns", "del", name], check=False)
        run(["ip", "link", "del", f"{name}v"], check=False)
        shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
    run(["ip", "link", "del", bridge], check=False)


def on_node(name: str, argv: list[str]) -> list[str]:
    """argv run on a node: inside its network namespace, with its own hostname and its
    ``/etc/hosts``. Not ``ip netns exec``: that remounts /sys for the namespace, which hides
    /sys/fs/cgroup, and slurmd will not start without it."""
    hosts = Path("/etc/netns") / name / "hosts"
    return ["nsenter", f"--net=/run/netns/{name}", "unshare", "--mount", "--uts",
            "--propagation", "private", "sh", "-c",
            f'mount --bind {hosts} /etc/hosts && hostname {name} && exec "$@"', "sh", *argv]


# ---- configs ---------------------------------------------------------------------------------

def memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def slurm_conf(d: Path, names: list[str], accounting: bool) -> str:
    ctl = socket.gethostname().split(".")[0]
    multi = len(names) > 1
    ctl_addr = f"{SUBNET}.1" if multi else "127.0.0.1"
    cpus, mem = os.cpu_count() or 1, max(512, memory_mb() - 1024)
    nodes = [f"NodeName={name} NodeAddr={node_addr(i) if multi else '127.0.0.1'} "
             f"CPUs={cpus} RealMemory={mem} State=UNKNOWN" for i, name in enumerate(names)]
    acct = (["AccountingStorageType=accounting_storage/slurmdbd",
             "AccountingStorageHost=127.0.0.1", f"AccountingStoragePort={PORTS['slurmdbd']}"]
            + ["AccountingStoreFlags=job_comment"]  # sacct shows each job's rule
            if accounting else ["AccountingStorageType=accounting_storage/none"])
    lines = [
        f"ClusterName={CLUSTER}", f"SlurmctldHost={ctl}({ctl_addr})",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
        # a requeued job may start again cred_expire + 1 s after its requeue (default 120 s),
        # and the scheduler's pass every sched_interval (default 60 s) starts it
        "AuthInfo=cred_expire=10", "SchedulerParameters=sched_interval=2",
        f"SlurmctldPort={PORTS['slurmctld']}", f"SlurmdPort={PORTS['slurmd']}",
        f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/run/slurmctld.pid", f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd-%n.log",
        "SlurmctldDebug=info", "SlurmdDebug=info",
        # no cgroups in a container: processes tracked by their parent pids, no task binding
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",  # every node gets this machine's CPUs
        "ReturnToService=2", "MpiDefault=none", "SchedulerType=sched/backfill",
        "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
        # finished jobs stay visible to squeue for 5 minutes (the plugin's fallback)
        "MinJobAge=300", "InactiveLimit=0", "KillWait=5", "SlurmdTimeout=60",
        *acct, *nodes,
        f"PartitionName=debug Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=YES",
    ]
    return "\n".join(lines) + "\n"


def slurmdbd_conf(d: Path) -> str:
    ctl = socket.gethostname().split(".")[0]
    return "\n".join([
        "AuthType=auth/munge", f"DbdHost={ctl}", "DbdAddr=127.0.0.1",
        f"DbdPort={PORTS['slurmdbd']}", "SlurmUser=root", f"PidFile={d}/run/slurmdbd.pid",
        f"LogFile={d}/log/slurmdbd.log", "DebugLevel=info",
        "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
        f"StoragePort={PORTS['mariadb']}", f"StorageUser={DB_USER}", f"StoragePass={DB_PASS}",
        f"StorageLoc={DB_NAME}"]) + "\n"


# ---- daemons ---------------------------------------------------------------------------------

def wait_for(what: str, ok, timeout_s: float, logfile: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.5)
    tail = ""
    if logfile is not None and logfile.exists():
        tail = "\n" + "\n".join(logfile.read_text(errors="replace").splitlines()[-20:])
    raise RuntimeError(f"{what} not up after {timeout_s:g} s{tail}")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def start_munge(state: dict) -> None:
    if run(["sh", "-c", "munge -n | unmunge"], check=False).returncode == 0:
        return
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    if not Path("/etc/munge/munge.key").exists():
        run(["mungekey", "--create"])  # Debian's postinst usually made it
        shutil.chown("/etc/munge/munge.key", "munge", "munge")
    run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"])
    state["munged"] = True
    wait_for("munged", lambda: run(["sh", "-c", "munge -n | unmunge"], check=False)
             .returncode == 0, 20)


def start_mariadb(d: Path, state: dict) -> None:
    data = d / "mysql"
    if not data.exists():
        run(["mariadb-install-db", "--user=root", f"--datadir={data}",
             "--auth-root-authentication-method=normal", "--skip-test-db"])
    sock = d / "run" / "mysql.sock"
    log_file = d / "log" / "mariadb.log"
    proc = subprocess.Popen(
        ["mariadbd", "--user=root", f"--datadir={data}", f"--socket={sock}",
         f"--port={PORTS['mariadb']}", "--bind-address=127.0.0.1", f"--log-error={log_file}",
         f"--pid-file={d}/run/mariadb.pid", "--skip-name-resolve"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    state["mariadb_pid"] = proc.pid
    wait_for("mariadb", lambda: port_open(PORTS["mariadb"]), 60, log_file)
    sql = (f"CREATE DATABASE IF NOT EXISTS {DB_NAME}; "
           f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}'; "
           f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1'; FLUSH PRIVILEGES;")
    run(["mariadb", f"--socket={sock}", "-uroot", "-e", sql])


def start_slurmdbd(d: Path, env: dict) -> None:
    conf = d / "slurmdbd.conf"
    conf.write_text(slurmdbd_conf(d))
    conf.chmod(0o600)  # slurmdbd refuses a config others can read (it holds the DB password)
    run(["slurmdbd"], env=env)  # reads slurmdbd.conf beside $SLURM_CONF
    wait_for("slurmdbd", lambda: port_open(PORTS["slurmdbd"]), 60, d / "log" / "slurmdbd.log")
    run(["sacctmgr", "-i", "add", "cluster", CLUSTER], check=False, env=env)
    run(["sacctmgr", "-i", "add", "account", CLUSTER, "Description=local tests",
         f"Organization={CLUSTER}"], check=False, env=env)
    run(["sacctmgr", "-i", "add", "user", "root", f"Account={CLUSTER}"], check=False, env=env)


def start_slurmd(d: Path, names: list[str], env: dict) -> None:
    for name in names:
        (d / "spool" / name).mkdir(parents=True, exist_ok=True)
        if len(names) == 1:
            run(["slurmd"], env=env)
        else:  # its own network and hostname: a machine of its own on the bridge
            run(on_node(name, ["slurmd"]), env=env)


def node_states(env: dict) -> dict[str, str]:
    out = run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, env=env).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def link_client_conf(conf: Path) -> None:
    """Point CLIENT_CONF at ``conf``; refuse where this machine has a SLURM of its own."""
    if SYSTEM_CONF.exists():
        raise Unavailable(f"{SYSTEM_CONF} exists (a SLURM of this machine's own): its client "
                          "commands would not reach the local test cluster")
    if CLIENT_CONF.is_symlink() or CLIENT_CONF.exists():
        ours = CLIENT_CONF.is_symlink() and (
            Path(os.readlink(CLIENT_CONF)).parent / STATE_FILE).exists()
        if not ours:
            raise Unavailable(f"{CLIENT_CONF} exists and is not a local test cluster's")
        CLIENT_CONF.unlink()  # a previous local cluster's, left by a killed run
    CLIENT_CONF.parent.mkdir(parents=True, exist_ok=True)
    CLIENT_CONF.symlink_to(conf)


def unlink_client_conf(d: Path) -> None:
    if CLIENT_CONF.is_symlink() and Path(os.readlink(CLIENT_CONF)).parent == d:
        CLIENT_CONF.unlink()


def up(d: Path, nodes: int, accounting: bool) -> dict:
    install()
    if nodes > 1:
        why = namespaces_allowed()
        if why:
            raise Unavailable(f"{nodes} nodes need network namespaces: {why}")
    d = d.resolve()
    for sub in ("state", "spool", "run", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    names = node_names(nodes)
    state = {"dir": str(d), "nodes": names, "accounting": accounting,
             "slurm_conf": str(d / "slurm.conf")}
    (d / STATE_FILE).write_text(json.dumps(state))
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    (d / "slurm.conf").write_text(slurm_conf(d, names, accounting))
    link_client_conf(d / "slurm.conf")
    start_munge(state)
    if nodes > 1:
        remove_network(names)  # leftovers of a run that was killed
        make_network(names)
    if accounting:
        start_mariadb(d, state)
        (d / STATE_FILE).write_text(json.dumps(state))
        start_slurmdbd(d, env)
    run(["slurmctld"], env=env)
    wait_for("slurmctld", lambda: run(["scontrol", "ping"], check=False, env=env)
             .stdout.count("UP") > 0, 60, d / "log" / "slurmctld.log")
    start_slurmd(d, names, env)
    wait_for(f"{len(names)} idle node(s)",
             lambda: sorted(node_states(env).values()) == ["idle"] * len(names), 90,
             d / "log" / f"slurmd-{names[-1]}.log")
    state["version"] = slurm_version(env)
    (d / STATE_FILE).write_text(json.dumps(state))
    log(f"up: {state['version']}, nodes {names}, accounting={accounting}; "
        f"export SLURM_CONF={d / 'slurm.conf'}")
    return state


def _kill_pidfile(path: Path, sig: int = signal.SIGTERM) -> None:
    try:
        os.kill(int(path.read_text().split()[0]), sig)
    except (OSError, ValueError, IndexError):
        pass


def down(d: Path) -> None:
    d = d.resolve()
    try:
        state = json.loads((d / STATE_FILE).read_text())
    except (OSError, ValueError):
        state = {"nodes": [], "accounting": False}
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    if shutil.which("scancel"):
        run(["scancel", "--full", "--user=root"], check=False, env=env, timeout=30)
    pids = [d / "run" / f"slurmd-{n}.pid" for n in state["nodes"]]
    pids += [d / "run" / "slurmctld.pid", d / "run" / "slurmdbd.pid"]
    for p in pids:
        _kill_pidfile(p)
    if state.get("mariadb_pid"):
        try:
            os.killpg(state["mariadb_pid"], signal.SIGTERM)
        except OSError:
            pass
    time.sleep(1)
    for p in pids:
        _kill_pidfile(p, signal.SIGKILL)
    if len(state["nodes"]) > 1:
        remove_network(state["nodes"])
    if state.get("munged"):
        run(["pkill", "-x", "munged"], check=False)
    unlink_client_conf(d)
    log(f"down; logs in {d / 'log'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install")
    sub.add_parser("check")
    u = sub.add_parser("up")
    u.add_argument("dir", type=Path)
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--no-accounting", action="store_true",
                   help="no slurmdbd/MariaDB: sacct will not work (the plugin then needs "
                        "status_command: squeue)")
    dn = sub.add_parser("down")
    dn.add_argument("dir", type=Path)
    args = p.parse_args(argv)
    try:
        if args.cmd == "install":
            install()
        elif args.cmd == "check":
            if os.geteuid() != 0 and missing_commands():
                raise Unavailable(f"{missing_commands()} missing and not root")
            print(namespaces_allowed() or "network namespaces: yes")
        elif args.cmd == "up":
            if args.nodes < 1:
                raise SystemExit(f"--nodes={args.nodes} must be >= 1")
            print(json.dumps(up(args.dir, args.nodes, not args.no_accounting)))
        else:
            down(args.dir)
    except Unavailable as e:
        print(f"local SLURM unavailable: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
