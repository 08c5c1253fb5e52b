"""The versioned result record: one JSON file per (experiment, baseline, workload point).

Records are the only thing that flows from the runs to the analysis. They are written atomically
(temp file in the same directory, fsync, rename), so an interrupted run never leaves half a record.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


class Status(str, Enum):
    OK = "ok"
    UNAVAILABLE = "unavailable"  # cannot run here (missing package, no GPU, ...)
    INCORRECT = "incorrect"  # ran, disagreed with the reference beyond tolerance: not timed
    FAILED = "failed"  # raised, crashed or timed out


@dataclass
class Record:
    experiment: str
    baseline: str
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
        return config_hash(self.config)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["config_hash"] = self.config_hash
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Record":
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"record schema_version={version!r}; this suite reads "
                             f"{SCHEMA_VERSION}")
        d = {k: v for k, v in d.items() if k != "config_hash"}
        try:
            d["status"] = Status(d["status"])
        except ValueError:
            raise ValueError(f"record status={d['status']!r}; valid: "
                             f"{[s.value for s in Status]}") from None
        return cls(**d)


def config_hash(config: dict[str, Any]) -> str:
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def write_record(record: Record, path: str | os.PathLike) -> Path:
    return atomic_write_json(record.to_dict(), path)


def atomic_write_json(obj: Any, path: str | os.PathLike) -> Path:
    """Write atomically: readers see the old file or the whole new one, never a torn one."""
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
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_record(path: str | os.PathLike) -> Record:
    with open(path) as f:
        return Record.from_dict(json.load(f))
