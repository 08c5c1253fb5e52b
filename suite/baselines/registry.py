"""Baselines are found through the ``seedbench.baselines`` entry-point group; the built-in ones
are registered the same way in pyproject.toml, so a plugin package needs no change here."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from suite.baselines.base import Baseline

GROUP = "seedbench.baselines"


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def names() -> list[str]:
    return sorted(_entry_points())


def check_names(wanted: list[str] | tuple[str, ...]) -> None:
    """Refuse unknown names before any job starts (a typo should not cost a sweep)."""
    unknown = sorted(set(wanted) - set(names()))
    if unknown:
        raise KeyError(f"unknown baseline(s) {unknown}; registered: {names()} "
                       f"(entry-point group {GROUP!r})")


def create(name: str) -> Baseline:
    eps = _entry_points()
    if name not in eps:
        raise KeyError(f"unknown baseline {name!r}; registered: {sorted(eps)} "
                       f"(entry-point group {GROUP!r})")
    cls = eps[name].load()
    if not (isinstance(cls, type) and issubclass(cls, Baseline)):
        raise TypeError(f"entry point {name!r} -> {eps[name].value} is not a Baseline subclass")
    return cls()
