"""Whole-request counting: chat templates, tools, images, the floor, and an incremental counter."""

from __future__ import annotations

from ctxbudget.counting.counter import RequestCounter, count_request
from ctxbudget.counting.result import PerMessage, RequestCount
from ctxbudget.counting.select import TEMPLATES

__all__ = ["TEMPLATES", "PerMessage", "RequestCount", "RequestCounter", "count_request"]
