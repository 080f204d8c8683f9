"""Adapters that keep other harnesses' conversations inside the window with ctxbudget's core.

One module per framework, each importing its framework lazily: ``openai_sdk`` (the ``openai``
client), ``langchain`` (``create_agent`` middleware), ``pydantic_ai`` (a history processor) and
``openai_agents`` (a ``call_model_input_filter``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ctxbudget.errors import MissingDependencyError

__all__ = ["require"]


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` or raise a one-line `MissingDependencyError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(what, f"ctxbudget[{extra}]") from None
