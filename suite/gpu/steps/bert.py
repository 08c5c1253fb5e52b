"""The ByteTransformer steps: the README's table (``bert_grid``, ``bert_grid_more``), serving
under LoadGen, the user's own path through Snakemake (``workflow``), the MHA study and the
ablation ladder."""

from __future__ import annotations

import importlib
import json
import os
import sys
import sysconfig
from typing import Any

from suite.gpu.steps.common import ROOT, outcome


def _grid(pack, systems) -> dict[str, Any]:
    timeouts = pack.sizes.extra.get("grid_timeout_s", {})
    return outcome(pack.points((system, lambda s=system: pack.grid(s, timeouts.get(s, 150)))
                               for system in systems))


def bert_grid(pack) -> dict[str, Any]:
    """The README's table for the systems the goals are judged on: each system's grid in one
    process of its own."""
    return _grid(pack, pack.sizes.bert_systems)


def bert_grid_more(pack) -> dict[str, Any]:
    """The same table for the grid's other systems (after serving: they take longest)."""
    return _grid(pack, pack.sizes.bert_systems_more)


def serving_section(s) -> dict[str, Any]:
    """The bert_serving section the pack serves with, at the sizes ``s``."""
    return {"enabled": True, "model": s.bert_model, "dtype": s.bert_dtype, "device": s.device,
            "repeats": 1, **s.serving}


def serving_order(systems: list[str], repeats: int, first: int) -> list[tuple[str, int]]:
    """The runs in the order they go: the first ``first`` systems (the goal's pair) every
    repeat, in rounds, then the others the same way, so a lease cut off keeps whole pairs of
    repeats for the claims."""
    return [(system, k) for group in (systems[:first], systems[first:])
            for k in range(repeats) for system in group]


def serving(pack) -> dict[str, Any]:
    """Each system served ``repeats`` times (``serving_order``); per run its record's status,
    the highest VALID Server QPS with the p99 there, Offline samples/s, and the graphs the
    reference captured before its first request."""
    section = serving_section(pack.sizes)
    found: dict[str, dict[str, Any]] = {}

    def serve(system: str, repeat: int) -> str:
        out = pack.results / "bert_serving" / system / f"run{repeat}.json"
        if not pack.kept(out):
            done = pack.seedbench("serve", "bert_serving", "--system", system, "--repeat",
                                  str(repeat), "--section-json", json.dumps(section), "--out",
                                  str(out), timeout=section["timeout_s"] + 30)
            if not out.exists():
                raise RuntimeError(f"no record (exit {done.returncode}): {done.stderr[-500:]}")
        rec = json.loads(out.read_text())
        derived = rec.get("derived") or {}
        scenarios = derived.get("scenarios") or {}
        server, offline = scenarios.get("Server") or {}, scenarios.get("Offline") or {}
        found[f"{system} run{repeat}"] = {
            "status": rec["status"], "reason": rec.get("reason", "")[:300],
            "max_valid_qps": server.get("max_valid_qps"),
            "p99_ms": (server.get("p99_s") or 0) * 1e3 or None,
            "offline_samples_per_s": offline.get("samples_per_s"),
            "shape_probes": derived.get("shape_probes"),
            "cuda_graphs": ((derived.get("system") or {}).get("cuda_graphs") or {}).get("serving")}
        return rec["status"]

    first = pack.sizes.extra.get("serving_first", len(section["systems"]))
    statuses = pack.points((f"{system} run{k}", lambda s=system, k=k: serve(s, k))
                           for system, k in serving_order(section["systems"],
                                                          section["repeats"], first))
    for label, status in statuses.items():
        found.setdefault(label, {"status": status})
    return {"systems": found, **outcome(statuses)}


def workflow(pack) -> dict[str, Any]:
    """The user's GPU path: Snakemake itself runs ``workflows/config/gpu.yaml`` (the rehearsal:
    the same config at tiny sizes, on CPU), a process per point as on any machine, then the
    table, figure and analysis. Its records go to ``OUT/workflow.tar.gz`` as the machine folder
    ``<machine>-workflow`` (publish it under that name, beside the pack's)."""
    import subprocess
    import tarfile

    import yaml

    name = f"{pack.machine}-workflow"
    where = pack.work / "workflow"
    (where / "results").mkdir(parents=True, exist_ok=True)
    paper = where / "results" / "paper"
    if not paper.exists():  # the papers' CSVs the analysis reads
        paper.symlink_to(ROOT / "results" / "paper")
    override: dict[str, Any] = {"machine": name}
    if pack.sizes.device != "cuda":
        override |= {"peak": {"dtypes": ["fp32"], "sizes": [64], "repeats": 1},
                     "bert_varlen": {"model": pack.sizes.bert_model, "device": "cpu",
                                     "dtype": "fp32", "batch_sizes": [2], "max_seq_lens": [16],
                                     "baselines": ["torch-eager", "reference"], "threads": 1,
                                     "timing": pack.sizes.timing}}
    (where / "override.yaml").write_text(yaml.safe_dump(override))
    targets = [f"results/{name}/bert_varlen/analysis.json",
               f"results/{name}/figures/bert_varlen.svg"]
    # the rules call the `seedbench` script, where pip put it for this Python
    scripts = {sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")}
    env = {**pack.env, "PATH": os.pathsep.join([*scripts, pack.env.get("PATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(where), "--profile", str(ROOT / "workflows/profiles/local"),
         "--configfile", str(ROOT / "workflows/config/gpu.yaml"), str(where / "override.yaml"),
         "--cores", "all", *targets],
        env=env, capture_output=True, text=True, cwd=where,
        timeout=max(60.0, pack.budget_s + 60 - pack.elapsed()))
    folder = where / "results" / name
    if folder.exists():
        with tarfile.open(pack.out / "workflow.tar.gz", "w:gz") as tar:
            tar.add(folder, arcname=name)
    records = sorted(str(p.relative_to(folder)) for p in folder.rglob("b*_l*.json")) \
        if folder.exists() else []
    summary = [line for line in done.stderr.splitlines() if line.startswith("[seedbench]")]
    out = {"machine_folder": name, "records": records, "progress": summary[-3:]}
    if done.returncode != 0:
        out |= {"status": "failed", "reason": f"snakemake exit {done.returncode}",
                "tail": done.stderr[-2000:]}
    return out


def mha(pack) -> dict[str, Any]:
    statuses = pack.points(
        (f"{system} L={n}", lambda s=system, n=n: pack.point("bert_mha", s, n, subject="attention"))
        for n in pack.sizes.mha_lengths for system in ("varlen", "padded-unfused", "padded-sdpa"))
    try:
        importlib.import_module("flash_attn")
        statuses["flash_attn varlen"] = "importable, not a registered system yet"
    except ImportError:
        statuses["flash_attn varlen"] = "unavailable: flash_attn is not installed here"
    return outcome(statuses)


def ladder(pack) -> dict[str, Any]:
    from reference_impl import LADDER
    from suite.experiments.bert_names import ladder_name

    n = pack.sizes.extra.get("ladder_length", pack.sizes.bert_lengths[0])
    steps = pack.sizes.extra.get("ladder_steps", range(len(LADDER)))
    return outcome(pack.points(
        (ladder_name(i), lambda i=i: pack.point("bert_ablation", ladder_name(i), n))
        for i in steps))
