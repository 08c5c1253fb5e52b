"""The results of every machine under ``results/``: this checkout's runs
(``results/<machine>/``) and published runs (``results/published/<machine>/``), found on disk.

A machine's folder is one with a ``peak.json`` (every run measures it first). Its records are
found by the path layout of each family (the run rules' output patterns), so the report can
be rebuilt from records alone, on any machine, without the config that produced them.
Torch-free: the workflow's planning imports it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from suite.experiments import registry

RESULTS = Path("results")
PUBLISHED = "published"
# Folders under results/ that hold no machine's runs.
NOT_MACHINES = ("paper", PUBLISHED)
# Where each family's records lie inside <machine>/<experiment>/ (the run rules' outputs).
RECORD_GLOBS = {"bert": "*/*/b*_l*.json", "llm": "*/*.json", "pretrain": "*/seed*.json",
                "serving": "*/run*.json"}
# What a published machine folder keeps: records, the step logs behind the loss curves, the
# summaries of LoadGen's runs, and the peak every efficiency divides by. Tables, figures,
# analyses and logs are rebuilt.
PUBLISHED_FILES = ("peak.json", *(f"*/{g}" for g in RECORD_GLOBS.values()), "llm_*/*/*.steps.jsonl",
                   "bert_serving/*/run*.loadgen/**/mlperf_log_summary.txt")


@dataclass(frozen=True)
class MachineResults:
    """``path``: the folder (``results/<name>`` or ``results/published/<name>``); ``key``: the
    path below ``results/``, the machine's name in the report."""

    path: str
    published: bool

    @property
    def key(self) -> str:
        return Path(self.path).relative_to(RESULTS).as_posix() if self.path.startswith(
            f"{RESULTS}/") else self.path

    @property
    def name(self) -> str:
        return Path(self.path).name

    def label(self, current: str | None = None) -> str:
        where = "published" if self.published else (
            "this machine" if self.path == current else "local")
        return f"{self.name} ({where})"


def discover(results: Path = RESULTS) -> list[MachineResults]:
    """Every machine folder under ``results/`` and ``results/published/``, sorted by path."""
    found = []
    for parent, published in ((results, False), (results / PUBLISHED, True)):
        if not parent.is_dir():
            continue
        for folder in sorted(parent.iterdir()):
            if folder.name in NOT_MACHINES and not published:
                continue
            if (folder / "peak.json").is_file():
                found.append(MachineResults(folder.as_posix(), published))
    return found


def records_on_disk(root: str | Path, experiment: str) -> list[str]:
    """The records of one experiment in one machine folder, sorted."""
    family = registry.get(experiment).family
    if family not in RECORD_GLOBS:
        return []
    folder = Path(root) / experiment
    return sorted(p.as_posix() for p in folder.glob(RECORD_GLOBS[family]) if p.is_file())


def experiments_on_disk(root: str | Path) -> list[str]:
    """The experiments with records in a machine folder, in registry order; the analytical
    scale model goes with the MegaScale runs (it needs no record of its own)."""
    found = [name for name in registry.names() if records_on_disk(root, name)]
    if any(registry.get(n).family == "llm" for n in found):
        found += [n for n in registry.names("scale")]
    return [n for n in registry.names() if n in found]


def record_config(records: list[str]) -> dict:
    """The config section the first record was run with (records carry it), e.g. to find the
    padded baseline of a published BERT table; {} when there is none."""
    for path in records:
        try:
            return json.loads(Path(path).read_text()).get("config") or {}
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a readable record ({e})") from e
    return {}


def publish(source: str | Path, name: str | None = None, *, results: Path = RESULTS,
            replace: bool = False) -> tuple[Path, list[Path]]:
    """Copy a machine folder's records, step logs and peak.json into
    ``results/published/<name>/`` (nothing else: tables, figures and analyses are rebuilt by
    ``make report``; checkpoints and logs stay behind). Every record is read first, so a
    damaged one stops the copy and is named. Returns the folder and the files copied."""
    import re
    import shutil

    from suite.records import read_record

    source = Path(source)
    if not (source / "peak.json").is_file():
        raise ValueError(f"{source}: not a machine folder (no peak.json); machine folders: "
                         f"{[m.path for m in discover(results) if not m.published]}")
    name = name or source.name
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise ValueError(f"published name {name!r}: lower-case letters, digits, '.', '_', '-'")
    files = sorted({p for pattern in PUBLISHED_FILES for p in source.glob(pattern)
                    if p.is_file()})
    records = [p for p in files if p.suffix == ".json" and p.name != "peak.json"]
    if not records:
        raise ValueError(f"{source}: no records to publish")
    for path in records:
        read_record(path)  # raises, naming the file, on a damaged one
    dest = results / PUBLISHED / name
    if dest.exists():
        if not replace:
            raise ValueError(f"{dest} exists: pass --replace to publish over it")
        shutil.rmtree(dest)
    for path in files:
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest, files


def summarize(records: list[Path]) -> str:
    """Statuses and commits (and whether any ran on uncommitted changes) of records:
    what a reader of a published folder should know before trusting it."""
    from collections import Counter

    from suite.records import read_record

    status, commits, dirty = Counter(), set(), False
    for path in records:
        r = read_record(path)
        status[r.status.value] += 1
        git = r.env.get("git") or {}
        commits.add((git.get("commit") or "unknown")[:12])
        dirty |= bool(git.get("dirty"))
    return (", ".join(f"{n} {s}" for s, n in status.most_common())
            + f"; commit {', '.join(sorted(commits))}" + (" with uncommitted changes" if dirty
                                                          else ""))
