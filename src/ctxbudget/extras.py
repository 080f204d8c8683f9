"""Optional packages, each behind an extra of ``pip install ctxbudget[...]``.

The core install counts, budgets, compacts and runs the adapters' shared logic; a feature that
needs more (plots, a framework's adapter, the gateway's server) imports its package through
``require``, so a missing one is a one-line `MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ctxbudget.errors import MissingDependencyError

__all__ = ["pyplot", "require"]


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise a one-line `MissingDependencyError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(what, f"ctxbudget[{extra}]") from None


def pyplot(what: str) -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend, for ``what`` (e.g. ``--plot``);
    without matplotlib a `MissingDependencyError` naming ``ctxbudget[plot]``."""
    matplotlib = require("matplotlib", "plot", what)
    matplotlib.use("Agg")  # files only: no display, the same output on every machine
    return importlib.import_module("matplotlib.pyplot")
