"""The wheels a bare GPU machine needs from here, and their install there.

Why: the lent GPU machine has its own Python (3.12), torch, triton, transformers, JAX and the
scientific stack, and no package registry. What the suite needs beyond that (Snakemake, for the
user's own path; jsonschema; LoadGen; DeepSpeed and what they pull in) travels as cp312 wheels
in ``.whl/``.

``python -m suite.gpu.wheels download DIR`` (here, with the project's venv): the dependency
closure of ``ROOTS`` as this venv has it installed (so the versions are requirements.lock's),
less ``NEVER``; a binary wheel for CPython 3.12 where the registry has one, else built from its
source distribution (DeepSpeed with ``DS_BUILD_OPS=0``: its CUDA ops are compiled on first use
there, where nvcc is).

``python3 -m suite.gpu.wheels install DIR TARGET`` (there; the standard library only): each
wheel whose distribution that Python lacks goes to ``TARGET`` (put on ``PYTHONPATH``); one it
has is left out, so that nothing the machine's torch or JAX were built against is shadowed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOTS = ("snakemake", "deepspeed", "jsonschema", "mlcommons-loadgen")
# The machine's own: the accelerator stack, and what it was built against or ships with (a
# second numpy on the path would break the machine's torch and JAX), and the scientific stack it
# has (the pack's env step lists anything missing).
NEVER = frozenset({"torch", "triton", "numpy", "setuptools", "scipy", "pandas", "matplotlib",
                   "pillow", "fonttools", "contourpy", "kiwisolver", "sympy", "mpmath",
                   "networkx", "fsspec", "filelock", "jinja2", "markupsafe", "typing-extensions",
                   "pyyaml", "requests", "urllib3", "idna", "certifi", "charset-normalizer",
                   "packaging", "tqdm", "python-dateutil", "pyparsing", "cycler", "tzdata"})
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots=ROOTS, never=NEVER) -> dict[str, str]:
    """``{name: version}`` of ``roots`` and everything they require, as installed here."""
    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = canonical(todo.pop())
        if name in found or name in never:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed in this venv ({sys.prefix}): run `make "
                             f"venv` first") from None
        found[name] = dist.version
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return dict(sorted(found.items()))


def download(out: Path) -> list[str]:
    """The closure's wheels into ``out``; returns the ones built from source."""
    out.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    binary = [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
              "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(out)]
    built = []
    for name, version in closure().items():
        spec = f"{name}=={version}"
        if subprocess.run([*binary, spec], capture_output=True).returncode == 0:
            continue
        subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(out),
                        spec], check=True, env={**os.environ, "DS_BUILD_OPS": "0"})
        built.append(spec)
    return built


def install(wheels: Path, target: Path) -> tuple[list[str], list[str]]:
    """The wheels of distributions this Python lacks into ``target``; returns (installed,
    left out as the machine's own, with its version)."""
    missing, present = [], []
    for wheel in sorted(wheels.glob("*.whl")):
        name = canonical(wheel.name.split("-")[0])
        try:
            present.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            missing.append(wheel)
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--no-compile", "--target", str(target), *map(str, missing)], check=True)
    return [w.name for w in missing], present


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.gpu.wheels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("download").add_argument("dir", type=Path)
    inst = sub.add_parser("install")
    inst.add_argument("dir", type=Path)
    inst.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    if args.command == "download":
        built = download(args.dir)
        print(f"{args.dir}: {len(list(args.dir.glob('*.whl')))} wheels"
              + (f"; built from source: {', '.join(built)}" if built else ""))
    else:
        installed, present = install(args.dir, args.target)
        print(f"installed into {args.target}: {len(installed)} wheels; the machine's own, left "
              f"out: {', '.join(present) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
