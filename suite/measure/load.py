"""What else the machine did while a point was timed, and whether that makes the point noisy.

Why: on a shared machine a point timed beside a busy process comes out slower and more spread,
and nothing in the number says so. Each timed point records the load around its timing (load
average, CPU frequency and governor where readable, and the CPU time that anything but the
run's own processes used during it) and a verdict: ``noisy`` when the samples' coefficient of
variation or that other CPU use crosses a threshold. Tables and the report show the
verdict; ``seedbench noisy`` lists those records so that one command re-runs them.

Torch-free and standard library only: Linux ``/proc`` and ``/sys`` are read where they exist; on
other systems the fields are ``None`` and only the CV decides.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# A point is noisy when its samples' CV exceeds NOISY_CV (quiet runs of this suite's points on a
# steady machine stay well under it; points taken beside a busy process measured 0.18-0.39, and
# so did quiet ones on a shared VM whose host was busy, which no guest process shows), or when
# processes outside its session used more than NOISY_OTHER_CPUS CPUs on average while it was
# timed.
NOISY_CV = 0.15
NOISY_OTHER_CPUS = 0.5
# Processes that used at least this many CPUs during the timing are named in the record.
NAMED_CPUS = 0.05
TOP_PROCESSES = 5
PROC = Path("/proc")
CPUFREQ = Path("/sys/devices/system/cpu")


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError, AttributeError):
        return 100


def _process_cpu() -> dict[tuple[int, int], tuple[str, int, int, float]]:
    """(pid, start time) -> (command name, parent pid, session id, CPU seconds so far) of every
    readable process; the start time tells a reused pid apart (a kernel worker's name changes
    with its work, so the name cannot)."""
    ticks = _clock_ticks()
    out: dict[tuple[int, int], tuple[str, int, int, float]] = {}
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return out
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended meanwhile, or is not ours to read
            continue
        # "pid (comm) state ppid pgrp session ... utime stime ... starttime": comm may hold
        # spaces and parentheses
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2:].split()
        try:
            parent, session = int(fields[1]), int(fields[3])
            utime, stime, started = int(fields[11]), int(fields[12]), int(fields[19])
        except (IndexError, ValueError):
            continue
        out[(int(entry.name), started)] = (name, parent, session, (utime + stime) / ticks)
    return out


def _command(pid: int, limit: int = 100) -> str | None:
    """A process's command line, cut at ``limit`` characters: its name alone ("python") does
    not tell a test worker from a warm server or another run; None once it has ended."""
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    line = " ".join(a.decode(errors="replace") for a in argv if a)
    return line[:limit] or None


def _descendants(root: int, processes: dict[tuple[int, int], tuple[str, int, int, float]]
                 ) -> set[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for (pid, _), (_, parent, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _system_busy() -> float | None:
    """CPU seconds all CPUs spent busy since boot (/proc/stat: user, nice, system, irq,
    softirq and steal, the time a hypervisor gave to other guests), or None."""
    try:
        first = (PROC / "stat").read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, first[1:9])
    except (OSError, ValueError, IndexError):
        return None
    return (user + nice + system + irq + softirq + steal) / _clock_ticks()


def _self_cpu() -> float:
    """CPU seconds of this process and of its children that ended and were waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _cpu_frequency() -> tuple[float | None, str | None]:
    """Mean current frequency (MHz) over the CPUs that report one, and the governor(s)."""
    freqs, governors = [], set()
    for cpu in sorted(CPUFREQ.glob("cpu[0-9]*/cpufreq")):
        try:
            freqs.append(int((cpu / "scaling_cur_freq").read_text()) / 1e3)
            governors.add((cpu / "scaling_governor").read_text().strip())
        except (OSError, ValueError):
            continue
    if not freqs:  # no cpufreq (most VMs): /proc/cpuinfo's "cpu MHz" lines
        try:
            freqs = [float(line.split(":")[1]) for line in
                     (PROC / "cpuinfo").read_text().splitlines() if line.startswith("cpu MHz")]
        except (OSError, ValueError, IndexError):
            freqs = []
    mhz = round(sum(freqs) / len(freqs), 1) if freqs else None
    return mhz, ",".join(sorted(governors)) or None


