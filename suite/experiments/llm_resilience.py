"""MegaScale's stability half, measured (``suite.resilience``): per trainer, three jobs.

- ``checkpoint``: one run whose checkpoints take turns between the store's modes (synchronous
  ``dcp.save``; two-stage ``dcp.async_save`` persisted by a process, and by a thread; each
  fsynced and committed atomically), so every mode's stall is taken under the same conditions.
  A checkpoint's stall is what training lost to it: the time the loop waited (the snapshot, or
  the whole write) plus, for a two-stage one, what the steps run beside its background write
  took over the healthy median, plus any wait for the write to end before the next checkpoint;
  a mode's first checkpoint (its one-time set-up) apart. Also: bytes, persist time and rate,
  the time to read it back, and this disk's fsynced write rate beside them.
- ``faults``: the uninterrupted run and one run per fault kind under torchrun's agent
  (``--max-restarts``), one after another, and beside them the hang, which mostly waits
  (``WAITING``; each record says what ran beside it): time to detect (the first of the peers'
  error and the agent's "failed (exitcode ...)" line), the restart broken into the agent's
  shutdown, the new processes' start and rendezvous, the restore and the first step; the work
  lost (steps since the last committed checkpoint); every step's loss against the
  uninterrupted run's (equal to the bit, or ``incorrect``); and what the run left behind.
- ``straggler``: phases with no rank or one rank slowed by a busy process pinned to its core;
  the per-rank monitor names the slow rank, and the throughput lost against the clean phase.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from suite import env as envmod
from suite.experiments.llm_plan import RESILIENCE_EXPERIMENT as EXPERIMENT
from suite.experiments.llm_plan import ResilienceJob
from suite.records import Record, Status, Unavailable, new_record, outcome, write_record
from suite.resilience.monitor import THRESHOLD, find_stragglers, rank_table
from suite.resilience.store import MODES
from suite.resilience.supervise import Launch, launch, read_events

NVRX = "checkpoint-nvrx-async"
DISK_PROBE_BYTES = 256 * 2**20


def run_job(job: ResilienceJob, out_dir: Path, work_dir: Path | None = None,
            timeout_s: float = 600.0, log=print) -> list[Path]:
    """Run one job; a record per system of its group in ``out_dir`` (any status)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"seedbench-{job.trainer}-{job.group}-",
                                 dir=work_dir))
    records = {s: new_record(EXPERIMENT, s, {"trainer": job.trainer, "group": job.group,
                                             "world_size": job.nprocs},
                             {"train": job.train, job.group: job.spec}) for s in job.systems}
    job_outcome = new_record(EXPERIMENT, job.group, {}, {})
    try:
        with outcome(job_outcome):
            _check(job)
            reason = _unsupported(job.trainer)
            if reason:
                raise Unavailable(reason)
            {"checkpoint": _checkpoint, "faults": _faults, "straggler": _straggler}[job.group](
                job, work, records, timeout_s, log)
        for rec in records.values():  # what the job as a whole ended on, where nothing else
            if rec.status == Status.FAILED and not rec.reason:
                rec.status, rec.reason = job_outcome.status, job_outcome.reason or (
                    "the job ended before this system was measured")
                rec.derived.update({k: v for k, v in job_outcome.derived.items()
                                    if k == "traceback"})
        _keep_events(work, out_dir / "events" / job.group)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    paths = []
    env = envmod.capture()
    for system, rec in records.items():
        rec.env = env
        paths.append(write_record(rec, out_dir / f"{system}.json"))
    return paths


