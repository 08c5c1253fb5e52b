"""Plugin registries over entry-point groups.

Every pluggable kind (inference baselines, training engines, ...) is found the same way: a
class registered under an entry-point group in some installed distribution's metadata. The
built-in ones are registered in pyproject.toml like any third-party plugin, so adding one never
needs a change here. Entry points are read on every call, not cached: a plugin installed while
a workflow runs is seen by the next job.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """The classes registered under one entry-point group, each a subclass of ``base``.

    ``kind`` only words the error messages ("unknown baseline 'x'"); it defaults to the base
    class's name in lower case.
    """

    def __init__(self, group: str, base: type[T], kind: str | None = None):
        if not group:
            raise ValueError("group must name an entry-point group, e.g. 'seedbench.trainers'")
        self.group = group
        self.base = base
        self.kind = kind or base.__name__.lower()

    def __repr__(self) -> str:
        return f"Registry(group={self.group!r}, base={self.base.__name__})"

    def entry_points(self) -> dict[str, EntryPoint]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        return sorted(self.entry_points())

    def check_names(self, wanted: list[str] | tuple[str, ...]) -> None:
        """Refuse unknown names before any job starts (a typo should not cost a sweep)."""
        registered = self.names()
        unknown = sorted(set(wanted) - set(registered))
        if unknown:
            raise KeyError(f"unknown {self.kind}(s) {unknown}; registered: {registered} "
                           f"(entry-point group {self.group!r})")

    def load(self, name: str) -> type[T]:
        """The registered class, checked to be a ``base`` subclass (not instantiated)."""
        eps = self.entry_points()
        if name not in eps:
            raise KeyError(f"unknown {self.kind} {name!r}; registered: {sorted(eps)} "
                           f"(entry-point group {self.group!r})")
        cls = eps[name].load()
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"entry point {name!r} -> {eps[name].value} is not a "
                            f"{self.base.__name__} subclass")
        return cls

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.load(name)(*args, **kwargs)
