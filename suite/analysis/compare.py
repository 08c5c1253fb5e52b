"""Two results folders (two machines, or two commits on one machine) compared point by point.

A point is (experiment, system, workload point). For every point timed on both sides: the ratio
of medians new / base with a bootstrap CI (resampling each side's samples), and a verdict (with
``percentile=90`` or ``99``: the ratio of that percentile of each side's samples instead, for
a tail that regresses while the median holds):

- ``slower`` / ``faster``: the CI lies wholly beyond 1 -/+ ``threshold``;
- ``noisy``: either side's coefficient of variation exceeds ``noisy_cv``, or either record was
  judged noisy when it was timed (other processes busy: ``suite.measure.load``), and the ratio
  is not clearly beyond the threshold, so a change could not be told from noise;
- ``same``: otherwise.

The CI resamples the samples within each run: it does not see what varies between runs (other
tenants of a shared machine, frequency, memory placement), which a self-comparison shows.
A ``slower`` point is a regression. Records of one point measured under different settings
(``Record.measurement_hash``: the config less what only chooses which points run) are never
compared: they are listed apart with the settings that differ (``table.attrs["apart"]``, a
line under the Markdown table), and the comparison refuses (``CompareError``) when no shared
point is left, as it does when the folders share no point or their record schema versions
differ. A quick run and a sweep compare on the points they measure alike (the quick run's
shorter pre-training runs are listed apart).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.measure.load import NOISY_CV, noise_columns
from suite.records import (Record, Status, config_diff, measurement_config, read_record,
                           record_files)
from suite.measure.stats import ratio_of_medians_ci

THRESHOLD = 0.05


class CompareError(ValueError):
    """The two folders cannot be compared (nothing in common, different configs or schemas)."""


@dataclass(frozen=True)
class Loaded:
    record: Record
    path: Path
    file_schema: int  # as written (read_record upgrades older ones in memory)


def load_records(folder: str | Path) -> dict[tuple[str, str, str], Loaded]:
    """Every record under ``folder`` by (experiment, system, point); a file that is not a valid
    record raises with its path."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CompareError(f"{folder} is not a folder of results")
    out: dict[tuple[str, str, str], Loaded] = {}
    for path in record_files(folder):
        try:
            record = read_record(path)  # names the file when it is not a record
        except ValueError as e:
            raise CompareError(str(e)) from e
        raw = json.loads(path.read_text())
        key = (record.experiment, record.system, json.dumps(record.point, sort_keys=True))
        out[key] = Loaded(record, path, int(raw["schema_version"]))
    return out


def compare(base: str | Path, new: str | Path, *, threshold: float = THRESHOLD,
            noisy_cv: float = NOISY_CV, percentile: float = 50.0) -> pd.DataFrame:
    """One row per point timed on both sides (see the module docstring)."""
    if not threshold >= 0:
        raise ValueError(f"threshold={threshold!r} must be >= 0 (a fraction: 0.05 is 5%)")
    if not 0 < percentile < 100:
        raise ValueError(f"percentile={percentile!r} must be in (0, 100), e.g. 50, 90 or 99")
    a, b = load_records(base), load_records(new)
    common = sorted(set(a) & set(b))
    if not common:
        raise CompareError(f"{base} and {new} share no (experiment, system, point): nothing to "
                           f"compare ({len(a)} and {len(b)} records)")
    schemas = {a[k].file_schema for k in common}, {b[k].file_schema for k in common}
    if schemas[0] != schemas[1]:
        raise CompareError(f"record schema versions differ: {sorted(schemas[0])} in {base}, "
                           f"{sorted(schemas[1])} in {new}; re-run one side with this suite")
    configs = defaultdict(list)
    for k in common:
        ra, rb = a[k].record, b[k].record
        if ra.measurement_hash != rb.measurement_hash:
            differ = config_diff(measurement_config(ra.config, ra.system),
                                 measurement_config(rb.config, rb.system))
            configs[", ".join(differ)].append(k)
    apart = {k for keys in configs.values() for k in keys}
    named = {differ: ", ".join(sorted({f"{k[0]}/{k[1]}" for k in keys})[:4])
             for differ, keys in configs.items()}
    detail = "; ".join(f"{differ} differ ({points})" for differ, points in named.items())
    if apart == set(common):
        raise CompareError(f"the same points were measured under different settings: {detail};"
                           f" compare runs that measure a point alike")
    table = pd.DataFrame([_row(k, a[k], b[k], threshold, noisy_cv, percentile)
                          for k in common if k not in apart])
    table.attrs["percentile"] = percentile
    table.attrs["apart"] = f"{len(apart)} shared point(s) measured under different settings, " \
                           f"not compared: {detail}" if apart else ""
    return table


