"""Plugin registries over entry-point groups.

Every pluggable kind (inference baselines, training engines, ...) is found the same way: a
class registered under an entry-point group in some installed distribution's metadata. The
built-in ones are registered in pyproject.toml like any third-party plugin, so adding one never
needs a change here. Entry points are read on every call, not cached: a plugin installed while
a workflow runs is seen by the next job.

A registry may name its base class as ``"module:Class"``: it is imported on the first ``load``,
so that listing and checking names (what the workflow does while planning) imports no plugin
code and no framework.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """The classes registered under one entry-point group, each a subclass of ``base``.

    ``base`` is the class or its ``"module:Class"`` path (imported when first needed).
    ``kind`` only words the error messages ("unknown baseline 'x'"); it defaults to the base
    class's name in lower case.
    """

    def __init__(self, group: str, base: type[T] | str, kind: str | None = None):
        if not group:
            raise ValueError("group must name an entry-point group, e.g. 'seedbench.trainers'")
        if isinstance(base, str):
            module, _, name = base.partition(":")
            if not module or not name:
                raise ValueError(f"base={base!r} must be a class or 'module:Class'")
            self._base: type[T] | None = None
            self._base_path = base
        else:
            module, name = base.__module__, base.__name__
            self._base, self._base_path = base, f"{module}:{name}"
        self._base_name = name
        self.group = group
        self.kind = kind or name.lower()

    @property
    def base(self) -> type[T]:
        if self._base is None:
            module, _, name = self._base_path.partition(":")
            self._base = getattr(import_module(module), name)
        return self._base

    def __repr__(self) -> str:
        return f"Registry(group={self.group!r}, base={self._base_name})"

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
                            f"{self._base_name} subclass")
        return cls

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.load(name)(*args, **kwargs)


def lazy_exports(namespace: dict[str, Any], names: Iterable[str], source: str
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` that import ``names`` from ``source`` on first
    access (then cache them in ``namespace``): a plugin group's package exports its contract
    without importing the framework behind it until a plugin needs it."""
    names = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name in names:
            value = namespace[name] = getattr(import_module(source), name)
            return value
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | names)

    return __getattr__, __dir__
