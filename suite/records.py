"""The versioned result record: one JSON file per (experiment, system, workload point).

Records are the only thing that flows from the runs to the analysis. They are written atomically
(temp file in the same directory, fsync, rename), so an interrupted run never leaves half a record.

Every runner makes its record the same way: ``new_record(...)`` (status FAILED until the run says
otherwise), then the run inside ``with outcome(record):``, which turns ``Unavailable`` and any
other exception into the record's status and reason. ``failed_record(...)`` is the record of a
run that never produced its own (a crashed, killed or hung child process). This module imports
no torch, so the supervising process and the analysis can use it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

# 2: the system under test is ``system`` (it was ``baseline`` in 1, which still reads).
SCHEMA_VERSION = 2
READS = (1, 2)
# JSON files the workflow writes beside the records under results/<machine>/ that are not records
NOT_RECORDS = ("peak.json", "analysis.json")
# Folders beside a record that hold its run's artifacts (LoadGen's logs, PMA's checkpoints)
ARTIFACTS = (".loadgen", ".checkpoints")


class Unavailable(RuntimeError):
    """Raised by a baseline, trainer or runner when a point cannot run on this machine: a record
    of status ``unavailable`` with the message as its reason, not a failure.

    Defined here (torch-free) so that ``outcome`` can recognise it without importing the
    baselines; ``suite.baselines`` re-exports it for plugins (``from suite.baselines import
    Unavailable``)."""


class Status(str, Enum):
    OK = "ok"
    UNAVAILABLE = "unavailable"  # cannot run here (missing package, no GPU, ...)
    INCORRECT = "incorrect"  # ran, disagreed with the reference beyond tolerance: not timed
    FAILED = "failed"  # raised, crashed or timed out


@dataclass
class Record:
    experiment: str
    system: str  # the system under test: a framework, ladder step, kernel, engine, VWN label
    point: dict[str, Any]  # the workload point: batch size, max length, ...
    config: dict[str, Any]  # the experiment's config section as the run saw it
    status: Status
    reason: str = ""
    workload: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    correctness: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)  # policy, samples, stats
    derived: dict[str, Any] = field(default_factory=dict)  # tokens/s, FLOP/s, bounds, ...
    created_at: str = ""
    schema_version: int = SCHEMA_VERSION

    @property
    def config_hash(self) -> str:
        """The whole section as the run saw it: provenance."""
        return config_hash(self.config)

    @property
    def measurement_hash(self) -> str:
        """What this point's measurement depends on (``measurement_config``): two records of
        one point compare when these agree, whatever else their runs planned."""
        return config_hash(measurement_config(self.config, self.system))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["config_hash"] = self.config_hash
        d["measurement_hash"] = self.measurement_hash
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Record":
        version = d.get("schema_version")
        if version not in READS:
            raise ValueError(f"record schema_version={version!r}; this suite reads {READS}")
        d = {k: v for k, v in d.items() if k not in ("config_hash", "measurement_hash")}
        if version == 1:  # upgraded in memory; the file stays as it was written
            d["system"] = d.pop("baseline")
            d["schema_version"] = SCHEMA_VERSION
        try:
            d["status"] = Status(d["status"])
        except ValueError:
            raise ValueError(f"record status={d['status']!r}; valid: "
                             f"{[s.value for s in Status]}") from None
        return cls(**d)


def now_iso() -> str:
    """A record's ``created_at``: UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_record(experiment: str, system: str, point: dict[str, Any], config: dict[str, Any],
               **fields: Any) -> Record:
    """The record a run starts from: status FAILED (a run that dies before saying otherwise
    failed) and ``created_at`` now. The run fills it in inside ``with outcome(record):``."""
    fields.setdefault("created_at", now_iso())
    return Record(experiment, system, point, config, Status.FAILED, **fields)


def failed_record(experiment: str, system: str, point: dict[str, Any],
                  config: dict[str, Any], reason: str) -> Record:
    """The record of a run that produced none of its own (its process crashed, was killed, hung
    or could not even parse its input): status FAILED, ``reason``, ``created_at`` now and the
    environment of this (supervising) process, captured without importing torch."""
    from suite import env as envmod  # subprocess/git calls; only needed here

    return new_record(experiment, system, point, config, reason=reason,
                      env=envmod.capture(torch_info=False))


