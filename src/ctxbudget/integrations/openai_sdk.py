"""A guard around an ``openai.OpenAI`` / ``AsyncOpenAI`` client's chat completions.

``guarded.chat.completions.create(...)`` takes and returns what the SDK does. Your message list
stays yours and is never changed: once the guard has compacted, it sends the compacted view in
place of the part of your list it replaced; ``guarded.messages`` is the list last sent.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

from ctxbudget.budget.rules import Policy
from ctxbudget.budget.usage import usage_from_openai
from ctxbudget.compaction.archive import Archive
from ctxbudget.errors import ContextOverflowError, CtxbudgetError
from ctxbudget.integrations._guard import ContextGuard, overflow_of
from ctxbudget.integrations._view import Substitution, Translated, UsageMemory, translate
from ctxbudget.messages.model import Message, Request
from ctxbudget.messages.openai import (
    message_from_openai,
    message_to_openai,
    request_from_openai,
    request_to_openai,
)
from ctxbudget.providers.overflow import classify_error
from ctxbudget.tokens.base import TokenCounter

__all__ = ["ContextBudgetOpenAI", "guard_openai"]

Item = dict[str, Any]


def guard_openai(
    client: Any,
    *,
    window: int,
    tokenizer: str | TokenCounter = "ctxbudget",
    policy: str | Policy = "ctxbudget",
    strategy: str = "layered",
    archive: Archive | str | Path | None = None,
    max_output_tokens: int | None = None,
    summary_model: str | None = None,
) -> ContextBudgetOpenAI:
    """``client`` (``OpenAI`` or ``AsyncOpenAI``) kept inside ``window`` tokens.

    Summaries are written by the same client with the call's model (or ``summary_model``).
    """
    guard = ContextGuard(
        window=window,
        tokenizer=tokenizer,
        policy=policy,
        strategy=strategy,
        archive=archive,
        max_output_tokens=max_output_tokens,
    )
    return ContextBudgetOpenAI(client, guard, summary_model=summary_model)


class ContextBudgetOpenAI:
    """The guarded client: ``.chat.completions.create`` as the SDK's, plus the guard's state."""

    def __init__(self, client: Any, guard: ContextGuard, *, summary_model: str | None) -> None:
        self.client = client
        self.guard = guard
        self.summary_model = summary_model
        self.is_async = _is_async(client)
        self.messages: list[Item] = []
        """The message list last sent (compacted where the guard compacted)."""
        self._substitution: Substitution[Item] = Substitution()
        self._memory = UsageMemory()
        self.chat = _Chat(self)

    def __getattr__(self, name: str) -> Any:
        # Everything but chat completions (models, embeddings, the Responses API) is the
        # client's own, unguarded.
        if name == "client":
            raise AttributeError(name)  # not set yet (copy, unpickling): no recursion
        return getattr(self.client, name)

    # -- the request -----------------------------------------------------------------------

    def _plan(
        self, kwargs: Mapping[str, Any]
    ) -> tuple[Translated[Item], Translated[Item], Request]:
        """(your list, the list to send, its request): the compacted view stands in for the
        prefix of your list it replaced."""
        full = translate([_as_dict(m) for m in kwargs["messages"]], _read)
        view = translate(self._substitution.apply(full), _read)
        body = {k: kwargs[k] for k in ("tools", "functions", "model") if kwargs.get(k)}
        base = request_from_openai({**body, "messages": []})
        request = Request(
            system=view.system,
            tools=base.tools,
            messages=self._memory.attach(view.messages),
            max_output_tokens=self.guard.max_output_tokens,
            model=base.model,
        )
        return full, view, request

    def _compacted(
        self, full: Translated[Item], view: Translated[Item], compacted: Request
    ) -> Translated[Item]:
        """The compacted list to send, remembered in place of the whole of your list."""
        items = view.back(compacted.messages, _rebuild)
        self._substitution.update(full, items)
        return translate([*view.items[: view.lead], *items], _read)

    def _sent_record(self, view: Translated[Item]) -> None:
        self.messages = list(view.items)
        self._memory.sent = view.messages

    def _record(self, usage: object) -> None:
        if usage is None:
            return
        raw = usage.model_dump() if hasattr(usage, "model_dump") else usage
        try:
            self._memory.usage = self.guard.stamp(usage_from_openai(raw))
        except CtxbudgetError:
            self._memory.usage = None  # an unreadable report: count instead next time

    # -- summaries -------------------------------------------------------------------------

    def _summary_body(self, request: Request, model: str) -> dict[str, Any]:
        body = request_to_openai(request, include_reasoning=False)
        body["model"] = self.summary_model or model
        return body


class _Chat:
    def __init__(self, owner: ContextBudgetOpenAI) -> None:
        self.owner = owner
        self.completions: _Completions | _AsyncCompletions = (
            _AsyncCompletions(owner) if owner.is_async else _Completions(owner)
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.owner.client.chat, name)


class _Completions:
    """``create`` with the guard: compact when the rule fires, retry once after an overflow."""

    def __init__(self, owner: ContextBudgetOpenAI) -> None:
        self.owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.owner.client.chat.completions, name)

    def create(self, **kwargs: Any) -> Any:
        """As ``client.chat.completions.create``; ``messages`` is your whole conversation."""
        owner, guard = self.owner, self.owner.guard
        guard.summarizer = _SyncSummarizer(owner, kwargs.get("model") or "")
        full, view, request = owner._plan(kwargs)
        compacted = guard.prepare(request)
        if compacted is not None:
            view, request = owner._compacted(full, view, compacted), compacted
        try:
            return self._send(view, kwargs)
        except ContextOverflowError as error:
            compacted = guard.recover(request, error)
            view = owner._compacted(full, view, compacted)
            try:
                return self._send(view, kwargs)
            except ContextOverflowError as again:
                raise guard.retry_failed(again) from again

    def _send(self, view: Translated[Item], kwargs: dict[str, Any]) -> Any:
        owner = self.owner
        body = _body(kwargs, list(view.items))
        try:
            result = owner.client.chat.completions.create(**body)
        except Exception as error:
            raise _overflow(error) or error from None
        owner._sent_record(view)
        if body.get("stream"):
            return _Stream(result, owner)
        owner._record(getattr(result, "usage", None))
        return result


class _AsyncCompletions:
    """The ``AsyncOpenAI`` flavour of `_Completions`; compaction runs off the event loop."""

    def __init__(self, owner: ContextBudgetOpenAI) -> None:
        self.owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.owner.client.chat.completions, name)

    async def create(self, **kwargs: Any) -> Any:
        """As ``await client.chat.completions.create``; ``messages`` is your whole conversation."""
        owner, guard = self.owner, self.owner.guard
        guard.summarizer = _LoopSummarizer(owner, kwargs.get("model") or "")
        full, view, request = owner._plan(kwargs)
        compacted = await asyncio.to_thread(guard.prepare, request)
        if compacted is not None:
            view, request = owner._compacted(full, view, compacted), compacted
        try:
            return await self._send(view, kwargs)
        except ContextOverflowError as error:
            compacted = await asyncio.to_thread(guard.recover, request, error)
            view = owner._compacted(full, view, compacted)
            try:
                return await self._send(view, kwargs)
            except ContextOverflowError as again:
                raise guard.retry_failed(again) from again

    async def _send(self, view: Translated[Item], kwargs: dict[str, Any]) -> Any:
        owner = self.owner
        body = _body(kwargs, list(view.items))
        try:
            result = await owner.client.chat.completions.create(**body)
        except Exception as error:
            raise _overflow(error) or error from None
        owner._sent_record(view)
        if body.get("stream"):
            return _AsyncStream(result, owner)
        owner._record(getattr(result, "usage", None))
        return result


class _Stream:
    """The SDK's stream, passed through; the usage chunk is recorded as it goes by."""

    def __init__(self, stream: Any, owner: ContextBudgetOpenAI) -> None:
        self._stream = stream
        self._owner = owner

    def __iter__(self) -> Iterator[Any]:
        for chunk in self._stream:
            if getattr(chunk, "usage", None) is not None:
                self._owner._record(chunk.usage)
            yield chunk

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()

    def close(self) -> None:
        """Close the underlying HTTP response."""
        self._stream.close()