def _state() -> dict[str, Any]:
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    mhz, governor = _cpu_frequency()
    return {"loadavg": load, "cpu_mhz": mhz, "governor": governor}


@contextmanager
def watched(family_of: int | None = None) -> Iterator[dict[str, Any]]:
    """Around a timing loop: yields a dict that holds, once the block ends, the machine's state
    ``before`` and ``after`` and ``other_cpus``: the CPUs busy on average during the block with
    anything but this run's own work, with the busiest other processes named. Its own work: this
    process's session (its children), and with ``family_of`` every process descended from that
    pid (a launcher such as torchrun starts each rank in a session of its own)."""
    load: dict[str, Any] = {"before": _state()}
    session = os.getsid(0)
    start, busy0, self0, t0 = _process_cpu(), _system_busy(), _self_cpu(), time.monotonic()
    yield load
    end, busy1, elapsed = _process_cpu(), _system_busy(), max(time.monotonic() - t0, 1e-9)
    own = _self_cpu() - self0  # this process and the children it has waited for
    load["after"] = _state()
    load["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count()
    if not end or busy0 is None or busy1 is None:  # no /proc: nothing to say about others
        load["other_cpus"], load["busy_processes"] = None, []
        return
    family = _descendants(family_of, end) if family_of else set()
    used = []
    for key, (name, _parent, sid, cpu) in end.items():
        before = start.get(key)
        spent = cpu - before[3] if before else cpu  # one started during the block: all of it
        if sid == session or key[0] in family:
            own += spent if key[0] != os.getpid() else 0.0  # live ranks, children
        elif spent > 0:
            used.append((spent / elapsed, key[0], name))
    used.sort(reverse=True)
    # everything the CPUs did but this run's own work: processes that came and went during
    # the block, the kernel and a hypervisor's steal included
    load["other_cpus"] = round(max(0.0, busy1 - busy0 - own) / elapsed, 3)
    load["busy_processes"] = [{"pid": pid, "name": name, "cmd": _command(pid), "cpus": round(u, 3)}
                              for u, pid, name in used[:TOP_PROCESSES] if u >= NAMED_CPUS]


def verdict(load: dict[str, Any] | None, cv: float | None) -> dict[str, Any]:
    """``{"noisy": bool, "reasons": [...], "thresholds": {...}}`` of one timed point."""
    reasons = []
    if cv is not None and cv == cv and cv > NOISY_CV:
        reasons.append(f"CV {cv:.2f} > {NOISY_CV}")
    other = (load or {}).get("other_cpus")
    if other is not None and other > NOISY_OTHER_CPUS:
        named = ", ".join(f"{p.get('cmd') or p['name']} (pid {p['pid']}) {p['cpus']:.2f}"
                          for p in load.get("busy_processes", []))
        reasons.append(f"other processes used {other:.2f} CPUs while timing"
                       + (f": {named}" if named else ""))
    return {"noisy": bool(reasons), "reasons": reasons,
            "thresholds": {"cv": NOISY_CV, "other_cpus": NOISY_OTHER_CPUS}}


def noise_columns(timing: dict[str, Any]) -> dict[str, Any]:
    """A tidy table's ``noisy`` and ``noise_reason`` from a record's ``timing``: ``noisy`` is
    None for records written before the suite recorded the load (or with no timing)."""
    noise = timing.get("noise")
    if noise is None:
        return {"noisy": None, "noise_reason": None}
    return {"noisy": bool(noise["noisy"]), "noise_reason": "; ".join(noise["reasons"]) or None}


def with_noise(timing: dict[str, Any], load: dict[str, Any] | None) -> dict[str, Any]:
    """A record's ``timing`` (with its ``stats``) plus the ``load`` watched around it and the
    verdict on both."""
    return {**timing, "load": load, "noise": verdict(load, timing["stats"].get("cv"))}
