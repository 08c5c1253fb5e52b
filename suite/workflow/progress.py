"""Progress of a long sweep a person can follow: after each job, done/total, the time elapsed and
an estimate of the time left; at the end, how many points came out ok, unavailable, incorrect
or failed, and where to read why.

The estimate for each rule is the mean duration of its finished jobs (a rule none of whose jobs
has finished yet takes the mean of all finished jobs), times the jobs of that rule still to run,
scaled by how many jobs ran at once so far (wall time per job-second). Snakemake feeds this
through the logger plugin ``snakemake_logger_plugin_seedbench``; nothing here imports snakemake.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from suite.records import NOT_RECORDS, Status

STATUSES = tuple(s.value for s in (Status.OK, Status.UNAVAILABLE, Status.INCORRECT,
                                   Status.FAILED))


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


@dataclass
class Progress:
    """Job events in, progress lines out."""

    clock: Callable[[], float] = time.monotonic
    planned: Counter = field(default_factory=Counter)  # rule -> jobs this run
    started: dict = field(default_factory=dict)  # jobid -> (rule, start, outputs)
    durations: dict = field(default_factory=lambda: defaultdict(list))  # rule -> seconds
    outputs: list = field(default_factory=list)  # outputs of finished jobs
    failed_jobs: list = field(default_factory=list)  # (rule, jobid)
    errors: list = field(default_factory=list)  # (rule, last line of its log)
    t0: float | None = None

    def plan(self, stats: dict[str, int]) -> None:
        self.planned = Counter({rule: n for rule, n in stats.items() if rule != "total"})
        self.t0 = self.clock()

    def job_started(self, jobid: int, rule: str, outputs: list[str]) -> None:
        if self.t0 is None:
            self.t0 = self.clock()
        self.started[jobid] = (rule, self.clock(), list(outputs))

    def job_finished(self, jobid: int) -> None:
        if jobid in self.started:
            rule, start, outputs = self.started.pop(jobid)
            self.durations[rule].append(self.clock() - start)
            self.outputs += outputs

    def job_failed(self, jobid: int, rule: str, logs: list[str] = ()) -> None:
        """A job that failed; the last line of each of its logs says why (e.g. which record
        could not be read), so the summary can name it without the user opening the log."""
        self.started.pop(jobid, None)
        self.failed_jobs.append((rule, jobid))
        for log in logs:
            try:
                lines = [x for x in Path(log).read_text(errors="replace").splitlines() if x.strip()]
            except OSError:
                continue
            if lines:
                self.errors.append((rule, lines[-1].strip()))

    def remaining_s(self) -> float | None:
        """Estimated seconds left, or None before any job has finished."""
        done = [d for ds in self.durations.values() for d in ds]
        if not done or self.t0 is None:
            return None
        overall = sum(done) / len(done)
        left_job_s = 0.0
        for rule, n in self.planned.items():
            left = n - len(self.durations.get(rule, [])) - sum(
                1 for r, *_ in self.failed_jobs if r == rule)
            ds = self.durations.get(rule)
            left_job_s += max(left, 0) * (sum(ds) / len(ds) if ds else overall)
        wall_per_job_s = (self.clock() - self.t0) / sum(done)
        return left_job_s * min(wall_per_job_s, 1.0)

    def line(self, done: int, total: int) -> str:
        elapsed = self.clock() - (self.t0 if self.t0 is not None else self.clock())
        left = self.remaining_s()
        estimate = ("estimating" if left is None or done >= total
                    else f"about {duration(left)} left")
        if done >= total:
            estimate = "finished"
        return f"[seedbench] {done}/{total} jobs done, {duration(elapsed)} elapsed, {estimate}"

    def summary(self, report: str = "reports/index.html") -> str:
        """Counts of the records this run wrote, by status, and where the reasons are ("" when
        it wrote none and no job failed)."""
        counts: Counter = Counter()
        unreadable = []
        for out in self.outputs:
            path = Path(out)
            if path.suffix != ".json" or path.name in NOT_RECORDS or not path.exists():
                continue
            try:
                data = json.loads(path.read_text())
            except ValueError:
                unreadable.append(str(path))
                continue
            if isinstance(data, dict) and "status" in data and "experiment" in data:
                counts[data["status"]] += 1
        if not counts and not self.failed_jobs and not unreadable:
            return ""
        parts = [f"{counts.get(s, 0)} {s}" for s in STATUSES]
        text = "[seedbench] points this run: " + ", ".join(parts)
        if any(counts.get(s) for s in STATUSES[1:]):
            text += f"; why: the report's failures table ({report}#problems) and each record's " \
                    "reason"
        if self.failed_jobs:
            text += (f"; {len(self.failed_jobs)} job(s) failed in the workflow itself "
                     f"({', '.join(sorted({r for r, _ in self.failed_jobs}))}): see its log above")
            text += "".join(f"\n[seedbench]   {rule}: {line}" for rule, line in self.errors)
        if unreadable:
            text += f"; unreadable: {', '.join(unreadable)}"
        return text + (f"\n{self.time_by_rule()}" if self.durations else "")

    def time_by_rule(self, most: int = 5) -> str:
        """Where the run's time went: the rules with the most job-seconds (jobs x mean)."""
        total = {rule: sum(ds) for rule, ds in self.durations.items()}
        top = sorted(total, key=total.get, reverse=True)[:most]
        parts = [f"{rule} {len(self.durations[rule])} x "
                 f"{duration(total[rule] / len(self.durations[rule]))} = {duration(total[rule])}"
                 for rule in top]
        return (f"[seedbench] job time by rule ({duration(sum(total.values()))} in all): "
                + ", ".join(parts))
