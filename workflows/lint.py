"""`snakemake --lint` that fails on any finding but one.

The one allowed: "Specify a conda environment or container for each rule". This project's
software is one pinned stack (requirements.lock, installed by `make`), recorded with every
result (`seedbench env`), not a conda environment per rule; a container image does not exist
to point at. Every other lint fails the check. Usage: python workflows/lint.py [snakemake args]
"""

from __future__ import annotations

import re
import subprocess
import sys

ALLOWED = ("Specify a conda environment or container for each rule.",)


def main(argv: list[str]) -> int:
    proc = subprocess.run(["snakemake", "--lint", *argv], capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 and "Lints for" not in text:
        sys.stderr.write(text)
        return proc.returncode
    findings, where = [], None
    for line in text.splitlines():
        if line.startswith("Lints for "):
            where = line.removeprefix("Lints for ").rstrip(":")
        elif (m := re.match(r"    \* (.+?):?$", line)) and m.group(1) not in ALLOWED:
            findings.append(f"{where}: {m.group(1)}")
    for finding in findings:
        print(finding, file=sys.stderr)
    print(f"snakemake --lint: {len(findings)} finding(s) besides the allowed {ALLOWED}",
          file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
