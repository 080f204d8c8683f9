"""ctxbudget: keep LLM agent conversations inside the model's context window."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