class _AsyncStream:
    """The SDK's async stream, passed through; the usage chunk is recorded as it goes by."""

    def __init__(self, stream: Any, owner: ContextBudgetOpenAI) -> None:
        self._stream = stream
        self._owner = owner

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for chunk in self._stream:
            if getattr(chunk, "usage", None) is not None:
                self._owner._record(chunk.usage)
            yield chunk

    async def __aenter__(self) -> _AsyncStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stream.close()

    async def close(self) -> None:
        """Close the underlying HTTP response."""
        await self._stream.close()


class _SyncSummarizer:
    """Summaries from the guarded client itself, unguarded (a summary request is self-contained)."""

    def __init__(self, owner: ContextBudgetOpenAI, model: str) -> None:
        self.owner = owner
        self.model = model

    def summarize(self, request: Request) -> str:
        reply = self.owner.client.chat.completions.create(
            **self.owner._summary_body(request, self.model)
        )
        return str(reply.choices[0].message.content or "")


class _LoopSummarizer(_SyncSummarizer):
    """Called in compaction's worker thread; runs the async call on the caller's event loop."""

    def __init__(self, owner: ContextBudgetOpenAI, model: str) -> None:
        super().__init__(owner, model)
        self.loop = asyncio.get_running_loop()

    def summarize(self, request: Request) -> str:
        call = self.owner.client.chat.completions.create(
            **self.owner._summary_body(request, self.model)
        )
        reply = asyncio.run_coroutine_threadsafe(call, self.loop).result()
        return str(reply.choices[0].message.content or "")


# -- translation ------------------------------------------------------------------------------


def _read(item: Item) -> tuple[Message, ...]:
    return (message_from_openai(item),)


def _rebuild(original: Item | None, group: list[Message]) -> Item:
    return message_to_openai(group[0], include_reasoning=False)


def _as_dict(message: Any) -> Item:
    if isinstance(message, Mapping):
        return dict(message)
    if hasattr(message, "model_dump"):  # a ChatCompletionMessage appended as it came
        dumped = message.model_dump(exclude_none=True)
        return {k: v for k, v in dumped.items() if k in _MESSAGE_KEYS}
    raise TypeError(f"messages must hold dicts or SDK message objects, got {type(message)!r}")


_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "function_call")


def _body(kwargs: Mapping[str, Any], items: list[Item]) -> dict[str, Any]:
    body = {**kwargs, "messages": items}
    if body.get("stream") and "stream_options" not in body:
        body["stream_options"] = {"include_usage": True}  # the usage the next count starts from
    return body


def _overflow(error: Exception) -> ContextOverflowError | None:
    response = getattr(error, "response", None)
    status = getattr(error, "status_code", None)
    if response is None or not isinstance(status, int):
        return None
    try:
        text = response.text
    except Exception:  # a streamed error body that was never read
        return overflow_of(error)
    return classify_error(status, text) or overflow_of(error)


def _is_async(client: Any) -> bool:
    import openai  # a dependency; imported here because it takes about a second

    if isinstance(client, openai.AsyncOpenAI):
        return True
    return inspect.iscoroutinefunction(client.chat.completions.create)
