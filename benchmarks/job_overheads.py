"""What a job pays before it measures, and what the shared oracle and the warm launchers save:
each pair timed end to end, interleaved, in one run on one machine.

- **Shared oracle**: one BERT point job of the config (`seedbench run`, as the bert_point rule
  calls it) reading the point's oracle from the shared folder (`--oracle-dir`, where the first
  job of the point wrote it) against the same job computing its own (no folder). The first
  job, which computes and writes it, is timed apart: a point with N systems saves about
  (N - 1) x (own - shared).
- **Warm supervisor**: a one-process and a two-rank training job as the workflow calls them
  (`seedbench train`, whose supervisor a warm server forks, and which then has its launcher or
  process forked warm too) against the same command with its supervisor in a cold interpreter
  (it imports torch to read its trainer's launcher; before, only its child started warm).
- **Warm launcher**: a two-rank DDP training job (`seedbench train`, as the llm_point rule
  calls it) whose torchrun agent is forked warm (`python -m torch.distributed.run`, the
  default) against the same job started by the `torchrun` console script (a cold interpreter
  importing torch). Both start their ranks warm.

    .venv/bin/python benchmarks/job_overheads.py [--config workflows/config/quick.yaml] [--reps 3]

Writes --out (JSON: every wall time, the medians and their differences) and prints a summary.
Run it on an otherwise idle machine: each job claims every core, as in the workflow.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import common
from suite.config import BertVarlenConfig, load
from suite.experiments import llm_plan
from suite.experiments.plan import jobs
from suite.launch import jobs as launch
from suite.trainers import registry as trainers

SEEDBENCH = str(Path(sys.executable).with_name("seedbench"))


def _wall(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    return time.perf_counter() - start


def _ok(out: Path, what: str) -> dict:
    record = json.loads(out.read_text())
    if record["status"] != "ok":
        raise SystemExit(f"{what}: status {record['status']} ({record.get('reason')})")
    return record


def oracle_pair(cfg: BertVarlenConfig, reps: int, tmp: Path) -> dict:
    """The bert_varlen point of the config, its padded baseline's job with and without the
    shared oracle."""
    job = next(j for js in jobs(cfg).values() for j in js
               if j.experiment == "bert_varlen" and j.system == cfg.padded_baseline)
    folder, out = tmp / "oracles", tmp / "point.json"
    run = [SEEDBENCH, "run", job.experiment, "--subject", job.subject, "--system", job.system,
           "--batch-size", str(job.batch_size), "--max-seq-len", str(job.max_seq_len),
           "--section-json", json.dumps(cfg.to_dict()), "--out", str(out)]
    shared = [*run, "--oracle-dir", str(folder)]
    want = {"first": "computed by this job, shared", "own": "computed by this job",
            "shared": "shared file"}
    times: dict[str, list[float]] = {"first": [], "own": [], "shared": []}
    for rep in range(reps):
        shutil.rmtree(folder, ignore_errors=True)
        order = ("first", "own", "shared") if rep % 2 == 0 else ("first", "shared", "own")
        for mode in order:
            times[mode].append(_wall(run if mode == "own" else shared))
            source = _ok(out, mode)["correctness"]["reference_source"]
            if not (source == want[mode] if mode == "own" else source.startswith(want[mode])):
                raise SystemExit(f"{mode}: the record's reference was {source!r}")
    med = {k: median(v) for k, v in times.items()}
    return {"point": job._asdict(), "times_s": times, "median_s": med,
            "saved_per_system_job_s": med["own"] - med["shared"]}


def launcher_pair(config: dict, reps: int, tmp: Path) -> dict:
    """The first two-rank torchrun job the config plans, its agent forked warm or cold."""
    job = next(j for js in llm_plan.jobs(config).values() for j in js
               if j.nprocs == 2 and j.nnodes == 1
               and trainers.create(j.trainer).launcher == "torchrun")
    out, steps = tmp / "train.json", tmp / "train.steps.jsonl"
    args = ["--experiment", job.experiment, "--train-json", json.dumps(job.train),
            "--trainer", job.trainer,
            "--check-steps", str(job.check_steps), "--out", str(out), "--steplog", str(steps)]
    warm_cmd = launch.command(job.trainer, 2, args, warm=True)
    if warm_cmd[:3] != [sys.executable, "-m", "torch.distributed.run"]:
        raise SystemExit(f"unexpected launcher line {warm_cmd[:3]}")
    cold_cmd = [str(Path(sys.executable).with_name("torchrun")), *warm_cmd[3:]]

    def supervised(cmd: list[str], warm_agent: bool) -> float:
        start = time.perf_counter()
        launch.run_isolated(cmd, out, None, 600, warm=warm_agent)
        elapsed = time.perf_counter() - start
        if _ok(out, "train")["env"]["process_start"] != "warm fork":
            raise SystemExit("the ranks did not start warm")
        return elapsed

    times: dict[str, list[float]] = {"cold_agent": [], "warm_agent": []}
    for rep in range(reps):
        order = ("cold_agent", "warm_agent") if rep % 2 == 0 else ("warm_agent", "cold_agent")
        for mode in order:
            times[mode].append(supervised(warm_cmd if mode == "warm_agent" else cold_cmd,
                                          mode == "warm_agent"))
    med = {k: median(v) for k, v in times.items()}
    return {"job": {"experiment": job.experiment, "label": job.label, "trainer": job.trainer},
            "times_s": times, "median_s": med,
            "saved_per_job_s": med["cold_agent"] - med["warm_agent"]}


def supervisor_pair(config: dict, reps: int, tmp: Path) -> dict:
    """The first one-process and the first two-rank job the config plans, each as the workflow
    calls it (``seedbench train``: the supervisor forwarded to a warm server, which then forks
    its launcher or its one process too) against the same command with the supervisor run
    cold in a fresh interpreter (as before: it imported torch, and only its child started
    warm)."""
    planned = [j for js in llm_plan.jobs(config).values() for j in js if j.nnodes == 1]
    picked = {"single": next(j for j in planned if j.nprocs == 1),
              "two_ranks": next(j for j in planned if j.nprocs == 2)}
    cold_main = [sys.executable, "-c", "import sys; from suite.cli import main; "
                                       "sys.exit(main(sys.argv[1:]))"]
    result = {}
    for kind, job in picked.items():
        out, steps = tmp / f"{kind}.json", tmp / f"{kind}.steps.jsonl"
        args = ["train", job.experiment, "--trainer", job.trainer, "--nprocs", str(job.nprocs),
                "--check-steps", str(job.check_steps), "--train-json", json.dumps(job.train),
                "--out", str(out), "--steplog", str(steps)]
        times: dict[str, list[float]] = {"cold_supervisor": [], "warm_supervisor": []}
        for rep in range(reps):
            order = (("cold_supervisor", "warm_supervisor") if rep % 2 == 0
                     else ("warm_supervisor", "cold_supervisor"))
            for mode in order:
                times[mode].append(_wall([*(cold_main if mode == "cold_supervisor"
                                            else [SEEDBENCH]), *args]))
                if _ok(out, kind)["env"]["process_start"] != "warm fork":
                    raise SystemExit(f"{kind} ({mode}): its process did not start warm")
        med = {k: median(v) for k, v in times.items()}
        result[kind] = {"job": {"experiment": job.experiment, "label": job.label,
                                "trainer": job.trainer, "nprocs": job.nprocs},
                        "times_s": times, "median_s": med,
                        "saved_per_job_s": med["cold_supervisor"] - med["warm_supervisor"]}
    return result


def main() -> int:
    args = common.arguments(__doc__, "job_overheads", reps=3)
    config = load(args.config)
    cfg = BertVarlenConfig.from_dict(config["bert_varlen"])
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # what torchrun gives ranks either way
    with tempfile.TemporaryDirectory() as tmp:
        oracle = oracle_pair(cfg, args.reps, Path(tmp))
        launcher = launcher_pair(config, args.reps, Path(tmp))
        supervisor = supervisor_pair(config, args.reps, Path(tmp))
    common.write("job_overheads", args, {"oracle": oracle, "launcher": launcher,
                                         "supervisor": supervisor})
    o, la = oracle["median_s"], launcher["median_s"]
    p = oracle["point"]
    print(f"oracle, {p['experiment']} {p['system']} b{p['batch_size']}_l{p['max_seq_len']}: "
          f"own {o['own']:.1f} s, shared {o['shared']:.1f} s "
          f"({oracle['saved_per_system_job_s']:.1f} s a system job); the first job, "
          f"which writes it, {o['first']:.1f} s", file=sys.stderr)
    print(f"launcher, {launcher['job']['experiment']} {launcher['job']['trainer']}: cold agent "
          f"{la['cold_agent']:.1f} s, warm agent {la['warm_agent']:.1f} s "
          f"({launcher['saved_per_job_s']:.1f} s a job)", file=sys.stderr)
    for kind, s in supervisor.items():
        m = s["median_s"]
        print(f"supervisor, {s['job']['experiment']} {s['job']['trainer']} ({kind}): cold "
              f"{m['cold_supervisor']:.1f} s, warm {m['warm_supervisor']:.1f} s "
              f"({s['saved_per_job_s']:.1f} s a job)", file=sys.stderr)
    print(f"-> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
