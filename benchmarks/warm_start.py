"""What warm starts (suite.launch.warm) save per point job: BERT point jobs of a workflow config
(`seedbench run`, as the bert_point rule calls it) timed end to end, cold (SEEDBENCH_WARM=0) and
warm, interleaved in one run on one machine, wall-clock per job. The server's own start (its
imports, paid once per idle period) is timed apart.

    .venv/bin/python benchmarks/warm_start.py [--config workflows/config/quick.yaml] [--reps 2]

Writes --out (JSON: every job's wall times in both modes, the sums and their ratio) and prints
a table. Run it on an otherwise idle machine: each job claims every core, as in the workflow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import common
from suite.config import BertVarlenConfig, load
from suite.experiments.plan import jobs
from suite.launch import warm

# one job of each kind the quick default runs (experiment, system prefix); the first match wins
KINDS = (("bert_varlen", "reference"), ("bert_varlen", "torch-eager"),
         ("bert_ablation", "ladder-0"), ("bert_variants", "torch-eager"),
         ("bert_mha", "varlen"), ("bert_fused_ops", "fused"))


def pick(cfg: BertVarlenConfig):
    planned = [j for js in jobs(cfg).values() for j in js]
    for experiment, system in KINDS:
        found = [j for j in planned if j.experiment == experiment and j.system == system]
        if found:
            yield found[0]


def time_job(job, section: str, out: Path, warm_on: bool) -> float:
    cmd = [str(Path(sys.executable).with_name("seedbench")), "run", job.experiment,
           "--subject", job.subject, "--system", job.system, "--batch-size",
           str(job.batch_size), "--max-seq-len", str(job.max_seq_len), "--section-json",
           section, "--out", str(out)]
    env = {**os.environ, warm.ENV_SWITCH: "1" if warm_on else "0"}
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    record = json.loads(out.read_text())
    expected = "warm fork" if warm_on else "cold"
    if record["status"] != "ok" or record["env"]["process_start"] != expected:
        raise SystemExit(f"{job}: status {record['status']} ({record.get('reason')}), "
                         f"started {record['env']['process_start']}, expected {expected}")
    return elapsed


def main() -> int:
    args = common.arguments(__doc__, "warm_start", reps=2)
    cfg = BertVarlenConfig.from_dict(load(args.config)["bert_varlen"])
    section = json.dumps(cfg.to_dict())
    start = time.perf_counter()  # the server this environment's jobs will use
    first = warm.popen([sys.executable, "-c", "pass"])
    if first is None or first.wait(timeout=300) != 0:
        raise SystemExit("no warm server answered")
    server_start_s = time.perf_counter() - start
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for job in pick(cfg):
            times = {"cold": [], "warm": []}
            for rep in range(args.reps):
                order = ("cold", "warm") if rep % 2 == 0 else ("warm", "cold")
                for mode in order:
                    times[mode].append(time_job(job, section, Path(tmp) / "r.json",
                                                mode == "warm"))
            rows.append({**job._asdict(), "cold_s": times["cold"], "warm_s": times["warm"]})
            print(f"{job.experiment:14} {job.subject:11} {job.system:12} "
                  f"b{job.batch_size}_l{job.max_seq_len}: cold {median(times['cold']):5.1f} s, "
                  f"warm {median(times['warm']):5.1f} s", file=sys.stderr)
    cold = sum(median(r["cold_s"]) for r in rows)
    warm_sum = sum(median(r["warm_s"]) for r in rows)
    result = {"server_start_s": server_start_s, "jobs": rows,
              "median_sum_cold_s": cold, "median_sum_warm_s": warm_sum,
              "saved_per_job_s": (cold - warm_sum) / len(rows), "warm_over_cold": warm_sum / cold}
    common.write("warm_start", args, result)
    print(f"{len(rows)} jobs, medians summed: cold {cold:.1f} s, warm {warm_sum:.1f} s "
          f"(warm/cold {warm_sum / cold:.2f}, {result['saved_per_job_s']:.1f} s saved a job); "
          f"server start {server_start_s:.1f} s once -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
