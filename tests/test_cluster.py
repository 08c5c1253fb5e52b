"""The cluster paths for real: the SLURM profile against the workflow's rules, two-node training
over two network namespaces (c10d rendezvous, gloo), the workflow through a local SLURM
(``workflows/cluster/local_slurm.py``: slurmctld, slurmd per node, slurmdbd for sacct), and a
requeued training job resuming from its checkpoint.

Marked ``cluster`` (``make test-cluster`` runs only these); ``make test`` runs them too. The
tests that need root, network namespaces or SLURM skip with the reason where those are refused.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from suite.launch.slurm import (Allocation, AllocationError, multi_node_allocation,
                                slurm_allocation, srun_environment)
from suite.launch.jobs import command
from suite.launch.ports import free_port
from suite.records import Status, read_record

from conftest import BIN, ROOT, copy_workflow, job_env
SEEDBENCH = str(BIN / "seedbench")
pytestmark = pytest.mark.cluster

TRAIN = {"model": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256},
         "seq_len": 32, "global_batch": 4, "steps": 6, "warmup_steps": 2, "threads": 1,
         "lr": 3e-3}


def _local_slurm():
    spec = importlib.util.spec_from_file_location(
        "local_slurm", ROOT / "workflows" / "cluster" / "local_slurm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


local_slurm = _local_slurm()


def _env(**extra: str) -> dict[str, str]:
    return job_env(OMP_NUM_THREADS="1", **extra)


# ---- the allocation, on recorded environments ----------------------------------------------

RECORDED = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "gpu[017-018]",
            "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0"}
# `scontrol show job --oneliner 4711`, the fields read (as a two-node job prints them)
SHOWN = {"JobId": "4711", "NodeList": "gpu[017-018]", "NumNodes": "2", "NumCPUs": "128"}
EXPAND = {"gpu[017-018]": ["gpu017", "gpu018"], "gpu017": ["gpu017"]}


def _no_scontrol(job: str) -> dict[str, str]:
    raise AllocationError("scontrol: command not found")


def test_allocation_from_scontrol():
    seen = []

    def hostnames(nodelist: str) -> list[str]:  # what `scontrol show hostnames` prints
        seen.append(nodelist)
        return EXPAND[nodelist]

    alloc = slurm_allocation(RECORDED, hostnames, lambda job: SHOWN)
    assert seen == ["gpu[017-018]"]
    assert alloc == Allocation("4711", ("gpu017", "gpu018")) and alloc.nnodes == 2
    assert alloc.rendezvous_endpoint() == "gpu017:30111"  # 29400 + 4711 % 1000
    assert slurm_allocation({}, hostnames) is None
    assert multi_node_allocation(2, RECORDED, hostnames, lambda job: SHOWN) == alloc


def test_a_job_step_environment_does_not_shrink_the_allocation():
    """Inside the Snakemake plugin's `srun -n1` step the environment names one node; the job
    (scontrol) has two."""
    step = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": "gpu017", "SLURM_NNODES": "1",
            "SLURM_JOB_NUM_NODES": "1"}
    alloc = multi_node_allocation(2, step, EXPAND.__getitem__, lambda job: SHOWN)
    assert alloc.hosts == ("gpu017", "gpu018")


def test_allocation_from_the_environment_without_scontrol():
    alloc = slurm_allocation(RECORDED, EXPAND.__getitem__, _no_scontrol)
    assert alloc == Allocation("4711", ("gpu017", "gpu018"))
    with pytest.raises(AllocationError, match=r"SLURM job 4711: scontrol: command not found, "
                                              r"and no SLURM_JOB_NODELIST"):
        slurm_allocation({"SLURM_JOB_ID": "4711"}, EXPAND.__getitem__, _no_scontrol)


def test_allocation_errors_name_the_cause():
    with pytest.raises(AllocationError, match=r"nnodes=2 needs either --rdzv-endpoint"):
        multi_node_allocation(2, {})
    with pytest.raises(AllocationError, match=r"asks for nnodes=4 but SLURM job 4711 holds 2"):
        multi_node_allocation(4, RECORDED, EXPAND.__getitem__, lambda job: SHOWN)
    with pytest.raises(AllocationError, match=r"expands to \['gpu017'\], but it has 2 node"):
        slurm_allocation(RECORDED, lambda _: ["gpu017"], lambda job: SHOWN)
    with pytest.raises(AllocationError, match=r"SLURM job 4711 has no nodes"):
        slurm_allocation(RECORDED, EXPAND.__getitem__, lambda job: {"NodeList": "(null)"})


def test_srun_fans_out_one_torchrun_per_node(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    prefix = Allocation("7", ("a", "b", "c")).srun_prefix(2)
    assert prefix[:2] == ["/usr/bin/srun", "--overlap"]
    assert {"--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"} <= set(
        prefix)


def test_the_inner_srun_forgets_the_step_it_started_from():
    step = {"SLURM_JOB_ID": "7", "SLURM_CONF": "/c/slurm.conf", "SLURM_NNODES": "1",
            "SLURM_JOB_NODELIST": "a", "SLURM_STEP_ID": "0", "SRUN_DEBUG": "3", "PATH": "/bin"}
    assert srun_environment(step) == {"SLURM_JOB_ID": "7", "SLURM_CONF": "/c/slurm.conf",
                                      "PATH": "/bin"}


def test_multi_node_torchrun_line():
    cmd = command("ddp", 4, ["--x"], nnodes=2, rdzv_endpoint="h0:29500", rdzv_id="j",
                  local_addr="10.0.0.2", join_timeout_s=90)
    joined = " ".join(cmd)
    assert "--nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint h0:29500" in joined
    assert "--local-addr 10.0.0.2" in joined and "--rdzv-conf join_timeout=90" in joined


def _train_cmd(out: Path, *extra: str, train: dict = TRAIN, timeout: float = 120,
               trainer: str = "ddp") -> list[str]:
    return [SEEDBENCH, "train", "llm_engines", "--trainer", trainer, "--label", "t",
            "--train-json", json.dumps(train), "--check-steps", "2", "--timeout-s", str(timeout),
            "--out", str(out), "--steplog", str(out.with_suffix(".steps.jsonl")), *extra]


def test_several_nodes_outside_an_allocation_is_a_failed_record(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(_train_cmd(out, "--nnodes", "2"), env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = read_record(out)
    assert record.status == Status.FAILED
    assert "nnodes=2 needs either --rdzv-endpoint HOST:PORT" in record.reason
    assert record.point["nnodes"] == 2


# ---- profiles cannot drift from the rules --------------------------------------------------

PROFILES = sorted(p.parent.name for p in (ROOT / "workflows" / "profiles").glob("*/config.yaml"))
LAUNCH_KEYS = {"nodes", "tasks", "gpu", "gres", "tasks_per_gpu", "tasks_per_node"}


@pytest.mark.parametrize("profile", PROFILES)
def test_profiles_leave_what_a_run_launches_to_its_rule(profile):
    """llm_point derives nodes, tasks and GPUs from the planned run; a profile setting them
    would give eight ranks one GPU (or the reverse)."""
    settings = yaml.safe_load((ROOT / "workflows" / "profiles" / profile / "config.yaml")
                              .read_text()) or {}
    llm = (settings.get("set-resources") or {}).get("llm_point") or {}
    assert not set(llm) & LAUNCH_KEYS, f"{profile}: llm_point sets {set(llm) & LAUNCH_KEYS}"


def _dry_run_jobs(config: dict, tmp_path: Path, profile: str = "slurm") -> list[dict]:
    """The jobs of a dry run with a profile: rule, resources and shell command of each."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    shutil.copytree(ROOT / "results" / "paper", tmp_path / "results" / "paper")
    proc = subprocess.run(
        [str(BIN / "snakemake"), "-n", "--profile", str(ROOT / "workflows" / "profiles" /
                                                        profile),
         "--configfile", str(cfg), "--printshellcmds", "--forceall",
         "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    jobs, current = [], None
    for line in (proc.stdout + proc.stderr).splitlines():
        stripped = line.strip()
        if stripped.startswith("rule ") and stripped.endswith(":"):
            current = {"rule": stripped[5:-1], "resources": {}, "shell": ""}
            jobs.append(current)
        elif current is not None and stripped.startswith("resources:"):
            for item in stripped[len("resources:"):].split(","):
                key, _, value = item.strip().partition("=")
                current["resources"][key] = value
        elif current is not None and stripped.startswith("Shell command: "):
            current["shell"] = stripped.removeprefix("Shell command: ")
    return jobs


class _Resources(dict):
    """A job's resources as the SLURM plugin reads them (``.get`` and attributes)."""

    def __getattr__(self, key):
        return self[key]


def _sbatch_line(resources: dict[str, str], threads: int = 1) -> str:
    """The sbatch options the pinned SLURM plugin builds from a job's resources."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    typed = _Resources({k: int(v) if v.lstrip("-").isdigit() else v
                        for k, v in resources.items()})
    job = SimpleNamespace(resources=typed, threads=threads)
    params = {"run_uuid": "u", "slurm_logfile": "l.log", "comment_str": "c", "account": "",
              "partition": "", "workdir": "."}
    return get_submit_command(job, params) + set_gres_string(job)


@pytest.mark.parametrize("nnodes", [1, 2])
def test_llm_point_asks_for_what_it_launches(nnodes, tmp_path):
    """Under the slurm profile on the paper config (cuda): the sbatch line the plugin builds
    asks for --nnodes nodes, one task per node and, on every node, one GPU per torchrun
    process (--gres=gpu:N counts per node; --gpus would be a total)."""
    config = yaml.safe_load((ROOT / "workflows" / "config" / "paper.yaml").read_text())
    config["llm"]["nnodes"] = nnodes
    for section in ("bert_varlen", "vwn", "pma"):
        config[section] = {**config.get(section, {}), "enabled": False}
    config["machine"] = "dry"
    jobs = [j for j in _dry_run_jobs(config, tmp_path) if j["rule"] == "llm_point"]
    assert jobs, "no llm_point job in the dry run"
    for job in jobs:
        words = job["shell"].split()
        nprocs = int(words[words.index("--nprocs") + 1])
        launched_nodes = int(words[words.index("--nnodes") + 1])
        single = "--trainer single" in job["shell"]
        assert launched_nodes == (1 if single else nnodes), job
        sbatch = _sbatch_line(job["resources"]).split()
        assert f"--nodes={launched_nodes}" in sbatch, (sbatch, job)
        assert f"--gres=gpu:{nprocs}" in sbatch, (sbatch, job)
        assert not [w for w in sbatch if w.startswith(("--gpus", "--ntasks-per-gpu"))], sbatch
        assert "--cpus-per-task=64" in sbatch, sbatch


def test_a_cpu_run_asks_for_no_gpu(tmp_path):
    """The quick config (cpu): one task per node and no GPU request at all."""
    config = yaml.safe_load((ROOT / "workflows" / "config" / "quick.yaml").read_text())
    for section in ("bert_varlen", "vwn", "pma"):
        config[section] = {**config.get(section, {}), "enabled": False}
    config["llm"]["device"] = "cpu"
    config["machine"] = "dry"
    jobs = [j for j in _dry_run_jobs(config, tmp_path) if j["rule"] == "llm_point"]
    assert jobs
    for job in jobs:
        sbatch = _sbatch_line(job["resources"]).split()
        assert "--nodes=1" in sbatch and "--ntasks=1" in sbatch, sbatch
        assert not [w for w in sbatch if "gpu" in w], sbatch


# ---- two nodes: network namespaces joined by a bridge --------------------------------------

NODES = ["sbt1", "sbt2"]
BRIDGE, SUBNET = "sbtbr0", "10.242.0"


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchrun starts its workers in sessions of their own, so
    a process group would miss them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


@dataclass(frozen=True)
class Nodes:
    """Two nodes: network namespaces on a bridge (own addresses and hostnames), or, where
    namespaces are refused, two node ranks on loopback (names None)."""

    names: tuple[str, ...] | None

    def host(self, i: int) -> str:
        return self.names[i] if self.names else "127.0.0.1"

    def on(self, i: int, argv: list[str]) -> list[str]:
        return local_slurm.on_node(self.names[i], argv) if self.names else argv

    def power_off(self, i: int, procs: list[subprocess.Popen]) -> None:
        """Every process of node i, SIGKILL at once: what a node losing power looks like to
        the others (its sockets go silent or reset)."""
        if self.names is None:  # the node's launcher and every process under it
            pids = [procs[i].pid, *_descendants(procs[i].pid)]
        else:
            pids = subprocess.run(["ip", "netns", "pids", self.names[i]], capture_output=True,
                                  text=True, check=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def two_nodes():
    why = local_slurm.namespaces_allowed()
    if why:
        print(f"\nnetwork namespaces refused ({why}): two node ranks on loopback instead")
        yield Nodes(None)
        return
    local_slurm.remove_network(NODES, BRIDGE)
    local_slurm.make_network(NODES, BRIDGE, SUBNET)
    yield Nodes(tuple(NODES))
    local_slurm.remove_network(NODES, BRIDGE)


def _start_nodes(nodes: Nodes, out: Path, port: int, train: dict = TRAIN,
                 timeout: float = 180, trainer: str = "ddp") -> list[subprocess.Popen]:
    endpoint = f"{nodes.host(0)}:{port}"
    procs = []
    for rank in range(2):
        argv = _train_cmd(out, "--nprocs", "1", "--nnodes", "2", "--node-rank", str(rank),
                          "--rdzv-endpoint", endpoint, train=train, timeout=timeout,
                          trainer=trainer)
        procs.append(subprocess.Popen(nodes.on(rank, argv), env=_env(),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    return procs


def _finish(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    return [p.communicate(timeout=timeout)[0] for p in procs]


@pytest.mark.parametrize("trainer", ["ddp", "zero2"])
def test_two_nodes_train_like_one_process(trainer, two_nodes, tmp_path):
    """Rank 0 on node 1, rank 1 on node 2 (different hosts, addresses, hostnames), one
    torchrun per node (ZeRO too: DeepSpeed's engine on torchrun's process group): the record
    is ok, the gate compared its first losses with a single-process run of the same batches,
    and the step time is printed beside the same run on one node."""
    out = tmp_path / "two.json"
    start = time.monotonic()
    logs = _finish(_start_nodes(two_nodes, out, free_port(), trainer=trainer), 240)
    record = read_record(out)
    assert record.status == Status.OK, record.reason + "\n" + "\n".join(logs)[-4000:]
    assert record.point["world_size"] == 2 and record.workload["nodes"] == 2
    assert record.correctness["passed"]
    took = time.monotonic() - start
    one = tmp_path / "one.json"
    subprocess.run(_train_cmd(one, "--nprocs", "2", trainer=trainer), env=_env(), check=True,
                   timeout=240, capture_output=True)
    single = read_record(one)
    assert single.status == Status.OK and single.workload["nodes"] == 1
    two_ms = record.timing["stats"]["median"] * 1e3
    one_ms = single.timing["stats"]["median"] * 1e3
    print(f"\n{trainer} 2 ranks, step median: two nodes {two_ms:.1f} ms, one node "
          f"{one_ms:.1f} ms (ratio {two_ms / one_ms:.2f}); the two-node run took {took:.0f} s")


def test_a_rendezvous_nobody_answers_fails_within_the_timeout(two_nodes, tmp_path):
    """Node 1 told to meet at node 2, where nothing listens: a failed record naming the
    timeout, not a hang."""
    out = tmp_path / "lonely.json"
    argv = _train_cmd(out, "--nprocs", "1", "--nnodes", "2", "--node-rank", "0",
                      "--rdzv-endpoint", f"{two_nodes.host(1)}:{free_port()}", timeout=20)
    start = time.monotonic()
    subprocess.run(two_nodes.on(0, argv), env=_env(), timeout=120, capture_output=True)
    took = time.monotonic() - start
    record = read_record(out)
    assert record.status == Status.FAILED and "timed out after 20 s" in record.reason
    assert took < 60, took


def test_a_node_dying_mid_run_fails_the_run_and_keeps_finished_records(two_nodes, tmp_path):
    """Node 2 loses power mid-run: node 1's rank sees its collective fail (the peer's sockets
    reset, or silence until the collective timeout, train ``timeout_s``), records that cause
    and the run ends at once, not at the whole run's timeout (torchrun's exit barrier would
    wait 5 minutes for the dead node's agent after a clean exit); other records stay."""
    kept = tmp_path / "finished.json"
    kept.write_text('{"kept": true}')
    out = tmp_path / "dies.json"
    procs = _start_nodes(two_nodes, out, free_port(),
                         train={**TRAIN, "steps": 5000, "timeout_s": 20}, timeout=120)
    steplog = out.with_suffix(".steps.jsonl")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (steplog.exists() and steplog.read_text()):
        time.sleep(0.5)
    assert steplog.exists() and steplog.read_text(), "the run never reached its first step"
    start = time.monotonic()
    two_nodes.power_off(1, procs)
    logs = _finish(procs, 150)
    took = time.monotonic() - start
    record = read_record(out)
    assert record.status == Status.FAILED, "\n".join(logs)[-3000:]
    assert "timed out after 120 s" not in record.reason, record.reason[:500]
    assert re.search(r"Connection (reset|closed) by peer|[Tt]imed out", record.reason), \
        record.reason[:500]
    assert took < 60, took
    assert kept.read_text() == '{"kept": true}'
    print(f"\nnode 2 killed: node 1's record failed after {took:.0f} s: "
          f"{record.reason[:200]}")


# ---- the workflow through a local SLURM ----------------------------------------------------

@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A local SLURM of two nodes (one where namespaces are refused), up for this module."""
    try:
        local_slurm.install()
    except local_slurm.Unavailable as e:
        pytest.skip(f"no local SLURM: {e}")
    d = tmp_path_factory.mktemp("slurm")
    nodes = 1 if local_slurm.namespaces_allowed() else 2
    try:
        state = local_slurm.up(d, nodes, accounting=True)
    except Exception as e:  # a cluster that cannot come up fails the tests, logs kept
        local_slurm.down(d)
        pytest.fail(f"local SLURM did not come up: {e}\nlogs: {d / 'log'}")
    yield state
    local_slurm.down(d)


def _slurm_env(state: dict) -> dict[str, str]:
    return _env(SLURM_CONF=state["slurm_conf"], PYTHONPATH=str(ROOT))


def test_slurm_and_plugin_versions(slurm):
    from importlib.metadata import version

    assert " 22.05." in slurm["version"], slurm["version"]
    locked = dict(line.split("==") for line in (ROOT / "requirements.lock").read_text()
                  .splitlines() if line.startswith("snakemake-executor-plugin-slurm"))
    assert version("snakemake-executor-plugin-slurm") == locked["snakemake-executor-plugin-slurm"]


def test_an_allocation_smaller_than_the_run_is_a_failed_record(slurm, tmp_path):
    """`seedbench train --nnodes 3` inside a real one-node allocation: no srun, no wait, a
    failed record naming both sizes."""
    out = tmp_path / "small.json"
    proc = subprocess.run(["srun", "--nodes=1", "--ntasks=1", *_train_cmd(out, "--nnodes", "3")],
                          env=_slurm_env(slurm), capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = read_record(out)
    assert record.status == Status.FAILED
    assert re.search(r"asks for nnodes=3 but SLURM job \d+ holds 1 node", record.reason), \
        record.reason


SUBMITTED = "has been submitted with SLURM jobid"  # the plugin's line per sbatch
CRASH = ["sh", "-c", "echo 'simulated crash of an external program' >&2; exit 3"]


def _slurm_config(nnodes: int) -> dict:
    return {
        "machine": "slurm-test",
        "peak": {"dtypes": ["fp32"], "sizes": [64], "repeats": 1,
                 "libraries": ["torch.matmul", "numpy"]},
        "bert_varlen": {
            "baselines": ["torch-eager", "reference", "external-crash"],
            "external": {"crash": {"command": CRASH}},
            "model": {"layers": 1, "hidden": 32, "heads": 4, "intermediate": 64,
                      "vocab_size": 100},
            "batch_sizes": [2], "max_seq_lens": [8], "device": "cpu", "threads": 1,
            "timing": {"warmup": 1, "min_repeats": 2, "min_time_s": 0.0},
            **{k: {"enabled": False} for k in ("ablation", "mha", "fused_ops",
                                                "fixed_length", "variants")},
        },
        "llm": {
            "nprocs": 1, "nnodes": nnodes, "device": "cpu",
            "train": {"seq_len": 16, "global_batch": 4, "steps": 4, "warmup_steps": 1,
                      "threads": 1},
            "sizes": {"t": {"n_layer": 1, "n_embd": 32, "n_head": 2}},
            "mfu": {"sizes": ["t"], "trainers": ["single", "ddp"]},
            **{k: {"enabled": False} for k in ("engines", "window", "pipeline", "ablation",
                                               "loss", "scale", "resilience")},
        },
        "vwn": {"enabled": False}, "pma": {"enabled": False},
    }


def _profile(tmp: Path) -> Path:
    """The slurm profile with this machine's partition and CPU/memory resources."""
    prof = yaml.safe_load((ROOT / "workflows" / "profiles" / "slurm" / "config.yaml")
                          .read_text())
    prof["default-resources"] = {**prof["default-resources"], "slurm_partition": "debug",
                                 "cpus_per_task": 1, "mem_mb": 1000, "gpu": 0, "runtime": 30}
    prof["set-resources"] = {rule: {**res, "cpus_per_task": 1, "mem_mb": 1000}
                             for rule, res in prof["set-resources"].items()}
    prof.update({"slurm-init-seconds-before-status-checks": 2,
                 "seconds-between-status-checks": 2, "latency-wait": 10})
    d = tmp / "profile"
    d.mkdir()
    (d / "config.yaml").write_text(yaml.safe_dump(prof))
    return d


def _snakemake(workdir: Path, profile: Path, env: dict, *targets: str, timeout: float = 900
               ) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "snakemake"), *targets, "--profile", str(profile), "--configfile",
         str(workdir / "config.yaml")], cwd=workdir, env=env, capture_output=True,
        text=True, timeout=timeout)


