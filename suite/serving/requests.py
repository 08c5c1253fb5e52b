"""The lengths of the requests a serving run draws from (LoadGen's query sample library).

Either a named mix of ``suite.workloads.varlen_lengths`` (``bytetransformer``: uniform on
[2 avg - max, max] with avg = 0.6 max, as the paper's benchmark draws them) or a user's
histogram: a CSV with columns ``length,count`` (one row per length, counts >= 0, at least one
positive), from which the library's lengths are drawn in proportion to the counts.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


class HistogramError(ValueError):
    """A length histogram that cannot be used; the message names the file and the row."""


def read_histogram(path: str | Path, max_len: int) -> dict[int, int]:
    """``length -> count`` from ``path``; one error line naming the file and row otherwise."""
    path = Path(path)
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
            columns = rows[0].keys() if rows else next(csv.reader(path.open()), [])
    except OSError as e:
        raise HistogramError(f"{path}: cannot read ({e.strerror})") from None
    if set(columns) != {"length", "count"}:
        raise HistogramError(f"{path}: columns must be 'length,count', got {list(columns)}")
    if not rows:
        raise HistogramError(f"{path}: no rows (one 'length,count' row per length)")
    counts: dict[int, int] = {}
    for i, row in enumerate(rows, start=2):  # row 1 is the header
        try:
            length, count = int(row["length"]), int(row["count"])
        except (TypeError, ValueError):
            raise HistogramError(f"{path}, row {i}: length and count must be integers, got "
                                 f"{row['length']!r}, {row['count']!r}") from None
        if not 1 <= length <= max_len:
            raise HistogramError(f"{path}, row {i}: length {length} outside [1, {max_len}] "
                                 f"(the model's max length)")
        if count < 0:
            raise HistogramError(f"{path}, row {i}: count {count} is negative")
        if length in counts:
            raise HistogramError(f"{path}, row {i}: length {length} appears twice")
        counts[length] = count
    if not sum(counts.values()):
        raise HistogramError(f"{path}: every count is 0")
    return counts


def request_lengths(n: int, max_len: int, mix: str | Path = "bytetransformer",
                    seed: int = 0) -> list[int]:
    """``n`` request lengths in [1, max_len]: a named mix, or drawn from a histogram CSV."""
    if isinstance(mix, Path) or str(mix).endswith(".csv"):
        counts = read_histogram(mix, max_len)
        lengths = np.array(sorted(counts))
        p = np.array([counts[n_] for n_ in lengths], dtype=float)
        rng = np.random.default_rng(seed)
        return [int(x) for x in rng.choice(lengths, size=n, p=p / p.sum())]
    from suite.workloads import varlen_lengths  # torch: not for the config check above

    return [max(1, n_) for n_ in varlen_lengths(n, max_len, str(mix), seed=seed)]