def _check(job: ResilienceJob) -> None:
    """The rules between a group's settings and the run (a bad one fails this job only)."""
    s = job.spec
    if job.group != "checkpoint" and job.nprocs < 2:
        raise ValueError(f"the {job.group} runs need >= 2 ranks (a peer to lose or to compare "
                         f"with); this job has {job.nprocs}")
    if job.group == "faults":
        if s["step"] >= s["steps"]:
            raise ValueError(f"faults.step={s['step']} is past the run's end: it must be < "
                             f"steps={s['steps']}")
        if s["rank"] >= job.nprocs:
            raise ValueError(f"faults.rank={s['rank']} must be < the {job.nprocs} ranks")
        if s["every"] >= s["steps"]:
            raise ValueError(f"faults.every={s['every']} leaves no checkpoint before the end "
                             f"(steps={s['steps']})")
    if job.group == "checkpoint":
        count = len(range(s["every"] - 1, job.train["steps"] - 1, s["every"]))
        if count < len(MODES):
            raise ValueError(f"checkpoint.every={s['every']} over steps={job.train['steps']} "
                             f"leaves {count} checkpoint(s) before the end; the {len(MODES)} "
                             f"modes take turns, so at least {len(MODES)} are needed")
    if job.group == "straggler":
        bad = [p for p in s["phases"] if p is not None and p >= job.nprocs]
        if bad:
            raise ValueError(f"straggler.phases: rank(s) {bad} must be < the {job.nprocs} "
                             f"ranks (or null for none)")
        if len(os.sched_getaffinity(0)) < job.nprocs:
            raise Unavailable(f"the straggler runs pin each rank to a core of its own: "
                              f"{job.nprocs} ranks, {len(os.sched_getaffinity(0))} core(s)")


def _unsupported(trainer: str) -> str:
    from suite.trainers import registry as trainers

    engine = trainers.create(trainer)
    ok, why = engine.available()
    if not ok:
        return why
    if engine.launcher != "torchrun":
        return (f"trainer {trainer!r} runs under {engine.launcher!r}; the resilience runs "
                f"restart ranks under torchrun's agent")
    return engine.checkpoint_unsupported


