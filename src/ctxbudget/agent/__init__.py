"""The agent loop: a session kept inside its window, its events and its summary."""

from __future__ import annotations

from ctxbudget.agent.events import CompactionRecord, LoopEvent, SessionSummary
from ctxbudget.agent.loop import Agent, ToolExecutor

__all__ = ["Agent", "CompactionRecord", "LoopEvent", "SessionSummary", "ToolExecutor"]
