"""The README's published results: a Markdown block (the machine, each experiment's headline,
the headline figures) generated from a published machine folder after ``make report``, and
written between two markers so that it is regenerated, never edited by hand
(``seedbench headlines --update-readme README.md results/published/<machine>``). A test
rebuilds the folder from its records and checks that the README still says the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from suite.experiments.registry import SPECS
from suite.peak.schema import read_peak

BEGIN = "<!-- published-results:begin (generated: seedbench headlines --update-readme) -->"
END = "<!-- published-results:end -->"
# The figures the README shows (results/published/.gitignore keeps exactly these committed).
README_FIGURES = ("bert_varlen", "bert_mha", "llm_mfu", "llm_engines")


def headlines_markdown(folder: str | Path) -> str:
    """The block for one published machine folder (its analyses and figures already built)."""
    folder = Path(folder)
    peak = read_peak(folder / "peak.json") or {}
    analyses = {name: json.loads(p.read_text()) for name in SPECS
                if (p := folder / name / "analysis.json").is_file()}
    if not analyses:
        raise ValueError(f"{folder}: no analysis.json under it; run `make report` first")
    envs = [a["provenance"]["env"] for a in analyses.values()
            if (a.get("provenance") or {}).get("env")]
    env = envs[0] if envs else peak.get("env") or {}
    commits = sorted({(e.get("git") or {}).get("commit", "?")[:12] for e in envs})
    lines = [f"Machine `{folder.name}`: {_device(peak, env)}; "
             f"{peak.get('threads', '?')} threads; "
             + "; ".join(_peak_text(d, e) for d, e in (peak.get("peaks") or {}).items())
             + f". torch {(env.get('packages') or {}).get('torch', '?')}, commit "
             + ", ".join(commits)
             + (" (uncommitted changes)" if any((e.get("git") or {}).get("dirty") for e in envs)
                else "") + ".", "",
             "| experiment | headline | measured at |", "|---|---|---|"]
    for name, analysis in analyses.items():
        h = analysis.get("headline")
        if not h:
            continue
        ci = f" [{h['ci'][0]:.3g}, {h['ci'][1]:.3g}]" if h.get("ci") else ""
        cells = (name, f"{h['metric']}: **{h['text']}**{ci}", h["at"])
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    figures = [f"![{name} on {folder.name}]({(folder / 'figures' / f'{name}.svg').as_posix()})"
               for name in README_FIGURES if (folder / "figures" / f"{name}.svg").is_file()]
    if figures:
        lines += ["", *figures]
    return "\n".join(lines)


def update_readme(readme: str | Path, folders: list[str | Path]) -> bool:
    """Replace the block between the markers, one machine after another in order of their
    folders' names (whatever order a shell's glob gave them); True when the README changed."""
    readme = Path(readme)
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{readme}: no {BEGIN!r} ... {END!r} markers to write between")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = "\n\n".join(headlines_markdown(f)
                         for f in sorted(folders, key=lambda f: Path(f).name))
    new = f"{head}{BEGIN}\n{body}\n{END}{tail}"
    if new != text:
        readme.write_text(new)
    return new != text


def readme_block(readme: str | Path) -> str:
    """What the README's block says now (between the markers)."""
    text = Path(readme).read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def _device(peak: dict, env: dict) -> str:
    gpu = env.get("gpu")
    if gpu:
        return f"{gpu['count']} x {gpu['name']}"
    cpu = peak.get("cpu") or {}
    from suite.peak.cpu_theory import isa_summary

    return (f"{cpu.get('model_name') or env.get('cpu_model', '?')}, "
            f"{env.get('cpu_cores', '?')} cores, {isa_summary(cpu)}")


def _peak_text(dtype: str, entry: dict) -> str:
    m = entry.get("measured")
    if not m:
        return f"{dtype}: no matmul peak measured"
    return f"{dtype} matmul peak {m['flops_per_s'] / 1e9:.0f} GFLOP/s ({m['library']}, measured)"
