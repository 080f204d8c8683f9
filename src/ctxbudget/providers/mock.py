"""The embedded mock model: a deterministic scripted agent that counts and refuses like vLLM.

It reports usage as a server does (the exact ``qwen3`` count of the rendered request) and
rejects a request over its window with vLLM's own error text, so the whole loop runs offline.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ctxbudget.errors import ContextOverflowError, ProviderError
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.usage import Usage
from ctxbudget.providers.base import Completion, Provider, StopReason
from ctxbudget.providers.extractive import clip_to_tokens, extractive_summary
from ctxbudget.providers.scenarios import ChatScenario, CodingScenario, Scenario, get_scenario

if TYPE_CHECKING:
    from ctxbudget.budget.context import RequestCounterLike

__all__ = ["ChatScenario", "CodingScenario", "MockProvider", "vllm_overflow_message"]

Scripted = Message | str | Exception


def vllm_overflow_message(limit: int, prompt: int, completion: int | None) -> str:
    """The text vLLM's OpenAI server returns (HTTP 400) for a request over ``limit`` tokens.

    Two forms, from vLLM's serving code: with ``max_tokens`` set it states prompt and completion;
    without, only the prompt.
    """
    if completion is None:
        return (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt} tokens in the messages, Please reduce the length of the messages."
        )
    return (
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion). Please reduce the length of the messages or completion."
    )


def _default_counter() -> RequestCounterLike:
    from ctxbudget.counting import RequestCounter  # imported late: loads the vocabulary

    counter: RequestCounterLike = RequestCounter("qwen3")
    return counter


class MockProvider(Provider):
    """A scripted model: replies from a scenario, or from replies queued with `enqueue`.

    ``window`` is the server's real context length (None: unlimited). ``counter`` counts
    requests as the server does (default: ``RequestCounter("qwen3")``). ``delay`` sleeps that
    many seconds per call, to make a demo slow enough to watch (or to kill).
    """

    name = "mock"
    tokenizer = "qwen3"

    def __init__(
        self,
        scenario: Scenario | str | None = "coding",
        *,
        window: int | None = None,
        counter: RequestCounterLike | None = None,
        seed: int = 0,
        delay: float = 0.0,
    ) -> None:
        self.scenario: Scenario | None = (
            get_scenario(scenario, seed) if isinstance(scenario, str) else scenario
        )
        self.window = window
        self._counter = counter
        self.delay = delay
        self._queue: deque[Scripted] = deque()
        self.requests: list[Request] = []
        """Every request received, rejected ones included (for tests)."""
        self.summaries = 0
        """How many times `summarize` was called."""

    @property
    def counter(self) -> RequestCounterLike:
        """The request counter, created on first use."""
        if self._counter is None:
            self._counter = _default_counter()
        return self._counter

    def enqueue(self, *replies: Scripted | Iterable[Scripted]) -> None:
        """Queue replies returned before the scenario's: a message, a text, or an error to raise."""
        for reply in replies:
            if isinstance(reply, Message | str | Exception):
                self._queue.append(reply)
            else:
                self._queue.extend(reply)

    def prompt_tokens(self, request: Request) -> int:
        """The server's count of ``request``'s prompt."""
        return self.counter.count(request).total

    def _check_window(self, request: Request, prompt: int) -> None:
        if self.window is None:
            return
        completion = request.max_output_tokens
        over = prompt >= self.window if completion is None else prompt + completion > self.window
        if over:
            raise ContextOverflowError(
                vllm_overflow_message(self.window, prompt, completion),
                status=400,
                limit=self.window,
                prompt_tokens=prompt,
            )

    def _next_reply(self, request: Request) -> Message:
        if self._queue:
            item = self._queue.popleft()
            if isinstance(item, Exception):
                raise item
            return Message(role="assistant", content=item) if isinstance(item, str) else item
        if self.scenario is None:
            raise ProviderError("the mock model has no scripted reply left; enqueue() one")
        return self.scenario.reply(request)

    def complete(self, request: Request) -> Completion:
        """Reply to ``request``; raise `ContextOverflowError` as vLLM would when it is too long."""
        self.requests.append(request)
        if self.delay:
            time.sleep(self.delay)
        prompt = self.prompt_tokens(request)
        self._check_window(request, prompt)
        reply = self._next_reply(request)
        # Output = what the reply adds to the next request, so usage-first counting is exact.
        after = self.counter.count(request.with_messages((*request.messages, reply))).total
        usage = Usage(input_tokens=prompt, output_tokens=max(1, after - prompt))
        stop: StopReason = "tool_calls" if reply.tool_calls else "stop"
        return Completion(message=_with_usage(reply, usage), usage=usage, stop_reason=stop)

    def summarize(self, request: Request) -> str:
        """An extractive summary of ``request``'s messages (the compaction `Summarizer` protocol).

        Deterministic and offline: the first user message is the goal; unique sentences of the
        user turns, error lines verbatim, the files named in tool calls, the last answer. The
        summarizer's own request is held to the window like any other.
        """
        self.requests.append(request)
        self.summaries += 1
        self._check_window(request, self.prompt_tokens(request))
        return clip_to_tokens(extractive_summary(request), request.max_output_tokens)


def _with_usage(message: Message, usage: Usage) -> Message:
    return Message(
        role="assistant",
        content=message.content,
        tool_calls=message.tool_calls,
        reasoning=message.reasoning,
        usage=usage,
        meta=message.meta,
    )
