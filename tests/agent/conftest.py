"""Shared pieces for the agent-loop tests: one qwen3 counter, agents on the mock model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ctxbudget.agent.events import LoopEvent
from ctxbudget.agent.loop import Agent
from ctxbudget.counting import RequestCounter
from ctxbudget.providers.mock import MockProvider


@pytest.fixture(scope="session")
def qwen3() -> RequestCounter:
    return RequestCounter("qwen3")


MakeAgent = Callable[..., tuple[Agent, MockProvider, list[LoopEvent]]]


@pytest.fixture
def make_agent(qwen3: RequestCounter) -> MakeAgent:
    """An agent on a mock scenario; returns (agent, provider, events)."""

    def make(
        scenario: str = "chat",
        *,
        window: int = 1200,
        server_window: int | None = None,
        counter: Any = None,
        **kwargs: Any,
    ) -> tuple[Agent, MockProvider, list[LoopEvent]]:
        provider = MockProvider(scenario, window=server_window or window, counter=qwen3)
        scene = provider.scenario
        assert scene is not None
        events: list[LoopEvent] = []
        options: dict[str, Any] = {
            "system": scene.system,
            "tools": scene.tools,
            "window": window,
            "counter": counter or qwen3,
            "tool_executor": scene.run_tool,
            "max_output_tokens": scene.max_output,
            "on_event": events.append,
        }
        options.update(kwargs)
        return Agent(provider, **options), provider, events

    return make