def _row(key, base: Loaded, new: Loaded, threshold: float, noisy_cv: float,
         percentile: float) -> dict[str, Any]:
    experiment, system, point = key
    row: dict[str, Any] = {"experiment": experiment, "system": system,
                           "point": _point_text(json.loads(point)),
                           "base_status": base.record.status.value,
                           "new_status": new.record.status.value}
    sa, sb = _samples(base.record), _samples(new.record)
    if sa is None or sb is None:
        row["verdict"] = "not timed on both sides"
        return row
    # new / base: > 1 is slower
    ratio, low, high = ratio_of_medians_ci(sb, sa, percentile=percentile)
    cv = max(base.record.timing["stats"].get("cv") or 0.0,
             new.record.timing["stats"].get("cv") or 0.0)
    if low > 1 + threshold:
        verdict = "slower"
    elif high < 1 - threshold:
        verdict = "faster"
    elif cv > noisy_cv or any(noise_columns(x.record.timing)["noisy"] for x in (base, new)):
        verdict = "noisy"
    else:
        verdict = "same"
    row.update(base_ms=1e3 * float(np.percentile(sa, percentile)),
               new_ms=1e3 * float(np.percentile(sb, percentile)),
               ratio=ratio, ci_low=low, ci_high=high, max_cv=cv, verdict=verdict)
    return row


def _samples(record: Record) -> list[float] | None:
    samples = (record.timing or {}).get("samples")
    return samples if record.status == Status.OK and samples else None


def _point_text(point: dict[str, Any]) -> str:
    keys = ("subject", "model", "op", "label", "batch_size", "max_seq_len", "world_size",
            "global_batch", "seq_len", "step", "seed")
    return " ".join(f"{k}={point[k]}" for k in keys if point.get(k) is not None)


def markdown(table: pd.DataFrame, base: str, new: str, threshold: float) -> str:
    """The comparison as a Markdown table, changes first, with a one-line verdict count."""
    order = {"slower": 0, "faster": 1, "noisy": 2, "same": 3}
    t = table.assign(_o=table.verdict.map(order).fillna(4)).sort_values(
        ["_o", "experiment", "system", "point"])
    counts = table.verdict.value_counts().to_dict()
    q = table.attrs.get("percentile", 50.0)
    stat = "median" if q == 50 else f"p{q:g}"
    lines = [f"**{new}** against **{base}**: " + ", ".join(f"{n} {v}" for v, n in
                                                           sorted(counts.items())) +
             f" (threshold {100 * threshold:g}%, ratio = new / base {stat} time; the CIs "
             "resample each run's own samples, so noise between runs of a shared machine is "
             "not in them: compare a machine with itself to see its size)", "",
             f"| experiment | system | point | base {stat} ms | new {stat} ms | ratio [95% CI] "
             "| verdict |",
             "| --- | --- | --- | ---: | ---: | --- | --- |"]
    for r in t.itertuples():
        if pd.isna(getattr(r, "ratio", float("nan"))):
            timing = f"– | – | – | {r.verdict} ({r.base_status} / {r.new_status})"
        else:
            timing = (f"{r.base_ms:.3g} | {r.new_ms:.3g} | {r.ratio:.3f} "
                      f"[{r.ci_low:.3f}, {r.ci_high:.3f}] | {r.verdict}")
        lines.append(f"| {r.experiment} | {r.system} | {r.point} | {timing} |")
    if table.attrs.get("apart"):
        lines += ["", table.attrs["apart"]]
    return "\n".join(lines) + "\n"
