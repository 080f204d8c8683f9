"""Adapters that keep other harnesses' conversations inside the window with ctxbudget's core.

One module per framework, each importing its framework lazily: ``openai_sdk`` (the ``openai``
client), ``langchain`` (``create_agent`` middleware), ``pydantic_ai`` (a history processor) and
``openai_agents`` (a ``call_model_input_filter``).
"""

from __future__ import annotations

# ``require`` lives in ctxbudget.extras (plots and the gateway use it too); it stays importable
# from here for the adapters and for code written against this module.
from ctxbudget.extras import require

__all__ = ["require"]