def _sacct(env: dict, since: str) -> list[dict]:
    out = subprocess.run(["sacct", "-X", "-n", "-P", "-S", since, "-o",
                          "JobID,Comment,State,NNodes,NodeList,Elapsed"], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    keys = ["id", "comment", "state", "nnodes", "nodes", "elapsed"]  # comment: rule, wildcards
    return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]


def _slurm_logs(workdir: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-1500:] for p in
                     sorted((workdir / ".snakemake").rglob("slurm_logs/**/*.log"))[-6:])


def test_the_workflow_through_slurm(slurm, tmp_path):
    """A run cut short (only the MFU records asked for), then the whole workflow: it resumes
    (nothing finished is submitted again), every job went through sbatch (sacct counts them),
    the crashing program is a failed record, the report renders; then a rerun is a no-op."""
    nnodes = len(slurm["nodes"])
    copy_workflow(tmp_path, _slurm_config(nnodes))
    env = _slurm_env(slurm)
    profile = _profile(tmp_path)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    results = tmp_path / "results" / "slurm-test"
    mfu = [results / "llm_mfu" / "t" / f"{t}.json" for t in ("single", "ddp")]

    part = _snakemake(tmp_path, profile, env, *(str(p.relative_to(tmp_path)) for p in mfu))
    assert part.returncode == 0, part.stderr[-5000:] + _slurm_logs(tmp_path)
    assert part.stderr.count(SUBMITTED) == 3  # the peak, then the two runs
    finished = {p: p.stat().st_mtime_ns for p in mfu}

    rest = _snakemake(tmp_path, profile, env)
    assert rest.returncode == 0, rest.stderr[-5000:] + _slurm_logs(tmp_path)
    assert (tmp_path / "reports" / "index.html").exists()
    assert {p: p.stat().st_mtime_ns for p in mfu} == finished  # resumed, not redone
    assert "rule_llm_point" not in "\n".join(
        line for line in rest.stderr.splitlines() if SUBMITTED in line)

    jobs = [j for j in _sacct(env, since) if j["comment"].startswith("rule_")]  # the plugin's
    submitted = part.stderr.count(SUBMITTED) + rest.stderr.count(SUBMITTED)
    assert len(jobs) >= 8 and len(jobs) == submitted, (jobs, rest.stderr[-3000:])
    assert all(j["state"] == "COMPLETED" for j in jobs), jobs

    crash = read_record(results / "bert_varlen" / "bert" / "external-crash" / "b2_l8.json")
    assert crash.status == Status.FAILED and "simulated crash" in crash.reason
    ddp = read_record(mfu[1])
    assert ddp.status == Status.OK, ddp.reason
    assert ddp.point["world_size"] == nnodes and ddp.workload["nodes"] == nnodes
    if nnodes > 1:
        multi = [j for j in jobs if j["nnodes"] == str(nnodes)]
        assert len(multi) == 1, jobs  # the ddp run: its own allocation of both nodes
    (tmp_path / "sacct.txt").write_text("\n".join("|".join(j.values()) for j in jobs))
    print("\n" + "\n".join(" | ".join(j.values()) for j in jobs))

    again = _snakemake(tmp_path, profile, env)  # nothing changed: nothing submitted
    assert again.returncode == 0 and SUBMITTED not in again.stderr, again.stderr[-2000:]


