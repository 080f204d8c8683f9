"""Whole-request counting: chat templates, tools, images, the floor, and an incremental counter.

A counter name picks a scheme (``select.py``): a tokenizer with the template that renders a
request for it, either native renderers counted message by message (``MessageScheme``: Qwen,
OpenAI's rules, estimators) or a model folder's Jinja template counted in pieces cut at added
tokens (``TemplateScheme``). ``count_request`` counts a request whole; ``RequestCounter`` keeps
one scheme's state (``Scheme.incremental``) and, given what changed since the last request
(``messages.model.what_changed``), counts only that again. docs/counting-internals.md follows
a request from start to end.
"""

from __future__ import annotations

from ctxbudget.counting.counter import RequestCounter, count_request
from ctxbudget.counting.result import PerMessage, RequestCount
from ctxbudget.counting.select import TEMPLATES

__all__ = ["TEMPLATES", "PerMessage", "RequestCount", "RequestCounter", "count_request"]
