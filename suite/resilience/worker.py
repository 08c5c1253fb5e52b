"""The training loop every rank runs under the supervisor (``suite.resilience.supervise``)::

    torchrun --max-restarts R ... -m suite.resilience.worker --spec JSON --events DIR

It trains one of the suite's engines (``suite.trainers``) on the run's global batches and:

- resumes from the newest committed checkpoint (``suite.resilience.store``) when there is one:
  model, optimizer, the step counter, the data position (the stream is replayed to it) and the
  RNG state, so that every later step's loss equals an uninterrupted run's;
- checkpoints every ``ckpt.every`` steps, cycling through ``ckpt.modes``;
- fires the declared fault once (a marker file keeps a restarted attempt from firing it again):
  ``kill`` (SIGKILL itself), ``hang`` (SIGSTOP itself: only the peers' collective timeout can
  find it), ``nan`` (the logits of that rank's step become NaN; every rank sees the non-finite
  global loss and stops before anything is checkpointed);
- runs the straggler phases (``straggler.phases``: None or the rank slowed by a busy process
  pinned to its core) with every rank pinned to a core of its own;
- writes one JSON line per event to ``DIR/rank<r>.jsonl`` (wall-clock ``t``, comparable
  between the processes of one node). Any error ends the process with status 1 after an
  ``error`` event, so the supervisor's restart path runs.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

FAULTS = ("kill", "hang", "nan")


class NonFiniteLoss(RuntimeError):
    pass


class Events:
    """Append-only JSON lines, one file per rank (``O_APPEND``: a killed process leaves whole
    lines behind)."""

    def __init__(self, folder: Path, rank: int, attempt: int):
        folder.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(folder / f"rank{rank}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.rank, self.attempt = rank, attempt

    def emit(self, event: str, **fields: Any) -> None:
        line = {"t": time.time(), "rank": self.rank, "attempt": self.attempt, "event": event,
                **fields}
        os.write(self.fd, (json.dumps(line) + "\n").encode())


def fire_once(markers: Path, fault: dict[str, Any]) -> bool:
    """True the first time this fault is reached in the whole run (all attempts)."""
    markers.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(markers / f"{fault['kind']}-step{fault['step']}-rank{fault['rank']}",
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def hog(core: int) -> subprocess.Popen:
    """A busy process pinned to ``core``: the slowdown of the rank that shares it."""
    code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def classify(error: BaseException) -> str:
    if isinstance(error, NonFiniteLoss):
        return "nonfinite loss"
    text = str(error).lower()
    if "timed out" in text or "timeout" in text:
        return "collective timeout"
    if any(s in text for s in ("connection", "closed", "reset", "broken pipe", "peer")):
        return "peer lost"
    return "other"


def run(spec: dict[str, Any], events_dir: Path) -> None:
    rank = int(os.environ.get("RANK", 0))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    ev = Events(events_dir, rank, attempt)
    # before the imports: the process's start; under SLURM, how often the job was requeued
    ev.emit("start", pid=os.getpid(),
            slurm_restart_count=int(os.environ.get("SLURM_RESTART_COUNT", 0)))
    import torch
    import torch.distributed as tdist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from suite.experiments.llm_train import build_model, global_batches, rank_slice
    from suite.resilience import store as st
    from suite.resilience.monitor import ComputeTimer
    from suite.trainers import registry as trainers
    from suite.trainers.config import TrainConfig

    hogs: list[subprocess.Popen] = []
    try:
        cfg = TrainConfig.from_dict(spec["train"])
        engine = trainers.create(spec["trainer"])
        straggler = spec.get("straggler")
        local = int(os.environ.get("LOCAL_RANK", 0))
        if straggler:  # a core per rank, so a busy process on one core slows one rank
            straggler = dict(straggler, cores=sorted(os.sched_getaffinity(0)))
            os.sched_setaffinity(0, {straggler["cores"][local % len(straggler["cores"])]})
        torch.set_num_threads(cfg.threads or 1)
        dist = _init_group(cfg, attempt)
        ev.emit("rendezvous")
        model = build_model(cfg, dist.device)
        engine.setup(model, cfg, dist)
        module, optimizer = engine.checkpoint_state()
        group = tdist.new_group(backend="gloo")
        ck = spec.get("ckpt") or {}
        store = st.CheckpointStore(ck.get("dir", events_dir / "ckpt"), rank, group)
        start = 0
        if ck:
            if rank == 0:
                st.clean(store.root)
            tdist.barrier(group)
            found = st.latest(store.root, log=lambda m: ev.emit("skipped", why=m))
            if found is not None:
                t0 = time.monotonic()
                state = _state(get_state_dict(module, optimizer))
                store.load(found[0], state)
                set_state_dict(module, optimizer, model_state_dict=state["model"],
                               optim_state_dict=state["optim"])
                extra = found[1]["extra"]
                torch.set_rng_state(torch.frombuffer(bytearray(base64.b64decode(extra["rng"])),
                                                     dtype=torch.uint8))
                start = extra["step"] + 1
                ev.emit("restored", step=extra["step"], seconds=time.monotonic() - t0,
                        path=str(found[0]))
        timer = ComputeTimer(model.blocks, cuda=dist.device.type == "cuda")
        stream = global_batches(cfg)
        for _ in range(start):  # the data position: replay the stream up to the resumed step
            next(stream)
        shard, shards = engine.data_parallel(dist)
        fault = spec.get("fault")
        saves = 0
        for step in range(start, cfg.steps):
            x, y = next(stream)
            x = rank_slice(x, shard, shards).to(dist.device)
            y = rank_slice(y, shard, shards).to(dist.device)
            if fault and fault["step"] == step and fault["rank"] == rank \
                    and fire_once(Path(spec["markers"]), fault):
                _fire(fault, ev, model)
            if straggler:
                hogs = _phase(straggler, step, rank, hogs, ev)
            t0 = time.perf_counter()
            result = engine.train_step(x, y)
            dt = time.perf_counter() - t0
            compute = timer.take()
            if not math.isfinite(result.loss):
                raise NonFiniteLoss(f"loss {result.loss} at step {step}")
            ev.emit("step", step=step, loss=result.loss, step_s=dt, compute_s=compute)
            committed = store.poll()
            if committed is not None:
                ev.emit("committed", **_saved(committed))
            if ck and (step + 1) % ck["every"] == 0 and step + 1 < cfg.steps:
                mode = ck["modes"][saves % len(ck["modes"])]
                saves += 1
                t0 = time.monotonic()
                previous = store.finish()
                if previous is not None:
                    ev.emit("committed", waited_s=time.monotonic() - t0, **_saved(previous))
                extra = {"step": step, "lr": cfg.lr,
                         "rng": base64.b64encode(torch.get_rng_state().numpy().tobytes())
                         .decode()}
                saved = store.save(step, _state(get_state_dict(module, optimizer)), extra,
                                   mode)
                ev.emit("checkpoint", step=step, mode=mode, blocked_s=saved.blocked_s)
                if mode == "sync":
                    ev.emit("committed", **_saved(saved))
        for h in hogs:
            h.kill()
        last = store.close()
        if last is not None:
            ev.emit("committed", **_saved(last))
        if ck.get("restore_check"):
            _time_restores(store, module, optimizer, group, ev)
        ev.emit("finished")
    except BaseException as e:  # noqa: BLE001 - every way out is an event, then status 1
        import traceback

        ev.emit("error", kind=classify(e), error=f"{type(e).__name__}: {e}"[:500],
                where=traceback.format_tb(e.__traceback__)[-3:])
        print(f"[rank {rank}] {classify(e)}: {type(e).__name__}: {e}"[:500], file=sys.stderr)
        for h in hogs:
            h.kill()
        sys.stderr.flush()
        os._exit(1)


def _init_group(cfg, attempt: int):
    """The training group, on the launcher's store under a prefix of this attempt. torchrun's
    agent keeps one store across restarts (torch 2.13), and a restarted group read the previous
    attempt's gloo addresses from it: "connectFullMesh failed ... Connection refused", in 3 of
    4 restarts on this CPU."""
    from datetime import timedelta

    import torch.distributed as tdist

    from suite.experiments.llm_train import rank_device
    from suite.trainers.base import DistInfo, env_rank

    rank, world, local = env_rank()
    device, backend = rank_device(cfg, local)
    timeout = timedelta(seconds=cfg.timeout_s)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":  # a launcher without one
        tdist.init_process_group(backend, timeout=timeout)
        return DistInfo(rank, world, local, device, backend)
    store = tdist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                           is_master=False, timeout=timeout)
    tdist.init_process_group(backend, store=tdist.PrefixStore(f"seedbench/attempt{attempt}",
                                                               store),
                             rank=rank, world_size=world, timeout=timeout)
    return DistInfo(rank, world, local, device, backend)


def _state(pair) -> dict[str, Any]:
    model_sd, optim_sd = pair
    return {"model": model_sd, "optim": optim_sd}


def _saved(s) -> dict[str, Any]:
    return {"step": s.step, "mode": s.mode, "blocked_s": s.blocked_s,
            "persisted_s": s.persisted_s, "committed_s": s.committed_s, "nbytes": s.nbytes,
            "path": s.path}


def _fire(fault: dict[str, Any], ev: Events, model) -> None:
    ev.emit("fault", kind=fault["kind"], step=fault["step"])
    if fault["kind"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault["kind"] == "hang":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:  # nan: this rank's logits, once
        def poison(module, args, output):
            handle.remove()
            return output * float("nan")

        handle = model.lm_head.register_forward_hook(poison)


def _phase(straggler: dict[str, Any], step: int, rank: int, hogs: list, ev: Events) -> list:
    """Rank 0 starts the busy process of the phase that begins at ``step`` (and stops the
    previous one)."""
    per = straggler["steps"]
    if rank != 0 or step % per:
        return hogs
    for h in hogs:
        h.kill()
        h.wait()
    slowed = straggler["phases"][step // per]
    ev.emit("phase", index=step // per, slowed=slowed)
    if slowed is None:
        return []
    cores = straggler["cores"]
    return [hog(cores[slowed % len(cores)])]


def _time_restores(store, module, optimizer, group, ev: Events) -> None:
    """Read each mode's last checkpoint back into the live state, timed (the state is the same
    step's, so training is unchanged)."""
    import torch.distributed as tdist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    last = {s.mode: s for s in store.done}
    for mode, saved in sorted(last.items()):
        tdist.barrier(group)
        t0 = time.monotonic()
        state = _state(get_state_dict(module, optimizer))
        store.load(Path(saved.path), state)
        set_state_dict(module, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        ev.emit("restore", mode=mode, step=saved.step, seconds=time.monotonic() - t0,
                nbytes=saved.nbytes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suite.resilience.worker",
                                description=__doc__.splitlines()[0])
    p.add_argument("--spec", required=True, help="the run's spec (JSON)")
    p.add_argument("--events", type=Path, required=True, help="event log folder")
    args = p.parse_args(argv)
    run(json.loads(args.spec), args.events)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as llm_train: no C++ static destructors after the run's files are closed