def test_a_requeued_job_resumes_from_its_last_checkpoint_to_the_bit(slurm, tmp_path):
    """docs/cluster.md's recipe through the local SLURM: `sbatch --requeue` around torchrun. A
    rank hangs (SIGSTOP, a timeout too long to wait for), the job is requeued as SLURM does for
    a failed node (`scontrol requeue`), and the second run resumes from the newest committed
    checkpoint in the shared folder: every loss equals an uninterrupted run's, nothing left."""
    from suite.experiments.llm_resilience import _steps
    from suite.resilience.supervise import TAG, kill_tagged, launch, read_events, torchrun

    train = {**TRAIN, "steps": 10, "timeout_s": 300}
    spec = {"train": train, "trainer": "ddp", "markers": str(tmp_path / "markers"),
            "ckpt": {"every": 2, "modes": ["sync"], "dir": str(tmp_path / "ckpt")}}
    fault = {"kind": "hang", "step": 6, "rank": 1}
    argv = torchrun({**spec, "fault": fault}, tmp_path / "events", 2, 0, python=str(BIN /
                    "python"))
    script = tmp_path / "job.sh"
    tag = f"requeue-{os.getpid()}"  # in every process of the job: any left is found by it
    script.write_text(f"#!/bin/bash\nexport {TAG}={tag}\n"
                      + " ".join(shlex.quote(a) for a in argv) + "\n")
    env = _slurm_env(slurm)
    sbatch = subprocess.run(["sbatch", "--parsable", "--requeue", "--nodes=1", "--ntasks=1",
                             "--cpus-per-task=2", "--partition=debug", "--open-mode=append",
                             f"--output={tmp_path / 'job.log'}", str(script)],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert sbatch.returncode == 0, sbatch.stderr
    job = sbatch.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 180
        while not any(e["event"] == "fault" for e in read_events(tmp_path / "events")):
            assert time.monotonic() < deadline, (tmp_path / "job.log").read_text()[-3000:]
            time.sleep(0.5)
        subprocess.run(["scontrol", "requeue", job], env=env, check=True, timeout=60)
        # the uninterrupted run, while the requeued job waits out SLURM's cred_expire
        ref = launch({**spec, "ckpt": {**spec["ckpt"], "dir": str(tmp_path / "ref-ckpt")}},
                     tmp_path / "ref", 2, 0, 120, log=None)
        while _state(env, job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            assert time.monotonic() < deadline, (tmp_path / "job.log").read_text()[-3000:]
            time.sleep(1)
    finally:
        subprocess.run(["scancel", job], env=env, timeout=60)
    log = (tmp_path / "job.log").read_text()
    assert _state(env, job) == "COMPLETED", log[-3000:]
    assert ref.code == 0, ref.tail()
    reference = {s: e["loss"] for s, e in _steps(read_events(tmp_path / "ref")).items()}
    events = read_events(tmp_path / "events")
    starts = [e for e in events if e["event"] == "start" and e["rank"] == 0]
    assert [e["slurm_restart_count"] for e in starts] == [0, 1], log[-3000:]
    restored = [e for e in events if e["event"] == "restored"]
    assert {e["step"] for e in restored} == {5}  # checkpoints every 2: steps 1, 3, 5
    losses = {s: e["loss"] for s, e in _steps(events).items()}
    assert losses == reference  # every step, the redone ones included, to the bit
    assert not list((tmp_path / "ckpt").glob("*.tmp")) and kill_tagged(tag) == []


def _state(env: dict, job: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "--oneliner", job], env=env,
                         capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"JobState=(\S+)", out)
    return found.group(1) if found else "UNKNOWN"
