"""A SLURM allocation as the launcher sees it: how many nodes, which hosts, where the ranks meet.

Why: a multi-node training job under SLURM gets its nodes from the allocation, not from the
config. ``seedbench train --nnodes N`` inside an allocation reads it here, checks that it holds
the N nodes the job asks for, and starts one torchrun per node with ``srun`` (one task per node,
``--overlap`` because the job's own command already runs in a step), every torchrun meeting at
the first host of the allocation (c10d rendezvous), as PyTorch's SLURM recipes do
(``scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

RDZV_BASE_PORT = 29400  # torchrun's default c10d port; the job id spreads jobs over 1000 ports
# what srun needs to find the job; the rest of SLURM_ (a step's node and task counts) would
# make it believe the allocation is only the step it was started from
SRUN_KEEPS = frozenset({"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CONF", "SLURM_CLUSTER_NAME"})


class AllocationError(RuntimeError):
    """No usable allocation: what is missing, and what the job asked for."""


@dataclass(frozen=True)
class Allocation:
    job_id: str
    hosts: tuple[str, ...]  # in the allocation's order; the first is the rendezvous host

    @property
    def nnodes(self) -> int:
        return len(self.hosts)

    def rendezvous_endpoint(self) -> str:
        """HOST:PORT of the c10d store: the first host, a port derived from the job id (so that
        two jobs sharing a node do not collide)."""
        digits = "".join(c for c in self.job_id if c.isdigit()) or "0"
        return f"{self.hosts[0]}:{RDZV_BASE_PORT + int(digits) % 1000}"

    def srun_prefix(self, nnodes: int) -> list[str]:
        """``srun`` starting one task per node on ``nnodes`` nodes of the allocation; a task
        that fails kills the others (no rank waits forever on a dead peer)."""
        srun = shutil.which("srun")
        if srun is None:
            raise AllocationError("srun is not on PATH inside a SLURM allocation")
        return [srun, "--overlap", f"--nodes={nnodes}", f"--ntasks={nnodes}",
                "--ntasks-per-node=1", "--kill-on-bad-exit=1", "--job-name=seedbench-train"]


def srun_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for an ``srun`` started inside a job step: without the step's own SLURM_
    and SRUN_ settings (an inner srun inheriting SLURM_NNODES=1 refuses two nodes)."""
    return {k: v for k, v in environ.items()
            if not k.startswith(("SLURM_", "SRUN_")) or k in SRUN_KEEPS}


def _scontrol_hostnames(nodelist: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                         text=True, timeout=30)
    if out.returncode:
        raise AllocationError(f"scontrol show hostnames {nodelist!r} failed: "
                              f"{out.stderr.strip()}")
    return out.stdout.split()


def _scontrol_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id],
                         capture_output=True, text=True, timeout=30)
    if out.returncode:
        raise AllocationError(f"scontrol show job {job_id} failed: {out.stderr.strip()}")
    return dict(word.split("=", 1) for word in out.stdout.split() if "=" in word)


def slurm_allocation(env: Mapping[str, str] | None = None,
                     hostnames: Callable[[str], list[str]] = _scontrol_hostnames,
                     job_info: Callable[[str], dict[str, str]] = _scontrol_job
                     ) -> Allocation | None:
    """The allocation this process runs in (``SLURM_JOB_ID``), or None outside SLURM.

    Its nodes come from ``scontrol show job``, expanded by ``scontrol show hostnames``: inside
    a job step the environment may describe only the step (the Snakemake SLURM plugin drops
    every SLURM_ variable but the job id before its ``srun -n1``, whose step then reports one
    node). ``SLURM_JOB_NODELIST`` is the fallback where ``scontrol`` cannot answer."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        info = job_info(job)
        nodelist, declared = info.get("NodeList"), info.get("NumNodes", "").split("-")[0]
    except (AllocationError, OSError) as e:
        nodelist, declared = env.get("SLURM_JOB_NODELIST"), env.get("SLURM_JOB_NUM_NODES")
        if not nodelist:
            raise AllocationError(f"SLURM job {job}: {e}, and no SLURM_JOB_NODELIST in the "
                                  "environment") from e
    if not nodelist or nodelist == "(null)":
        raise AllocationError(f"SLURM job {job} has no nodes (NodeList={nodelist!r})")
    hosts = tuple(hostnames(nodelist))
    if not hosts or (declared and int(declared) != len(hosts)):
        raise AllocationError(f"the node list {nodelist!r} of SLURM job {job} expands to "
                              f"{list(hosts)}, but it has {declared} node(s)")
    return Allocation(job, hosts)


def multi_node_allocation(nnodes: int, env: Mapping[str, str] | None = None,
                          hostnames: Callable[[str], list[str]] = _scontrol_hostnames,
                          job_info: Callable[[str], dict[str, str]] = _scontrol_job
                          ) -> Allocation:
    """The allocation a job of ``nnodes`` nodes runs on without an explicit rendezvous; an
    error naming what is missing when there is none or it is smaller."""
    alloc = slurm_allocation(env, hostnames, job_info)
    if alloc is None:
        raise AllocationError(f"nnodes={nnodes} needs either --rdzv-endpoint HOST:PORT (a host "
                              "every node reaches) or a SLURM allocation of that many nodes "
                              "(no SLURM_JOB_ID here)")
    if alloc.nnodes < nnodes:
        raise AllocationError(f"the job asks for nnodes={nnodes} but SLURM job {alloc.job_id} "
                              f"holds {alloc.nnodes} node(s): {list(alloc.hosts)}")
    return alloc
