"""Per-step training logs as JSON lines: one object per optimizer step, appended and flushed as
the run goes, so a crashed or killed run still leaves every step it finished.

Every key a step line may carry is a constant here; writers and readers (the training run, the
analysis, the report) import them instead of spelling strings.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, IO

STEP = "step"  # 0-based index of the logged step (correctness-check steps are not logged)
PHASE = "phase"  # WARMUP or MEASURE
STEP_TIME_S = "step_time_s"  # rank 0 wall clock of the whole step, ending on the loss all-reduce
TOKENS_PER_S = "tokens_per_s"  # global tokens of the step / step_time_s
MFU = "mfu"  # fraction, null without a peak
HFU = "hfu"  # fraction (recompute included), null without a peak
PEAK_MEM_BYTES = "peak_mem_bytes"  # of rank 0; the record says which measure (CUDA or RSS)
LOSS = "loss"  # mean over the global batch
GRAD_NORM = "grad_norm"  # total L2 norm before clipping
LR = "lr"

KEYS = (STEP, PHASE, STEP_TIME_S, TOKENS_PER_S, MFU, HFU, PEAK_MEM_BYTES, LOSS, GRAD_NORM, LR)
WARMUP = "warmup"
MEASURE = "measure"
PHASES = (WARMUP, MEASURE)


def step_line(**values: Any) -> dict[str, Any]:
    """A step's object with exactly ``KEYS``; a missing or unknown key is an error, so every
    line of every log has the same columns."""
    missing = [k for k in KEYS if k not in values]
    unknown = sorted(set(values) - set(KEYS))
    if missing or unknown:
        raise KeyError(f"step line keys: missing {missing}, unknown {unknown}; valid: "
                       f"{list(KEYS)}")
    if values[PHASE] not in PHASES:
        raise ValueError(f"{PHASE}={values[PHASE]!r} is not one of {PHASES}")
    return {k: values[k] for k in KEYS}


class StepLogWriter:
    """Appends one JSON object per line, flushed per line: a killed process loses nothing it
    wrote. Not fsynced: rank 0 writes between timed steps, and a disk sync there would delay
    it against the other ranks."""

    def __init__(self, path: str | os.PathLike, truncate: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[str] = open(self.path, "w" if truncate else "a", encoding="utf-8")

    def write(self, obj: dict[str, Any]) -> None:
        # NaN/inf (a diverged loss) are written as null: JSON has no spelling for them
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in obj.items()}
        self._f.write(json.dumps(clean, allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> StepLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_steplog(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every complete line; a torn last line (the writer was killed mid-write) is skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {i + 1} is not JSON: {line[:80]!r}") from None
    return out
