"""A digest of this package's source, which the workflow's derived rules carry as a parameter.

Tables, figures, analyses, the scale model's table and the report are computed by this package
from files on disk. When the package changes (an upgrade, a new term in the scale model), they
must be built again although no input file changed; Snakemake re-runs a job whose parameters
differ from the ones its outputs were made with (its ``params`` rerun trigger). The timed rules
do not carry the digest: a measurement stays valid when the code that tabulates it changes, and
re-timing every point after each edit would cost hours."""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # suite/
# the code, the report templates and the data files read at run time
PATTERNS = ("*.py", "*.j2", "*.yaml", "*.csv")


def digest(package: Path | None = None) -> str:
    """sha256 over every source file's path and bytes, in path order (16 hex digits), of
    ``package`` (default ``PACKAGE``, read at call time)."""
    package = package or PACKAGE
    h = hashlib.sha256()
    for path in sorted({p for pattern in PATTERNS for p in package.rglob(pattern)}):
        h.update(path.relative_to(package).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
