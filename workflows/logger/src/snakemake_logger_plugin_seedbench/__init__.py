"""Snakemake logger plugin: feeds job events to ``suite.workflow.progress.Progress`` and prints
its lines beside Snakemake's own output (which it leaves as it is)."""

from __future__ import annotations

import sys
from logging import LogRecord

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

from suite.workflow.progress import Progress


def _path(formatted: str) -> str:
    """Snakemake's formatted file name without its annotations ('a.json (report)')."""
    return str(formatted).split(" ", 1)[0]


def _say(line: str) -> None:
    """One write per line: Snakemake's own handler writes from another thread."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class LogHandler(LogHandlerBase):
    def __post_init__(self) -> None:
        self.progress = Progress()
        self.summarized = False

    def emit(self, record: LogRecord) -> None:
        event = getattr(record, "event", None)
        if self.common_settings.dryrun:
            return
        if event == LogEvent.RUN_INFO and isinstance(getattr(record, "stats", None), dict):
            self.progress.plan(record.stats)
        elif event == LogEvent.JOB_INFO:
            self.progress.job_started(record.jobid, record.rule_name,
                                      [_path(f) for f in record.output or []])
        elif event == LogEvent.JOB_FINISHED:
            self.progress.job_finished(record.job_id)
        elif event == LogEvent.JOB_ERROR:
            self.progress.job_failed(record.jobid, record.rule_name,
                                     [_path(f) for f in getattr(record, "log", None) or []])
        elif event == LogEvent.PROGRESS:
            _say(self.progress.line(record.done, record.total))
            if record.done >= record.total:
                self._summarize()

    def _summarize(self) -> None:
        if not self.summarized:
            summary = self.progress.summary()
            if summary:
                _say(summary)
            self.summarized = True

    def close(self) -> None:
        self._summarize()  # a run that stopped early still says what it wrote
        super().close()

    @property
    def writes_to_stream(self) -> bool:
        return False  # Snakemake's own stream output stays; these are extra lines

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True  # every event is wanted, whatever the quietness

    @property
    def has_formatter(self) -> bool:
        return True  # prints its own lines

    @property
    def needs_rulegraph(self) -> bool:
        return False