def clip(text: str, limit: int = 4000) -> str:
    """``text`` cut to about ``limit`` characters, head and tail kept: what a plugin or an
    external program says goes into records, and a flood of it must not."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - 2 * half} characters cut ...] {text[-half:]}"


def error_reason(e: BaseException) -> str:
    """``"{Type}: {message}"`` (clipped); a KeyError's message without the quotes its repr
    adds."""
    message = e.args[0] if isinstance(e, KeyError) and e.args else e
    return clip(f"{type(e).__name__}: {message}")


@contextmanager
def outcome(record: Record, *, traceback_limit: int = 8) -> Iterator[Record]:
    """Run the body and let the record say how it ended, so that a runner never raises for a
    problem of the system under test (one way of doing it, not a hand-written copy per runner).

    - ``Unavailable``: status UNAVAILABLE, the message as reason;
    - any other ``Exception``: status FAILED, reason ``"{Type}: {message}"`` and
      ``derived["traceback"]`` (the first ``traceback_limit`` frames from the ``with``
      statement down, as ``traceback.format_exc(limit=...)`` there);
    - no exception: the record is left as the body left it (the body sets OK / INCORRECT).

    ``KeyboardInterrupt``, ``SystemExit`` and other ``BaseException``s are not swallowed: an
    interrupted run must stop, not be recorded as a failure of the system.
    """
    try:
        yield record
    except Unavailable as e:
        record.status, record.reason = Status.UNAVAILABLE, str(e)
    except Exception as e:  # noqa: BLE001 - any error of a run becomes a failed record
        record.status, record.reason = Status.FAILED, error_reason(e)
        tb = e.__traceback__
        tb = tb.tb_next if tb is not None and tb.tb_frame.f_code is _OUTCOME_CODE else tb
        record.derived["traceback"] = clip("".join(
            traceback.format_exception(type(e), e, tb, limit=traceback_limit)), 20_000)


_OUTCOME_CODE = outcome.__wrapped__.__code__  # its own frame is left out of the traceback


def config_hash(config: dict[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# Keys of a config section that choose which points run (and for how long a job may take), not
# how one point is measured; at any depth. A point's measurement config leaves them out, so that
# the quick default and a sweep compare on the points they share.
PLAN_KEYS = frozenset({"baselines", "padded_baseline", "batch_sizes", "max_seq_lens", "models",
                       "seeds", "enabled", "timeout_s"})


def measurement_config(config: dict[str, Any], system: str) -> dict[str, Any]:
    """What one point's measurement depends on: ``config`` less ``PLAN_KEYS``, and of the
    external programs' settings only ``system``'s own (``external``: name -> settings)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in PLAN_KEYS}
        return value

    from suite.config import EXTERNAL_PREFIX

    out = strip(config)
    if isinstance(out.get("external"), dict):
        name = system.removeprefix(EXTERNAL_PREFIX)
        out["external"] = {k: v for k, v in out["external"].items() if k == name}
    return out


def config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two configs (for error messages)."""
    keys = sorted(set(a) | set(b))
    out = []
    for k in keys:
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += config_diff(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}")
    return out


def write_record(record: Record, path: str | os.PathLike) -> Path:
    return atomic_write_json(record.to_dict(), path)


def atomic_write_json(obj: Any, path: str | os.PathLike) -> Path:
    """Write atomically: readers see the old file or the whole new one, never a torn one. A
    failed write (disk full, RLIMIT_FSIZE) leaves no temp file and raises naming ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1, allow_nan=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None:  # disk full, file too large: say where
            raise OSError(e.errno, f"{e.strerror} while writing {path}") from e
        raise
    return path


def record_files(folder: str | os.PathLike) -> list[Path]:
    """Every record under ``folder``, sorted: its JSON files less ``NOT_RECORDS``, hidden
    files, logs and the runs' artifact folders (``ARTIFACTS``)."""
    root = Path(folder)
    return [p for p in sorted(root.rglob("*.json"))
            if p.name not in NOT_RECORDS and not p.name.startswith(".")
            and not any(part == "logs" or part.endswith(ARTIFACTS)
                        for part in p.relative_to(root).parts[:-1])]


def read_record(path: str | os.PathLike) -> Record:
    """The record at ``path``; a file that is not one (truncated, another format, a stray
    JSON file) raises a ValueError that names it."""
    try:
        with open(path) as f:
            return Record.from_dict(json.load(f))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"{os.fspath(path)}: not a readable record ({type(e).__name__}: "
                         f"{e})") from e