def _keep_events(work: Path, dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    for src in sorted(work.glob("*/rank*.jsonl")):
        (dest / src.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest / src.parent.name / src.name)


def _spec(job: ResilienceJob, work: Path, **extra: Any) -> dict[str, Any]:
    return {"train": job.train, "trainer": job.trainer, "markers": str(work / "markers"),
            **extra}


def _failed(run: Launch, what: str, events: Path) -> str:
    """Why a launch failed: the first error a rank recorded, then the launcher's last lines."""
    errors = [e for e in read_events(events) if e["event"] == "error"] if events.is_dir() else []
    cause = f" (rank {errors[0]['rank']}: {errors[0]['error']})" if errors else ""
    ended = "timed out" if run.timed_out else f"exited with code {run.code}"
    return f"{what} {ended}{cause}; last output:\n{run.tail()}"


def _steps(events: list[dict], rank: int = 0) -> dict[int, dict]:
    """Each step's last event on ``rank`` (a step redone after a restart: the redo)."""
    return {e["step"]: e for e in events if e["event"] == "step" and e["rank"] == rank}


# ----------------------------------------------------------------------------- checkpoint


def disk_write_rate(folder: Path, nbytes: int = DISK_PROBE_BYTES) -> dict[str, Any]:
    """This folder's fsynced sequential write rate (what a synchronous checkpoint waits for)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "disk-probe.bin"
    block = os.urandom(4 * 2**20)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(nbytes // len(block)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - t0
    path.unlink()
    return {"bytes": nbytes, "seconds": seconds, "bytes_per_s": nbytes / seconds,
            "how": "sequential 4 MiB writes, then fsync, in the checkpoint folder"}


def _checkpoint(job: ResilienceJob, work: Path, records: dict[str, Record], timeout_s: float,
                log) -> None:
    disk = disk_write_rate(work / "ckpt")
    spec = _spec(job, work, ckpt={"dir": str(work / "ckpt"), "every": job.spec["every"],
                                  "modes": list(MODES), "restore_check": True})
    run = launch(spec, work / "run", job.nprocs, 0, timeout_s, log)
    events = read_events(work / "run")
    if run.code != 0:
        raise RuntimeError(_failed(run, "the checkpoint run", work / "run"))
    per_mode = checkpoint_stalls(events, job.train["warmup_steps"])
    for mode, figures in per_mode.items():
        rec = records[f"checkpoint-{mode}"]
        rec.derived = {**figures, "disk": disk, "leftovers": run.leftovers}
        rec.timing = {"unit": "s", "samples": figures["stalls_s"],
                      "timer": "time.monotonic on rank 0 (stall) and time.perf_counter per step"}
        rec.status = Status.OK
    nvrx = records[NVRX]
    with outcome(nvrx):
        raise Unavailable(nvrx_unavailable(job.train.get("device", "auto")))


def nvrx_unavailable(device: str) -> str:
    """Why nvidia-resiliency-ext's async checkpoint is not run here."""
    try:
        import nvidia_resiliency_ext  # noqa: F401
    except ImportError:
        return ("nvidia-resiliency-ext is not installed (pip install nvidia-resiliency-ext=="
                "0.4.1: a CUDA machine's peer of DCP's async_save)")
    import torch

    if not torch.cuda.is_available() or device == "cpu":
        return ("nvidia-resiliency-ext's TorchAsyncCheckpoint calls torch.cuda.synchronize() "
                "and puts its queue's tensors on torch.cuda.current_device(): CUDA only, and "
                "this run is on the CPU")
    return ("nvidia-resiliency-ext is installed and CUDA is here, but its TorchAsyncCheckpoint "
            "(torch.save per rank in a persistent process) is not wired into this suite's "
            "checkpoint store yet")


def checkpoint_stalls(events: list[dict], warmup: int) -> dict[str, dict[str, Any]]:
    """Per mode: each checkpoint's stall and the figures around it, from rank 0's events."""
    steps = _steps(events)
    checkpoints = [e for e in events if e["event"] == "checkpoint" and e["rank"] == 0]
    commits = {e["step"]: e for e in events if e["event"] == "committed" and e["rank"] == 0}
    restores = {e["mode"]: e for e in events if e["event"] == "restore" and e["rank"] == 0}
    windows: dict[int, list[int]] = {}
    for c in checkpoints:
        end = commits[c["step"]]["t"]
        windows[c["step"]] = [s for s, e in steps.items() if c["t"] < e["t"] <= end]
    busy = {s for w in windows.values() for s in w}
    healthy = statistics.median(e["step_s"] for s, e in steps.items()
                                if s >= warmup and s not in busy)
    out: dict[str, dict[str, Any]] = {}
    for c in checkpoints:
        done = commits[c["step"]]
        beside = sum(steps[s]["step_s"] - healthy for s in windows[c["step"]])
        stall = c["blocked_s"] + beside + done.get("waited_s", 0.0)
        m = out.setdefault(c["mode"], {"mode": c["mode"], "checkpoints": []})
        m["checkpoints"].append({"step": c["step"], "blocked_s": c["blocked_s"],
                                 "steps_beside": len(windows[c["step"]]),
                                 "beside_s": beside, "waited_s": done.get("waited_s", 0.0),
                                 "stall_s": stall, "persisted_s": done["persisted_s"],
                                 "nbytes": done["nbytes"]})
    for mode, m in out.items():
        rows = m["checkpoints"]
        # a mode's first checkpoint also pays its one-time set-up (staging buffers, the
        # persister process): reported apart, the stall is the median of the others
        first, *steady = [r["stall_s"] for r in rows]
        m["first_stall_s"], m["stalls_s"] = first, steady or [first]
        persist = statistics.median(r["persisted_s"] for r in rows)
        nbytes = rows[0]["nbytes"]
        m.update({"stall_s": statistics.median(m["stalls_s"]), "healthy_step_s": healthy,
                  "persist_s": persist, "state_bytes": nbytes,
                  "persist_bytes_per_s": nbytes / persist if persist else None,
                  "restore_s": restores[mode]["seconds"] if mode in restores else None})
    return out


# ----------------------------------------------------------------------------- faults


# Faults whose run mostly waits (a collective timeout, torchrun's grace for a stopped rank) run
# beside the others, which run one after another.
WAITING = ("hang",)


def _faults(job: ResilienceJob, work: Path, records: dict[str, Record], timeout_s: float,
            log) -> None:
    f = job.spec
    ckpt = {"every": f["every"], "modes": [f["mode"]]}

    def run(kind: str | None) -> Launch:
        folder = work / (kind or "none")
        fault = {"fault": {"kind": kind, "step": f["step"], "rank": f["rank"]},
                 "markers": str(folder / "markers")} if kind else {}
        return launch(_spec(job, work, ckpt={**ckpt, "dir": str(folder / "ckpt")}, **fault),
                      folder, job.nprocs, f["max_restarts"] if kind else 0, timeout_s, log,
                      shutdown_timeout_s=f["shutdown_timeout_s"])

    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = {k: pool.submit(run, k) for k in f["kinds"] if k in WAITING}
        ref = run(None)
        runs = {k: run(k) for k in f["kinds"] if k not in WAITING}
        runs.update({k: future.result() for k, future in waiting.items()})
    if ref.code != 0:
        raise RuntimeError(_failed(ref, "the uninterrupted run", work / "none"))
    reference = {s: e["loss"] for s, e in _steps(read_events(work / "none")).items()}
    rec = records["fault-none"]
    rec.derived = {"losses": [reference[s] for s in sorted(reference)],
                   "wall_s": ref.ended - ref.started, "leftovers": ref.leftovers}
    rec.status = Status.OK
    for kind in f["kinds"]:
        rec = records[f"fault-{kind}"]
        with outcome(rec):
            _judge(rec, kind, runs[kind], work / kind, reference, job,
                   beside=[k for k in f["kinds"] if (k in WAITING) != (kind in WAITING)])


def _judge(rec: Record, kind: str, run: Launch, folder: Path, reference: dict[int, float],
           job: ResilienceJob, beside: list[str]) -> None:
    """One fault run's record: the recovery's figures, ``incorrect`` when a loss differs."""
    f = job.spec
    rec.derived = {"leftovers": run.leftovers, "timeout_s": job.train["timeout_s"],
                   "max_restarts": f["max_restarts"],
                   "shutdown_timeout_s": f["shutdown_timeout_s"], "ran_beside": beside,
                   "agent_lines": [line for _, line in run.lines if "exitcode" in line][:6]}
    if run.code != 0:
        limit = (f"torchrun --max-restarts {f['max_restarts']} allows no restart"
                 if f["max_restarts"] == 0 else
                 f"the {f['max_restarts']} restart(s) torchrun allows were not enough")
        raise RuntimeError(f"the {kind} fault ended the run: {limit}; "
                           + _failed(run, "torchrun", folder))
    rec.derived.update(recovery(read_events(folder), run, reference))
    if rec.derived["bit_exact"]:
        rec.status = Status.OK
        return
    rec.status = Status.INCORRECT
    rec.reason = (f"after the {kind} fault the losses differ from the uninterrupted run's "
                  f"(max |diff| {rec.derived['max_abs_loss_diff']:.3g})")


def recovery(events: list[dict], run: Launch, reference: dict[int, float]) -> dict[str, Any]:
    """Detection, restart, lost work and the losses' equality of one fault run."""
    fault = next(e for e in events if e["event"] == "fault")
    attempt = fault["attempt"]
    seen = [(e["t"], f"rank {e['rank']}: {e['kind']}") for e in events
            if e["event"] == "error" and e["attempt"] == attempt and e["t"] >= fault["t"]
            and e["kind"] != "other"]
    seen += [(t, f"torchrun's agent: a worker exited with code {code}")
             for t, code in run.agent_failures() if t >= fault["t"]]
    t_detect, detected_by = min(seen)
    nxt = [e for e in events if e["attempt"] == attempt + 1]
    t_spawn = min(e["t"] for e in nxt if e["event"] == "start")
    t_rdzv = max(e["t"] for e in nxt if e["event"] == "rendezvous")
    restored = [e for e in nxt if e["event"] == "restored"]
    t_restored = max((e["t"] for e in restored), default=t_rdzv)
    t_train = min(e["t"] for e in nxt if e["event"] == "step" and e["rank"] == 0)
    resumed_from = restored[0]["step"] if restored else None
    redone = fault["step"] - (resumed_from + 1 if resumed_from is not None else 0)
    losses = {s: e["loss"] for s, e in _steps(events).items()}
    diffs = [abs(losses.get(s, float("nan")) - v) for s, v in reference.items()]
    healthy = statistics.median(e["step_s"] for e in _steps(events).values())
    return {
        "fault_step": fault["step"], "fault_rank": fault["rank"], "detected_by": detected_by,
        "detect_s": t_detect - fault["t"],
        "shutdown_s": t_spawn - t_detect,  # the agent stops the group, starts the new one
        "startup_s": t_rdzv - t_spawn,  # interpreter, imports, rendezvous
        "restore_s": t_restored - t_rdzv,  # model, engine, checkpoint read
        "first_step_s": t_train - t_restored,
        "recovery_s": t_train - t_detect, "downtime_s": t_train - fault["t"],
        "resumed_from_step": resumed_from, "steps_redone": redone,
        "lost_work_s": redone * healthy,
        "losses": [losses.get(s) for s in sorted(reference)],
        "bit_exact": all(d == 0 for d in diffs),
        "max_abs_loss_diff": max(diffs) if diffs else None,
        "final_loss": losses.get(max(reference)), "reference_final_loss": reference[
            max(reference)],
        "attempts": 1 + max(e["attempt"] for e in events),
        # checkpoints a restart passed over (unfinished, truncated), each with its reason
        "checkpoints_skipped": sorted({e["why"] for e in events if e["event"] == "skipped"}),
    }


# ----------------------------------------------------------------------------- stragglers


def _straggler(job: ResilienceJob, work: Path, records: dict[str, Record], timeout_s: float,
               log) -> None:
    s = job.spec
    run = launch(_spec(job, work, straggler={"phases": s["phases"],
                                             "steps": s["steps_per_phase"]}),
                 work / "run", job.nprocs, 0, timeout_s, log)
    if run.code != 0:
        raise RuntimeError(_failed(run, "the straggler run", work / "run"))
    rec = records["straggler"]
    rec.derived = {**straggler_phases(read_events(work / "run"), s["steps_per_phase"]),
                   "leftovers": run.leftovers}
    rec.status = Status.OK


def straggler_phases(events: list[dict], per: int) -> dict[str, Any]:
    """Per phase: the rank slowed, the ranks the monitor named, each rank's compute, and the
    throughput lost against the first clean phase."""
    phases = [e for e in events if e["event"] == "phase"]
    steps = [e for e in events if e["event"] == "step"]
    out = []
    for p in phases:
        lo, hi = p["index"] * per + 1, (p["index"] + 1) * per  # the phase's first step ramps
        inside = [e for e in steps if lo <= e["step"] < hi]
        compute: dict[int, list[float]] = {}
        for e in inside:
            compute.setdefault(e["rank"], []).append(e["compute_s"])
        step_s = [e["step_s"] for e in inside if e["rank"] == 0]
        named, ratios = find_stragglers(compute)
        out.append({"index": p["index"], "slowed": p["slowed"], "named": named,
                    "ratios": {str(r): x for r, x in ratios.items()},
                    "correct": named == ([] if p["slowed"] is None else [p["slowed"]]),
                    "step_s": statistics.median(step_s),
                    "ranks": rank_table(compute, step_s)})
    clean = next((p["step_s"] for p in out if p["slowed"] is None), None)
    for p in out:
        p["throughput_lost"] = 1 - clean / p["step_s"] if clean else None
    return {"phases": out, "threshold": THRESHOLD,
            "all_correct": all(p["correct"] for p in out),
            "slowdown": ("a busy process pinned to the slowed rank's core (each rank pinned to "
                         "a core of its own, one thread)")}
