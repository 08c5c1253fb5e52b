"""The ``seedbench`` subcommands, one module each: ``add_parser(sub)`` declares its arguments,
``run(args) -> exit code`` does it. Heavy imports stay inside ``run`` so that building the
parser (every command line, the generated reference in docs/cli.md) costs nothing."""

from __future__ import annotations

import importlib
from types import ModuleType

# In the order `seedbench --help` and docs/cli.md list them: a run's flow, then the tools.
NAMES = ("peak", "run", "grid", "build-external", "train", "attention-window", "resilience",
         "pretrain", "serve", "table", "llm-table", "table-step", "scale-table", "analyze", "plot",
         "report", "headlines", "publish", "compare", "noisy", "scale-model", "gpu-check", "env",
         "baselines", "trainers", "experiments")


def module(name: str) -> ModuleType:
    """The module of subcommand ``name`` (``scale-model`` -> ``suite.commands.scale_model``)."""
    if name not in NAMES:
        raise KeyError(f"no subcommand {name!r}; valid: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
